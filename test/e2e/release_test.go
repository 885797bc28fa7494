//go:build e2e

package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"debug/elf"
	"debug/macho"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"clusterip-policy/test/e2e/framework"
)

// TestReleaseArtefacts checks what `make release` wrote into RELEASE_DIR
// (`make release-check` runs make release, then this test; CI runs it from
// .ci/run): the checksums, the CLI binaries, the chart package against the
// image in the release, a second image build giving the same digest, and
// the documented `skopeo copy --all oci-archive:...` into Debian's
// docker-registry on loopback, then the image pulled back by its digest.
// It skips without RELEASE_DIR, like the node tests without NODE_ENV.
func TestReleaseArtefacts(t *testing.T) {
	dir := os.Getenv("RELEASE_DIR")
	if dir == "" {
		t.Skip("no release to check: run `make release-check` (RELEASE_DIR names the output of make release)")
	}
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(root, dir)
	}
	ctx := testContext(t, 12*time.Minute)
	run := func(t *testing.T, cwd, name string, args ...string) string {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(cctx, name, args...)
		cmd.Dir = cwd
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s %s: %v\n%s%s", filepath.Base(name), strings.Join(args, " "), err, out.String(), errOut.String())
		}
		return strings.TrimSpace(out.String())
	}

	// What the release must be: the VERSION file's version (a commit not
	// tagged with it builds as VERSION-dev, docs/release.md) at this commit.
	fileVersion := strings.TrimSpace(readText(t, filepath.Join(root, "VERSION")))
	commit := run(t, root, "git", "rev-parse", "--short", "HEAD")
	tars, _ := filepath.Glob(filepath.Join(dir, "clusterip-policy-v*.oci.tar"))
	if len(tars) != 1 {
		t.Fatalf("%s holds %d image archives clusterip-policy-v*.oci.tar, want 1 (run make release)", dir, len(tars))
	}
	version := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(tars[0]), "clusterip-policy-"), ".oci.tar")
	if version != fileVersion && version != fileVersion+"-dev" {
		t.Fatalf("the release is %s; the VERSION file says %s (want it, or %s-dev on an untagged commit)", version, fileVersion, fileVersion)
	}
	chartVersion := strings.TrimPrefix(version, "v")
	want := []string{
		"SHA256SUMS",
		"clusterip-policy-" + chartVersion + ".tgz",
		"clusterip-policy-" + version + "-darwin-amd64",
		"clusterip-policy-" + version + "-darwin-arm64",
		"clusterip-policy-" + version + "-linux-amd64",
		"clusterip-policy-" + version + "-linux-arm64",
		"clusterip-policy-" + version + ".oci.tar",
		"clusterip-policy-" + version + ".spdx.json",
		"clusterip-policy.yaml",
		"install-crd.yaml",
		"install.yaml",
		"kubectl-clusterip_policy-" + version + "-darwin-amd64.tar.gz",
		"kubectl-clusterip_policy-" + version + "-darwin-arm64.tar.gz",
		"kubectl-clusterip_policy-" + version + "-linux-amd64.tar.gz",
		"kubectl-clusterip_policy-" + version + "-linux-arm64.tar.gz",
	}
	sort.Strings(want)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	sort.Strings(got)
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("%s holds\n  %s\nwant\n  %s", dir, strings.Join(got, " "), strings.Join(want, " "))
	}
	digest := indexDigestInArchive(t, tars[0])
	t.Logf("e2e: release: %s (commit %s) in %s; image index %s", version, commit, dir, digest)

	// The README's install block as printed, its $V and ${V#v} expanded as
	// bash would with V=$(make -s version): the files it names must be the
	// ones this release wrote, and its chart version this chart's.
	install := readmeInstallCommands(t, root, run(t, root, "make", "-s", "version"))
	t.Run("the README's install commands name the files make release wrote and its chart version", func(t *testing.T) {
		if v := run(t, root, "make", "-s", "version"); v != version {
			t.Fatalf("make -s version prints %s; make release wrote %s", v, version)
		}
		named := 0
		for _, c := range install {
			for _, f := range strings.Fields(c) {
				f = strings.TrimPrefix(f, "oci-archive:")
				if !strings.HasPrefix(f, "_output/release/") {
					continue
				}
				named++
				if _, err := os.Stat(filepath.Join(dir, strings.TrimPrefix(f, "_output/release/"))); err != nil {
					t.Errorf("the README runs %q, but make release wrote no %s into %s", c, f, dir)
				}
			}
			if strings.HasPrefix(c, "helm install ") {
				if _, after, ok := strings.Cut(c, " --version "); !ok || strings.Fields(after)[0] != chartVersion {
					t.Errorf("the README installs %q; the chart make release wrote is version %s", c, chartVersion)
				}
			}
		}
		if named < 2 {
			t.Errorf("the README's install block names %d files of _output/release (want the image archive and the chart): %q", named, install)
		}
	})

	t.Run("each kubectl plugin archive holds its platform's CLI, as kubectl-clusterip_policy, the LICENSE and the completion helper", func(t *testing.T) {
		for _, platform := range []string{"darwin-amd64", "darwin-arm64", "linux-amd64", "linux-arm64"} {
			f, err := os.Open(filepath.Join(dir, "kubectl-clusterip_policy-"+version+"-"+platform+".tar.gz"))
			if err != nil {
				t.Fatal(err)
			}
			zr, err := gzip.NewReader(f)
			if err != nil {
				t.Fatal(err)
			}
			members := map[string]string{}
			modes := map[string]int64{}
			tr := tar.NewReader(zr)
			for {
				hdr, err := tr.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				h := sha256.New()
				if _, err := io.Copy(h, tr); err != nil {
					t.Fatal(err)
				}
				members[hdr.Name] = hex.EncodeToString(h.Sum(nil))
				modes[hdr.Name] = hdr.Mode
			}
			f.Close()
			cli := fileSHA256(t, filepath.Join(dir, "clusterip-policy-"+version+"-"+platform))
			license := fileSHA256(t, filepath.Join(root, "LICENSE"))
			complete := fileSHA256(t, filepath.Join(root, "hack", "kubectl_complete-clusterip_policy"))
			if len(members) != 3 || members["kubectl-clusterip_policy"] != cli || members["LICENSE"] != license || members["kubectl_complete-clusterip_policy"] != complete {
				t.Errorf("kubectl-clusterip_policy-%s-%s.tar.gz holds %v; want kubectl-clusterip_policy (sha256 %s, the CLI's), LICENSE (%s) and kubectl_complete-clusterip_policy (%s)", version, platform, members, cli, license, complete)
			}
			for name, mode := range modes {
				want := int64(0o755)
				if name == "LICENSE" {
					want = 0o644
				}
				if mode != want {
					t.Errorf("kubectl-clusterip_policy-%s-%s.tar.gz: %s has mode %o, want 0755 (0644 for LICENSE)", version, platform, name, mode)
				}
			}
		}
	})

	t.Run("SHA256SUMS lists every other file, and each one matches", func(t *testing.T) {
		sums := readText(t, filepath.Join(dir, "SHA256SUMS"))
		var listed []string
		for _, line := range strings.Split(strings.TrimSpace(sums), "\n") {
			_, name, ok := strings.Cut(line, "  ")
			if !ok {
				t.Fatalf("SHA256SUMS line %q is not `HASH  NAME`", line)
			}
			listed = append(listed, name)
		}
		sort.Strings(listed)
		if strings.Join(listed, " ") != strings.Join(want[1:], " ") {
			t.Errorf("SHA256SUMS lists %v, want %v", listed, want[1:])
		}
		out := run(t, dir, "sha256sum", "-c", "--strict", "SHA256SUMS")
		if strings.Count(out, ": OK") != len(want)-1 {
			t.Errorf("sha256sum -c SHA256SUMS:\n%s", out)
		}
	})

	t.Run("the linux/amd64 CLI prints the version and the commit; each binary is for its platform", func(t *testing.T) {
		out := run(t, dir, filepath.Join(dir, "clusterip-policy-"+version+"-linux-amd64"), "version")
		// clusterip-policy webhook v0.1.0-dev (commit 1a2b3c4, go1.26.8, linux/amd64)
		re := regexp.MustCompile(`^clusterip-policy webhook ` + regexp.QuoteMeta(version) + ` \(commit ` + regexp.QuoteMeta(commit) + `(-dirty)?, go[0-9.]+, linux/amd64\)$`)
		if !re.MatchString(out) {
			t.Errorf("clusterip-policy-%s-linux-amd64 version printed %q, want %s", version, out, re)
		}
		t.Logf("e2e: release: linux-amd64 version: %s", out)
		for arch, m := range map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64} {
			f, err := elf.Open(filepath.Join(dir, "clusterip-policy-"+version+"-linux-"+arch))
			if err != nil {
				t.Errorf("linux-%s: %v", arch, err)
				continue
			}
			if f.Machine != m || f.Type != elf.ET_EXEC {
				t.Errorf("linux-%s is %s %s, want %s ET_EXEC (static)", arch, f.Machine, f.Type, m)
			}
			f.Close()
		}
		for arch, c := range map[string]macho.Cpu{"amd64": macho.CpuAmd64, "arm64": macho.CpuArm64} {
			f, err := macho.Open(filepath.Join(dir, "clusterip-policy-"+version+"-darwin-"+arch))
			if err != nil {
				t.Errorf("darwin-%s: %v", arch, err)
				continue
			}
			if f.Cpu != c {
				t.Errorf("darwin-%s is for %s, want %s", arch, f.Cpu, c)
			}
			f.Close()
		}
	})

	t.Run("the chart's version and appVersion are the release's; its values pin the image index by digest", func(t *testing.T) {
		helm := filepath.Join(filepath.Dir(framework.DefaultBinaries(root).Kubectl), "helm")
		pkg := filepath.Join(dir, "clusterip-policy-"+chartVersion+".tgz")
		meta := run(t, root, helm, "show", "chart", pkg)
		for _, line := range []string{"version: " + chartVersion, "appVersion: " + version} {
			if !containsLine(meta, line) {
				t.Errorf("helm show chart: no line %q in\n%s", line, meta)
			}
		}
		values := run(t, root, helm, "show", "values", pkg)
		i := strings.Index(values, "\nimage:")
		if i < 0 {
			t.Fatalf("helm show values has no image block:\n%.400s", values)
		}
		image := values[i:]
		for _, line := range []string{"  tag: " + version, "  digest: " + digest} {
			if !containsLine(image, line) {
				t.Errorf("helm show values: the image block has no line %q:\n%.400s", line, image)
			}
		}
	})

	t.Run("the SBOM names the image index and the linux binaries by their hashes", func(t *testing.T) {
		sbom := readText(t, filepath.Join(dir, "clusterip-policy-"+version+".spdx.json"))
		var doc map[string]any
		if err := json.Unmarshal([]byte(sbom), &doc); err != nil {
			t.Fatalf("the SBOM is not JSON: %v", err)
		}
		if doc["spdxVersion"] != "SPDX-2.3" {
			t.Errorf("spdxVersion %v, want SPDX-2.3", doc["spdxVersion"])
		}
		if !strings.Contains(sbom, strings.TrimPrefix(digest, "sha256:")) {
			t.Errorf("the SBOM does not name the image index %s", digest)
		}
		for _, arch := range []string{"amd64", "arm64"} {
			sum := fileSHA256(t, filepath.Join(dir, "clusterip-policy-"+version+"-linux-"+arch))
			if !strings.Contains(sbom, sum) {
				t.Errorf("the SBOM does not name linux-%s's SHA-256 %s (the linux CLI is the binary in the image)", arch, sum)
			}
		}
	})

	t.Run("a second image build of this commit gives the same digest", func(t *testing.T) {
		// hack/image.sh from scratch into other directories: the Go builds,
		// the layers, the index. RELEASE_DIGEST_ONCE=1 skips this (the time
		// is in RELIABILITY.md's release section).
		if os.Getenv("RELEASE_DIGEST_ONCE") != "" {
			t.Skip("RELEASE_DIGEST_ONCE is set")
		}
		tmp := t.TempDir()
		start := time.Now()
		cmd := exec.CommandContext(ctx, filepath.Join(root, "hack", "image.sh"))
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "VERSION="+version, "COMMIT="+versionCommit(t, dir, version),
			"OUT="+filepath.Join(tmp, "image"), "BIN_OUT="+filepath.Join(tmp, "bin"))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("hack/image.sh again: %v\n%s", err, out)
		}
		again := indexDigestInArchive(t, filepath.Join(tmp, "image", "clusterip-policy.oci.tar"))
		if again != digest {
			t.Errorf("the second build's index is %s, the release's %s", again, digest)
		}
		a, b := fileSHA256(t, filepath.Join(tmp, "image", "clusterip-policy.oci.tar")), fileSHA256(t, tars[0])
		if a != b {
			t.Errorf("the second build's archive has SHA-256 %s, the release's %s", a, b)
		}
		t.Logf("e2e: release: a second hack/image.sh gave index %s and a byte-identical archive in %s", again, time.Since(start).Round(time.Second))
	})

	t.Run("skopeo copy --all oci-archive:... docker://... as documented, then pulled back by digest", func(t *testing.T) {
		skopeo, err := exec.LookPath("skopeo")
		if err != nil {
			t.Fatalf("skopeo is not installed (Debian package skopeo; .ci/run installs it): %v", err)
		}
		rdir := t.TempDir()
		reg := startRegistry(t, ctx, rdir)
		ref := reg.Addr() + "/clusterip-policy"
		// The README's command, with the registry on loopback; it serves
		// plain HTTP, which skopeo uses only with --dest-tls-verify=false.
		args := readmeCommand(t, install, "skopeo copy ")
		for i, a := range args {
			if after, ok := strings.CutPrefix(a, "docker://registry.example.com/clusterip-policy:"); ok {
				args[i] = "docker://" + ref + ":" + after
			}
		}
		args = append([]string{args[0], "--dest-tls-verify=false"}, args[1:]...)
		start := time.Now()
		run(t, root, skopeo, args...)
		served, err := reg.ManifestDigest(ctx, "clusterip-policy", version)
		if err != nil {
			t.Fatal(err)
		}
		if served != digest {
			t.Fatalf("after skopeo copy the registry serves %s:%s as %s; the archive's index is %s", ref, version, served, digest)
		}
		t.Logf("e2e: release: skopeo copy --all oci-archive:%s docker://%s:%s in %s; the registry serves %s", filepath.Base(tars[0]), ref, version, time.Since(start).Round(time.Millisecond), served)

		raw := run(t, root, skopeo, "inspect", "--raw", "--tls-verify=false", "docker://"+ref+"@"+digest)
		sum := sha256.Sum256([]byte(raw))
		if "sha256:"+hex.EncodeToString(sum[:]) != digest {
			t.Errorf("skopeo inspect --raw %s@%s returned a manifest whose SHA-256 is %x", ref, digest, sum)
		}
		var idx struct {
			MediaType string `json:"mediaType"`
			Manifests []struct {
				Platform struct{ OS, Architecture string } `json:"platform"`
			} `json:"manifests"`
		}
		if err := json.Unmarshal([]byte(raw), &idx); err != nil {
			t.Fatal(err)
		}
		var platforms []string
		for _, m := range idx.Manifests {
			platforms = append(platforms, m.Platform.OS+"/"+m.Platform.Architecture)
		}
		if idx.MediaType != "application/vnd.oci.image.index.v1+json" || strings.Join(platforms, " ") != "linux/amd64 linux/arm64" {
			t.Errorf("by digest: media type %s, platforms %v; want an OCI index of linux/amd64 linux/arm64", idx.MediaType, platforms)
		}
		pulled := filepath.Join(t.TempDir(), "pulled")
		run(t, root, skopeo, "copy", "--all", "--src-tls-verify=false", "docker://"+ref+"@"+digest, "oci:"+pulled+":"+version)
		back := run(t, root, filepath.Join(root, "_output", "tools", "imagebuild"), "digest", "--layout", pulled)
		if back != digest {
			t.Errorf("pulled back by digest, the layout's index is %s, want %s", back, digest)
		}
		t.Logf("e2e: release: skopeo inspect --raw and skopeo copy --all by digest %s: the same index, %s", digest, strings.Join(platforms, " "))
	})

	// Issue 40, "a release you can verify" (release_verify_test.go).
	t.Run("the krew manifest names each archive by its SHA-256 and platform", func(t *testing.T) {
		checkKrewManifest(t, dir, version)
	})
	t.Run("image and chart signed and the SBOM attested with docs/release.md's commands; verify refuses another key, image or chart", func(t *testing.T) {
		checkSigning(t, ctx, root, dir, version, digest,
			releaseDocBlock(t, root, "V=$(make -s version)"), releaseDocBlock(t, root, "cosign verify "))
	})
	t.Run("krew installs the plugin from the krew manifest on every platform, refuses a wrong archive, and kubectl completes it", func(t *testing.T) {
		checkKrew(t, ctx, root, dir, version, releaseDocBlock(t, root, "kubectl krew install "), releaseDocBlock(t, root, "ln -s ~/.krew/"))
	})
	t.Run("install.yaml applied to a real kube-apiserver with docs/release.md's commands", func(t *testing.T) {
		checkInstallYAML(t, ctx, root, dir, version, digest, releaseDocBlock(t, root, "kubectl apply --server-side -f install-crd.yaml"))
	})
}

