package manifests

import (
	"reflect"
	"strings"
	"testing"

	admv1 "k8s.io/api/admissionregistration/v1"
)

// namespaceLabelGuards are the names of the namespace label policy (and of
// its binding).
var namespaceLabelGuards = []string{"clusterip-policy-namespace-labels"}

// guardPolicies returns the namespace label policy and binding of o by
// name.
func guardPolicies(o *objects) (map[string]*admv1.ValidatingAdmissionPolicy, map[string]*admv1.ValidatingAdmissionPolicyBinding) {
	ps, bs := map[string]*admv1.ValidatingAdmissionPolicy{}, map[string]*admv1.ValidatingAdmissionPolicyBinding{}
	for _, p := range o.AdmissionPolicies {
		for _, n := range namespaceLabelGuards {
			if p.Name == n {
				ps[n] = p
			}
		}
	}
	for _, b := range o.AdmissionBindings {
		for _, n := range namespaceLabelGuards {
			if b.Name == n {
				bs[n] = b
			}
		}
	}
	return ps, bs
}

// The chart's namespace label policy with default values is the base's,
// field for field, so the kustomize path guards the same labels.
func TestChartNamespaceLabelGuardMatchesTheBase(t *testing.T) {
	chartPs, chartBs := guardPolicies(renderChart(t).objects)
	basePs, baseBs := guardPolicies(loadBase(t))
	for _, n := range namespaceLabelGuards {
		if chartPs[n] == nil || basePs[n] == nil || chartBs[n] == nil || baseBs[n] == nil {
			t.Fatalf("%s: the chart renders policy %v binding %v, the base has policy %v binding %v; want both in both", n, chartPs[n] != nil, chartBs[n] != nil, basePs[n] != nil, baseBs[n] != nil)
		}
		if !reflect.DeepEqual(chartPs[n].Spec, basePs[n].Spec) {
			t.Errorf("policy %s: the chart's spec differs from manifests/base/namespace-labels.yaml; render it again (the file's header says how)", n)
		}
		if !reflect.DeepEqual(chartBs[n].Spec, baseBs[n].Spec) {
			t.Errorf("binding %s: the chart's spec differs from the base's", n)
		}
		if chartPs[n].Labels["clusterip-policy.io/break-glass"] != "keep" || basePs[n].Labels["clusterip-policy.io/break-glass"] != "keep" {
			t.Errorf("policy %s is not labelled clusterip-policy.io/break-glass: keep, so the emergency command would lift a guard that is in no Service create's path", n)
		}
	}
}

// What the values change: the keys (the Service webhooks' selector, the
// rendered policy's reservedRanges selectors, extra keys) and requesters in
// the expressions, nothing when off; a guard nobody may pass, and values
// that would break the expressions, are refused naming the value. It reads
// no object (no paramKind): one whose kind is missing would fail every
// namespace write.
func TestChartNamespaceLabelGuardValues(t *testing.T) {
	r := renderChart(t, "--set-json", `webhook.namespaceSelector={"matchExpressions":[{"key":"zone","operator":"NotIn","values":["lab"]},{"key":"env","operator":"DoesNotExist"}]}`,
		"--set-file", "policy=../examples/reserved-ranges/clusterippolicy.yaml",
		"--set-json", `namespaceLabelGuard.extraKeys=["example.com/cost-center"]`,
		"--set-json", `namespaceLabelGuard.allowedGroups=["oidc:platform"]`,
		"--set-json", `namespaceLabelGuard.allowedUsers=["system:serviceaccount:argocd:argocd-application-controller"]`)
	ps, bs := guardPolicies(r.objects)
	p := ps["clusterip-policy-namespace-labels"]
	if p == nil || len(bs) != 1 {
		t.Fatalf("policies %v, bindings %v; want the one", ps, bs)
	}
	if p.Spec.ParamKind != nil || bs["clusterip-policy-namespace-labels"].Spec.ParamRef != nil {
		t.Errorf("the guard reads a parameter object (%v, %v): while its kind is missing every namespace write would fail", p.Spec.ParamKind, bs["clusterip-policy-namespace-labels"].Spec.ParamRef)
	}
	changed := ""
	for _, v := range p.Spec.Variables {
		if v.Name == "changed" {
			changed = v.Expression
		}
	}
	// team: examples/reserved-ranges' namespaceSelector.
	if !strings.Contains(changed, `k in ["env","example.com/cost-center","team","zone"]`) {
		t.Errorf("the guarded keys in %q, want env, zone, team and the extra key", changed)
	}
	cond := p.Spec.MatchConditions[0].Expression
	if !strings.Contains(cond, `g in ["oidc:platform"]`) || !strings.Contains(cond, `username in ["system:serviceaccount:argocd:argocd-application-controller"]`) {
		t.Errorf("the allowed requesters in %q", cond)
	}
	if !strings.Contains(p.Spec.Validations[0].MessageExpression, "only oidc:platform, system:serviceaccount:argocd:argocd-application-controller may") {
		t.Errorf("the refusal %q does not name who may", p.Spec.Validations[0].MessageExpression)
	}
	// The policy kept elsewhere: only what the values say.
	ps, _ = guardPolicies(renderChart(t, "--set", "createPolicyObject=false", "--set-file", "policy=../examples/reserved-ranges/clusterippolicy.yaml").objects)
	for _, v := range ps["clusterip-policy-namespace-labels"].Spec.Variables {
		if v.Name == "changed" && strings.Contains(v.Expression, `"team"`) {
			t.Errorf("with createPolicyObject=false the guard names the policy value's keys: %q", v.Expression)
		}
	}
	ps, bs = guardPolicies(renderChart(t, "--set", "namespaceLabelGuard.enabled=false").objects)
	if len(ps)+len(bs) != 0 {
		t.Errorf("off: %d policies, %d bindings rendered", len(ps), len(bs))
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--set-json", "namespaceLabelGuard.allowedGroups=[]"}, "allowedGroups and allowedUsers are both empty"},
		{[]string{"--set-json", `namespaceLabelGuard.allowedGroups=["x' || true || '"]`}, "/namespaceLabelGuard/allowedGroups/0"},
		{[]string{"--set-json", `namespaceLabelGuard.allowedUsers=["a\\b"]`}, "/namespaceLabelGuard/allowedUsers/0"},
		{[]string{"--set-json", `namespaceLabelGuard.extraKeys=["bad key"]`}, "/namespaceLabelGuard/extraKeys/0"},
	} {
		_, err := helmTemplate(t, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want a refusal containing %q", c.args, err, c.want)
		}
	}
}
