//go:build e2e

package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"clusterip-policy/certs"
	"clusterip-policy/docs"
	"clusterip-policy/test/e2e/framework"
)

// TestNodeReadmeInstall runs the README's install block as a newcomer
// copies it, onto the real node: `make release` for a registry, then skopeo,
// helm push, the namespace, helm install, the rollout and the smoke create.
// Two things differ from the page, and only these: the registry is a TLS
// registry on loopback instead of registry.example.com (skopeo and helm trust
// its CA through SSL_CERT_FILE, containerd through a hosts.toml, so no
// insecure flag is added), and helm install gains the node's one extra value,
// the apiserver's address for the pods (the node runs no kube-proxy, so the
// kubernetes Service's ClusterIP leads nowhere). The cluster has a kube-dns
// Service, as a user's cluster does, whose address the install reads.
func TestNodeReadmeInstall(t *testing.T) {
	n := nodeUnderTest(t)
	ctx := testContext(t, 20*time.Minute)
	kubectl := framework.DefaultBinaries(n.root).Kubectl

	ca, err := certs.NewCA("clusterip-policy-e2e-registry-ca", 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := framework.StartRegistryTLS(ctx, filepath.Join(n.dir, "tls-registry"), ca, framework.ProcessOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		reg.Stop(5 * time.Second)
		if t.Failed() {
			t.Logf("registry log:\n%s", reg.Tail(40))
		}
	})
	caFile := filepath.Join(n.dir, "registry-ca.crt")
	if err := os.WriteFile(caFile, ca.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	// SSL_CERT_FILE replaces the system's roots for every Go program the
	// block runs (make release's go builds reach the module proxy too):
	// the system's bundle plus the registry's CA.
	system, _ := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
	bundle := filepath.Join(n.dir, "roots.crt")
	if err := os.WriteFile(bundle, append(append(system, '\n'), ca.CertPEM...), 0o644); err != nil {
		t.Fatal(err)
	}
	// containerd (config_path .local/node/containerd/certs.d) reads a host's
	// hosts.toml at each pull: trust the registry's CA there.
	hostsDir := filepath.Join(filepath.Dir(os.Getenv("NODE_ENV")), "containerd", "certs.d", reg.Addr())
	if err := os.MkdirAll(hostsDir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(hostsDir) })
	hosts := "server = \"https://" + reg.Addr() + "\"\n\n[host.\"https://" + reg.Addr() + "\"]\n  capabilities = [\"pull\", \"resolve\"]\n  ca = \"" + caFile + "\"\n"
	if err := os.WriteFile(filepath.Join(hostsDir, "hosts.toml"), []byte(hosts), 0o644); err != nil {
		t.Fatal(err)
	}

	// A user's cluster has cluster DNS; the README reads its address.
	n.run(t, ctx, kubectl, "-n", "kube-system", "create", "service", "clusterip", "kube-dns", "--tcp=53:53", "--clusterip=10.96.0.10")
	t.Cleanup(func() {
		_ = n.cs.CoreV1().Services("kube-system").Delete(context.Background(), "kube-dns", metav1.DeleteOptions{})
	})

	block := readmeInstallBlock(t, n.root)
	var script []string
	for _, c := range block {
		c = strings.ReplaceAll(c, "registry.example.com", reg.Addr())
		if strings.HasPrefix(c, "helm install ") {
			c += " --set-json '" + n.apiserverEnv() + "'"
		}
		script = append(script, c)
	}
	t.Logf("the README's install block, as run:\n%s", strings.Join(script, "\n"))
	bin := filepath.Dir(kubectl)
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", strings.Join(script, "\n"))
	cmd.Dir = n.root
	cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "KUBECONFIG="+n.kubeconfig, "SSL_CERT_FILE="+bundle,
		"HELM_CACHE_HOME="+filepath.Join(n.dir, "cache"), "HELM_CONFIG_HOME="+filepath.Join(n.dir, "config"), "HELM_DATA_HOME="+filepath.Join(n.dir, "data"))
	start := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("output:\n%s", out)
	if err != nil {
		t.Fatalf("the README's install block failed after %s: %v", time.Since(start).Round(time.Second), err)
	}
	t.Logf("e2e: node: the README's install block (make release to the smoke create) ran in %s", time.Since(start).Round(time.Second))
	n.checkPods(t, ctx, "clusterip-policy", 3)

	// docs/install.md's uninstall, so the node is as before for the next test.
	n.run(t, ctx, n.helm, "uninstall", "clusterip-policy", "--namespace", "clusterip-policy", "--wait", "--timeout", "3m")
	n.cleanUp(t, ctx, "clusterip-policy")
	n.nothingLeft(t, ctx, "clusterip-policy")
}

// readmeInstallBlock is the README's install block (the sh block that starts
// with make release), its commands as the docs tests read them.
func readmeInstallBlock(t *testing.T, root string) []string {
	t.Helper()
	for _, b := range docs.Blocks(readText(t, filepath.Join(root, "README.md"))) {
		if cmds := docs.Commands(b); len(cmds) > 0 && strings.HasPrefix(cmds[0], "make release ") {
			return cmds
		}
	}
	t.Fatal("README.md has no sh block starting with make release (the install block)")
	return nil
}
