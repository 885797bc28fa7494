package manifests

import (
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
)

// webhook.policyReports: on (the default) leaves --policy-reports at its
// default, on, as manifests/base does, and grants the leader list, create,
// update and delete on wgpolicyk8s.io policyreports; false sets
// --policy-reports=false and the ClusterRole names no policyreports. The
// base grants the same.
func TestChartPolicyReportsValue(t *testing.T) {
	grants := func(o *objects) bool {
		for _, r := range o.ClusterRoles {
			if slices.ContainsFunc(r.Rules, func(rule rbacv1.PolicyRule) bool {
				return slices.Contains(rule.APIGroups, "wgpolicyk8s.io") && slices.Contains(rule.Resources, "policyreports") &&
					slices.Equal(rule.Verbs, []string{"list", "create", "update", "delete"})
			}) {
				return true
			}
		}
		return false
	}
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"default", nil, ""},
		{"off", []string{"--set", "webhook.policyReports=false"}, "false"},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := renderChart(t, c.args...).objects
			if len(o.Deployments) != 1 {
				t.Fatalf("%d Deployments", len(o.Deployments))
			}
			ctr := &o.Deployments[0].Spec.Template.Spec.Containers[0]
			// On is the flag's default (as in manifests/base): no flag.
			if v, _ := flagValue(ctr, "policy-reports"); v != c.want {
				t.Errorf("--policy-reports=%q, want %q", v, c.want)
			}
			if got := grants(o); got != (c.want == "") {
				t.Errorf("the ClusterRole grants policyreports: %v, want %v", got, c.want == "")
			}
			for _, p := range rbacExact(o) {
				t.Error(p)
			}
		})
	}
	base := loadBase(t)
	if !grants(base) {
		t.Error("manifests/base/rbac.yaml grants no list, create, update, delete on wgpolicyk8s.io policyreports; the Deployment runs with --policy-reports on (its default)")
	}
	if _, err := helmTemplate(t, "--set", "webhook.policyReports=yes"); err == nil {
		t.Error("webhook.policyReports=yes rendered; want the schema's boolean refusal")
	}
}