// indexDigestInArchive reads index.json out of an OCI layout tar (as
// `make image` and `make release` write it): the digest of its one entry,
// the multi-arch image index.
func indexDigestInArchive(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			t.Fatalf("%s has no index.json: not an OCI layout", path)
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if strings.TrimPrefix(h.Name, "./") != "index.json" {
			continue
		}
		var idx struct {
			Manifests []struct {
				MediaType string `json:"mediaType"`
				Digest    string `json:"digest"`
			} `json:"manifests"`
		}
		if err := json.NewDecoder(io.LimitReader(tr, 1<<20)).Decode(&idx); err != nil {
			t.Fatalf("%s index.json: %v", path, err)
		}
		if len(idx.Manifests) != 1 || idx.Manifests[0].MediaType != "application/vnd.oci.image.index.v1+json" {
			t.Fatalf("%s index.json has %d entries, want one image index", path, len(idx.Manifests))
		}
		return idx.Manifests[0].Digest
	}
}

// versionCommit is the commit the release's linux/amd64 CLI says it was
// built from (with -dirty if it was), for a second build stamped the same.
func versionCommit(t *testing.T, dir, version string) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(dir, "clusterip-policy-"+version+"-linux-amd64"), "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(out), "(commit ")
	commit, _, ok2 := strings.Cut(rest, ",")
	if !ok || !ok2 {
		t.Fatalf("version printed %q: no commit", out)
	}
	return commit
}

func fileSHA256(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func readText(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func containsLine(text, line string) bool {
	for _, l := range strings.Split(text, "\n") {
		if strings.TrimRight(l, " ") == line {
			return true
		}
	}
	return false
}

// readmeInstallCommands returns the commands of the README's install block
// (the sh block that runs make release), with $V and ${V#v} replaced by
// version as bash expands them after V=$(make -s version).
func readmeInstallCommands(t *testing.T, root, version string) []string {
	t.Helper()
	var out []string
	for _, c := range readmeInstallBlock(t, root) {
		c = strings.ReplaceAll(c, "${V#v}", strings.TrimPrefix(version, "v"))
		out = append(out, strings.ReplaceAll(c, "$V", version))
	}
	return out
}

// readmeCommand returns the arguments of the one command in cmds starting
// with prefix (the program name dropped).
func readmeCommand(t *testing.T, cmds []string, prefix string) []string {
	t.Helper()
	for _, c := range cmds {
		if strings.HasPrefix(c, prefix) {
			return strings.Fields(c)[1:]
		}
	}
	t.Fatalf("the README's install block has no command starting with %q: %q", prefix, cmds)
	return nil
}
