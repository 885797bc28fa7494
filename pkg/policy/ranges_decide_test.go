package policy

import (
	"net/netip"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"clusterip-policy/pkg/allocview"
	"clusterip-policy/test/fixtures"
)

// rangesPolicy has, on the dual-stack ranges 10.96.0.0/16 (static band
// 10.96.0.1-10.96.1.0) and fd00:10:96::/108 (static band
// fd00:10:96::1-fd00:10:96::100): a DNS block in the static band, a team
// block in the dynamic band selected by namespace label, an IPv6 block for
// databases of one namespace, and a single reservation inside the DNS block
// for a Service of another namespace.
const rangesPolicy = `
reservations:
- ip: 10.96.0.12
  service: monitoring/node-local-dns
  note: node-local DNS
reservedRanges:
- cidr: 10.96.0.8/29
  namespaces: [kube-system]
  note: cluster DNS and add-ons
- first: 10.96.100.0
  last: 10.96.100.255
  namespaceSelector: {matchLabels: {team: payments}}
  note: team payments
- cidr: fd00:10:96::f:ff00/120
  namespaces: [data]
  serviceSelector: {matchLabels: {tier: db}}
  note: databases
`

func labelled(kv ...string) func(*corev1.Service) {
	return func(s *corev1.Service) {
		s.Labels = map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			s.Labels[kv[i]] = kv[i+1]
		}
	}
}

func teamLabels(ns string) (map[string]string, bool) {
	switch ns {
	case "payments", "payments-canary":
		return map[string]string{corev1.LabelMetadataName: ns, "team": "payments"}, true
	case "data", "kube-system", "web", "monitoring":
		return map[string]string{corev1.LabelMetadataName: ns}, true
	}
	return nil, false
}

