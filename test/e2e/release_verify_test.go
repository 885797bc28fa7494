//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"clusterip-policy/docs"
	"clusterip-policy/test/e2e/framework"
)

// What TestReleaseArtefacts checks beyond the files themselves (issue 40,
// "a release you can verify"): docs/release.md's signing and verifying
// commands against a loopback registry, the krew manifest installed with
// krew, the plugin's completion through kubectl, and install.yaml applied
// to a real kube-apiserver. Every command of docs/release.md it runs is
// taken from the page, so the page and the check cannot drift apart.

// releaseDocBlock returns the commands of the sh block of docs/release.md
// whose first command starts with prefix.
func releaseDocBlock(t *testing.T, root, prefix string) []string {
	t.Helper()
	for _, b := range docs.Blocks(readText(t, filepath.Join(root, "docs", "release.md"))) {
		if cmds := docs.Commands(b); len(cmds) > 0 && strings.HasPrefix(cmds[0], prefix) {
			return cmds
		}
	}
	t.Fatalf("docs/release.md has no sh block starting with %q", prefix)
	return nil
}

// shellResult is what one bash script printed and how it ended.
type shellResult struct {
	stdout, stderr string
	err            error
}

func (r shellResult) String() string {
	return strings.TrimSpace(r.stdout + "\n" + r.stderr)
}

