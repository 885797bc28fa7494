package policy

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"clusterip-policy/test/fixtures"
)

func TestReplayCreateRunsMutateThenValidateOnWhatWasAllocated(t *testing.T) {
	tests := []struct {
		name       string
		policy     string
		svc        *corev1.Service
		allowed    bool
		outcome    Outcome
		rules      []RuleID
		mutations  []string
		clusterIPs []string
		message    string
	}{
		{
			name: "leaves a dynamic create to the apiserver's allocator", policy: dnsPolicy,
			svc:     fixtures.Service("default", "web"),
			allowed: true, outcome: Allowed,
		},
		{
			name: "assigns kube-dns its reservation and validates the assigned address", policy: dnsPolicy,
			svc:     fixtures.Service("kube-system", "kube-dns"),
			allowed: true, outcome: Patched, mutations: []string{MutationAssignReserved}, clusterIPs: []string{"10.96.0.10"},
			message: "assigned reserved 10.96.0.10",
		},
		{
			name: "keeps a static-band address the Service asked for", policy: dnsPolicy,
			svc:     fixtures.Service("default", "web", fixtures.WithClusterIP("10.96.0.20")),
			allowed: true, outcome: Allowed, clusterIPs: []string{"10.96.0.20"},
		},
		{
			name: "passes a headless Service untouched and reports None", policy: dnsPolicy,
			svc:     fixtures.Service("default", "headless", fixtures.WithClusterIP(corev1.ClusterIPNone)),
			allowed: true, outcome: Allowed, clusterIPs: []string{corev1.ClusterIPNone},
			message: "headless Service (clusterIP None)",
		},
		{
			name: "stops at the mutating stage when it denies", policy: dnsPolicy,
			svc:     fixtures.Service("default", "web", fixtures.WithClusterIP("10.96.200.5")),
			outcome: Denied, rules: []RuleID{RuleStaticIPInDynamicBand},
			message: `spec.clusterIP: Invalid value: "10.96.200.5": lies in the dynamic band 10.96.1.1-10.96.255.254 of 10.96.0.0/16 (--service-cidr); choose a free address in the static band 10.96.0.1-10.96.1.0 or ask for a reservation`,
		},
		{
			name: "lists a rule both stages warn about once", policy: dnsPolicy + "enforcement:\n  rules:\n    reserved-for-other: warn\n",
			svc:     fixtures.Service("default", "web", fixtures.WithClusterIP("10.96.0.10")),
			allowed: true, outcome: Warned, rules: []RuleID{RuleReservedForOther}, clusterIPs: []string{"10.96.0.10"},
			message: `ClusterIP "10.96.0.10" is reserved for Service kube-system/kube-dns (cluster DNS), which cannot get it while this Service holds it; allowed only because the policy sets reserved-for-other to warn`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := Env{Policy: fixtures.MustPolicy(t, ParseDocument, tt.policy), StaticCIDRs: mustPrefixes("10.96.0.0/16")}
			got := ReplayCreate(env, tt.svc)
			if got.Allowed != tt.allowed || got.Outcome != tt.outcome {
				t.Fatalf("allowed %v outcome %s, want %v %s: %s", got.Allowed, got.Outcome, tt.allowed, tt.outcome, got.Message)
			}
			for what, pair := range map[string][2]string{
				"rules":      {fmt.Sprint(got.Rules), fmt.Sprint(tt.rules)},
				"mutations":  {fmt.Sprint(got.Mutations), fmt.Sprint(tt.mutations)},
				"clusterIPs": {fmt.Sprint(got.ClusterIPs), fmt.Sprint(tt.clusterIPs)},
				"message":    {got.Message, tt.message},
			} {
				if pair[0] != pair[1] {
					t.Errorf("%s = %s, want %s", what, pair[0], pair[1])
				}
			}
			if (len(got.Patch) > 0) != (tt.outcome == Patched) {
				t.Errorf("patch %v with outcome %s", got.Patch, got.Outcome)
			}
		})
	}
}
