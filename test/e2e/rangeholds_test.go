//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"clusterip-policy/certs"
	"clusterip-policy/test/e2e/framework"
	"clusterip-policy/test/fixtures"
)

// rangeHoldsPolicy reserves 10.96.0.24/29, inside the dynamic band
// (.17-.30) of a 10.96.0.0/27, for namespace rrh-team; .31 is the
// broadcast address, so the range has 7 addresses the apiserver allocates.
var rangeHoldsPolicy = fixtures.Policy(sharedSpec + `reservedRanges:
- cidr: 10.96.0.24/29
  namespaces: [rrh-team]
  note: team block
`)

// rangeParentResource is the parentRef resource of the holds of a
// reserved range's addresses (allocview.RangeHoldResource).
const rangeParentResource = "reservedranges"

var teamRange = band{mustAddr("10.96.0.24"), mustAddr("10.96.0.30")}

// TestReservedRangeHolds: with --hold-reservations the leader holds every
// free address of a reserved range in the dynamic band, so dynamic creates
// fill the rest of the /27 until the allocator is exhausted without ever
// getting one of the range's addresses; the namespace the range is for
// then gets each of them by name, another namespace is denied, and a
// deleted Service's address is held again.
func TestReservedRangeHolds(t *testing.T) {
	c := own(t, framework.Options{
		APIServers:  []framework.APIServerOptions{{ServiceClusterIPRange: "10.96.0.0/27"}},
		Policy:      rangeHoldsPolicy,
		Webhooks:    1,
		WebhookArgs: []string{"--hold-reservations", "--manage-match-conditions"},
	})
	cs := c.Client(0)
	ctx := testContext(t, 4*time.Minute)
	const team = "rrh-team"
	if err := framework.EnsureNamespace(ctx, cs, team); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteServices(t, cs, team) })
	dyn := namespace(t, c, "rrh-dyn")

	t.Run("the leader holds every allocatable address of the range, naming the range", func(t *testing.T) {
		start := time.Now()
		for ip := teamRange.first; !teamRange.last.Less(ip); ip = ip.Next() {
			a := waitHold(t, ctx, cs, ip.String(), 30*time.Second)
			if r := a.Spec.ParentRef; r == nil || r.Group != "clusterip-policy.io" || r.Resource != rangeParentResource || r.Namespace != "" || r.Name != "10.96.0.24-10.96.0.31" {
				t.Fatalf("hold %s parentRef %+v, want reservedranges.clusterip-policy.io 10.96.0.24-10.96.0.31", ip, a.Spec.ParentRef)
			}
		}
		t.Logf("e2e: range holds: the 7 addresses of 10.96.0.24/29 were held %s after the replica was ready", time.Since(start).Round(10*time.Millisecond))
		if ipAddressExists(t, ctx, cs, "10.96.0.31") {
			t.Fatal("the broadcast address 10.96.0.31 is held; the apiserver never allocates it")
		}
		eventuallyMetric(t, ctx, c, "clusterip_policy_range_holds", `state="held"`, 7)
		waitManaged(t, ctx, c, policyDigest(t, rangeHoldsPolicy), 30*time.Second)
	})

	t.Run("dynamic creates exhaust the allocator without one address of the range", func(t *testing.T) {
		// 30 usable addresses: .1 default/kubernetes, .10 held for kube-dns,
		// .24-.30 held for the range.
		const free = 30 - 1 - 1 - 7
		// calls counts the webhook calls of the creates given a
		// dynamic-band address; those that spill into the static band
		// once it is full are sent to the validating webhook by design
		// (docs/matchconditions.md).
		dynamicBand := band{mustAddr("10.96.0.17"), mustAddr("10.96.0.30")}
		created, inRange, denied, full, inDynamic, calls := 0, 0, 0, 0, 0, 0
		for i := 0; i < free+5 && full == 0; i++ {
			got, err := create(ctx, cs, fixtures.Service(dyn, fmt.Sprintf("dynamic-%03d", i+1)))
			switch {
			case err == nil:
				if teamRange.contains(got.Spec.ClusterIP) {
					inRange++
					t.Errorf("%s got %s, in the held range", got.Name, got.Spec.ClusterIP)
				}
				created++
				if dynamicBand.contains(got.Spec.ClusterIP) {
					inDynamic++
					if reached(c, dyn, got.Name, "") {
						calls++
					}
				}
			case deniedBy(err, validating) || deniedBy(err, mutating):
				t.Errorf("create %d denied: %v", i+1, err)
				denied++
			case strings.Contains(err.Error(), "range is full"):
				full++
			default:
				t.Fatalf("create %d: %v", i+1, err)
			}
		}
		t.Logf("e2e: range holds: /27 with a /29 range held: %d dynamic Services created, %d of them in the range, %d denied, then range is full; %d of them got a dynamic-band address, with %.2f webhook calls per create", created, inRange, denied, inDynamic, float64(calls)/float64(max(inDynamic, 1)))
		if inDynamic != 7 || calls != 0 {
			t.Errorf("%d of the %d creates given a dynamic-band address reached the webhook, want 7 creates and none: with the range held the managed matchConditions send none", calls, inDynamic)
		}
		if created != free || inRange != 0 || denied != 0 || full != 1 {
			t.Fatalf("created %d, in the range %d, denied %d, range-is-full %d; want %d, 0, 0, 1", created, inRange, denied, full, free)
		}
	})

	t.Run("another namespace naming a held address of the range is denied and releases nothing", func(t *testing.T) {
		_, err := create(ctx, cs, fixtures.Service(dyn, "squatter", fixtures.WithClusterIP("10.96.0.26")))
		requireDenied(t, err, mutating, "is in reserved range 10.96.0.24/29 (team block), which only namespace rrh-team may use")
		requireRule(t, ctx, c, dyn, "squatter", "reserved-range-for-other")
		waitHold(t, ctx, cs, "10.96.0.26", time.Second)
	})

	t.Run("the range's namespace gets every address of it by name, in a full Service range", func(t *testing.T) {
		before := metricSum(t, ctx, c, "clusterip_policy_hold_releases_total", `result="released"`)
		for ip := teamRange.first; !teamRange.last.Less(ip); ip = ip.Next() {
			name := "team-" + strings.ReplaceAll(ip.String(), ".", "-")
			got := mustCreate(t, ctx, cs, fixtures.Service(team, name, fixtures.WithClusterIP(ip.String())))
			if got.Spec.ClusterIP != ip.String() {
				t.Fatalf("%s got %s, want %s", name, got.Spec.ClusterIP, ip)
			}
		}
		if got := metricSum(t, ctx, c, "clusterip_policy_hold_releases_total", `result="released"`); got != before+7 {
			t.Fatalf("releases %v -> %v, want 7 more", before, got)
		}
		eventuallyMetric(t, ctx, c, "clusterip_policy_range_holds", `state="used"`, 7)
	})

	t.Run("a deleted Service's address of the range is held again", func(t *testing.T) {
		if err := cs.CoreV1().Services(team).Delete(ctx, "team-10-96-0-27", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		deleted := time.Now()
		waitHold(t, ctx, cs, "10.96.0.27", 10*time.Second)
		t.Logf("e2e: range holds: 10.96.0.27 was held again %s after its Service was deleted", time.Since(deleted).Round(10*time.Millisecond))
		// The allocator is exhausted but for that address: a dynamic
		// create must not get it.
		_, err := create(ctx, cs, fixtures.Service(dyn, "after-delete"))
		if err == nil || !strings.Contains(err.Error(), "range is full") {
			t.Fatalf("a dynamic create with only the held range address free: %v, want range is full", err)
		}
		got := mustCreate(t, ctx, cs, fixtures.Service(team, "team-again", fixtures.WithClusterIP("10.96.0.27")))
		if got.Spec.ClusterIP != "10.96.0.27" {
			t.Fatalf("got %s", got.Spec.ClusterIP)
		}
	})
}