func TestMutateReservedRanges(t *testing.T) {
	p := fixtures.MustPolicy(t, ParseDocument, rangesPolicy)
	tests := []struct {
		name      string
		svc       *corev1.Service
		allocated []string
		rule      RuleID
		message   string
	}{
		{name: "an allowed namespace names an address of its static-band range", svc: fixtures.Service("kube-system", "kube-dns", fixtures.WithClusterIP("10.96.0.10"))},
		{name: "an allowed namespace names an address of its dynamic-band range (no static-ip-in-dynamic-band)", svc: fixtures.Service("payments", "api", fixtures.WithClusterIP("10.96.100.7"))},
		{name: "a second namespace with the label may too", svc: fixtures.Service("payments-canary", "api", fixtures.WithClusterIP("10.96.100.255"))},
		{
			name: "another namespace is denied a static-band range, naming the range, its note and what to pick",
			svc:  fixtures.Service("web", "frontend", fixtures.WithClusterIP("10.96.0.10")), rule: RuleReservedRangeForOther,
			message: `spec.clusterIP: Invalid value: "10.96.0.10": is in reserved range 10.96.0.8/29 (cluster DNS and add-ons), which only namespace kube-system may use; choose a free address in the static band 10.96.0.1-10.96.1.0 outside the reserved ranges, or leave clusterIP empty to get one allocated`,
		},
		{
			name: "another namespace is denied a dynamic-band range by reserved-range-for-other, not static-ip-in-dynamic-band",
			svc:  fixtures.Service("web", "frontend", fixtures.WithClusterIP("10.96.100.0")), rule: RuleReservedRangeForOther,
			message: `spec.clusterIP: Invalid value: "10.96.100.0": is in reserved range 10.96.100.0-10.96.100.255 (team payments), which only namespaces matching team=payments may use; choose a free address in the static band 10.96.0.1-10.96.1.0 outside the reserved ranges, or leave clusterIP empty to get one allocated`,
		},
		{name: "a namespace whose labels are not known is matched by name only", svc: fixtures.Service("unknown", "api", fixtures.WithClusterIP("10.96.100.1")), rule: RuleReservedRangeForOther},
		{name: "the address just past a range is an ordinary dynamic one", svc: fixtures.Service("payments", "api", fixtures.WithClusterIP("10.96.101.0")), rule: RuleStaticIPInDynamicBand},
		{name: "the address just before a range is an ordinary static one", svc: fixtures.Service("web", "frontend", fixtures.WithClusterIP("10.96.0.7"))},
		{name: "the owner of a single reservation inside a range has it, from another namespace", svc: fixtures.Service("monitoring", "node-local-dns", fixtures.WithClusterIP("10.96.0.12"))},
		{name: "a Service of the range's namespace is denied the single reservation inside it", svc: fixtures.Service("kube-system", "coredns-2", fixtures.WithClusterIP("10.96.0.12")), rule: RuleReservedForOther},
		{name: "IPv6: the namespace and the Service selector both match", svc: fixtures.Service("data", "pg", fixtures.WithClusterIPs("fd00:10:96::f:ff10"), fixtures.WithIPFamilies(corev1.IPv6Protocol), labelled("tier", "db"))},
		{name: "IPv6: the namespace matches but the Service selector does not", svc: fixtures.Service("data", "cache", fixtures.WithClusterIPs("fd00:10:96::f:ff10"), fixtures.WithIPFamilies(corev1.IPv6Protocol), labelled("tier", "cache")), rule: RuleReservedRangeForOther},
		{name: "IPv6: the labels match but the namespace is another", svc: fixtures.Service("web", "pg", fixtures.WithClusterIPs("fd00:10:96::f:ff10"), fixtures.WithIPFamilies(corev1.IPv6Protocol), labelled("tier", "db")), rule: RuleReservedRangeForOther},
		{
			name: "dual-stack: the IPv4 address is free, the IPv6 one in another's range",
			svc:  fixtures.Service("web", "pg", fixtures.WithClusterIPs("10.96.0.30", "FD00:10:96::F:FF01"), fixtures.WithIPFamilies(corev1.IPv4Protocol, corev1.IPv6Protocol), fixtures.WithIPFamilyPolicy(corev1.IPFamilyPolicyRequireDualStack)),
			rule: RuleReservedRangeForOther,
		},
		{name: "an allowed Service is still told when another Service holds the address", svc: fixtures.Service("payments", "api", fixtures.WithClusterIP("10.96.100.9")), allocated: []string{"10.96.100.9=payments/old"}, rule: RuleAlreadyAllocated},
		{name: "a dynamic create is untouched", svc: fixtures.Service("web", "frontend")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := Env{Policy: p, Snapshot: makeSnapshot(dualStack, tt.allocated...), NamespaceLabels: teamLabels}
			assertRule(t, Mutate(env, Request{Operation: Create, Service: tt.svc}), tt.rule, tt.message)
		})
	}
}

func TestValidateCatchesAnAllocationInAReservedRange(t *testing.T) {
	p := fixtures.MustPolicy(t, ParseDocument, rangesPolicy)
	env := Env{Policy: p, Snapshot: makeSnapshot(dualStack), NamespaceLabels: teamLabels}
	d := Validate(env, Request{Operation: Create, Service: fixtures.Service("web", "frontend", fixtures.WithClusterIPs("10.96.100.42"))})
	assertRule(t, d, RuleReservedRangeForOther,
		`allocated ClusterIP "10.96.100.42" is in reserved range 10.96.100.0-10.96.100.255 (team payments), which only namespaces matching team=payments may use; the apiserver picked it at random from the dynamic band 10.96.1.1-10.96.255.254 of ServiceCIDR "kubernetes" before the range's free addresses were held, and releases it with this denial: create the Service again to get another address, or name a free address in the static band 10.96.0.1-10.96.1.0`)
	d = Validate(env, Request{Operation: Create, Service: fixtures.Service("web", "frontend", fixtures.WithClusterIPs("10.96.0.9"))})
	assertRule(t, d, RuleReservedRangeForOther, "")
	if !strings.Contains(d.Message, "only when the range's dynamic band is full") {
		t.Fatalf("a static-band allocation is explained as one: %s", d.Message)
	}
	for _, ok := range []*corev1.Service{
		fixtures.Service("payments", "api", fixtures.WithClusterIPs("10.96.100.42")),
		fixtures.Service("monitoring", "node-local-dns", fixtures.WithClusterIPs("10.96.0.12")),
		fixtures.Service("web", "frontend", fixtures.WithClusterIPs("10.96.44.3")),
	} {
		assertRule(t, Validate(env, Request{Operation: Create, Service: ok}), "", "")
	}
	// An update that keeps the address is not an allocation: a range added
	// later does not revoke it.
	kept := fixtures.Service("web", "frontend", fixtures.WithClusterIPs("10.96.100.42"))
	assertRule(t, Validate(env, Request{Operation: Update, OldService: kept, Service: kept}), "", "")
}

