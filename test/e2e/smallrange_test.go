//go:build e2e

package e2e

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"clusterip-policy/test/e2e/framework"
	"clusterip-policy/test/fixtures"
)

// With --service-cluster-ip-range=10.96.0.0/27 the static band is
// 10.96.0.1-10.96.0.16 and the dynamic band 10.96.0.17-10.96.0.30. Once the
// dynamic band is full the apiserver hands dynamic Services addresses from
// the static band, so one could take the DNS address before kube-dns
// exists; every such allocation must be refused: by the validating
// webhook, or by the backstop (on by default), which the apiserver runs
// before the validating webhooks once the leader has written it.
func TestSmallRangeNeverSpillsOntoTheReservedIP(t *testing.T) {
	c := own(t, framework.Options{
		APIServers: []framework.APIServerOptions{{ServiceClusterIPRange: "10.96.0.0/27"}},
		Policy:     sharedPolicy,
		Webhooks:   1,
	})
	cs := c.Client(0)
	ctx := testContext(t, 3*60e9)
	ns := namespace(t, c, "small-range")
	dynamic := band{netip.MustParseAddr("10.96.0.17"), netip.MustParseAddr("10.96.0.30")}
	static := band{netip.MustParseAddr("10.96.0.1"), netip.MustParseAddr("10.96.0.16")}
	n := 0
	next := func() string { n++; return fmt.Sprintf("dynamic-%03d", n) }

	t.Run("the first 14 dynamic Services fill the dynamic band", func(t *testing.T) {
		for range 14 {
			got := mustCreate(t, ctx, cs, fixtures.Service(ns, next()))
			if !dynamic.contains(got.Spec.ClusterIP) {
				t.Errorf("%s got %s, outside the dynamic band %s", got.Name, got.Spec.ClusterIP, dynamic)
			}
		}
	})

	// Free in the static band: .2-.16 but .10 (.1 is default/kubernetes).
	const freeStatic = 14
	var spilled, denied, full int
	// refused checks a failed dynamic create: the validating webhook or the
	// backstop denies an allocation of 10.96.0.10, or the apiserver finds
	// no free address (its cache may still hold the 10.96.0.10 it released
	// a moment ago).
	refused := func(t *testing.T, err error) {
		t.Helper()
		if strings.Contains(err.Error(), "range is full") && !deniedBy(err, validating) {
			full++
			return
		}
		if msg := err.Error(); strings.Contains(msg, "(clusterip-policy backstop, rule reserved-for-other)") {
			if !strings.Contains(msg, `"10.96.0.10" is reserved for Service kube-system/kube-dns`) {
				t.Fatalf("the backstop refused, but not naming 10.96.0.10 and its owner: %v", err)
			}
			denied++
			return
		}
		requireDenied(t, err, validating, `"10.96.0.10"`, "is reserved for Service kube-system/kube-dns")
		denied++
	}
	t.Run("further dynamic Services take static addresses but never 10.96.0.10", func(t *testing.T) {
		for attempt := 0; spilled < freeStatic && attempt < 300; attempt++ {
			got, err := create(ctx, cs, fixtures.Service(ns, next()))
			if err != nil {
				refused(t, err)
				continue
			}
			ip := got.Spec.ClusterIP
			if ip == "10.96.0.10" || !static.contains(ip) {
				t.Fatalf("%s got %s, want an address of the static band %s other than 10.96.0.10", got.Name, ip, static)
			}
			spilled++
		}
		if spilled != freeStatic {
			t.Fatalf("%d dynamic Services landed in the static band, want %d", spilled, freeStatic)
		}
		// Now 10.96.0.10 is the only free address: every dynamic
		// allocation lands on it and is refused.
		for range 5 {
			_, err := create(ctx, cs, fixtures.Service(ns, next()))
			if err == nil {
				t.Fatal("a dynamic Service was admitted although only the reserved 10.96.0.10 was free")
			}
			refused(t, err)
		}
		t.Logf("e2e: small range: %d dynamic Services filled the dynamic band, %d spilled into the static band, %d allocations of 10.96.0.10 were denied by the validating webhook or the backstop (and %d refused as range is full by the apiserver)", 14, spilled, denied, full)
		if denied == 0 {
			t.Fatal("no dynamic allocation of 10.96.0.10 was denied")
		}
		if ipAddressExists(t, ctx, cs, "10.96.0.10") {
			t.Fatal("an IPAddress 10.96.0.10 exists although every allocation of it was denied")
		}
	})

	t.Run("kube-dns still gets 10.96.0.10 afterwards", func(t *testing.T) {
		out, _, err := c.Kubectl(ctx, kubeDNSWithoutIP, "create", "-f", "-", "-o", "jsonpath={.spec.clusterIP}")
		if err != nil {
			t.Fatalf("kubectl create kube-dns: %v", err)
		}
		if out != "10.96.0.10" {
			t.Fatalf("kube-dns got %s, want 10.96.0.10", out)
		}
	})

	t.Run("then the range is full, and the apiserver says so", func(t *testing.T) {
		_, err := create(ctx, cs, fixtures.Service(ns, next()))
		if err == nil || !strings.Contains(err.Error(), "range is full") {
			t.Fatalf("want the apiserver's range is full, got %v", err)
		}
	})
}