// runShell runs script with bash (errexit, nounset, pipefail) in cwd, with
// env added to this process's environment, for at most two minutes.
func runShell(ctx context.Context, cwd string, env []string, script string) shellResult {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, "bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = cwd
	cmd.Env = append(os.Environ(), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	return shellResult{out.String(), errOut.String(), err}
}

// onLoopback rewrites a documented command for the loopback registry at
// addr: registry.example.com becomes addr, skopeo and helm push over plain
// HTTP (which a registry with a trusted certificate does not need), and
// cosign's key pair is the one in keys. Nothing else changes.
func onLoopback(c, addr, keys string) string {
	c = strings.ReplaceAll(c, "registry.example.com", addr)
	c = strings.Replace(c, "skopeo copy ", "skopeo copy --dest-tls-verify=false ", 1)
	c = strings.Replace(c, "helm push ", "helm push --plain-http ", 1)
	c = strings.ReplaceAll(c, "--key cosign.key ", "--key "+filepath.Join(keys, "cosign.key")+" ")
	return strings.ReplaceAll(c, "--key cosign.pub ", "--key "+filepath.Join(keys, "cosign.pub")+" ")
}

// cosignRefusal is what cosign says when a signature does not verify: no
// signature for that digest, or one the key did not make. A verify that
// fails for another reason (the registry unreachable, a flag cosign does
// not know) is not the refusal the test looks for.
var cosignRefusal = regexp.MustCompile(`no signatures found|no matching signatures|no matching attestations|invalid signature|signature mismatch|failed to verify signature|verification failure`)

// checkSigning runs docs/release.md's signing block (sign) against a
// loopback registry with a key pair made for the run, then its verifying
// block (verify), and shows verify refusing a wrong key, another image
// under the release's tag and another chart under the chart's tag.
func checkSigning(t *testing.T, ctx context.Context, root, dir, version, digest string, sign, verify []string) {
	bin := filepath.Dir(framework.DefaultBinaries(root).Kubectl)
	cosign := filepath.Join(bin, "cosign")
	if _, err := os.Stat(cosign); err != nil {
		t.Fatalf("cosign is not built: %v (make release-check-tools)", err)
	}
	if _, err := exec.LookPath("skopeo"); err != nil {
		t.Fatalf("skopeo is not installed (Debian package skopeo; .ci/run installs it): %v", err)
	}
	reg := startRegistry(t, ctx, t.TempDir())
	// A throwaway password and key pair per run, as CI has no maintainer
	// key; a second pair stands for a key the release was not signed with.
	pw := make([]byte, 18)
	if _, err := rand.Read(pw); err != nil {
		t.Fatal(err)
	}
	env := []string{
		"COSIGN_PASSWORD=" + base64.RawURLEncoding.EncodeToString(pw),
		"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH"),
		"V=" + version,
		// cosign keeps Sigstore's TUF metadata here; this run uses none.
		"TUF_ROOT=" + t.TempDir(),
	}
	keys, otherKeys := t.TempDir(), t.TempDir()
	for _, d := range []string{keys, otherKeys} {
		if r := runShell(ctx, d, env, "cosign generate-key-pair"); r.err != nil {
			t.Fatalf("cosign generate-key-pair: %v\n%s", r.err, r)
		}
	}

	start := time.Now()
	var script []string
	for _, c := range sign {
		script = append(script, onLoopback(c, reg.Addr(), keys))
	}
	script = append(script, `echo "DIGEST=$DIGEST CHART_DIGEST=$CHART_DIGEST"`)
	r := runShell(ctx, root, env, strings.Join(script, "\n"))
	if r.err != nil {
		t.Fatalf("docs/release.md's signing commands on loopback:\n%s\n: %v\n%s", strings.Join(script, "\n"), r.err, r)
	}
	t.Logf("e2e: release: pushed, signed and attested with docs/release.md's commands in %s", time.Since(start).Round(time.Millisecond))
	m := regexp.MustCompile(`(?m)^DIGEST=(\S+) CHART_DIGEST=(sha256:[0-9a-f]{64})$`).FindStringSubmatch(r.stdout)
	if m == nil || m[1] != digest {
		t.Fatalf("the signing commands signed DIGEST/CHART_DIGEST %q; want the release's index %s and a chart digest", m, digest)
	}
	chartDigest := m[2]

	verifyAll := func(keys string) []shellResult {
		var out []shellResult
		for _, c := range verify {
			out = append(out, runShell(ctx, root, env, onLoopback(c, reg.Addr(), keys)))
		}
		return out
	}
	mustRefuse := func(what string, i int, r shellResult) {
		t.Helper()
		if r.err == nil {
			t.Errorf("%s: %s verified:\n%s", what, verify[i], r)
			return
		}
		if !cosignRefusal.MatchString(r.stderr) {
			t.Errorf("%s: %s failed, but not as a refused signature (%s):\n%s", what, verify[i], cosignRefusal, r)
			return
		}
		f := strings.Fields(verify[i])
		t.Logf("e2e: release: %s: %s %s refused: %s", what, f[1], f[len(f)-1], lastLine(r.stderr))
	}

	start = time.Now()
	results := verifyAll(keys)
	for i, r := range results {
		if r.err != nil {
			t.Fatalf("docs/release.md's %s: %v\n%s", verify[i], r.err, r)
		}
	}
	t.Logf("e2e: release: docs/release.md's three verify commands passed in %s", time.Since(start).Round(time.Millisecond))
	for i, c := range verify {
		if strings.HasPrefix(c, "cosign verify-attestation ") {
			checkSBOMAttestation(t, results[i].stdout, digest, filepath.Join(dir, "clusterip-policy-"+version+".spdx.json"))
		}
	}

	for i, r := range verifyAll(otherKeys) {
		mustRefuse("another key pair's public key", i, r)
	}

	// Another image under the release's tag: the pause image built beside
	// it. The tag then names a digest nobody signed.
	pause := filepath.Join(root, "_output", "image", "pause")
	if r := runShell(ctx, root, env, "skopeo copy --all --dest-tls-verify=false oci:"+pause+":"+version+" docker://"+reg.Addr()+"/clusterip-policy:"+version); r.err != nil {
		t.Fatalf("push the pause image under the release's tag: %v\n%s", r.err, r)
	}
	if served, err := reg.ManifestDigest(ctx, "clusterip-policy", version); err != nil || served == digest {
		t.Fatalf("after pushing the pause image the tag serves %s (%v); want another digest than %s", served, err, digest)
	}
	// Another chart of the same version, naming another image.
	other := filepath.Join(t.TempDir(), "other")
	if r := runShell(ctx, root, env, "hack/package-chart.sh attacker.example/clusterip-policy "+version+" "+digest+" "+other+" >/dev/null && helm push --plain-http "+other+"/clusterip-policy-"+strings.TrimPrefix(version, "v")+".tgz oci://"+reg.Addr()+"/charts"); r.err != nil {
		t.Fatalf("push another chart under the chart's tag: %v\n%s", r.err, r)
	}
	for i, r := range verifyAll(keys) {
		mustRefuse("another image and chart under the tags", i, r)
	}
	// The signatures belong to the digests, not to the tags: the release's
	// own digests still verify.
	for _, ref := range []string{reg.Addr() + "/clusterip-policy@" + digest, reg.Addr() + "/charts/clusterip-policy@" + chartDigest} {
		if r := runShell(ctx, root, env, "cosign verify --key "+filepath.Join(keys, "cosign.pub")+" --insecure-ignore-tlog=true "+ref); r.err != nil {
			t.Errorf("cosign verify %s, the digest the release signed: %v\n%s", ref, r.err, r)
		}
	}
}

