package manifests

import (
	"slices"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// crdUpgrade: the pre-upgrade hook that brings the CRD (clusterip-policy
// apply-crd) is rendered on helm upgrade only, so helm template (GitOps)
// renders none of it; it runs the Deployment's image, as the Deployment's
// containers run, with get and patch of the one CRD and nothing else.
func TestChartCRDUpgradeHook(t *testing.T) {
	hookObjects := func(args ...string) []map[string]any {
		t.Helper()
		out, err := helmTemplate(t, args...)
		if err != nil {
			t.Fatalf("helm template %s: %v", strings.Join(args, " "), err)
		}
		docs, err := SplitYAML(out)
		if err != nil {
			t.Fatal(err)
		}
		var hooks []map[string]any
		for _, d := range docs {
			var m map[string]any
			if err := yaml.Unmarshal(d, &m); err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(d), "clusterip-policy-apply-crd") {
				hooks = append(hooks, m)
			}
		}
		return hooks
	}
	if got := hookObjects(); len(got) != 0 {
		t.Errorf("helm template (an install, GitOps) renders %d objects of the CRD upgrade hook, want none", len(got))
	}
	if got := hookObjects("--is-upgrade", "--set", "crdUpgrade=false"); len(got) != 0 {
		t.Errorf("crdUpgrade=false: %d objects of the hook rendered on upgrade, want none", len(got))
	}

	out, err := helmTemplate(t, "--is-upgrade", "--show-only", "templates/crd-upgrade.yaml", "--set", "image.repository=registry.example/cip", "--set", "image.tag=v1.2.3",
		"--set-json", `extraEnv=[{"name":"KUBERNETES_SERVICE_HOST","value":"10.0.0.1"}]`)
	if err != nil {
		t.Fatal(err)
	}
	docs, err := SplitYAML(out)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	var job *batchv1.Job
	var role *rbacv1.ClusterRole
	for _, d := range docs {
		var m struct {
			Kind     string
			Metadata struct{ Annotations map[string]string }
		}
		if err := yaml.Unmarshal(d, &m); err != nil {
			t.Fatal(err)
		}
		kinds = append(kinds, m.Kind)
		if m.Metadata.Annotations["helm.sh/hook"] != "pre-upgrade" {
			t.Errorf("%s: helm.sh/hook %q, want pre-upgrade", m.Kind, m.Metadata.Annotations["helm.sh/hook"])
		}
		if !strings.Contains(m.Metadata.Annotations["helm.sh/hook-delete-policy"], "before-hook-creation") {
			t.Errorf("%s: no before-hook-creation: the next upgrade would fail on the object left by this one", m.Kind)
		}
		switch m.Kind {
		case "Job":
			job = &batchv1.Job{}
			if err := yaml.UnmarshalStrict(d, job); err != nil {
				t.Fatal(err)
			}
		case "ClusterRole":
			role = &rbacv1.ClusterRole{}
			if err := yaml.UnmarshalStrict(d, role); err != nil {
				t.Fatal(err)
			}
		}
	}
	if want := []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Job"}; !slices.Equal(kinds, want) {
		t.Fatalf("the hook renders %v, want %v", kinds, want)
	}
	want := []rbacv1.PolicyRule{{APIGroups: []string{"apiextensions.k8s.io"}, Resources: []string{"customresourcedefinitions"},
		ResourceNames: []string{"clusterippolicies.clusterip-policy.io"}, Verbs: []string{"get", "patch"}}}
	if !slices.EqualFunc(role.Rules, want, func(a, b rbacv1.PolicyRule) bool {
		return slices.Equal(a.APIGroups, b.APIGroups) && slices.Equal(a.Resources, b.Resources) && slices.Equal(a.ResourceNames, b.ResourceNames) && slices.Equal(a.Verbs, b.Verbs) && len(a.NonResourceURLs) == 0
	}) {
		t.Errorf("the hook's ClusterRole grants %+v, want get and patch of the one CRD", role.Rules)
	}
	ctr := job.Spec.Template.Spec.Containers[0]
	if ctr.Image != "registry.example/cip:v1.2.3" || len(ctr.Args) == 0 || ctr.Args[0] != "apply-crd" {
		t.Errorf("the hook's container runs %s %v, want the values' image with apply-crd", ctr.Image, ctr.Args)
	}
	if len(ctr.Env) != 1 || ctr.Env[0].Name != "KUBERNETES_SERVICE_HOST" || ctr.Env[0].Value != "10.0.0.1" {
		t.Errorf("the hook's container has env %+v, want extraEnv (what reaches the apiserver from the webhook's pods)", ctr.Env)
	}
	if job.Spec.Template.Spec.ServiceAccountName != "clusterip-policy-apply-crd" {
		t.Errorf("the hook runs as %q", job.Spec.Template.Spec.ServiceAccountName)
	}
	if ctr.SecurityContext == nil || ctr.SecurityContext.RunAsNonRoot == nil || !*ctr.SecurityContext.RunAsNonRoot {
		if job.Spec.Template.Spec.SecurityContext == nil || job.Spec.Template.Spec.SecurityContext.RunAsNonRoot == nil || !*job.Spec.Template.Spec.SecurityContext.RunAsNonRoot {
			t.Error("the hook's container may run as root")
		}
	}
	if job.Spec.ActiveDeadlineSeconds == nil || job.Spec.BackoffLimit == nil {
		t.Error("the hook's Job is not bounded (activeDeadlineSeconds, backoffLimit)")
	}
}
