//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"clusterip-policy/test/e2e/framework"
)

// TestInstallFromRegistry does what a platform team does with a release:
// the image built by `make image` (tools/imagebuild, an OCI layout) is
// pushed to a registry, the chart is packaged with that image's digest in
// its values (hack/package-chart.sh, as `make release` does) and pushed as
// an OCI artifact, and `helm install oci://...` installs it into the
// apiserver. The registry is Debian's docker-registry on loopback. No pod
// runs here (the harness has no kubelet): the test checks what a kubelet
// would be given, the Deployment's image reference, against what the
// registry serves under the tag, and the config of the image it names.
func TestInstallFromRegistry(t *testing.T) {
	root, helm := repoAndHelm(t)
	layoutDir := filepath.Join(root, "_output", "image", "clusterip-policy")
	imagebuild := filepath.Join(root, "_output", "tools", "imagebuild")
	for _, p := range []string{filepath.Join(layoutDir, "index.json"), imagebuild} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s is missing: run `make image` first (%v)", p, err)
		}
	}
	tag, err := framework.LayoutTag(layoutDir)
	if err != nil {
		t.Fatal(err)
	}

	ctx := testContext(t, 4*time.Minute)
	dir := t.TempDir()
	reg := startRegistry(t, ctx, dir)
	// run returns the command's stdout; its stderr is shown when it fails.
	run := func(t *testing.T, name string, args ...string) string {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(cctx, name, args...)
		cmd.Dir = root
		// helm keeps its cache, config and registry logins under HOME: keep them here.
		cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(dir, "cache"), "HELM_CONFIG_HOME="+filepath.Join(dir, "config"), "HELM_DATA_HOME="+filepath.Join(dir, "data"))
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s %s: %v\n%s%s", filepath.Base(name), strings.Join(args, " "), err, out.String(), errOut.String())
		}
		return strings.TrimSpace(out.String())
	}

	repo := reg.Addr() + "/clusterip-policy"
	var digest string
	t.Run("the image is pushed and the registry serves it under its tag", func(t *testing.T) {
		start := time.Now()
		pushed := run(t, imagebuild, "push", "--layout", layoutDir, "--ref", repo+":"+tag)
		built := run(t, imagebuild, "digest", "--layout", layoutDir)
		if pushed != repo+"@"+built {
			t.Fatalf("push printed %q, want %s@%s", pushed, repo, built)
		}
		served, err := reg.ManifestDigest(ctx, "clusterip-policy", tag)
		if err != nil {
			t.Fatal(err)
		}
		if served != built {
			t.Fatalf("the registry serves %s:%s as %s, the layout's index is %s", repo, tag, served, built)
		}
		digest = served
		t.Logf("e2e: registry: pushed %s:%s = %s in %s", repo, tag, digest, time.Since(start).Round(time.Millisecond))
	})
	if t.Failed() {
		return
	}

	t.Run("each platform's image runs our binary as 65532 with nothing else to run", func(t *testing.T) {
		var idx struct {
			Manifests []struct {
				Digest   string `json:"digest"`
				Platform struct {
					OS           string `json:"os"`
					Architecture string `json:"architecture"`
				} `json:"platform"`
			} `json:"manifests"`
		}
		getJSON(ctx, t, "http://"+reg.Addr()+"/v2/clusterip-policy/manifests/"+digest, "application/vnd.oci.image.index.v1+json", &idx)
		var platforms []string
		for _, m := range idx.Manifests {
			platforms = append(platforms, m.Platform.OS+"/"+m.Platform.Architecture)
			var man struct {
				Config struct{ Digest string }   `json:"config"`
				Layers []struct{ Digest string } `json:"layers"`
			}
			getJSON(ctx, t, "http://"+reg.Addr()+"/v2/clusterip-policy/manifests/"+m.Digest, "application/vnd.oci.image.manifest.v1+json", &man)
			var cfg struct {
				Architecture string `json:"architecture"`
				Config       struct {
					User       string   `json:"User"`
					Entrypoint []string `json:"Entrypoint"`
					Labels     map[string]string
				} `json:"config"`
			}
			getJSON(ctx, t, "http://"+reg.Addr()+"/v2/clusterip-policy/blobs/"+man.Config.Digest, "", &cfg)
			if cfg.Config.User != "65532:65532" || strings.Join(cfg.Config.Entrypoint, " ") != "/clusterip-policy" || cfg.Architecture != m.Platform.Architecture {
				t.Errorf("%s: user %q entrypoint %q architecture %q", m.Platform.Architecture, cfg.Config.User, cfg.Config.Entrypoint, cfg.Architecture)
			}
			if v := cfg.Config.Labels["org.opencontainers.image.version"]; v != tag {
				t.Errorf("%s: label version %q, want %s", m.Platform.Architecture, v, tag)
			}
			if len(man.Layers) != 1 {
				t.Errorf("%s: %d layers, want 1 (binary, /etc/passwd, /etc/group, the license)", m.Platform.Architecture, len(man.Layers))
			}
		}
		if got := strings.Join(platforms, " "); got != "linux/amd64 linux/arm64" {
			t.Errorf("index platforms %q, want linux/amd64 linux/arm64", got)
		}
	})

	chartVersion := strings.TrimPrefix(tag, "v")
	t.Run("the chart is packaged with the digest, pushed as OCI and installed from the registry", func(t *testing.T) {
		pkg := run(t, filepath.Join(root, "hack", "package-chart.sh"), repo, tag, digest, filepath.Join(dir, "chart"))
		run(t, helm, "push", pkg, "oci://"+reg.Addr()+"/charts", "--plain-http")
		c := own(t, framework.Options{NoRBAC: true, NoRegister: true})
		start := time.Now()
		out := run(t, helm, "install", "clusterip-policy", "oci://"+reg.Addr()+"/charts/clusterip-policy", "--version", chartVersion,
			"--plain-http", "--namespace", "clusterip-policy", "--create-namespace", "--kubeconfig", c.AdminKubeconfig,
			// No kube-dns Service runs here for the chart to read its address from.
			"--set", "dns.clusterIP=10.96.0.10")
		t.Logf("e2e: registry: helm install oci://%s/charts/clusterip-policy --version %s took %s", reg.Addr(), chartVersion, time.Since(start).Round(time.Millisecond))
		if !strings.Contains(out, "STATUS: deployed") {
			t.Errorf("helm install did not report deployed:\n%s", out)
		}
		d, err := c.Client(0).AppsV1().Deployments("clusterip-policy").Get(ctx, "clusterip-policy-webhook", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := repo + ":" + tag + "@" + digest
		if got := d.Spec.Template.Spec.Containers[0].Image; got != want {
			t.Errorf("the installed Deployment runs %q, want %q (the digest the registry serves for the tag)", got, want)
		}
		// The chart's metadata as installed: helm records which chart version it installed.
		status := run(t, helm, "list", "--namespace", "clusterip-policy", "--kubeconfig", c.AdminKubeconfig, "-o", "json")
		if !strings.Contains(status, `"chart":"clusterip-policy-`+chartVersion+`"`) || !strings.Contains(status, `"app_version":"`+tag+`"`) {
			t.Errorf("helm list: %s; want chart clusterip-policy-%s, app_version %s", status, chartVersion, tag)
		}

		// --no-hooks: no kubelet here runs the pre-delete Job (unregister).
		run(t, helm, "uninstall", "clusterip-policy", "--namespace", "clusterip-policy", "--kubeconfig", c.AdminKubeconfig, "--wait", "--timeout", "60s", "--no-hooks")
		adm := c.Client(0).AdmissionregistrationV1()
		if _, err := adm.MutatingWebhookConfigurations().Get(ctx, "clusterip-policy", metav1.GetOptions{}); err == nil {
			t.Error("the MutatingWebhookConfiguration is still there after helm uninstall")
		}
		if _, err := adm.ValidatingWebhookConfigurations().Get(ctx, "clusterip-policy", metav1.GetOptions{}); err == nil {
			t.Error("the ValidatingWebhookConfiguration is still there after helm uninstall")
		}
		if _, err := c.Client(0).AppsV1().Deployments("clusterip-policy").Get(ctx, "clusterip-policy-webhook", metav1.GetOptions{}); err == nil {
			t.Error("the Deployment is still there after helm uninstall")
		}
	})
}

func getJSON(ctx context.Context, t *testing.T, url, accept string, v any) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(http.MaxBytesReader(nil, resp.Body, 1<<20)).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}