// checkSBOMAttestation checks what `cosign verify-attestation` printed: a
// DSSE envelope whose payload is an in-toto statement about the image
// index, with the release's SBOM as its SPDX predicate.
func checkSBOMAttestation(t *testing.T, out, digest, sbomPath string) {
	t.Helper()
	var want any
	if err := json.Unmarshal([]byte(readText(t, sbomPath)), &want); err != nil {
		t.Fatal(err)
	}
	line := strings.TrimSpace(out)
	if i := strings.IndexByte(line, '\n'); i >= 0 {
		t.Fatalf("verify-attestation printed %d attestations, want one:\n%.600s", strings.Count(line, "\n")+1, line)
	}
	var env struct {
		PayloadType string `json:"payloadType"`
		Payload     string `json:"payload"`
	}
	if err := json.Unmarshal([]byte(line), &env); err != nil {
		t.Fatalf("verify-attestation printed no DSSE envelope: %v\n%.600s", err, line)
	}
	payload, err := base64.StdEncoding.DecodeString(env.Payload)
	if err != nil {
		t.Fatalf("the envelope's payload: %v", err)
	}
	var st struct {
		PredicateType string `json:"predicateType"`
		Subject       []struct {
			Digest map[string]string `json:"digest"`
		} `json:"subject"`
		Predicate any `json:"predicate"`
	}
	if err := json.Unmarshal(payload, &st); err != nil {
		t.Fatalf("the payload is not an in-toto statement: %v\n%.600s", err, payload)
	}
	if env.PayloadType != "application/vnd.in-toto+json" || st.PredicateType != "https://spdx.dev/Document" {
		t.Errorf("payload type %q, predicate type %q; want application/vnd.in-toto+json and https://spdx.dev/Document", env.PayloadType, st.PredicateType)
	}
	if len(st.Subject) != 1 || "sha256:"+st.Subject[0].Digest["sha256"] != digest {
		t.Errorf("the attestation's subject is %v, want the index %s", st.Subject, digest)
	}
	if !reflect.DeepEqual(st.Predicate, want) {
		t.Errorf("the attested predicate is not the release's SBOM %s", filepath.Base(sbomPath))
	}
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	return s[strings.LastIndexByte(s, '\n')+1:]
}

