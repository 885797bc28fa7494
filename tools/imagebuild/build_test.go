package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// goBuild builds the pause program for one platform, a small static Go
// binary with build information, as the real image's binary has.
func goBuild(t *testing.T, goos, goarch, cgo string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "pause-"+goarch)
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, "./pause")
	cmd.Env = append(os.Environ(), "GOOS="+goos, "GOARCH="+goarch, "CGO_ENABLED="+cgo)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	return out
}

func testOptions(t *testing.T, amd64, arm64 string) buildOptions {
	return buildOptions{
		out:        filepath.Join(t.TempDir(), "layout"),
		name:       "test",
		tag:        "v0.0.1",
		entrypoint: "/pause",
		user:       "65532:65532",
		epoch:      time.Unix(1700000000, 0).UTC(),
		binaries: []platformBinary{
			{supportedPlatforms["linux/amd64"], amd64},
			{supportedPlatforms["linux/arm64"], arm64},
		},
		labels: map[string]string{"org.opencontainers.image.version": "v0.0.1"},
	}
}

func TestTwoBuildsGiveOneDigest(t *testing.T) {
	amd64, arm64 := goBuild(t, "linux", "amd64", "0"), goBuild(t, "linux", "arm64", "0")
	o := testOptions(t, amd64, arm64)
	o.tarOut = filepath.Join(t.TempDir(), "a.tar")
	d1, err := build(o)
	if err != nil {
		t.Fatal(err)
	}
	tar1, _ := os.ReadFile(o.tarOut)
	time.Sleep(1100 * time.Millisecond) // a wall-clock time leaking in would now differ
	o2 := testOptions(t, amd64, arm64)
	o2.tarOut = filepath.Join(t.TempDir(), "b.tar")
	d2, err := build(o2)
	if err != nil {
		t.Fatal(err)
	}
	tar2, _ := os.ReadFile(o2.tarOut)
	if d1 != d2 {
		t.Errorf("two builds of the same inputs: %s and %s", d1, d2)
	}
	if !bytes.Equal(tar1, tar2) {
		t.Errorf("the layout tars differ (%d and %d bytes)", len(tar1), len(tar2))
	}
	if _, d, err := indexOf(o.out); err != nil || d != d1 {
		t.Errorf("indexOf(layout) = %s, %v; want %s", d, err, d1)
	}

	// The inputs do matter: another epoch or another binary gives another digest.
	o3 := testOptions(t, amd64, arm64)
	o3.epoch = o3.epoch.Add(time.Second)
	if d3, err := build(o3); err != nil || d3 == d1 {
		t.Errorf("another epoch: digest %s (err %v), want one different from %s", d3, err, d1)
	}
}

