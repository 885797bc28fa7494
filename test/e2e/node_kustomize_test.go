//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"clusterip-policy/docs"
	"clusterip-policy/test/e2e/framework"
	"clusterip-policy/test/fixtures"
)

// TestNodeKustomizeBase runs docs/install.md's kustomize block for the base
// alone (managed certificates: the elected pod makes the CA, the serving
// certificate and the caBundle) onto the real node, as printed but for one
// word: `-k manifests/base` names a kustomization that adds to the base what
// the node needs and a user's cluster does not (the image in the node's
// registry, and the apiserver's address for the pods, since the node runs no
// kube-proxy). Then it checks what the page promises: three pods ready on
// the certificate they made, the caBundle written, a create that breaks the
// base policy warned (the base warns), and the documented uninstall leaving
// nothing.
func TestNodeKustomizeBase(t *testing.T) {
	n := nodeUnderTest(t)
	ctx := testContext(t, 10*time.Minute)
	kubectl := framework.DefaultBinaries(n.root).Kubectl
	const ns = "clusterip-policy"

	wrap := filepath.Join(n.dir, "base-on-node")
	if err := os.MkdirAll(wrap, 0o755); err != nil {
		t.Fatal(err)
	}
	base, err := filepath.Rel(wrap, filepath.Join(n.root, "manifests", "base"))
	if err != nil {
		t.Fatal(err)
	}
	n.writeNodeKustomization(t, wrap, base, ns)

	var script []string
	for _, c := range installBlockWith(t, n.root, "kubectl apply --server-side --force-conflicts -k manifests/base") {
		script = append(script, strings.ReplaceAll(c, "-k manifests/base", "-k "+wrap))
	}
	start := time.Now()
	n.script(t, ctx, script)
	t.Logf("e2e: node: docs/install.md's kustomize block for the base (managed certificates) ran in %s", time.Since(start).Round(time.Second))
	n.checkPods(t, ctx, ns, 3)

	// The leader made the serving Secret and wrote its CA into every webhook.
	secret, err := n.cs.CoreV1().Secrets(ns).Get(ctx, "clusterip-policy-webhook-tls", metav1.GetOptions{})
	if err != nil || len(secret.Data["tls.crt"]) == 0 {
		t.Fatalf("the managed serving Secret: %v (tls.crt %d bytes)", err, len(secret.Data["tls.crt"]))
	}
	vwc, err := n.cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "clusterip-policy", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range vwc.Webhooks {
		if len(w.ClientConfig.CABundle) == 0 {
			t.Errorf("webhook %s has no caBundle after the install", w.Name)
		}
	}
	// The base's policy warns: a static address in the dynamic band is
	// admitted with the rule's warning, from a pod serving the managed
	// certificate (a TLS failure would be a denial or, unarmed, silence).
	fixtures.EventuallyNil(t, "the base's warning on a dynamic-band create", time.Minute, func() error {
		_, stderr, err := n.kubectlOut(ctx, kubectl, "create", "service", "clusterip", "kustomize-base-probe", "--tcp=80", "--clusterip=10.96.200.7", "--dry-run=server")
		if err != nil {
			return err
		}
		if !strings.Contains(stderr, "Warning:") || !strings.Contains(stderr, "10.96.200.7") {
			return fmt.Errorf("no warning naming 10.96.200.7 on the create; stderr %q", stderr)
		}
		return nil
	})

	// docs/install.md, "Uninstall": the configurations and the
	// backstop's bindings first, then what kustomize applied (namespace,
	// Lease and CRD with it), then the backstop's policies, then the holds.
	n.run(t, ctx, kubectl, "delete", "mutatingwebhookconfiguration,validatingwebhookconfiguration,validatingadmissionpolicybinding", "-l", "app.kubernetes.io/name=clusterip-policy-webhook,clusterip-policy.io/break-glass!=keep")
	n.run(t, ctx, kubectl, "delete", "-k", wrap, "--ignore-not-found", "--wait", "--timeout=3m")
	n.run(t, ctx, kubectl, "delete", "validatingadmissionpolicy,mutatingadmissionpolicy,mutatingadmissionpolicybinding", "-l", "app.kubernetes.io/name=clusterip-policy-webhook")
	n.run(t, ctx, kubectl, "delete", "ipaddresses", "-l", holdLabel)
	n.nothingLeft(t, ctx, ns)
}

// installBlockWith is the sh block of docs/install.md that runs the command
// with, its commands as the docs tests read them.
func installBlockWith(t *testing.T, root, with string) []string {
	t.Helper()
	for _, b := range docs.Blocks(readText(t, filepath.Join(root, "docs", "install.md"))) {
		cmds := docs.Commands(b)
		for _, c := range cmds {
			if c == with {
				return cmds
			}
		}
	}
	t.Fatalf("docs/install.md has no sh block running %s", with)
	return nil
}

