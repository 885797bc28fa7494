package policy

import (
	"fmt"
	"strings"
	"testing"

	"clusterip-policy/pkg/allocview"
	"clusterip-policy/test/fixtures"
)

func TestReviewServiceCIDR(t *testing.T) {
	p := fixtures.MustPolicy(t, ParseDocument, "allowedCIDRs: [10.96.0.0/12, fd00:10:96::/64]\n")
	open := fixtures.MustPolicy(t, ParseDocument, "")
	warnOverlap := fixtures.MustPolicy(t, ParseDocument, "allowedCIDRs: [10.96.0.0/12]\nenforcement: {rules: {static-ip-in-dynamic-band: warn}}\n")
	exemptAdmin := fixtures.MustPolicy(t, ParseDocument, "allowedCIDRs: [10.96.0.0/12]\nexemptions: {users: [break-glass]}\n")
	withRuntime := append([]allocview.ServiceCIDR{serviceCIDR("e2e-runtime", true, "10.97.5.0/24")}, v4Only...)
	create := func(name string, cidrs ...string) ServiceCIDRRequest {
		return ServiceCIDRRequest{Operation: Create, Name: name, CIDRs: cidrs, User: "admin", Groups: []string{"system:masters"}}
	}
	tests := []struct {
		name    string
		policy  *Policy
		cidrs   []allocview.ServiceCIDR
		req     ServiceCIDRRequest
		rule    RuleID // "" when allowed
		message string // the exact message when set
		skipped string
	}{
		{name: "allows a range inside allowedCIDRs beside the default one", req: create("extra", "10.97.0.0/16")},
		{name: "allows a dual-stack range inside allowedCIDRs", req: create("extra", "10.97.0.0/24", "fd00:10:96::1:0/112")},
		{
			name: "refuses a range outside allowedCIDRs, naming them and both fixes", req: create("rogue", "10.200.0.0/24"), rule: RuleOutsideServiceCIDRs,
			message: `spec.cidrs[0]: Invalid value: "10.200.0.0/24": is not inside the policy's allowedCIDRs 10.96.0.0/12, fd00:10:96::/64; the apiserver would hand out its addresses to Services at random and the webhook would deny each of those creates: choose a range inside allowedCIDRs, or, if this range is approved, add it to allowedCIDRs first`,
		},
		{
			name: "refuses a range larger than an allowed CIDR, naming the allowed part", req: create("wide", "10.0.0.0/8"), rule: RuleOutsideServiceCIDRs,
			message: `spec.cidrs[0]: Invalid value: "10.0.0.0/8": is only partly inside the policy's allowedCIDRs 10.96.0.0/12, fd00:10:96::/64 (10.96.0.0/12 of it); the apiserver would hand out its addresses to Services at random and the webhook would deny each of those creates: choose a range inside allowedCIDRs, or, if this range is approved, add it to allowedCIDRs first`,
		},
		{name: "refuses the second family's range when it alone is outside", req: create("ds", "10.97.0.0/24", "fd00:99::/112"), rule: RuleOutsideServiceCIDRs, message: `spec.cidrs[1]: Invalid value: "fd00:99::/112": is not inside`},
		{name: "allows any range when the policy lists no allowedCIDRs", policy: open, req: create("anything", "192.168.0.0/24")},
		{
			name: "refuses a smaller range whose dynamic band covers the default range's static band", req: create("inside", "10.96.0.0/24"), rule: RuleStaticIPInDynamicBand,
			message: `spec.cidrs[0]: Invalid value: "10.96.0.0/24": its dynamic band 10.96.0.17-10.96.0.254 covers 10.96.0.17-10.96.0.254 of the static band 10.96.0.1-10.96.1.0 of ServiceCIDR "kubernetes": the apiserver would hand out those addresses at random, so they would no longer be free for Services that name them (or for reservations); choose a range that does not overlap 10.96.0.0/16, or one with the same network address that is at least as large`,
		},
		{name: "refuses a /28 on the default range's first addresses (all dynamic, kube-dns's address included)", req: create("tiny", "10.96.0.0/28"), rule: RuleStaticIPInDynamicBand, message: "its dynamic band 10.96.0.1-10.96.0.14 covers 10.96.0.1-10.96.0.14 of the static band 10.96.0.1-10.96.1.0"},
		{name: "refuses a larger range on another network address that swallows a static band", cidrs: withRuntime, req: create("big", "10.97.0.0/16"), rule: RuleStaticIPInDynamicBand, message: `its dynamic band 10.97.1.1-10.97.255.254 covers 10.97.5.1-10.97.5.16 of the static band 10.97.5.1-10.97.5.16 of ServiceCIDR "e2e-runtime"`},
		{name: "allows a larger range with the same network address (the same static band)", req: create("grow", "10.96.0.0/12")},
		{name: "allows a range inside another's dynamic band", req: create("carve", "10.96.128.0/24")},
		{name: "allows the same range as an existing one", req: create("twin", "10.96.0.0/16")},
		{name: "an overlap set to warn allows with a warning", policy: warnOverlap, req: create("inside", "10.96.0.0/24"), message: "its dynamic band 10.96.0.17-10.96.0.254 covers"},
		{
			name: "never refuses the apiserver's default ServiceCIDR, whatever its range", req: ServiceCIDRRequest{Operation: Create, Name: "kubernetes", CIDRs: []string{"192.168.0.0/24"}, User: "system:apiserver", Groups: []string{"system:masters"}},
			skipped: "the apiserver's default ServiceCIDR, made from its --service-cluster-ip-range",
		},
		{name: "refuses a ServiceCIDR named kubernetes from anyone else", req: create("kubernetes", "192.168.0.0/24"), rule: RuleOutsideServiceCIDRs},
		{name: "refuses a ServiceCIDR named kubernetes from system:apiserver without its group", req: ServiceCIDRRequest{Operation: Create, Name: "kubernetes", CIDRs: []string{"192.168.0.0/24"}, User: "system:apiserver"}, rule: RuleOutsideServiceCIDRs},
		{name: "refuses another name from system:apiserver", req: ServiceCIDRRequest{Operation: Create, Name: "other", CIDRs: []string{"192.168.0.0/24"}, User: "system:apiserver", Groups: []string{"system:masters"}}, rule: RuleOutsideServiceCIDRs},
		{name: "honours the policy's user exemptions", policy: exemptAdmin, req: ServiceCIDRRequest{Operation: Create, Name: "rogue", CIDRs: []string{"192.168.0.0/24"}, User: "break-glass"}, skipped: "user break-glass is exempt by the policy"},
		{name: "an update that keeps the CIDRs (labels, finalizers) passes, even for an unapproved range", req: ServiceCIDRRequest{Operation: Update, Name: "rogue", CIDRs: []string{"10.200.0.0/24"}, OldCIDRs: []string{"10.200.0.0/24"}}, skipped: "spec.cidrs unchanged"},
		{name: "an update adding an unapproved second family is refused on that CIDR", req: ServiceCIDRRequest{Operation: Update, Name: "extra", CIDRs: []string{"10.97.0.0/24", "fd00:99::/112"}, OldCIDRs: []string{"10.97.0.0/24"}}, rule: RuleOutsideServiceCIDRs, message: `spec.cidrs[1]: Invalid value: "fd00:99::/112"`},
		{name: "an update does not compare the object with its own stored ranges", cidrs: append([]allocview.ServiceCIDR{serviceCIDR("e2e-runtime", true, "10.97.0.0/16")}, v4Only...), req: ServiceCIDRRequest{Operation: Update, Name: "e2e-runtime", CIDRs: []string{"10.97.0.0/16", "fd00:10:96::/112"}, OldCIDRs: []string{"10.97.0.0/16"}}},
		{name: "a malformed CIDR (only sent straight to the webhook) is invalid-ip", req: create("bad", "10.96.0.0/33"), rule: RuleInvalidIP, message: `spec.cidrs[0]: Invalid value: "10.96.0.0/33": is not a CIDR such as 10.96.0.0/16 or fd00:10:96::/108`},
		{name: "a CIDR with host bits set says which one was meant", req: create("bad", "10.97.0.1/24"), rule: RuleInvalidIP, message: `spec.cidrs[0]: Invalid value: "10.97.0.1/24": has host bits set; did you mean 10.97.0.0/24?`},
		{name: "more CIDRs than the apiserver allows get one short denial", req: create("many", strings.Split(strings.Repeat("10.97.0.0/24,", 5000), ",")...), rule: RuleInvalidIP, message: "spec.cidrs: Too many: 5001: a ServiceCIDR holds at most 2 CIDRs, one per IP family"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pol := tt.policy
			if pol == nil {
				pol = p
			}
			cidrs := tt.cidrs
			if cidrs == nil {
				cidrs = v4Only
			}
			d := ReviewServiceCIDR(Env{Policy: pol, Snapshot: makeSnapshot(cidrs)}, tt.req)
			if d.Stage != StageServiceCIDR {
				t.Errorf("stage %q", d.Stage)
			}
			if d.Skipped != tt.skipped {
				t.Errorf("skipped %q, want %q", d.Skipped, tt.skipped)
			}
			if len(d.Message) > MaxMessageBytes+clipSlack || len(d.RequestedIPs) > MaxListed+1 {
				t.Errorf("unbounded decision: message %d bytes, %d CIDRs listed", len(d.Message), len(d.RequestedIPs))
			}
			if tt.rule == "" {
				if !d.Allowed() || len(d.Rules()) > 0 && tt.message == "" {
					t.Fatalf("want allowed without violations, got %s %v: %s", d.Outcome, d.Rules(), d.Message)
				}
				if tt.message != "" && (d.Outcome != Warned || len(d.Warnings) != 1 || !strings.Contains(d.Warnings[0], tt.message)) {
					t.Fatalf("want one warning containing %q, got %s %q", tt.message, d.Outcome, d.Warnings)
				}
				return
			}
			if d.Allowed() || fmt.Sprint(d.Rules()) != fmt.Sprint([]RuleID{tt.rule}) {
				t.Fatalf("want denied by %s, got %s %v: %s", tt.rule, d.Outcome, d.Rules(), d.Message)
			}
			if tt.message != "" && !strings.HasPrefix(d.Message, tt.message) && !strings.Contains(d.Message, tt.message) {
				t.Fatalf("message\n%s\nwant it to contain\n%s", d.Message, tt.message)
			}
		})
	}
}
