//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"clusterip-policy/test/e2e/framework"
	"clusterip-policy/test/fixtures"
)

// reservedRangesPolicy: a block in the static band for one namespace by
// name, a block in the dynamic band for namespaces labelled
// team=rr-payments, and the DNS reservation inside the first block.
var reservedRangesPolicy = fixtures.Policy(`allowedCIDRs: [10.96.0.0/16]
reservations:
- ip: 10.96.0.70
  service: rr-dns/owner
  note: single reservation inside a range
reservedRanges:
- cidr: 10.96.0.64/27
  namespaces: [rr-dns]
  note: cluster DNS and add-ons
- first: 10.96.128.0
  last: 10.96.128.63
  namespaceSelector:
    matchLabels: {team: rr-payments}
  note: team payments
`)

// The decisions on reserved ranges, on the real apiserver (without the
// leader's holds: the addresses are free because nothing else asks for
// them here): an allowed namespace's hand-picked create in its range is
// admitted in either band, another namespace is denied with
// reserved-range-for-other naming the range and its note, and the
// namespaceSelector follows the namespace's live labels.
func TestReservedRangesDecisions(t *testing.T) {
	c := own(t, framework.Options{Policy: reservedRangesPolicy, Webhooks: 1})
	cs := c.Client(0)
	ctx := testContext(t, 3*time.Minute)
	const dns, payments, web = "rr-dns", "rr-payments-a", "rr-web"
	for _, ns := range []string{dns, payments, web} {
		if err := framework.EnsureNamespace(ctx, cs, ns); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { deleteServices(t, cs, ns) })
	}
	setNamespaceLabel(t, ctx, c, payments, "team=rr-payments")

	t.Run("the named namespace gets a static-band address of its range", func(t *testing.T) {
		got := mustCreate(t, ctx, cs, fixtures.Service(dns, "coredns", fixtures.WithClusterIP("10.96.0.66")))
		if got.Spec.ClusterIP != "10.96.0.66" {
			t.Fatalf("clusterIP %s, want 10.96.0.66", got.Spec.ClusterIP)
		}
	})
	t.Run("another namespace is denied that range, naming it, its note and what to pick", func(t *testing.T) {
		_, err := create(ctx, cs, fixtures.Service(web, "squatter", fixtures.WithClusterIP("10.96.0.67")))
		requireDenied(t, err, mutating, `spec.clusterIP: Invalid value: "10.96.0.67"`, "is in reserved range 10.96.0.64/27 (cluster DNS and add-ons), which only namespace rr-dns may use", "outside the reserved ranges")
		requireRule(t, ctx, c, web, "squatter", "reserved-range-for-other")
	})
	t.Run("the single reservation inside the range wins over the range", func(t *testing.T) {
		_, err := create(ctx, cs, fixtures.Service(dns, "other", fixtures.WithClusterIP("10.96.0.70")))
		requireDenied(t, err, mutating, "is reserved for Service rr-dns/owner")
		got := mustCreate(t, ctx, cs, fixtures.Service(dns, "owner"))
		if got.Spec.ClusterIP != "10.96.0.70" {
			t.Fatalf("the owner got %s, want its reservation 10.96.0.70", got.Spec.ClusterIP)
		}
	})
	t.Run("a labelled namespace gets a dynamic-band address of its range, with no static-ip-in-dynamic-band", func(t *testing.T) {
		// The webhook's watch of the namespaces may trail the label by a
		// moment: retry while the denial is the range's.
		var got *corev1.Service
		fixtures.Eventually(t, "the labelled namespace getting 10.96.128.5", time.Minute, func() bool {
			s, err := create(ctx, cs, fixtures.Service(payments, "api", fixtures.WithClusterIP("10.96.128.5")))
			if err != nil && !strings.Contains(err.Error(), "reserved-range") && !strings.Contains(err.Error(), "is in reserved range") {
				t.Fatalf("create: %v", err)
			}
			got = s
			return err == nil
		})
		if got.Spec.ClusterIP != "10.96.128.5" {
			t.Fatalf("clusterIP %s", got.Spec.ClusterIP)
		}
		for _, d := range decisionsFor(c, payments, "api") {
			if len(d.Rules) > 0 && d.Decision != "denied" {
				t.Errorf("admitted with rules %v (%s)", d.Rules, d.Message)
			}
		}
	})
	t.Run("an unlabelled namespace is denied the selector's range", func(t *testing.T) {
		_, err := create(ctx, cs, fixtures.Service(web, "api", fixtures.WithClusterIP("10.96.128.6")))
		requireDenied(t, err, mutating, "is in reserved range 10.96.128.0-10.96.128.63 (team payments), which only namespaces matching team=rr-payments may use")
	})
	t.Run("the label added, the same create is admitted", func(t *testing.T) {
		setNamespaceLabel(t, ctx, c, web, "team=rr-payments")
		start := time.Now()
		fixtures.Eventually(t, "rr-web getting 10.96.128.6 after its label", time.Minute, func() bool {
			_, err := create(ctx, cs, fixtures.Service(web, "api", fixtures.WithClusterIP("10.96.128.6")))
			if err != nil && !strings.Contains(err.Error(), "is in reserved range") {
				t.Fatalf("create: %v", err)
			}
			return err == nil
		})
		t.Logf("e2e: reserved ranges: the label reached the decision within %s", time.Since(start).Round(time.Millisecond))
	})
	t.Run("outside every range the dynamic band stays closed to hand-picked addresses", func(t *testing.T) {
		_, err := create(ctx, cs, fixtures.Service(payments, "legacy", fixtures.WithClusterIP("10.96.129.5")))
		requireDenied(t, err, mutating, "lies in the dynamic band")
	})
}

// setNamespaceLabel sets one label (key=value) on namespace ns.
func setNamespaceLabel(t *testing.T, ctx context.Context, c *framework.Cluster, ns, kv string) {
	t.Helper()
	if out, errOut, err := c.Kubectl(ctx, "", "label", "namespace", ns, kv, "--overwrite"); err != nil {
		t.Fatalf("kubectl label namespace %s %s: %v\n%s%s", ns, kv, err, out, errOut)
	}
}

// requireRule waits until the webhook's audit log has a denial of
// namespace/name by rule (the log is written as the answer goes out).
func requireRule(t *testing.T, ctx context.Context, c *framework.Cluster, namespace, name, rule string) {
	t.Helper()
	fixtures.Eventually(t, "an audit line denying "+namespace+"/"+name+" by "+rule, time.Minute, func() bool {
		for _, d := range decisionsFor(c, namespace, name) {
			for _, r := range d.Rules {
				if d.Decision == "denied" && r == rule {
					return true
				}
			}
		}
		return false
	})
}