func TestImageContents(t *testing.T) {
	amd64, arm64 := goBuild(t, "linux", "amd64", "0"), goBuild(t, "linux", "arm64", "0")
	o := testOptions(t, amd64, arm64)
	lic := filepath.Join(t.TempDir(), "LICENSE")
	if err := os.WriteFile(lic, []byte("license text\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o.files = []imageFile{{dest: "/licenses/LICENSE", src: lic}}
	if _, err := build(o); err != nil {
		t.Fatal(err)
	}
	idx, _, err := indexOf(o.out)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := idx.IndexManifest()
	if len(m.Manifests) != 2 {
		t.Fatalf("index has %d manifests, want 2", len(m.Manifests))
	}
	// skopeo 1.9 rewrites an index whose entries carry artifactType, which
	// changes its digest (withoutArtifactTypes).
	raw, _ := idx.RawManifest()
	if bytes.Contains(raw, []byte("artifactType")) {
		t.Errorf("the index names an artifactType: %s", raw)
	}
	if d, _ := idx.Digest(); d.String() != fmt.Sprintf("sha256:%x", sha256.Sum256(raw)) {
		t.Errorf("the index's digest %s is not the SHA-256 of its bytes", d)
	}
	for _, d := range m.Manifests {
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, _ := img.ConfigFile()
		if cf.Architecture != d.Platform.Architecture || cf.OS != "linux" {
			t.Errorf("%s: config says %s/%s", d.Platform.Architecture, cf.OS, cf.Architecture)
		}
		if cf.Config.User != "65532:65532" || strings.Join(cf.Config.Entrypoint, " ") != "/pause" {
			t.Errorf("%s: user %q entrypoint %q", d.Platform.Architecture, cf.Config.User, cf.Config.Entrypoint)
		}
		if !cf.Created.Equal(o.epoch) {
			t.Errorf("%s: created %s, want %s", d.Platform.Architecture, cf.Created.Time, o.epoch)
		}
		layers, _ := img.Layers()
		rc, _ := layers[0].Uncompressed()
		tr := tar.NewReader(rc)
		var names []string
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			names = append(names, h.Name)
			if !h.ModTime.Equal(o.epoch) || h.Uid != 0 || h.Gid != 0 {
				t.Errorf("%s: entry %s: mtime %s uid %d gid %d", d.Platform.Architecture, h.Name, h.ModTime, h.Uid, h.Gid)
			}
			if h.Name == "pause" && h.Mode != 0o755 || h.Name == "licenses/LICENSE" && h.Mode != 0o444 {
				t.Errorf("%s: %s mode %o", d.Platform.Architecture, h.Name, h.Mode)
			}
		}
		rc.Close()
		want := "etc/ etc/group etc/passwd licenses/ licenses/LICENSE pause tmp/"
		if got := strings.Join(names, " "); got != want {
			t.Errorf("%s: entries %q, want %q", d.Platform.Architecture, got, want)
		}
	}

	// extract gives back the very binary that went in.
	out := filepath.Join(t.TempDir(), "x")
	if err := extractCmd([]string{"--layout", o.out, "--platform", "linux/arm64", "--path", "/pause", "--out", out}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(arm64)
	b, _ := os.ReadFile(out)
	if !bytes.Equal(a, b) {
		t.Error("extract returned other bytes than the arm64 binary")
	}
}

func TestSBOMListsTheModulesCompiledIn(t *testing.T) {
	amd64, arm64 := goBuild(t, "linux", "amd64", "0"), goBuild(t, "linux", "arm64", "0")
	o := testOptions(t, amd64, arm64)
	d, err := build(o)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := sbom(o, d)
	if err != nil {
		t.Fatal(err)
	}
	var doc spdxDoc
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.SPDXVersion != "SPDX-2.3" || !strings.HasSuffix(doc.DocumentNamespace, d.Hex) {
		t.Errorf("version %q namespace %q", doc.SPDXVersion, doc.DocumentNamespace)
	}
	ids := map[string]bool{}
	for _, p := range doc.Packages {
		ids[p.SPDXID] = true
	}
	var binaries, stdlib int
	for _, r := range doc.Relationships {
		if !ids[r.Related] && r.Related != "SPDXRef-DOCUMENT" {
			t.Errorf("relationship %v names a package not in the document", r)
		}
		if r.Type == "CONTAINS" {
			binaries++
		}
		if r.Type == "DEPENDS_ON" && strings.Contains(r.Related, "stdlib") {
			stdlib++
		}
	}
	if binaries != 2 || stdlib != 2 {
		t.Errorf("%d binaries and %d stdlib dependencies, want 2 and 2", binaries, stdlib)
	}
	// pause imports nothing outside the standard library; a module listed
	// here would be invented.
	for _, p := range doc.Packages {
		if p.PrimaryPurpose == "LIBRARY" && p.Name != "stdlib" {
			t.Errorf("module %s listed, but pause uses only the standard library", p.Name)
		}
	}
}

func TestRefusals(t *testing.T) {
	amd64 := goBuild(t, "linux", "amd64", "0")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no epoch", []string{"--out", "x", "--name", "n", "--tag", "t", "--entrypoint", "/e", "--binary", "linux/amd64=" + amd64, "--epoch", ""}, "no creation time"},
		{"root user", []string{"--out", "x", "--name", "n", "--tag", "t", "--entrypoint", "/e", "--binary", "linux/amd64=" + amd64, "--epoch", "1", "--user", "0:0"}, "non-root"},
		{"user by name", []string{"--out", "x", "--name", "n", "--tag", "t", "--entrypoint", "/e", "--binary", "linux/amd64=" + amd64, "--epoch", "1", "--user", "nonroot"}, "numeric"},
		{"unknown platform", []string{"--out", "x", "--name", "n", "--tag", "t", "--entrypoint", "/e", "--binary", "linux/s390x=" + amd64, "--epoch", "1"}, `platform "linux/s390x"`},
		{"wrong architecture", []string{"--out", filepath.Join(t.TempDir(), "l"), "--name", "n", "--tag", "t", "--entrypoint", "/e", "--binary", "linux/arm64=" + amd64, "--epoch", "1"}, "built for linux/amd64, given as linux/arm64"},
		{"relative entrypoint", []string{"--out", "x", "--name", "n", "--tag", "t", "--entrypoint", "e", "--binary", "linux/amd64=" + amd64, "--epoch", "1"}, "clean absolute path"},
		{"not a binary", []string{"--out", filepath.Join(t.TempDir(), "l"), "--name", "n", "--tag", "t", "--entrypoint", "/e", "--binary", "linux/amd64=build_test.go", "--epoch", "1"}, "not a Go binary"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := buildCmd(tc.args, io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}