// TestReservedRangeWithoutHoldsDeniesADynamicAllocationInIt: with holds
// off the allocator may pick a range's address for any Service; the
// validating stage then denies that create with reserved-range-for-other
// (the apiserver releases the address), and the other dynamic creates go
// through. Once the rest of the dynamic band is taken every dynamic pick
// is in the range, so a denial is certain within a few creates.
//
// Without the backstop, which once in force refuses such an allocation
// before the validating webhook is called: this test is about the
// webhook's message, which says the apiserver picked the address.
func TestReservedRangeWithoutHoldsDeniesADynamicAllocationInIt(t *testing.T) {
	c := own(t, framework.Options{
		APIServers: []framework.APIServerOptions{{ServiceClusterIPRange: "10.96.0.0/27"}},
		Policy:     rangeHoldsPolicy,
		Webhooks:   1,
		NoBackstop: true,
	})
	cs := c.Client(0)
	ctx := testContext(t, 3*time.Minute)
	dyn := namespace(t, c, "rrh-nohold")
	for i := 0; i < 14; i++ {
		got, err := create(ctx, cs, fixtures.Service(dyn, fmt.Sprintf("dynamic-%03d", i+1)))
		if err == nil {
			if teamRange.contains(got.Spec.ClusterIP) {
				t.Fatalf("%s kept %s, in the range", got.Name, got.Spec.ClusterIP)
			}
			continue
		}
		requireDenied(t, err, validating, "is in reserved range 10.96.0.24/29 (team block), which only namespace rrh-team may use", "the apiserver picked it at random from the dynamic band")
		t.Logf("e2e: range holds off: dynamic create %d was allocated an address of the range and denied by the validating stage", i+1)
		return
	}
	t.Fatal("14 dynamic creates in a 14-address dynamic band half covered by the range, and none was denied")
}