// whyRefusedLogsCommand is docs/why-refused.md's command that reads every
// pod's denials from their logs.
func whyRefusedLogsCommand(t *testing.T, root string) string {
	t.Helper()
	for _, b := range docs.Blocks(readText(t, filepath.Join(root, "docs", "why-refused.md"))) {
		for _, c := range docs.Commands(b) {
			if strings.HasPrefix(c, "kubectl -n clusterip-policy logs -l ") && strings.Contains(c, "| jq ") {
				return c
			}
		}
	}
	t.Fatal("docs/why-refused.md has no kubectl logs ... | jq command")
	return ""
}

// script runs documented commands in bash (-euo pipefail) from the
// repository's root, with the node's kubeconfig and the tools of .local/bin
// first on the PATH; it logs them and their output and returns the output.
// A failure ends the test.
func (n *realNode) script(t *testing.T, ctx context.Context, lines []string) string {
	t.Helper()
	out, err := n.tryScript(t, ctx, lines)
	if err != nil {
		n.dumpPods(t, ctx, "clusterip-policy")
		t.Fatal(err)
	}
	return out
}

// tryScript is script returning the failure instead.
func (n *realNode) tryScript(t *testing.T, ctx context.Context, lines []string) (string, error) {
	t.Helper()
	t.Logf("as run:\n%s", strings.Join(lines, "\n"))
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", strings.Join(lines, "\n"))
	cmd.Dir = n.root
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(framework.DefaultBinaries(n.root).Kubectl)+":"+os.Getenv("PATH"), "KUBECONFIG="+n.kubeconfig)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("output:\n%s", out)
	if err != nil {
		return string(out), fmt.Errorf("failed after %s: %w", time.Since(start).Round(time.Second), err)
	}
	return string(out), nil
}

// operationsBlockWith is the sh block of docs/operations.md whose commands
// include one that starts with prefix.
func operationsBlockWith(t *testing.T, root, prefix string) []string {
	t.Helper()
	for _, b := range docs.Blocks(readText(t, filepath.Join(root, "docs", "operations.md"))) {
		cmds := docs.Commands(b)
		for _, c := range cmds {
			if strings.HasPrefix(c, prefix) {
				return cmds
			}
		}
	}
	t.Fatalf("docs/operations.md has no sh block with a command starting %q", prefix)
	return nil
}