// checkKrew installs the plugin with krew, offline, from the release's krew
// manifest: docs/release.md's `kubectl krew install` for linux/amd64 as
// printed (kubectl finds krew as the plugin kubectl-krew), then each other
// platform with KREW_OS and KREW_ARCH, as krew itself would on that
// platform. krew checks the archive's SHA-256 against the platform the
// manifest's selector picks, so it must refuse another platform's archive.
// Then the plugin runs through kubectl, and kubectl completes it through
// the completion helper linked as docs/release.md says.
func checkKrew(t *testing.T, ctx context.Context, root, dir, version string, install, link []string) {
	bin := filepath.Dir(framework.DefaultBinaries(root).Kubectl)
	krew := filepath.Join(bin, "krew")
	if _, err := os.Stat(krew); err != nil {
		t.Fatalf("krew is not built: %v (make release-check-tools)", err)
	}
	if len(install) != 1 || len(link) != 1 {
		t.Fatalf("docs/release.md's krew blocks hold %q and %q; want one command each", install, link)
	}
	plugins := t.TempDir()
	if err := os.Symlink(krew, filepath.Join(plugins, "kubectl-krew")); err != nil {
		t.Fatal(err)
	}
	// krew lives in $HOME/.krew unless KREW_ROOT says otherwise; each
	// platform gets a home of its own. KREW_NO_UPGRADE_CHECK keeps krew
	// from asking GitHub for a newer krew.
	krewEnv := func(home string, extra ...string) []string {
		return append([]string{
			"HOME=" + home, "KREW_ROOT=", "KREW_NO_UPGRADE_CHECK=1", "V=" + version,
			"PATH=" + filepath.Join(home, ".krew", "bin") + string(os.PathListSeparator) + plugins + string(os.PathListSeparator) + bin + string(os.PathListSeparator) + os.Getenv("PATH"),
		}, extra...)
	}
	cli := func(platform string) string {
		return fileSHA256(t, filepath.Join(dir, "clusterip-policy-"+version+"-"+platform))
	}

	home := t.TempDir()
	if r := runShell(ctx, dir, krewEnv(home), install[0]); r.err != nil {
		t.Fatalf("docs/release.md's %s: %v\n%s", install[0], r.err, r)
	}
	store := filepath.Join(home, ".krew", "store", "clusterip-policy", version)
	if got := fileSHA256(t, filepath.Join(store, "kubectl-clusterip_policy")); got != cli("linux-amd64") {
		t.Errorf("krew installed a kubectl-clusterip_policy with SHA-256 %s, not the linux-amd64 CLI's %s", got, cli("linux-amd64"))
	}
	r := runShell(ctx, dir, krewEnv(home), "kubectl clusterip-policy version")
	if r.err != nil || !strings.Contains(r.stdout, " "+version+" ") {
		t.Errorf("kubectl clusterip-policy version, installed by krew: %v\n%s", r.err, r)
	}
	t.Logf("e2e: release: krew installed the plugin from clusterip-policy.yaml; kubectl clusterip-policy version: %s", strings.TrimSpace(r.stdout))

	// Completion: without the helper kubectl has nothing to run for the
	// plugin and completes nothing; linked as docs/release.md says, it
	// answers with the plugin's commands.
	complete := "kubectl __complete clusterip-policy re"
	if r := runShell(ctx, dir, krewEnv(home), complete); strings.Contains(r.stdout, "review\t") {
		t.Fatalf("%s completed review before the helper was linked: the check below proves nothing\n%s", complete, r)
	}
	if r := runShell(ctx, dir, krewEnv(home), link[0]); r.err != nil {
		t.Fatalf("docs/release.md's %s: %v\n%s", link[0], r.err, r)
	}
	r = runShell(ctx, dir, krewEnv(home), complete)
	if r.err != nil || !strings.Contains(r.stdout, "review\tevaluate Service manifests offline") || !strings.Contains(r.stdout, "\n:4\n") {
		t.Errorf("%s through kubectl_complete-clusterip_policy: %v\n%s\nwant the review command and cobra's directive :4 (no file completion)", complete, r.err, r)
	}
	t.Logf("e2e: release: %s -> %q", complete, strings.Fields(r.stdout)[0])

	for _, p := range []struct{ os, arch string }{{"linux", "arm64"}, {"darwin", "amd64"}, {"darwin", "arm64"}} {
		platform := p.os + "-" + p.arch
		home := t.TempDir()
		archive := "kubectl-clusterip_policy-" + version + "-" + platform + ".tar.gz"
		r := runShell(ctx, dir, krewEnv(home, "KREW_OS="+p.os, "KREW_ARCH="+p.arch), "kubectl krew install --manifest=clusterip-policy.yaml --archive="+archive)
		if r.err != nil {
			t.Errorf("krew install as %s: %v\n%s", platform, r.err, r)
			continue
		}
		store := filepath.Join(home, ".krew", "store", "clusterip-policy", version)
		if got := fileSHA256(t, filepath.Join(store, "kubectl-clusterip_policy")); got != cli(platform) {
			t.Errorf("krew as %s installed a kubectl-clusterip_policy with SHA-256 %s, not the %s CLI's %s", platform, got, platform, cli(platform))
		}
		if _, err := os.Stat(filepath.Join(store, "kubectl_complete-clusterip_policy")); err != nil {
			t.Errorf("krew as %s: %v", platform, err)
		}
	}
	// Another platform's archive for linux/amd64: its SHA-256 is not the
	// one the manifest gives for linux/amd64.
	r = runShell(ctx, dir, krewEnv(t.TempDir(), "KREW_OS=linux", "KREW_ARCH=amd64"), "kubectl krew install --manifest=clusterip-policy.yaml --archive=kubectl-clusterip_policy-"+version+"-darwin-amd64.tar.gz")
	if r.err == nil || !strings.Contains(r.String(), "checksum does not match") {
		t.Errorf("krew installed the darwin-amd64 archive as linux/amd64 (or failed for another reason than its checksum): %v\n%s", r.err, r)
	} else {
		t.Logf("e2e: release: krew refused another platform's archive: %s", lastLine(r.stderr))
	}
}