// TestForgedCreatesCannotFreeAWholeRange plays a client that reaches the
// webhook port without being an apiserver (no client certificates): it
// POSTs forged creates of Services of the range's namespace, one for each
// address of a held /26, as fast as the webhook answers. Each address has
// a budget of its own, so only the range's budget (20 at once, then 2 a
// second) keeps the forger from freeing all 64; the leader holds each
// freed address again after the grace.
func TestForgedCreatesCannotFreeAWholeRange(t *testing.T) {
	pol := fixtures.Policy(sharedSpec + `reservedRanges:
- cidr: 10.96.128.0/26
  namespaces: [rrf-team]
`)
	c := own(t, framework.Options{Policy: pol, Webhooks: 1, WebhookArgs: []string{"--hold-reservations"}})
	ctx := testContext(t, 3*time.Minute)
	fixtures.Eventually(t, "the /26 fully held", time.Minute, func() bool {
		return metricSum(t, ctx, c, "clusterip_policy_range_holds", `state="held"`) == 64
	})
	released0 := metricSum(t, ctx, c, "clusterip_policy_hold_releases_total", `result="released"`)
	start := time.Now()
	allowed, refused := 0, 0
	for i := range 64 {
		ip := netip.AddrFrom4([4]byte{10, 96, 128, byte(i)}).String()
		raw, err := json.Marshal(fixtures.Service("rrf-team", fmt.Sprintf("forged-%02d", i), fixtures.WithClusterIP(ip)))
		if err != nil {
			t.Fatal(err)
		}
		if forgeCreate(t, ctx, c, fmt.Sprintf("forged-range-%03d", i), "rrf-team", fmt.Sprintf("forged-%02d", i), raw, "too often") {
			allowed++
		} else {
			refused++
		}
	}
	span := time.Since(start)
	released := metricSum(t, ctx, c, "clusterip_policy_hold_releases_total", `result="released"`) - released0
	// 20 at once, then one every 500 ms of the run.
	bound := 20 + int(span/(500*time.Millisecond)) + 1
	t.Logf("e2e: range holds: 64 forged creates over a held /26 in %s: %d released, %d refused with 503 (bound %d)", span.Round(time.Millisecond), int(released), refused, bound)
	if int(released) > bound || allowed != int(released) || refused != 64-allowed {
		t.Fatalf("released %v, allowed %d, refused %d in %s; want at most %d released", released, allowed, refused, span, bound)
	}
	fixtures.Eventually(t, "the forged releases held again", time.Minute, func() bool {
		return metricSum(t, ctx, c, "clusterip_policy_range_holds", `state="held"`) == 64
	})
}

