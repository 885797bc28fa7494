//go:build e2e

package e2e

import (
	"fmt"
	"testing"

	"clusterip-policy/test/fixtures"
)

// In 10.96.0.0/16 the static band is 10.96.0.1-10.96.1.0 and the dynamic
// band 10.96.1.1-10.96.255.254.
func TestStaticAndDynamicBands(t *testing.T) {
	c := shared(t)
	cs := c.Client(0)
	ctx := testContext(t, 2*60e9)
	ns := namespace(t, c, "bands")

	t.Run("a static IP in the dynamic band is denied, naming both bands", func(t *testing.T) {
		_, err := create(ctx, cs, fixtures.Service(ns, "in-dynamic-band", fixtures.WithClusterIP("10.96.200.5")))
		requireDenied(t, err, mutating,
			`spec.clusterIP: Invalid value: "10.96.200.5": lies in the dynamic band 10.96.1.1-10.96.255.254 of ServiceCIDR "kubernetes"`,
			"choose a free address in the static band 10.96.0.1-10.96.1.0")
	})

	t.Run("a static IP in the static band is accepted", func(t *testing.T) {
		got := mustCreate(t, ctx, cs, fixtures.Service(ns, "in-static-band", fixtures.WithClusterIP("10.96.0.53")))
		if got.Spec.ClusterIP != "10.96.0.53" {
			t.Fatalf("clusterIP %s, want 10.96.0.53", got.Spec.ClusterIP)
		}
	})

	t.Run("a static IP that is already allocated is denied, naming its holder", func(t *testing.T) {
		eventuallyDenied(t, mutating, func() error {
			_, err := create(ctx, cs, fixtures.Service(ns, "same-ip", fixtures.WithClusterIP("10.96.0.53")))
			return err
		}, `"10.96.0.53"`, "is held by IPAddress 10.96.0.53 for Service "+ns+"/in-static-band", "repair loop")
	})

	t.Run("a static IP outside every range is denied by the webhook, not only by the apiserver", func(t *testing.T) {
		_, err := create(ctx, cs, fixtures.Service(ns, "outside", fixtures.WithClusterIP("10.200.0.1")))
		requireDenied(t, err, mutating, `spec.clusterIP: Invalid value: "10.200.0.1"`, "is outside every active Service CIDR", "10.96.0.0/16")
	})

	t.Run("an IP that is not an IP is denied", func(t *testing.T) {
		_, err := create(ctx, cs, fixtures.Service(ns, "not-an-ip", fixtures.WithClusterIP("10.96.0.300")))
		requireDenied(t, err, mutating, `"10.96.0.300"`)
	})

	t.Run("50 Services created without a clusterIP all land in the dynamic band and none on a reserved IP", func(t *testing.T) {
		seen := map[string]string{}
		for i := range 50 {
			got := mustCreate(t, ctx, cs, fixtures.Service(ns, fmt.Sprintf("dynamic-%02d", i)))
			ip := got.Spec.ClusterIP
			if !dynamicBand16.contains(ip) {
				t.Errorf("%s got %s, outside the dynamic band %s", got.Name, ip, dynamicBand16)
			}
			if ip == "10.96.0.10" || ip == "10.96.0.1" {
				t.Errorf("%s got the reserved %s", got.Name, ip)
			}
			if other, dup := seen[ip]; dup {
				t.Errorf("%s and %s share %s", got.Name, other, ip)
			}
			seen[ip] = got.Name
		}
		t.Logf("e2e: 50 of 50 dynamic Services landed in the dynamic band %s", dynamicBand16)
	})
}