func TestReservedRangeModesAndExemptions(t *testing.T) {
	req := Request{Operation: Create, User: "bob", Service: fixtures.Service("web", "frontend", fixtures.WithClusterIP("10.96.100.5"))}
	for _, tt := range []struct {
		name, extra string
		outcome     Outcome
		skipped     string
	}{
		{name: "deny by default", outcome: Denied},
		{name: "warn", extra: "enforcement:\n  rules: {reserved-range-for-other: warn}\n", outcome: Warned},
		{name: "audit", extra: "enforcement:\n  rules: {reserved-range-for-other: audit}\n", outcome: Allowed},
		{name: "another rule's action does not apply", extra: "enforcement:\n  rules: {reserved-for-other: warn}\n", outcome: Denied},
		{name: "exempt namespace", extra: "exemptions: {namespaces: [web]}\n", outcome: Allowed, skipped: "namespace web is exempt by the policy"},
		{name: "exempt user", extra: "exemptions: {users: [bob]}\n", outcome: Allowed, skipped: "user bob is exempt by the policy"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			env := Env{Policy: fixtures.MustPolicy(t, ParseDocument, rangesPolicy+tt.extra), Snapshot: makeSnapshot(dualStack), NamespaceLabels: teamLabels}
			var warned []string
			for _, d := range []Decision{Mutate(env, req), Validate(env, req)} {
				if d.Outcome != tt.outcome || d.Skipped != tt.skipped {
					t.Fatalf("%s: outcome %s skipped %q (%s); want %s %q", d.Stage, d.Outcome, d.Skipped, d.Message, tt.outcome, tt.skipped)
				}
				if tt.skipped == "" && (len(d.Rules()) != 1 || d.Rules()[0] != RuleReservedRangeForOther) {
					t.Fatalf("%s: rules %v; every mode records the rule", d.Stage, d.Rules())
				}
				warned = append(warned, d.Warnings...)
			}
			if tt.outcome == Warned && (len(warned) != 2 || warned[0] != warned[1]) {
				t.Fatalf("a warned range reads the same at both stages (the apiserver drops the repeat): %q", warned)
			}
		})
	}
}

func TestAuditReportsServicesInAnotherNamespacesRange(t *testing.T) {
	p := fixtures.MustPolicy(t, ParseDocument, rangesPolicy)
	env := Env{Policy: p, Snapshot: makeSnapshot(dualStack), NamespaceLabels: teamLabels}
	svcs := []*corev1.Service{
		fixtures.Service("payments", "api", fixtures.WithClusterIPs("10.96.100.1")),
		fixtures.Service("web", "squatter", fixtures.WithClusterIPs("10.96.100.2")),
		fixtures.Service("monitoring", "node-local-dns", fixtures.WithClusterIPs("10.96.0.12")),
	}
	r := Audit(env, svcs)
	var got []string
	for _, f := range r.Findings {
		got = append(got, f.Namespace+"/"+f.Name+" "+string(f.Rule))
	}
	if strings.Join(got, ",") != "web/squatter reserved-range-for-other" {
		t.Fatalf("findings %v", got)
	}
	if f := r.Findings[0]; !strings.Contains(f.Problem, "reserved range 10.96.100.0-10.96.100.255 (team payments)") || !strings.Contains(f.Fix, "outside the reserved ranges") {
		t.Fatalf("finding %+v", f)
	}
}