// checkInstallYAML runs docs/release.md's kubectl-only install commands
// against a real kube-apiserver, in the release directory, and checks that
// every object of install.yaml then exists and the Deployment runs the
// release's image by digest. The harness runs no kubelet: the two waits
// for the webhook's pods (rollout status, WebhookReachable) cannot pass
// and are left out, so the webhook configurations are applied with no
// ready pod, which the base allows (they register not armed).
func checkInstallYAML(t *testing.T, ctx context.Context, root, dir, version, digest string, cmds []string) {
	c := own(t, framework.Options{NoRBAC: true, NoRegister: true})
	bin := filepath.Dir(framework.DefaultBinaries(root).Kubectl)
	env := []string{"KUBECONFIG=" + c.AdminKubeconfig, "PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH")}
	skipped := 0
	start := time.Now()
	for _, cmd := range cmds {
		if strings.Contains(cmd, " rollout status ") || strings.Contains(cmd, "condition=WebhookReachable") {
			skipped++
			continue
		}
		r := runShell(ctx, dir, env, cmd)
		if r.err != nil {
			t.Fatalf("docs/release.md's %s: %v\n%s", cmd, r.err, r)
		}
	}
	if skipped != 2 || len(cmds) != 6 {
		t.Fatalf("docs/release.md's install.yaml block has %d commands, %d of them waits for pods; want 6 and 2 (update this test with the page)", len(cmds), skipped)
	}
	t.Logf("e2e: release: docs/release.md's kubectl apply of install.yaml (without the two waits for pods) in %s", time.Since(start).Round(time.Millisecond))

	want := 0
	for _, doc := range regexp.MustCompile(`(?m)^---$`).Split(readText(t, filepath.Join(dir, "install.yaml")), -1) {
		if regexp.MustCompile(`(?m)^kind: `).MatchString(doc) {
			want++
		}
	}
	r := runShell(ctx, dir, env, "kubectl get -f install.yaml -o name")
	if r.err != nil {
		t.Fatalf("kubectl get -f install.yaml: %v\n%s", r.err, r)
	}
	if got := strings.Count(strings.TrimSpace(r.stdout), "\n") + 1; got != want || want < 20 {
		t.Errorf("kubectl get -f install.yaml found %d objects; the file holds %d:\n%s", got, want, r)
	}
	image := runShell(ctx, dir, env, "kubectl -n clusterip-policy get deployment clusterip-policy-webhook -o jsonpath='{.spec.template.spec.containers[*].image}'")
	if image.err != nil || !strings.HasSuffix(image.stdout, ":"+version+"@"+digest) {
		t.Errorf("the applied Deployment runs %q (%v), want the release's image ...:%s@%s", image.stdout, image.err, version, digest)
	}
	t.Logf("e2e: release: all %d objects of install.yaml exist; the Deployment runs %s", want, image.stdout)
}

