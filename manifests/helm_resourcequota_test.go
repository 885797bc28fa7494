package manifests

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// criticalPodsQuota: a ResourceQuota admission configuration with
// limitedResources (GKE's) admits a pod of system-cluster-critical or
// system-node-critical only in a namespace holding a ResourceQuota whose
// scopeSelector covers that class. The chart renders one in the release
// namespace for those two classes, scoped to the class its pods use, with
// room for a rollout, a hook Job and an eviction; its pre-upgrade copy
// exists while the CRD upgrade's Job starts. The real node's apiserver runs
// with that configuration (framework/node.go) and installs the chart.
func TestChartCriticalPodsQuota(t *testing.T) {
	// The quotas alone (an upgrade renders the hooks' Jobs too, which
	// renderChart does not decode); none when the template renders nothing.
	quotas := func(args ...string) []*corev1.ResourceQuota {
		t.Helper()
		out, err := helmTemplate(t, append(args, "--show-only", "templates/resourcequota.yaml")...)
		if err != nil {
			if strings.Contains(err.Error(), "could not find template templates/resourcequota.yaml") {
				return nil
			}
			t.Fatalf("helm template %s: %v", strings.Join(args, " "), err)
		}
		docs, err := SplitYAML(out)
		if err != nil {
			t.Fatal(err)
		}
		o := &objects{}
		for _, d := range docs {
			if err := o.decode(d); err != nil {
				t.Fatal(err)
			}
		}
		return o.ResourceQuotas
	}
	check := func(t *testing.T, q *corev1.ResourceQuota, name, class string, pods int64) {
		t.Helper()
		if q.Name != name || q.Namespace != ownNamespace {
			t.Errorf("ResourceQuota %s/%s, want %s/%s", q.Namespace, q.Name, ownNamespace, name)
		}
		if got := q.Spec.Hard[corev1.ResourcePods]; got.Value() != pods || len(q.Spec.Hard) != 1 {
			t.Errorf("%s: hard %v, want pods: %d alone", q.Name, q.Spec.Hard, pods)
		}
		sel := q.Spec.ScopeSelector
		if len(q.Spec.Scopes) != 0 || sel == nil || len(sel.MatchExpressions) != 1 ||
			sel.MatchExpressions[0].ScopeName != corev1.ResourceQuotaScopePriorityClass ||
			sel.MatchExpressions[0].Operator != corev1.ScopeSelectorOpIn || !slices.Equal(sel.MatchExpressions[0].Values, []string{class}) {
			t.Errorf("%s: scopes %v scopeSelector %+v, want PriorityClass In [%s] alone", q.Name, q.Spec.Scopes, sel, class)
		}
	}

	t.Run("the default (system-cluster-critical, 3 replicas): 2 x 3 + 4 pods", func(t *testing.T) {
		qs := quotas()
		if len(qs) != 1 {
			t.Fatalf("%d ResourceQuotas, want 1", len(qs))
		}
		check(t, qs[0], "clusterip-policy-critical-pods", "system-cluster-critical", 10)
		if len(qs[0].Annotations) != 0 {
			t.Errorf("the release's quota carries annotations %v; it must be an ordinary object (created before the Deployment, there at pre-delete), not a hook", qs[0].Annotations)
		}
	})
	t.Run("system-node-critical, 2 replicas", func(t *testing.T) {
		qs := quotas("--set", "priorityClassName=system-node-critical", "--set", "replicas=2")
		if len(qs) != 1 {
			t.Fatalf("%d ResourceQuotas, want 1", len(qs))
		}
		check(t, qs[0], "clusterip-policy-critical-pods", "system-node-critical", 8)
	})
	t.Run("pods given", func(t *testing.T) {
		qs := quotas("--set", "criticalPodsQuota.pods=5")
		if len(qs) != 1 {
			t.Fatalf("%d ResourceQuotas, want 1", len(qs))
		}
		check(t, qs[0], "clusterip-policy-critical-pods", "system-cluster-critical", 5)
	})
	t.Run("a class of your own, no class, or disabled: none", func(t *testing.T) {
		for _, args := range [][]string{
			{"--set", "priorityClassName=platform-admission"},
			{"--set", "priorityClassName="},
			{"--set", "criticalPodsQuota.enabled=false"},
			{"--set", "criticalPodsQuota.enabled=false", "--is-upgrade"},
		} {
			if qs := quotas(args...); len(qs) != 0 {
				t.Errorf("%s: %d ResourceQuotas, want none", strings.Join(args, " "), len(qs))
			}
		}
	})
	t.Run("on upgrade, a pre-upgrade copy for the CRD upgrade's Job", func(t *testing.T) {
		qs := quotas("--is-upgrade")
		if len(qs) != 2 {
			t.Fatalf("%d ResourceQuotas on upgrade, want the release's and the hook's", len(qs))
		}
		check(t, qs[0], "clusterip-policy-critical-pods", "system-cluster-critical", 10)
		// helm template reads no live Deployment: nothing added for its replicas.
		check(t, qs[1], "clusterip-policy-critical-pods-hook", "system-cluster-critical", 10)
		a := qs[1].Annotations
		if a["helm.sh/hook"] != "pre-upgrade" || a["helm.sh/hook-delete-policy"] != "before-hook-creation,hook-succeeded" || a["helm.sh/hook-weight"] != "-2" {
			t.Errorf("the hook's copy has annotations %v, want pre-upgrade, weight -2 (before the Job's, -1 and 0), deleted when the hooks succeeded", a)
		}
		if qs := quotas("--is-upgrade", "--set", "crdUpgrade=false"); len(qs) != 1 {
			t.Errorf("crdUpgrade=false: %d ResourceQuotas on upgrade, want the release's alone (no hook Job to admit)", len(qs))
		}
	})
	t.Run("refused: too few pods, a bad value", func(t *testing.T) {
		for _, c := range []struct {
			args []string
			want string
		}{
			{[]string{"--set", "criticalPodsQuota.pods=4"}, "criticalPodsQuota.pods: 4 is fewer than replicas + 2 (5)"},
			{[]string{"--set", "criticalPodsQuota.pods=-1"}, "at '/criticalPodsQuota/pods': minimum: got -1, want 0"},
			{[]string{"--set", "criticalPodsQuota.enabled=yes"}, "at '/criticalPodsQuota/enabled': got string, want boolean"},
			{[]string{"--set", "criticalPodsQuota.pod=3"}, "additional properties 'pod' not allowed"},
		} {
			if _, err := helmTemplate(t, c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s: %v, want an error containing %q", strings.Join(c.args, " "), err, c.want)
			}
		}
	})
}

// hostNetwork in a namespace that enforces Pod Security baseline or
// restricted is refused at helm install (lookup reads the namespace's
// label); helm template cannot read it and renders hostNetwork as asked.
// The refusal itself runs against a real apiserver:
// test/e2e/helm_providers_test.go.
func TestChartHostNetworkRendersWithoutTheCluster(t *testing.T) {
	o := renderChart(t, "--set", "hostNetwork=true", "--set", "ports.webhook=10443", "--set", "ports.health=10444", "--set", "ports.metrics=10445").objects
	if !o.Deployments[0].Spec.Template.Spec.HostNetwork {
		t.Error("helm template with hostNetwork=true renders no hostNetwork pod")
	}
}