// failurePolicies lists the failurePolicy of every webhook of ours, by name.
func (n *realNode) failurePolicies(ctx context.Context) (map[string]string, error) {
	out := map[string]string{}
	adm := n.cs.AdmissionregistrationV1()
	m, err := adm.MutatingWebhookConfigurations().Get(ctx, "clusterip-policy", metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	for _, w := range m.Webhooks {
		out[w.Name] = string(*w.FailurePolicy)
	}
	v, err := adm.ValidatingWebhookConfigurations().Get(ctx, "clusterip-policy", metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	for _, w := range v.Webhooks {
		out[w.Name] = string(*w.FailurePolicy)
	}
	return out, nil
}

// breakGlassAsDocumented runs docs/operations.md's break-glass (the three
// failurePolicy patches) as printed and checks what the page says: the
// leader sets Fail again on the two Service webhooks while the webhook
// answers, the ServiceCIDR webhook stays Ignore, and the page's restore
// (apply the overlay with --force-conflicts; -k names the wrapper) sets it
// back to Fail.
func (n *realNode) breakGlassAsDocumented(t *testing.T, ctx context.Context, wrap string) {
	t.Helper()
	patches := append(operationsBlockWith(t, n.root, "kubectl patch mutatingwebhookconfiguration clusterip-policy "),
		operationsBlockWith(t, n.root, `kubectl patch validatingwebhookconfiguration clusterip-policy --type=json -p='[{"op":"replace","path":"/webhooks/1/`)...)
	if len(patches) != 3 {
		t.Fatalf("docs/operations.md's break-glass is %d commands, want the three patches: %q", len(patches), patches)
	}
	services := []string{framework.MutatingWebhookName, "validate-services.clusterip-policy.io"}
	const cidrs = "validate-servicecidrs.clusterip-policy.io"
	// want waits until every webhook named has the failurePolicy given.
	want := func(what, policy string, names ...string) {
		t.Helper()
		fixtures.EventuallyNil(t, what, time.Minute, func() error {
			now, err := n.failurePolicies(ctx)
			if err != nil {
				return err
			}
			for _, w := range names {
				if now[w] != policy {
					return fmt.Errorf("%s: %s is %s, want %s", what, w, now[w], policy)
				}
			}
			return nil
		})
	}
	want("before the break-glass (the leader arms the Service webhooks)", "Fail", append(services, cidrs)...)
	start := time.Now()
	for i, c := range patches {
		out := n.script(t, ctx, []string{c})
		if !strings.Contains(out, "patched") {
			t.Errorf("patch %d printed %q, want ... patched", i, out)
		}
	}
	took := time.Since(start)
	// The ServiceCIDR webhook is not armed by the leader: it stays Ignore
	// until the restore below. The Service webhooks are armed again by the
	// leader while the webhook answers, as the page says.
	if now, err := n.failurePolicies(ctx); err != nil || now[cidrs] != "Ignore" {
		t.Fatalf("after the break-glass %s is %q (%v), want Ignore", cidrs, now[cidrs], err)
	}
	want("the leader arms the Service webhooks again", "Fail", services...)
	rearmed := time.Since(start)
	t.Logf("e2e: node: break-glass patched 3 webhooks in %s; the leader set Fail again %s after the first patch (the webhook answers)", took.Round(time.Millisecond), rearmed.Round(time.Millisecond))
	restore := operationsBlockWith(t, n.root, "kubectl apply --server-side --force-conflicts -k manifests/overlays/self-signed")
	var script []string
	for _, c := range restore {
		script = append(script, strings.ReplaceAll(c, "-k manifests/overlays/self-signed", "-k "+wrap))
	}
	n.script(t, ctx, script)
	want("after the restore", "Fail", append(services, cidrs)...)
}

// rotateCAAsDocumented runs, under 8 clients creating Services, two
// documented re-applies of the overlay once the leader has armed the
// webhooks: docs/install.md's upgrade (the overlay unchanged, so it only
// re-applies) and docs/operations.md's CA rotation for the self-signed
// overlay, as printed but for two things: -k names the wrapper (the
// upgrade's my-cluster too), and gencerts writes into the test's copy of the
// overlay (--out-dir, --cabundle-patch). kubectl diff exits 1 when it finds
// differences (the leader's armed failurePolicy is one), which is its
// contract, not a failure. Not one request may fail or need a retry, and at
// the end every webhook trusts the new CA alone.
func (n *realNode) rotateCAAsDocumented(t *testing.T, ctx context.Context, wrap, overlay string) {
	t.Helper()
	var script []string
	for _, c := range installBlockWith(t, n.root, "kubectl apply --server-side --force-conflicts -k my-cluster") {
		c = strings.ReplaceAll(c, "-k my-cluster", "-k "+wrap)
		if strings.HasPrefix(c, "kubectl diff ") {
			c = "{ " + c + " || [ $? -eq 1 ]; }"
		}
		script = append(script, c)
	}
	for _, c := range operationsBlockWith(t, n.root, "go run ./certs/cmd/gencerts --new-ca") {
		if strings.HasPrefix(c, "go run ./certs/cmd/gencerts ") {
			c += " --out-dir " + filepath.Join(overlay, "tls") + " --cabundle-patch " + filepath.Join(overlay, "cabundle-patch.yaml")
		}
		script = append(script, strings.ReplaceAll(c, "-k manifests/overlays/self-signed", "-k "+wrap))
	}
	bundles := func() map[string]string {
		out := map[string]string{}
		v, err := n.cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "clusterip-policy", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range v.Webhooks {
			out[w.Name] = string(w.ClientConfig.CABundle)
		}
		return out
	}
	before := bundles()
	n.lifecycleLoad(t, ctx, "ca-rotation", 150*time.Second, func() error {
		_, err := n.tryScript(t, ctx, script)
		return err
	})
	caFile, err := os.ReadFile(filepath.Join(overlay, "tls", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range bundles() {
		if b == before[name] || strings.TrimSpace(b) != strings.TrimSpace(string(caFile)) {
			t.Errorf("after the CA rotation %s's caBundle is %d bytes (%d before), want the new CA alone (tls/ca.crt, %d bytes)", name, len(b), len(before[name]), len(caFile))
		}
	}
}

// kubectlOut runs kubectl against the node and returns stdout and stderr
// apart (warnings go to stderr).
func (n *realNode) kubectlOut(ctx context.Context, kubectl string, args ...string) (string, string, error) {
	cmd := exec.CommandContext(ctx, kubectl, args...)
	cmd.Dir = n.root
	cmd.Env = append(os.Environ(), "KUBECONFIG="+n.kubeconfig)
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, errOut.String())
	}
	return out.String(), errOut.String(), err
}

// writeNodeKustomization writes dir/kustomization.yaml: resource (a path
// relative to dir) with what the node needs and a user's cluster does not,
// the image from the node's registry by digest and the apiserver's address
// for the pods of namespace ns (the node runs no kube-proxy), then any
// further patches, each a kustomize `patches` entry such as "path: x.yaml".
func (n *realNode) writeNodeKustomization(t *testing.T, dir, resource, ns string, patches ...string) {
	t.Helper()
	named, digest, _ := strings.Cut(n.env["NODE_IMAGE"], "@")
	repo := named[:strings.LastIndex(named, ":")]
	kz := fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- %s
images:
- name: clusterip-policy
  newName: %s
  digest: %s
patches:
- patch: |-
    apiVersion: apps/v1
    kind: Deployment
    metadata:
      name: clusterip-policy-webhook
      namespace: %s
    spec:
      template:
        spec:
          containers:
          - name: webhook
            env:
            - name: KUBERNETES_SERVICE_HOST
              value: %q
            - name: KUBERNETES_SERVICE_PORT
              value: %q
`, resource, repo, digest, ns, n.env["NODE_APISERVER_HOST"], n.env["NODE_APISERVER_PORT"])
	for _, p := range patches {
		kz += "- " + p + "\n"
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(kz), 0o644); err != nil {
		t.Fatal(err)
	}
}