func TestReservedRangeLookupIsBoundedForAnyAddress(t *testing.T) {
	// The largest policy: 64 ranges; a lookup is a binary search, whatever
	// the address (either family, a 4in6 spelling).
	var b strings.Builder
	b.WriteString("reservedRanges:\n")
	for i := range 64 {
		b.WriteString("- cidr: 10.96." + strconv.Itoa(i) + ".0/26\n  namespaces: [team-" + strconv.Itoa(i) + "]\n")
	}
	p := fixtures.MustPolicy(t, ParseDocument, b.String())
	env := Env{Policy: p, Snapshot: makeSnapshot(dualStack)}
	for _, ip := range []string{"10.96.63.63", "10.96.63.64", "0.0.0.0", "255.255.255.255", "::", "fd00:10:96::5", "::ffff:10.96.0.5"} {
		d := Mutate(env, Request{Operation: Create, Service: fixtures.Service("team-1", "x", fixtures.WithClusterIP(ip))})
		if rules := d.Rules(); len(rules) > 1 {
			t.Fatalf("%s: %v", ip, rules)
		}
	}
	assertRule(t, Mutate(env, Request{Operation: Create, Service: fixtures.Service("team-1", "x", fixtures.WithClusterIP("10.96.63.1"))}), RuleReservedRangeForOther, "")
	assertRule(t, Mutate(env, Request{Operation: Create, Service: fixtures.Service("team-63", "x", fixtures.WithClusterIP("10.96.63.1"))}), "", "")
}

// TestOurRangeHoldIsFreeForThoseWhoMayUseTheRange: with holds on, every
// free address of a range has an IPAddress of ours naming the range; the
// mutating stage releases it for a Service that may use the range, so the
// decision must not call it allocated. For anyone else it stays taken. A
// hold naming the range as it was before a resize (kept: parentRef is
// immutable, and replacing it would unhold the address) is released too.
func TestOurRangeHoldIsFreeForThoseWhoMayUseTheRange(t *testing.T) {
	p := fixtures.MustPolicy(t, ParseDocument, rangesPolicy)
	team := allocview.Band{First: netip.MustParseAddr("10.96.100.0"), Last: netip.MustParseAddr("10.96.100.255")}
	stale := allocview.Band{First: netip.MustParseAddr("10.96.100.0"), Last: netip.MustParseAddr("10.96.100.127")}
	snap := allocview.NewView().Update(func(tx *allocview.Tx) {
		for _, c := range dualStack {
			tx.SetServiceCIDR(c)
		}
		tx.SetAllocation(netip.MustParseAddr("10.96.100.7"), allocview.RangeHolder(team))
		tx.SetAllocation(netip.MustParseAddr("10.96.100.8"), allocview.RangeHolder(stale))
		// Labelled like a range hold but not ours: anyone may write a parentRef.
		forged := allocview.RangeHolder(team)
		forged.Ours = false
		tx.SetAllocation(netip.MustParseAddr("10.96.100.9"), forged)
		tx.MarkSynced(true)
	})
	env := Env{Policy: p, Snapshot: snap, NamespaceLabels: teamLabels}
	for _, tt := range []struct {
		svc  *corev1.Service
		rule RuleID
	}{
		{fixtures.Service("payments", "api", fixtures.WithClusterIP("10.96.100.7")), ""},
		{fixtures.Service("web", "frontend", fixtures.WithClusterIP("10.96.100.7")), RuleReservedRangeForOther},
		{fixtures.Service("payments", "api", fixtures.WithClusterIP("10.96.100.8")), ""},
		{fixtures.Service("web", "frontend", fixtures.WithClusterIP("10.96.100.8")), RuleReservedRangeForOther},
		{fixtures.Service("payments", "api", fixtures.WithClusterIP("10.96.100.9")), RuleAlreadyAllocated},
	} {
		assertRule(t, Mutate(env, Request{Operation: Create, Service: tt.svc}), tt.rule, "")
	}
}
