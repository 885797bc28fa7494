//go:build e2e

package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"clusterip-policy/docs"
	"clusterip-policy/manifests"
	"clusterip-policy/test/e2e/framework"
)

// The overlay of docs/observability.md ("Tuning the alerts (kustomize)"),
// taken from the page and built with the real kubectl: the patched alert
// fires at 10% free after 15m, every other rule is the base's, and the
// build fails, rather than patch another alert, once the place the patch
// tests holds a different one. No cluster.
func TestMonitoringOverlayChangesTheThreshold(t *testing.T) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	const header = "# my-monitoring/kustomization.yaml"
	var kustomization string
	for _, b := range docs.Blocks(readText(t, filepath.Join(root, "docs", "observability.md"))) {
		if b.Info == "yaml" && len(b.Lines) > 0 && b.Lines[0] == header {
			kustomization = strings.Join(b.Lines, "\n") + "\n"
		}
	}
	if kustomization == "" {
		t.Fatalf("docs/observability.md has no yaml block starting %q", header)
	}
	kubectl := framework.DefaultBinaries(root).Kubectl
	tmp := t.TempDir()
	copyDir(t, filepath.Join(root, "manifests", "monitoring"), filepath.Join(tmp, "manifests", "monitoring"))
	build := func(k string) (rules []map[string]any, stderr string, err error) {
		t.Helper()
		dir := filepath.Join(tmp, "my-monitoring")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(kubectl, "kustomize", dir)
		var errOut bytes.Buffer
		cmd.Stderr = &errOut
		out, err := cmd.Output()
		if err != nil {
			return nil, errOut.String(), err
		}
		return prometheusRuleRules(t, out), errOut.String(), nil
	}

	got, stderr, err := build(kustomization)
	if err != nil {
		t.Fatalf("kubectl kustomize the overlay of docs/observability.md: %v\n%s", err, stderr)
	}
	base, err := os.ReadFile(filepath.Join(root, "manifests", "monitoring", "prometheusrule.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want := prometheusRuleRules(t, base)
	if len(got) != len(want) {
		t.Fatalf("the overlay renders %d rules, the base %d", len(got), len(want))
	}
	patched := 0
	for i := range want {
		if got[i]["alert"] != "ClusterIPPolicyDynamicBandFilling" {
			if !reflect.DeepEqual(got[i], want[i]) {
				t.Errorf("rule %d (%v) differs from the base's: the overlay must change one alert only", i, want[i]["alert"])
			}
			continue
		}
		patched++
		expr, _ := got[i]["expr"].(string)
		if !strings.Contains(expr, "<= 0.1 *") || strings.Contains(expr, "<= 0.2 *") || got[i]["for"] != "15m" {
			t.Errorf("ClusterIPPolicyDynamicBandFilling after the overlay: for %v, expr %s; want 15m and <= 0.1 * (10%% free)", got[i]["for"], expr)
		}
		if wantExpr := strings.Replace(want[i]["expr"].(string), "<= 0.2 *", "<= 0.1 *", 1); expr != wantExpr {
			t.Errorf("the overlay's expr %q is not the base's %q with the level alone changed", expr, want[i]["expr"])
		}
	}
	if patched != 1 {
		t.Errorf("%d rules named ClusterIPPolicyDynamicBandFilling after the overlay, want 1", patched)
	}

	// A release that moved the alert: the patch's test op refuses the build.
	moved := strings.ReplaceAll(kustomization, "/rules/11/", "/rules/12/")
	if moved == kustomization {
		t.Fatal("the documented patch does not address /rules/11/; update this test with the page")
	}
	if _, stderr, err := build(moved); err == nil || !strings.Contains(stderr, "testing value") {
		t.Errorf("the patch pointed at another alert: err %v, stderr %q; want the build refused by the test op (\"testing value ... failed\"), as the page says", err, stderr)
	}
}

// prometheusRuleRules are the rules of the first group of the one
// PrometheusRule in the YAML stream out.
func prometheusRuleRules(t *testing.T, out []byte) []map[string]any {
	t.Helper()
	objs, err := manifests.SplitYAML(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range objs {
		var rule struct {
			Kind string `json:"kind"`
			Spec struct {
				Groups []struct {
					Rules []map[string]any `json:"rules"`
				} `json:"groups"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal(doc, &rule); err != nil {
			t.Fatal(err)
		}
		if rule.Kind == "PrometheusRule" && len(rule.Spec.Groups) > 0 {
			return rule.Spec.Groups[0].Rules
		}
	}
	t.Fatalf("no PrometheusRule in %d documents", len(objs))
	return nil
}
