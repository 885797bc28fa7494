package policy

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"clusterip-policy/pkg/allocview"
	"clusterip-policy/test/fixtures"
)

// With the StrictIPCIDRValidation gate off, the apiserver accepts a
// clusterIP with leading zeros or in IPv4-mapped IPv6 form and stores the
// address netutils.ParseIPSloppy reads (010.096.000.010 and
// ::ffff:10.96.0.10 are 10.96.0.10). Where invalid-ip only warns or
// audits, the other rules judge that address, so a reserved address does
// not pass under another spelling; where invalid-ip denies, it alone
// answers, as before.
func TestSloppySpellingsAreJudgedAsTheAddressTheAPIServerStores(t *testing.T) {
	cidrs := []allocview.ServiceCIDR{serviceCIDR("kubernetes", true, "10.96.0.0/16")}
	for _, tc := range []struct {
		name, invalidIP, svc, ip string
		validate                 bool
		rules                    []RuleID
		denied                   bool
		message                  string // part of the decision's message
	}{
		{name: "leading zeros on another Service's reserved address", invalidIP: "warn", svc: "default/web", ip: "010.096.000.010",
			rules: []RuleID{RuleInvalidIP, RuleReservedForOther}, denied: true, message: `spec.clusterIP: Invalid value: "010.096.000.010": is reserved for Service kube-system/kube-dns (cluster DNS)`},
		{name: "an IPv4-mapped spelling of another Service's reserved address", invalidIP: "audit", svc: "default/web", ip: "::ffff:10.96.0.10",
			rules: []RuleID{RuleInvalidIP, RuleReservedForOther}, denied: true, message: `spec.clusterIP: Invalid value: "::ffff:10.96.0.10": is reserved for Service kube-system/kube-dns (cluster DNS)`},
		{name: "leading zeros in the dynamic band", invalidIP: "warn", svc: "default/web", ip: "010.096.200.005",
			rules: []RuleID{RuleInvalidIP, RuleStaticIPInDynamicBand}, denied: true, message: `lies in the dynamic band 10.96.1.1-10.96.255.254`},
		{name: "leading zeros outside every range", invalidIP: "warn", svc: "default/web", ip: "010.200.000.001",
			rules: []RuleID{RuleInvalidIP, RuleOutsideServiceCIDRs}, denied: true, message: `is outside every active Service CIDR`},
		{name: "the owner itself, in a sloppy spelling, is only warned", invalidIP: "warn", svc: "kube-system/kube-dns", ip: "010.096.000.010",
			rules: []RuleID{RuleInvalidIP}, denied: false},
		{name: "a free static address in a sloppy spelling is only warned", invalidIP: "warn", svc: "default/web", ip: "010.096.000.020",
			rules: []RuleID{RuleInvalidIP}, denied: false},
		{name: "invalid-ip at deny answers alone", invalidIP: "deny", svc: "default/web", ip: "010.096.000.010",
			rules: []RuleID{RuleInvalidIP}, denied: true, message: `"010.096.000.010": has leading zeros, which some software reads as octal and an apiserver without StrictIPCIDRValidation as 10.96.0.10; write it as 10.96.0.10`},
		{name: "what no apiserver parses is invalid-ip only", invalidIP: "warn", svc: "default/web", ip: "10.96.0.300",
			rules: []RuleID{RuleInvalidIP}, denied: false},
		{name: "the validating stage judges the stored address too", invalidIP: "warn", svc: "default/web", ip: "010.096.000.010", validate: true,
			rules: []RuleID{RuleInvalidIP, RuleReservedForOther}, denied: true, message: `allocated ClusterIP "010.096.000.010" is reserved for Service kube-system/kube-dns (cluster DNS)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := fixtures.MustPolicy(t, ParseDocument, dnsPolicy+"enforcement:\n  default: deny\n  rules:\n    invalid-ip: "+tc.invalidIP+"\n")
			env := Env{Policy: p, Snapshot: makeSnapshot(cidrs)}
			svcNamespace, svcName, _ := strings.Cut(tc.svc, "/")
			req := Request{Operation: Create, Service: fixtures.Service(svcNamespace, svcName, fixtures.WithClusterIP(tc.ip))}
			var d Decision
			if tc.validate {
				req.Service = fixtures.Service(svcNamespace, svcName, fixtures.WithClusterIPs(tc.ip))
				d = Validate(env, req)
			} else {
				d = Mutate(env, req)
			}
			if got := d.Rules(); !slices.Equal(got, tc.rules) {
				t.Fatalf("rules %v, want %v; message %s", got, tc.rules, d.Message)
			}
			if denied := d.Outcome == Denied; denied != tc.denied {
				t.Fatalf("outcome %s, want denied %v: %s", d.Outcome, tc.denied, d.Message)
			}
			if !strings.Contains(d.Message, tc.message) {
				t.Fatalf("message %q lacks %q", d.Message, tc.message)
			}
		})
	}
}

// The audit of stored Services reports a sloppy spelling as invalid-ip and
// judges the address it stands for.
func TestAuditJudgesTheAddressASloppySpellingStandsFor(t *testing.T) {
	p := fixtures.MustPolicy(t, ParseDocument, dnsPolicy)
	env := Env{Policy: p, Snapshot: makeSnapshot([]allocview.ServiceCIDR{serviceCIDR("kubernetes", true, "10.96.0.0/16")})}
	r := Audit(env, []*corev1.Service{fixtures.Service("default", "web", fixtures.WithClusterIPs("010.096.000.010"))})
	var rules []RuleID
	for _, f := range r.Findings {
		rules = append(rules, f.Rule)
	}
	if !slices.Equal(rules, []RuleID{RuleInvalidIP, RuleReservedForOther}) {
		t.Fatalf("findings %+v, want invalid-ip and reserved-for-other", r.Findings)
	}
}