// checkKrewManifest reads the release's krew manifest by hand: one
// platform per plugin archive, its selector the archive's OS and
// architecture, its sha256 the archive's, its uri under one https://
// directory and ending in the archive's name. (krew validates the
// manifest's form itself when checkKrew installs from it: krew's
// indexscanner runs its validation package on every manifest it reads.)
func checkKrewManifest(t *testing.T, dir, version string) {
	var m struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Spec struct {
			Version   string `json:"version"`
			Platforms []struct {
				Selector struct {
					MatchLabels map[string]string `json:"matchLabels"`
				} `json:"selector"`
				URI    string `json:"uri"`
				SHA256 string `json:"sha256"`
				Bin    string `json:"bin"`
				Files  []struct {
					From string `json:"from"`
					To   string `json:"to"`
				} `json:"files"`
			} `json:"platforms"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal([]byte(readText(t, filepath.Join(dir, "clusterip-policy.yaml"))), &m); err != nil {
		t.Fatal(err)
	}
	if m.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || m.Kind != "Plugin" || m.Metadata.Name != "clusterip-policy" || m.Spec.Version != version {
		t.Errorf("the manifest is %s %s %s version %s; want krew.googlecontainertools.github.com/v1alpha2 Plugin clusterip-policy version %s", m.APIVersion, m.Kind, m.Metadata.Name, m.Spec.Version, version)
	}
	seen := map[string]bool{}
	base := ""
	for _, p := range m.Spec.Platforms {
		labels := p.Selector.MatchLabels
		platform := labels["os"] + "-" + labels["arch"]
		archive := "kubectl-clusterip_policy-" + version + "-" + platform + ".tar.gz"
		if len(labels) != 2 || seen[platform] {
			t.Errorf("platform selector %v: want os and arch, each pair once", labels)
			continue
		}
		seen[platform] = true
		if !strings.HasPrefix(p.URI, "https://") || !strings.HasSuffix(p.URI, "/"+archive) {
			t.Errorf("%s: uri %s, want https://.../%s", platform, p.URI, archive)
		}
		if b := strings.TrimSuffix(p.URI, archive); base == "" {
			base = b
		} else if b != base {
			t.Errorf("%s: uri %s is not under %s like the others", platform, p.URI, base)
		}
		if _, err := os.Stat(filepath.Join(dir, archive)); err != nil {
			t.Errorf("%s: %v", platform, err)
			continue
		}
		if sum := fileSHA256(t, filepath.Join(dir, archive)); p.SHA256 != sum {
			t.Errorf("%s: sha256 %s, the archive's is %s", platform, p.SHA256, sum)
		}
		var files []string
		for _, f := range p.Files {
			files = append(files, f.From+"->"+f.To)
		}
		if p.Bin != "kubectl-clusterip_policy" || strings.Join(files, " ") != "kubectl-clusterip_policy->. kubectl_complete-clusterip_policy->. LICENSE->." {
			t.Errorf("%s: bin %s, files %v; want kubectl-clusterip_policy and the three files of the archive", platform, p.Bin, files)
		}
	}
	if len(seen) != 4 || !seen["linux-amd64"] || !seen["linux-arm64"] || !seen["darwin-amd64"] || !seen["darwin-arm64"] {
		t.Errorf("the manifest's platforms are %v; want linux and darwin on amd64 and arm64", seen)
	}
}
