package manifests

import (
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"clusterip-policy/certs"
)

// The safety tests see exactly what kustomize builds: every manifest in
// base/ is listed in its kustomization, and every listed one exists.
func TestBaseKustomizationListsEveryManifest(t *testing.T) {
	k := readKustomization(t, "base")
	files, err := filepath.Glob(filepath.Join("base", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var onDisk []string
	for _, f := range files {
		if b := filepath.Base(f); b != "kustomization.yaml" {
			onDisk = append(onDisk, b)
		}
	}
	listed := slices.Clone(k.Resources)
	sort.Strings(listed)
	sort.Strings(onDisk)
	if !slices.Equal(listed, onDisk) {
		t.Errorf("base/kustomization.yaml lists %v; base/ holds %v", listed, onDisk)
	}
	if !slices.Contains(listed, webhookConfigs) {
		t.Errorf("the e2e harness reads base/%s; the base does not list it", webhookConfigs)
	}
}

// referencedFiles lists the files a kustomization names, relative to its directory.
func referencedFiles(k kustomization) []string {
	var out []string
	out = append(out, k.Resources...)
	out = append(out, k.Components...)
	for _, p := range k.Patches {
		if p.Path != "" {
			out = append(out, p.Path)
		}
	}
	for _, g := range append(slices.Clone(k.SecretGenerator), k.ConfigMapGenerator...) {
		for _, f := range g.Files {
			if _, src, ok := strings.Cut(f, "="); ok {
				f = src
			}
			out = append(out, f)
		}
	}
	return out
}

// gitignored reports whether rel (relative to dir) is covered by dir/.gitignore,
// which in an overlay names exactly the files `make certs` generates. Only
// the anchored forms used there are understood: "/file" and "/dir/".
func gitignored(dir, rel string) bool {
	data, err := os.ReadFile(filepath.Join(dir, ".gitignore"))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		pat := strings.TrimPrefix(strings.TrimSpace(line), "/")
		if pat == "" || strings.HasPrefix(pat, "#") {
			continue
		}
		if pat == rel || (strings.HasSuffix(pat, "/") && strings.HasPrefix(rel, pat)) {
			return true
		}
	}
	return false
}

// missingFiles returns the files k refers to that neither exist in dir nor
// are generated there (and so git-ignored).
func missingFiles(dir string, k kustomization) []string {
	var p []string
	for _, f := range referencedFiles(k) {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil || gitignored(dir, filepath.ToSlash(filepath.Clean(f))) {
			continue
		}
		p = append(p, problemf("%s/kustomization.yaml refers to %s, which does not exist and is not generated", dir, f))
	}
	return p
}

func overlays(t *testing.T) []string {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join("overlays", "*", "kustomization.yaml"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no overlays found: %v", err)
	}
	for i := range dirs {
		dirs[i] = filepath.Dir(dirs[i])
	}
	return dirs
}

func TestOverlaysReferOnlyToFilesThatExistOrAreGenerated(t *testing.T) {
	for _, dir := range overlays(t) {
		t.Run(dir, func(t *testing.T) {
			for _, p := range missingFiles(dir, readKustomization(t, dir)) {
				t.Error(p)
			}
		})
	}
	t.Run("rejects an overlay that refers to a file that is missing", func(t *testing.T) {
		dir := filepath.Join("overlays", "cert-manager")
		k := readKustomization(t, dir)
		k.Patches = append(k.Patches, patchRef{Path: "no-such-patch.yaml"})
		if p := missingFiles(dir, k); len(p) != 1 || !strings.Contains(p[0], "no-such-patch.yaml") {
			t.Errorf("got %q, want one problem naming no-such-patch.yaml", p)
		}
	})
}

// selfSignedSecret checks that the self-signed overlay generates the Secret
// the pods mount, under a stable name, from the files gencerts writes.
func selfSignedSecret(k kustomization) []string {
	for _, g := range k.SecretGenerator {
		if g.Name != tlsSecret {
			continue
		}
		var p []string
		if g.Namespace != ownNamespace {
			p = append(p, problemf("Secret %s is generated in namespace %q, not %s", tlsSecret, g.Namespace, ownNamespace))
		}
		if g.Type != string(corev1.SecretTypeTLS) {
			p = append(p, problemf("Secret %s has type %q, want %s", tlsSecret, g.Type, corev1.SecretTypeTLS))
		}
		if !g.Options.DisableNameSuffixHash {
			p = append(p, problemf("Secret %s gets a hash suffix: a rotation would roll the pods instead of updating the Secret in place", tlsSecret))
		}
		want := []string{certs.CertFile + "=tls/" + certs.CertFile, certs.KeyFile + "=tls/" + certs.KeyFile}
		if !slices.Equal(g.Files, want) {
			p = append(p, problemf("Secret %s is made from %v, want %v (what gencerts writes)", tlsSecret, g.Files, want))
		}
		return p
	}
	return []string{"the self-signed overlay generates no Secret " + tlsSecret}
}

func TestSelfSignedOverlayGeneratesTheMountedSecret(t *testing.T) {
	dir := filepath.Join("overlays", "self-signed")
	for _, p := range selfSignedSecret(readKustomization(t, dir)) {
		t.Error(p)
	}
	for _, f := range []string{"tls/" + certs.CertFile, "tls/" + certs.KeyFile, "tls/" + certs.CAKeyFile, "cabundle-patch.yaml"} {
		if !gitignored(dir, f) {
			t.Errorf("%s/%s is generated by gencerts but not git-ignored", dir, f)
		}
	}
	t.Run("rejects a Secret name with a hash suffix", func(t *testing.T) {
		k := readKustomization(t, dir)
		k.SecretGenerator[0].Options.DisableNameSuffixHash = false
		if p := selfSignedSecret(k); len(p) == 0 {
			t.Error("the check found nothing wrong")
		}
	})
}

// certManagerInjection checks that both webhook configurations ask the
// cainjector for the CA of a Certificate that writes the mounted Secret and
// covers every DNS name of the webhook Service.
func certManagerInjection(patches, certificates []map[string]any, svcName string) []string {
	var p []string
	kinds := map[string]string{}
	for _, d := range patches {
		kind, _ := d["kind"].(string)
		md, _ := d["metadata"].(map[string]any)
		ann, _ := md["annotations"].(map[string]any)
		from, _ := ann["cert-manager.io/inject-ca-from"].(string)
		kinds[kind] = from
	}
	for _, kind := range []string{"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"} {
		from, ok := kinds[kind]
		if !ok || from == "" {
			p = append(p, problemf("the cert-manager overlay does not inject the CA into the %s", kind))
			continue
		}
		ns, name, _ := strings.Cut(from, "/")
		var cert map[string]any
		for _, c := range certificates {
			md, _ := c["metadata"].(map[string]any)
			if c["kind"] == "Certificate" && md["namespace"] == ns && md["name"] == name {
				cert = c
			}
		}
		if cert == nil {
			p = append(p, problemf("%s: inject-ca-from %s names no Certificate of the overlay", kind, from))
			continue
		}
		spec, _ := cert["spec"].(map[string]any)
		if spec["secretName"] != tlsSecret {
			p = append(p, problemf("Certificate %s writes Secret %v, not the mounted %s", from, spec["secretName"], tlsSecret))
		}
		dns, _ := spec["dnsNames"].([]any)
		for _, want := range certs.ServiceDNSNames(svcName, ownNamespace) {
			if !slices.Contains(dns, any(want)) {
				p = append(p, problemf("Certificate %s does not cover %s", from, want))
			}
		}
	}
	return p
}

func readDocs(t *testing.T, path string) []map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	docs, err := SplitYAML(data)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out []map[string]any
	for _, d := range docs {
		var m map[string]any
		if err := yaml.Unmarshal(d, &m); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, m)
	}
	return out
}