// TestARangeNamingAnExcludedNamespaceIsNotHeld: a range that names the
// webhook's own namespace (which the shipped configurations leave out, as
// an operator's namespaceSelector may leave out kube-system) beside a
// judged one is not held, so a Service of that namespace gets the address
// it names instead of "already allocated" (before: every address of the
// range held, none ever released there); the leader logs the range, the
// namespace and the fix. A range of judged namespaces only is held.
func TestARangeNamingAnExcludedNamespaceIsNotHeld(t *testing.T) {
	c := own(t, framework.Options{
		Policy: fixtures.Policy("allowedCIDRs: [10.96.0.0/16]\nreservedRanges:\n" +
			"- {cidr: 10.96.0.40/29, namespaces: [team-db, clusterip-policy], note: mixed}\n" +
			"- {cidr: 10.96.0.48/29, namespaces: [team-db]}\n"),
		Webhooks:    1,
		WebhookArgs: []string{"--hold-reservations"},
	})
	cs := c.Client(0)
	ctx := testContext(t, 2*time.Minute)
	if err := framework.EnsureNamespace(ctx, cs, "clusterip-policy"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteServices(t, cs, "clusterip-policy") })
	waitHold(t, ctx, cs, "10.96.0.49", 30*time.Second) // the judged range: a pass has run
	for _, ip := range []string{"10.96.0.40", "10.96.0.41", "10.96.0.46", "10.96.0.47"} {
		if ipAddressExists(t, ctx, cs, ip) {
			t.Errorf("%s of the range naming the excluded namespace is held", ip)
		}
	}
	got, err := create(ctx, cs, fixtures.Service("clusterip-policy", "named", fixtures.WithClusterIP("10.96.0.41")))
	if err != nil || got.Spec.ClusterIP != "10.96.0.41" {
		t.Fatalf("a Service of the excluded namespace naming 10.96.0.41 of its range: %v", err)
	}
	log, err := c.Webhooks[0].Log()
	if err != nil {
		t.Fatal(err)
	}
	want := `reservedRanges[0] 10.96.0.40/29 (mixed) is not held: it names namespace \"clusterip-policy\"`
	if !strings.Contains(log, want) {
		t.Fatalf("the leader's log does not say %s", want)
	}
	t.Logf("e2e: a range naming an excluded namespace: not held, and logged once (%d lines)", strings.Count(log, want))
}

// TestResizingARangeKeepsItsHolds: a held /29 grows to a /28. The holds of
// its eight addresses stay the same objects (same UID, still naming the
// range as it was: parentRef is immutable), the eight new addresses are
// held, and a team create naming an old address right after the resize is
// admitted with it. Before, the leader replaced every hold whose parentRef
// named the old range, leaving each address unheld for a grace and the
// team's creates refused as already allocated meanwhile.
func TestResizingARangeKeepsItsHolds(t *testing.T) {
	spec := func(cidr string) string {
		return "allowedCIDRs: [10.96.0.0/16]\nreservedRanges:\n- {cidr: " + cidr + ", namespaces: [rrs-team]}\n"
	}
	c := own(t, framework.Options{Policy: fixtures.Policy(spec("10.96.0.64/29")), Webhooks: 1, WebhookArgs: []string{"--hold-reservations"}})
	cs := c.Client(0)
	ctx := testContext(t, 2*time.Minute)
	const team = "rrs-team"
	if err := framework.EnsureNamespace(ctx, cs, team); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteServices(t, cs, team) })
	before := map[string]string{}
	for i := 64; i < 72; i++ {
		ip := fmt.Sprintf("10.96.0.%d", i)
		before[ip] = string(waitHold(t, ctx, cs, ip, 30*time.Second).UID)
	}
	if err := certs.WriteFileAtomic(c.PolicyFile, []byte(fixtures.Policy(spec("10.96.0.64/28"))), 0o644); err != nil {
		t.Fatal(err)
	}
	resized := time.Now()
	for i := 72; i < 80; i++ {
		waitHold(t, ctx, cs, fmt.Sprintf("10.96.0.%d", i), 30*time.Second)
	}
	t.Logf("e2e: resize: the eight new addresses of 10.96.0.64/28 held %s after the policy file changed", time.Since(resized).Round(10*time.Millisecond))
	got := mustCreate(t, ctx, cs, fixtures.Service(team, "named-after-resize", fixtures.WithClusterIP("10.96.0.66")))
	if got.Spec.ClusterIP != "10.96.0.66" {
		t.Fatalf("got %s", got.Spec.ClusterIP)
	}
	leaderPasses(t, ctx, c, 3) // the leader decided on the resized range, three times
	for ip, uid := range before {
		if ip == "10.96.0.66" {
			continue // released for the team's Service
		}
		a, err := cs.NetworkingV1().IPAddresses().Get(ctx, ip, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the hold on %s is gone after the resize: %v", ip, err)
		}
		if string(a.UID) != uid {
			t.Errorf("the hold on %s was replaced by the resize (uid %s, was %s)", ip, a.UID, uid)
		}
		if r := a.Spec.ParentRef; r == nil || r.Name != "10.96.0.64-10.96.0.71" {
			t.Errorf("the hold on %s names %+v, want the range as it was when held", ip, a.Spec.ParentRef)
		}
	}
}
