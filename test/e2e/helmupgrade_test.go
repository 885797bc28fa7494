//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"clusterip-policy/test/e2e/framework"
)

// upgradeMarkerField is the CRD field the test-only copy of this chart adds
// (no field of the CRD is new on this branch): a policy that uses it is
// refused before the upgrade and stored after it.
const upgradeMarkerField = "e2eUpgradeMarker"

// TestHelmUpgradeFromThePreviousChart installs the chart as on main
// (git archive main, the previous chart version, whose CRD sits in crds/),
// upgrades to this chart with helm alone, and uses a CRD field that only the
// new chart's CRD has. Then a fresh install of this chart (the CRD and the
// policy object in one release) and an upgrade that changes the policy, and
// an uninstall that keeps the CRD. No pods run (the harness has no kubelet):
// what is checked is what helm applies.
func TestHelmUpgradeFromThePreviousChart(t *testing.T) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	helm := filepath.Join(filepath.Dir(framework.DefaultBinaries(root).Kubectl), "helm")
	if _, err := os.Stat(helm); err != nil {
		t.Skipf("no helm at %s (run hack/build-tools.sh): %v", helm, err)
	}
	c := own(t, framework.Options{NoRBAC: true, NoRegister: true, Webhooks: 0})
	ctx := testContext(t, 4*time.Minute)
	dir := t.TempDir()

	// The previous chart: main's, from git.
	old := filepath.Join(dir, "old")
	if err := os.MkdirAll(old, 0o755); err != nil {
		t.Fatal(err)
	}
	archive := exec.CommandContext(ctx, "sh", "-c", "git archive main charts/clusterip-policy | tar -x -C "+old)
	archive.Dir = root
	if out, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("git archive main charts/clusterip-policy: %v\n%s", err, out)
	}
	oldChart := filepath.Join(old, "charts", "clusterip-policy")
	if _, err := os.Stat(filepath.Join(oldChart, "crds", "clusterippolicies.yaml")); err != nil {
		t.Fatalf("main's chart has no crds/clusterippolicies.yaml (is main still the previous version?): %v", err)
	}

	// This chart, with one more CRD field (a test-only copy).
	newChart := filepath.Join(dir, "new", "clusterip-policy")
	cp := exec.CommandContext(ctx, "cp", "-r", filepath.Join(root, "charts", "clusterip-policy"), filepath.Dir(newChart))
	if err := os.MkdirAll(filepath.Dir(newChart), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := cp.CombinedOutput(); err != nil {
		t.Fatalf("copy the chart: %v\n%s", err, out)
	}
	crdFile := filepath.Join(newChart, "templates", "crd.yaml")
	crd, err := os.ReadFile(crdFile)
	if err != nil {
		t.Fatal(err)
	}
	// The spec's first property is allowedCIDRs: the new field goes before it.
	const at = "              allowedCIDRs:\n"
	if strings.Count(string(crd), at) != 1 {
		t.Fatalf("%s: %q found %d times, want once", crdFile, at, strings.Count(string(crd), at))
	}
	added := strings.Replace(string(crd), at, "              "+upgradeMarkerField+":\n                description: test only\n                type: string\n"+at, 1)
	if err := os.WriteFile(crdFile, []byte(added), 0o644); err != nil {
		t.Fatal(err)
	}

	runHelm := func(args ...string) (string, error) {
		hctx, cancel := context.WithTimeout(ctx, 90*time.Second)
		defer cancel()
		cmd := exec.CommandContext(hctx, helm, append(args, "--kubeconfig", c.AdminKubeconfig)...)
		cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(dir, "cache"), "HELM_CONFIG_HOME="+filepath.Join(dir, "config"), "HELM_DATA_HOME="+filepath.Join(dir, "data"))
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		if err != nil {
			err = fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, out.String())
		}
		return out.String(), err
	}
	useField := func() error {
		patch := `{"spec":{"` + upgradeMarkerField + `":"set after the upgrade"}}`
		_, errOut, err := c.Kubectl(ctx, "", "patch", "clusterippolicy", "default", "--type=merge", "-p", patch)
		if err != nil {
			return fmt.Errorf("%w: %s", err, errOut)
		}
		got, _, err := c.Kubectl(ctx, "", "get", "clusterippolicy", "default", "-o", "jsonpath={.spec."+upgradeMarkerField+"}")
		if err != nil || got != "set after the upgrade" {
			return fmt.Errorf("stored %q (%v), want the value: the field was pruned", got, err)
		}
		return nil
	}
	values := []string{"--namespace", "clusterip-policy", "--set", "dns.clusterIP=10.96.0.10", "--set", "enforcement=deny"}

	t.Run("helm upgrade from the previous chart brings the new CRD field", func(t *testing.T) {
		if out, err := runHelm(append([]string{"install", "clusterip-policy", oldChart, "--create-namespace"}, values...)...); err != nil {
			t.Fatalf("install the previous chart: %v\n%s", err, out)
		}
		if err := useField(); err == nil {
			t.Fatal("the previous chart's CRD took the new field: the test would prove nothing")
		} else {
			t.Logf("before the upgrade: %v", lastLines(err.Error(), 1))
		}
		// The previous chart's CRD came from crds/, outside the release:
		// helm refuses to take it over unless told once.
		out, err := runHelm(append([]string{"upgrade", "clusterip-policy", newChart, "--reuse-values"}, values...)...)
		if err == nil || !strings.Contains(err.Error(), "exists and cannot be imported into the current release") {
			t.Fatalf("helm upgrade without --take-ownership: %v, want helm's refusal to import the CRD", err)
		}
		t.Logf("without --take-ownership: %s", lastLines(strings.TrimSpace(out), 1))
		start := time.Now()
		out, err = runHelm(append([]string{"upgrade", "clusterip-policy", newChart, "--reuse-values", "--take-ownership"}, values...)...)
		if err != nil {
			t.Fatalf("helm upgrade --take-ownership to this chart: %v", err)
		}
		t.Logf("helm upgrade (%s): %s", time.Since(start).Round(time.Millisecond), strings.Fields(out)[0])
		if err := useField(); err != nil {
			t.Fatalf("after helm upgrade, the new field: %v", err)
		}
		if keep, _, _ := c.Kubectl(ctx, "", "get", "crd", "clusterippolicies.clusterip-policy.io", "-o", `jsonpath={.metadata.annotations.helm\.sh/resource-policy} {.metadata.annotations.meta\.helm\.sh/release-name}`); keep != "keep clusterip-policy" {
			t.Errorf("the CRD after the upgrade: annotations %q, want keep and the release", keep)
		}
		if mode, _, _ := c.Kubectl(ctx, "", "get", "clusterippolicy", "default", "-o", "jsonpath={.spec.enforcement.default}"); mode != "deny" {
			t.Errorf("the policy object after the upgrade: enforcement %q, want deny", mode)
		}
		t.Logf("e2e: helm upgrade from main's chart: CRD in the release, field %s stored", upgradeMarkerField)
	})
	if t.Failed() {
		return
	}

	t.Run("helm uninstall keeps the CRD and the policy", func(t *testing.T) {
		if _, err := runHelm("uninstall", "clusterip-policy", "--namespace", "clusterip-policy", "--wait"); err != nil {
			t.Fatal(err)
		}
		if out, _, err := c.Kubectl(ctx, "", "get", "crd", "clusterippolicies.clusterip-policy.io", "-o", "name"); err != nil || strings.TrimSpace(out) == "" {
			t.Errorf("helm uninstall deleted the CRD: %q %v", out, err)
		}
		if _, _, err := c.Kubectl(ctx, "", "delete", "crd", "clusterippolicies.clusterip-policy.io", "--wait"); err != nil {
			t.Fatal(err)
		}
	})
	if t.Failed() {
		return
	}

	t.Run("a fresh install of this chart creates the CRD and the policy; an upgrade changes the policy", func(t *testing.T) {
		if out, err := runHelm(append([]string{"install", "clusterip-policy", newChart}, values...)...); err != nil {
			t.Fatalf("fresh install: %v\n%s", err, out)
		}
		if mode, _, err := c.Kubectl(ctx, "", "get", "clusterippolicy", "default", "-o", "jsonpath={.spec.enforcement.default}"); err != nil || mode != "deny" {
			t.Fatalf("after a fresh install the policy object: %q %v", mode, err)
		}
		if err := useField(); err != nil {
			t.Errorf("after a fresh install, the new field: %v", err)
		}
		policyMode := func() string {
			mode, _, _ := c.Kubectl(ctx, "", "get", "clusterippolicy", "default", "-o", "jsonpath={.spec.enforcement.default}")
			return mode
		}
		// The first upgrade takes the hook-made object into the release;
		// helm v3 patches an adopted custom resource from the rendered
		// object to itself, so that upgrade's own changes would not reach it:
		// docs/install.md says to run it with the install's values first.
		if _, err := runHelm(append([]string{"upgrade", "clusterip-policy", newChart, "--reuse-values"}, values...)...); err != nil {
			t.Fatal(err)
		}
		if _, err := runHelm(append([]string{"upgrade", "clusterip-policy", newChart, "--reuse-values"}, append(values, "--set", "enforcement=warn")...)...); err != nil {
			t.Fatal(err)
		}
		if mode := policyMode(); mode != "warn" {
			t.Errorf("helm upgrade --set enforcement=warn after the adopting upgrade left the policy object at %q", mode)
		}
		manifest, err := runHelm("get", "manifest", "clusterip-policy", "--namespace", "clusterip-policy")
		if err != nil || !strings.Contains(manifest, "kind: ClusterIPPolicy\nmetadata:\n  name: default") || !strings.Contains(manifest, "kind: CustomResourceDefinition") {
			t.Errorf("the release after the upgrades does not hold the CRD and the policy object (%v)", err)
		}
		_, _ = runHelm("uninstall", "clusterip-policy", "--namespace", "clusterip-policy", "--wait")
		t.Log("e2e: helm: fresh install of this chart created the CRD and the policy; an upgrade changed the policy")
	})
}
