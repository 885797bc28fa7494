//go:build e2e

package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"clusterip-policy/test/e2e/framework"
)

// TestHelmUpgradeFromThePreviousChart installs the chart of
// previousChartRef (it rendered a Helm-generated certificate into the
// Secret clusterip-policy-webhook-tls and every caBundle) and upgrades to
// this chart (certificate.source=managed: the leader writes both) with helm
// alone. What helm applies is checked, on the harness's apiserver (no pods
// run, so helm upgrade runs with --no-hooks and the test runs the
// pre-upgrade hook's command itself, as the hook's service account): the
// caBundle and the Secret must survive the upgrade, since the new
// pods serve that Secret until their leader has moved to a CA of its own,
// and the old pods serve it meanwhile. Without that (the chart before this
// test), Helm's three-way merge deleted both. The whole path under load is
// TestNodeLifecycle's upgrade subtest.
func TestHelmUpgradeFromThePreviousChart(t *testing.T) {
	root, helm := repoAndHelm(t)
	c := own(t, framework.Options{NoRBAC: true, NoRegister: true, Webhooks: 0})
	cs := c.Client(0)
	ctx := testContext(t, 4*time.Minute)
	dir := t.TempDir()

	old := filepath.Join(dir, "old")
	if err := os.MkdirAll(old, 0o755); err != nil {
		t.Fatal(err)
	}
	archive := exec.CommandContext(ctx, "sh", "-c", fmt.Sprintf("git archive %q charts/clusterip-policy | tar -x -C %q", previousChartRef, old))
	archive.Dir = root
	if out, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("git archive %s charts/clusterip-policy: %v\n%s", previousChartRef, err, out)
	}
	oldChart := filepath.Join(old, "charts", "clusterip-policy")
	runHelm := helmRunner{bin: helm, root: root, dir: dir, kubeconfig: c.AdminKubeconfig}.run
	const ns = "clusterip-policy"
	values := []string{"--namespace", ns, "--set", "dns.clusterIP=10.96.0.10", "--set", "enforcement=deny"}
	// caBundles lists every webhook's caBundle, by name.
	caBundles := func() map[string]string {
		out := map[string]string{}
		m, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "clusterip-policy", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range m.Webhooks {
			out[h.Name] = string(h.ClientConfig.CABundle)
		}
		v, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "clusterip-policy", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range v.Webhooks {
			out[h.Name] = string(h.ClientConfig.CABundle)
		}
		return out
	}
	servingSecret := func() (map[string]string, map[string]string, map[string][]byte, error) {
		s, err := cs.CoreV1().Secrets(ns).Get(ctx, "clusterip-policy-webhook-tls", metav1.GetOptions{})
		if err != nil {
			return nil, nil, nil, err
		}
		return s.Labels, s.Annotations, s.Data, nil
	}

	if out, err := runHelm(ctx, append([]string{"install", "clusterip-policy", oldChart, "--create-namespace"}, values...)...); err != nil {
		t.Fatalf("install the chart of %s: %v\n%s", previousChartRef, err, out)
	}
	before := caBundles()
	_, _, data, err := servingSecret()
	if err != nil {
		t.Fatalf("the chart of %s made no serving Secret (is it still the chart that generated a certificate?): %v", previousChartRef, err)
	}
	for name, b := range before {
		if b == "" || b != string(data["ca.crt"]) {
			t.Fatalf("the chart of %s: webhook %s has caBundle %d bytes, want the Secret's ca.crt", previousChartRef, name, len(b))
		}
	}

	t.Run("helm upgrade keeps the previous chart's caBundle and serving Secret", func(t *testing.T) {
		start := time.Now()
		// As docs/install.md says for this upgrade: the install's values,
		// this chart's defaults (--reuse-values would take the previous
		// chart's, certificate.source selfSigned among them, refused).
		if _, err := runHelm(ctx, "upgrade", "clusterip-policy", "charts/clusterip-policy", "--no-hooks", "--namespace", ns, "--reset-then-reuse-values"); err != nil {
			t.Fatal(err)
		}
		t.Logf("e2e: helm upgrade from the chart of %s took %s", previousChartRef, time.Since(start).Round(time.Millisecond))
		after := caBundles()
		for name, b := range before {
			if after[name] != b {
				t.Errorf("webhook %s: caBundle %d bytes after the upgrade, %d before: every call to it fails TLS until the new leader writes it", name, len(after[name]), len(b))
			}
		}
		labels, annotations, got, err := servingSecret()
		if err != nil {
			t.Fatalf("the serving Secret after the upgrade: %v (the new pods would wait for it while an old pod holds the Lease)", err)
		}
		for k, v := range data {
			if !bytes.Equal(got[k], v) {
				t.Errorf("the serving Secret's %s changed in the upgrade", k)
			}
		}
		if annotations["helm.sh/resource-policy"] != "keep" || labels["app.kubernetes.io/managed-by"] != "Helm" {
			t.Errorf("the serving Secret after the upgrade: annotations %v, labels %v; want it kept and still the chart's", annotations, labels)
		}
	})

	t.Run("once the leader has taken the Secret over, helm upgrade leaves it and the caBundle alone", func(t *testing.T) {
		// What the leader does (internal/controllers/servingcerts): its
		// first write labels the Secret its own, and it writes the caBundle.
		if _, errOut, err := c.Kubectl(ctx, "", "-n", ns, "label", "secret", "clusterip-policy-webhook-tls", "--overwrite", "app.kubernetes.io/managed-by=clusterip-policy"); err != nil {
			t.Fatalf("%v: %s", err, errOut)
		}
		m, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "clusterip-policy", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		written := append(bytes.Clone(m.Webhooks[0].ClientConfig.CABundle), data["ca.crt"]...)
		m.Webhooks[0].ClientConfig.CABundle = written
		if _, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(ctx, m, metav1.UpdateOptions{FieldManager: "clusterip-policy-certificates"}); err != nil {
			t.Fatal(err)
		}
		if _, err := runHelm(ctx, append([]string{"upgrade", "clusterip-policy", "charts/clusterip-policy", "--no-hooks"}, values...)...); err != nil {
			t.Fatal(err)
		}
		manifest, err := runHelm(ctx, "get", "manifest", "clusterip-policy", "--namespace", ns)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(manifest, "name: clusterip-policy-webhook-tls\n  namespace: "+ns+"\n  annotations:\n    helm.sh/resource-policy: keep") {
			t.Error("the chart still renders the serving Secret after the leader labelled it its own")
		}
		if _, _, _, err := servingSecret(); err != nil {
			t.Errorf("helm upgrade deleted the serving Secret the leader took over: %v", err)
		}
		if got := caBundles()["mutate-services.clusterip-policy.io"]; got != string(written) {
			t.Errorf("helm upgrade changed the caBundle the leader wrote (%d bytes, want %d)", len(got), len(written))
		}
	})

	if t.Failed() {
		return
	}

	t.Run("the pre-upgrade hook brings an older CRD up to this release's: a policy then stores the new field", func(t *testing.T) {
		// The CRD has no field newer than the previous chart's, so the
		// cluster's is made older here: without spec.exemptions.
		const crd = "clusterippolicies.clusterip-policy.io"
		const field = "exemptions"
		remove := `[{"op":"remove","path":"/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/` + field + `"}]`
		if _, errOut, err := c.Kubectl(ctx, "", "patch", "crd", crd, "--type=json", "-p", remove); err != nil {
			t.Fatalf("make the CRD older: %v: %s", err, errOut)
		}
		useField := func() error {
			patch := `{"spec":{"` + field + `":{"namespaces":["e2e-upgrade"]}}}`
			// The CRD just changed: the apiserver may serve the old schema
			// for a moment; a stored value is what counts.
			var last error
			for range 20 {
				_, errOut, err := c.Kubectl(ctx, "", "patch", "clusterippolicy", "default", "--type=merge", "-p", patch)
				got, _, gerr := c.Kubectl(ctx, "", "get", "clusterippolicy", "default", "-o", "jsonpath={.spec."+field+".namespaces}")
				if err == nil && gerr == nil && strings.Contains(got, "e2e-upgrade") {
					return nil
				}
				switch {
				case err != nil:
					last = fmt.Errorf("patch: %w: %s", err, strings.TrimSpace(errOut))
				case gerr != nil:
					last = fmt.Errorf("read spec.%s back: %w", field, gerr)
				default:
					last = fmt.Errorf("stored %q, want e2e-upgrade in it", got)
				}
				time.Sleep(250 * time.Millisecond)
			}
			return last
		}
		if err := useField(); err == nil {
			t.Fatal("the CRD without spec.exemptions stored it: the test would prove nothing")
		} else {
			t.Logf("before the hook: %v", err)
		}
		// The hook's service account and RBAC, as helm creates them before
		// the Job (the Job itself is left out: no kubelet here).
		sv, err := cs.Discovery().ServerVersion()
		if err != nil {
			t.Fatal(err)
		}
		hook, err := runHelm(ctx, append([]string{"template", "clusterip-policy", "charts/clusterip-policy", "--is-upgrade", "--kube-version", sv.GitVersion, "--show-only", "templates/crd-upgrade.yaml"}, values...)...)
		if err != nil {
			t.Fatal(err)
		}
		docs := strings.Split(hook, "\n---\n")
		var rbac []string
		for _, d := range docs {
			if !strings.Contains(d, "\nkind: Job\n") {
				rbac = append(rbac, d)
			}
		}
		if len(rbac) != 3 || len(docs) != 4 {
			t.Fatalf("the hook renders %d objects, %d of them not the Job; want the ServiceAccount, ClusterRole, ClusterRoleBinding and the Job", len(docs), len(rbac))
		}
		if _, errOut, err := c.Kubectl(ctx, strings.Join(rbac, "\n---\n"), "apply", "-f", "-"); err != nil {
			t.Fatalf("apply the hook's RBAC: %v: %s", err, errOut)
		}
		applyCRD := func() (string, error) {
			cmd := exec.CommandContext(ctx, c.Bin.Webhook, "apply-crd", "--kubeconfig", c.AdminKubeconfig, "--as", "system:serviceaccount:"+ns+":clusterip-policy-apply-crd", "--timeout=1m")
			out, err := cmd.CombinedOutput()
			return string(out), err
		}
		start := time.Now()
		out, err := applyCRD()
		if err != nil {
			t.Fatalf("clusterip-policy apply-crd as the hook's service account: %v\n%s", err, out)
		}
		t.Logf("e2e: apply-crd as the hook's service account took %s: %s", time.Since(start).Round(time.Millisecond), strings.TrimSpace(out))
		if err := useField(); err != nil {
			t.Fatalf("after the hook the new field: %v", err)
		}
		// Never over a CRD a newer release applied.
		if _, errOut, err := c.Kubectl(ctx, "", "annotate", "crd", crd, "--overwrite", "clusterip-policy.io/applied-by-version=v99.0.0"); err != nil {
			t.Fatalf("%v: %s", err, errOut)
		}
		if _, errOut, err := c.Kubectl(ctx, "", "patch", "crd", crd, "--type=json", "-p", remove); err != nil {
			t.Fatalf("%v: %s", err, errOut)
		}
		out, err = applyCRD()
		if err != nil || !strings.Contains(out, "kept the CRD") {
			t.Errorf("apply-crd over a CRD of v99.0.0: %v %q, want it kept", err, out)
		}
		if got, _, _ := c.Kubectl(ctx, "", "get", "crd", crd, "-o", "jsonpath={.spec.versions[0].schema.openAPIV3Schema.properties.spec.properties."+field+".type}"); got != "" {
			t.Errorf("apply-crd replaced a CRD a newer release applied (spec.%s is back, type %q)", field, got)
		}
	})
}
