package matchconditions

import (
	"fmt"
	"slices"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	v1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"clusterip-policy/pkg/policy"
	"clusterip-policy/test/fixtures"
)

func rule(ops []admissionregistrationv1.OperationType, groups, versions, resources []string, scope *admissionregistrationv1.ScopeType) admissionregistrationv1.RuleWithOperations {
	return admissionregistrationv1.RuleWithOperations{Operations: ops, Rule: admissionregistrationv1.Rule{APIGroups: groups, APIVersions: versions, Resources: resources, Scope: scope}}
}

var (
	create     = []admissionregistrationv1.OperationType{admissionregistrationv1.Create}
	update     = []admissionregistrationv1.OperationType{admissionregistrationv1.Update}
	allOps     = []admissionregistrationv1.OperationType{admissionregistrationv1.OperationAll}
	core       = []string{""}
	v1only     = []string{"v1"}
	namespaced = admissionregistrationv1.NamespacedScope
	cluster    = admissionregistrationv1.ClusterScope
	anyScope   = admissionregistrationv1.AllScopes
)

func TestRuleSelectsServiceCreateAsTheApiserverMatchesRules(t *testing.T) {
	for _, tc := range []struct {
		name string
		rule admissionregistrationv1.RuleWithOperations
		want bool
	}{
		{"services CREATE in core/v1", rule(create, core, v1only, []string{"services"}, nil), true},
		{"every operation", rule(allOps, core, v1only, []string{"services"}, nil), true},
		// An UPDATE can be given an address after ours too (a label-only
		// update turned dual-stack), and ours is reinvoked only if called.
		{"UPDATE only", rule(update, core, v1only, []string{"services"}, nil), true},
		{"DELETE only", rule([]admissionregistrationv1.OperationType{admissionregistrationv1.Delete}, core, v1only, []string{"services"}, nil), false},
		{"every group", rule(create, []string{"*"}, v1only, []string{"services"}, nil), true},
		{"another group only", rule(create, []string{"apps"}, v1only, []string{"services"}, nil), false},
		{"every version", rule(create, core, []string{"*"}, []string{"services"}, nil), true},
		{"another version only", rule(create, core, []string{"v2"}, []string{"services"}, nil), false},
		{"every resource", rule(create, core, v1only, []string{"*"}, nil), true},
		{"every resource and subresource", rule(create, core, v1only, []string{"*/*"}, nil), true},
		{"services/* selects the Service too", rule(create, core, v1only, []string{"services/*"}, nil), true},
		{"services/status only", rule(create, core, v1only, []string{"services/status"}, nil), false},
		{"*/status only", rule(create, core, v1only, []string{"*/status"}, nil), false},
		{"pods only", rule(create, core, v1only, []string{"pods", "configmaps"}, nil), false},
		{"pods and services", rule(create, core, v1only, []string{"pods", "services"}, nil), true},
		{"namespaced scope", rule(create, core, v1only, []string{"services"}, &namespaced), true},
		{"any scope", rule(create, core, v1only, []string{"*"}, &anyScope), true},
		{"cluster scope only", rule(create, core, v1only, []string{"*"}, &cluster), false},
		{"empty rule", admissionregistrationv1.RuleWithOperations{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ruleSelectsServiceCreate(tc.rule); got != tc.want {
				t.Fatalf("ruleSelectsServiceCreate(%+v) = %v, want %v", tc.rule, got, tc.want)
			}
		})
	}
}

func TestWebhookMutatorsLeaveOutOnlyOurServiceWebhook(t *testing.T) {
	svc := rule(create, core, v1only, []string{"services"}, nil)
	cfgs := []*admissionregistrationv1.MutatingWebhookConfiguration{
		{ObjectMeta: v1.ObjectMeta{Name: "clusterip-policy"}, Webhooks: []admissionregistrationv1.MutatingWebhook{
			{Name: "mutate-services.clusterip-policy.io", Rules: []admissionregistrationv1.RuleWithOperations{svc}},
			{Name: "another.clusterip-policy.io", Rules: []admissionregistrationv1.RuleWithOperations{svc}},
		}},
		{ObjectMeta: v1.ObjectMeta{Name: "zz-injector"}, Webhooks: []admissionregistrationv1.MutatingWebhook{
			{Name: "mutate-services.clusterip-policy.io", Rules: []admissionregistrationv1.RuleWithOperations{svc}},
			{Name: "pods.injector.io", Rules: []admissionregistrationv1.RuleWithOperations{rule(create, core, v1only, []string{"pods"}, nil)}},
		}},
	}
	n, names := ServiceMutators(WebhookMutators(cfgs, "clusterip-policy", "mutate-services.clusterip-policy.io"))
	want := []string{"MutatingWebhookConfiguration clusterip-policy/another.clusterip-policy.io", "MutatingWebhookConfiguration zz-injector/mutate-services.clusterip-policy.io"}
	if n != 2 || !slices.Equal(names, want) {
		t.Fatalf("got %d %v, want 2 %v", n, names, want)
	}
}

func TestServiceMutatorsCountsAllButNamesOnlyAFew(t *testing.T) {
	var ms []Mutator
	for i := range 1000 {
		ms = append(ms, Mutator{Name: fmt.Sprintf("m%04d", i), Rules: []admissionregistrationv1.RuleWithOperations{rule(allOps, []string{"*"}, []string{"*"}, []string{"*"}, nil)}})
	}
	n, names := ServiceMutators(ms)
	if n != 1000 || len(names) != maxMutatorNames || names[0] != "m0000" {
		t.Fatalf("got %d, %d names starting %q", n, len(names), names[0])
	}
}

func TestCallEveryCreateKeepsTheValidatingConditionAndChangesTheDigest(t *testing.T) {
	env := policy.Env{Policy: fixtures.MustPolicy(t, policy.ParseDocument, testPolicy), Snapshot: snapshot(serviceCIDR("kubernetes", "10.96.0.0/16"))}
	c := Compute(env.Policy, env.Ranges())
	e := c.CallEveryCreate()
	if e.Mutating != "true" || e.Validating != c.Validating || e.Digest == c.Digest || !e.OwnersCapped || e.Owners != nil {
		t.Fatalf("CallEveryCreate: mutating %q, validating kept %v, digest %s vs %s, owners %v/%v", e.Mutating, e.Validating == c.Validating, e.Digest, c.Digest, e.Owners, e.OwnersCapped)
	}
	if c.Mutating == "true" {
		t.Fatal("the receiver was changed")
	}
}
