package manifests

import (
	"slices"
	"testing"

	admv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"clusterip-policy/internal/names"
)

// webhook.armFailurePolicy (on by default) renders the Service webhooks not
// armed (Ignore), passes --arm-failure-policy and grants the probe its
// Role in default; off, they are Fail as before, and neither is there. Both
// renders pass the safety check that holds the three together. (Under helm
// template lookup finds no live configuration: the render is Ignore; that
// helm upgrade keeps a live Fail is shown on a real apiserver,
// test/e2e/arming_test.go.)
func TestChartArmingValues(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		arm  bool
	}{
		{"default: armed by the leader", nil, true},
		{"armFailurePolicy=false: registered Fail", []string{"--set", "webhook.armFailurePolicy=false"}, false},
		{"armed, with the audit every minute", []string{"--set", "webhook.auditInterval=1m"}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := renderChart(t, c.args...).objects
			for _, p := range serviceWebhooksArming(o) {
				t.Error(p)
			}
			for _, p := range rbacExact(o) {
				t.Error(p)
			}
			ctr := &o.Deployments[0].Spec.Template.Spec.Containers[0]
			if got := hasBoolFlag(ctr, "arm-failure-policy"); got != c.arm {
				t.Errorf("--arm-failure-policy passed: %v, want %v (args %q)", got, c.arm, ctr.Args)
			}
			want := admv1.Fail
			if c.arm {
				want = admv1.Ignore
			}
			for _, w := range o.webhooks() {
				if w.name != names.MutatingServiceWebhook && w.name != names.ValidatingServiceWebhook {
					continue
				}
				if w.failurePolicy == nil || *w.failurePolicy != want {
					t.Errorf("%s: failurePolicy %v, want %s", w.where, w.failurePolicy, want)
				}
			}
			probeRole := slices.ContainsFunc(o.Roles, func(r *rbacv1.Role) bool {
				return r.Namespace == "default" && r.Name == "clusterip-policy-webhook-probe"
			})
			if probeRole != c.arm {
				t.Errorf("the probe's Role in default rendered: %v, want %v", probeRole, c.arm)
			}
		})
	}
}