func TestCertManagerOverlayInjectsTheCAIntoBothWebhooks(t *testing.T) {
	dir := filepath.Join("overlays", "cert-manager")
	k := readKustomization(t, dir)
	var patches, resources []map[string]any
	for _, pr := range k.Patches {
		patches = append(patches, readDocs(t, filepath.Join(dir, pr.Path))...)
	}
	for _, r := range k.Resources {
		if strings.HasSuffix(r, ".yaml") {
			resources = append(resources, readDocs(t, filepath.Join(dir, r))...)
		}
	}
	svc := loadBase(t).Services[0].Name
	for _, p := range certManagerInjection(patches, resources, svc) {
		t.Error(p)
	}
	t.Run("rejects a serving Certificate that misses a Service DNS name", func(t *testing.T) {
		for _, r := range resources {
			if spec, ok := r["spec"].(map[string]any); ok && spec["secretName"] == tlsSecret {
				spec["dnsNames"] = []any{svc + "." + ownNamespace + ".svc"}
			}
		}
		p := certManagerInjection(patches, resources, svc)
		if !slices.ContainsFunc(p, func(s string) bool {
			return strings.Contains(s, "does not cover "+svc+"."+ownNamespace+".svc.cluster.local")
		}) {
			t.Errorf("got %q", p)
		}
	})
	t.Run("rejects an overlay that injects into one configuration only", func(t *testing.T) {
		p := certManagerInjection(patches[:1], resources, svc)
		if len(p) == 0 {
			t.Error("the check found nothing wrong")
		}
	})
}
