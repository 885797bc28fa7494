package main

import (
	"archive/tar"
	"bytes"
	"debug/buildinfo"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// buildOptions are the inputs of one image index; equal options give an
// equal digest.
type buildOptions struct {
	out, tarOut, sbomOut string
	name, tag            string
	entrypoint           string
	user                 string
	epoch                time.Time
	binaries             []platformBinary
	files                []imageFile
	labels               map[string]string
}

type platformBinary struct {
	platform v1.Platform
	file     string
}

type imageFile struct {
	dest, src string
}

// supportedPlatforms are the ones the release builds; anything else is a
// typo more likely than a wish (the Go toolchain builds many more).
var supportedPlatforms = map[string]v1.Platform{
	"linux/amd64": {OS: "linux", Architecture: "amd64"},
	"linux/arm64": {OS: "linux", Architecture: "arm64", Variant: "v8"},
}

func buildCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("build", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o buildOptions
	var bins, files, labels multiFlag
	var epoch string
	fs.StringVar(&o.out, "out", "", "OCI layout directory to write (replaced if it exists)")
	fs.StringVar(&o.tarOut, "tar", "", "also write the layout as this tar file (byte-for-byte reproducible)")
	fs.StringVar(&o.sbomOut, "sbom", "", "write an SPDX 2.3 JSON SBOM of the binaries' Go modules to this file")
	fs.StringVar(&o.name, "name", "", "image name, for the SBOM and the layout's ref.name annotation (e.g. clusterip-policy)")
	fs.StringVar(&o.tag, "tag", "", "tag recorded in the layout's index.json (org.opencontainers.image.ref.name)")
	fs.StringVar(&o.entrypoint, "entrypoint", "", "absolute path in the image of the binary to run; each --binary is put there")
	fs.StringVar(&o.user, "user", "65532:65532", "numeric UID:GID the container runs as (numeric so runAsNonRoot can check it)")
	fs.StringVar(&epoch, "epoch", os.Getenv("SOURCE_DATE_EPOCH"), "creation time, seconds since 1970 (default $SOURCE_DATE_EPOCH; use the commit's time)")
	fs.Var(&bins, "binary", "OS/ARCH=FILE: the static binary for one platform (repeat; linux/amd64, linux/arm64)")
	fs.Var(&files, "file", "/PATH=FILE: an extra read-only file in the image (repeat)")
	fs.Var(&labels, "label", "KEY=VALUE: an image label, also an index annotation (repeat)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q: every input is a flag", fs.Arg(0))
	}
	if o.out == "" || o.name == "" || o.tag == "" || o.entrypoint == "" {
		return fmt.Errorf("--out, --name, --tag and --entrypoint are required")
	}
	if !path.IsAbs(o.entrypoint) || path.Clean(o.entrypoint) != o.entrypoint || o.entrypoint == "/" {
		return fmt.Errorf("--entrypoint %q: want a clean absolute path such as /clusterip-policy", o.entrypoint)
	}
	if err := checkUser(o.user); err != nil {
		return err
	}
	if epoch == "" {
		return fmt.Errorf("no creation time: set --epoch or SOURCE_DATE_EPOCH (e.g. $(git log -1 --format=%%ct)), so two builds of one commit are identical")
	}
	sec, err := strconv.ParseInt(epoch, 10, 64)
	if err != nil || sec < 0 {
		return fmt.Errorf("--epoch %q: want seconds since 1970, e.g. $(git log -1 --format=%%ct)", epoch)
	}
	o.epoch = time.Unix(sec, 0).UTC()
	seen := map[string]bool{}
	for _, b := range bins {
		k, v, err := splitPair("binary", b)
		if err != nil {
			return err
		}
		p, ok := supportedPlatforms[k]
		if !ok {
			return fmt.Errorf("--binary %q: platform %q is not built; use linux/amd64 or linux/arm64", b, k)
		}
		if seen[k] {
			return fmt.Errorf("--binary %q: platform %q given twice", b, k)
		}
		seen[k] = true
		o.binaries = append(o.binaries, platformBinary{platform: p, file: v})
	}
	if len(o.binaries) == 0 {
		return fmt.Errorf("no --binary given: give at least one OS/ARCH=FILE")
	}
	for _, f := range files {
		k, v, err := splitPair("file", f)
		if err != nil {
			return err
		}
		if !path.IsAbs(k) || path.Clean(k) != k || k == o.entrypoint {
			return fmt.Errorf("--file %q: want a clean absolute path other than the entrypoint", f)
		}
		o.files = append(o.files, imageFile{dest: k, src: v})
	}
	o.labels = map[string]string{}
	for _, l := range labels {
		k, v, err := splitPair("label", l)
		if err != nil {
			return err
		}
		o.labels[k] = v
	}

	digest, err := build(o)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s:%s %s\n", o.name, o.tag, digest)
	if o.sbomOut != "" {
		doc, err := sbom(o, digest)
		if err != nil {
			return err
		}
		if err := os.WriteFile(o.sbomOut, doc, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func checkUser(u string) error {
	uid, gid, ok := strings.Cut(u, ":")
	for _, s := range []string{uid, gid} {
		if n, err := strconv.ParseUint(s, 10, 32); !ok || err != nil || n == 0 {
			return fmt.Errorf("--user %q: want a numeric non-root UID:GID such as 65532:65532", u)
		}
	}
	return nil
}

// build writes the layout and returns the index's digest.
func build(o buildOptions) (v1.Hash, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, b := range o.binaries {
		img, err := platformImage(o, b)
		if err != nil {
			return v1.Hash{}, fmt.Errorf("%s/%s: %w", b.platform.OS, b.platform.Architecture, err)
		}
		p := b.platform
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &p}})
	}
	if len(o.labels) > 0 {
		idx = mutate.Annotations(idx, o.labels).(v1.ImageIndex)
	}
	idx, err := withoutArtifactTypes(idx)
	if err != nil {
		return v1.Hash{}, err
	}
	digest, err := idx.Digest()
	if err != nil {
		return v1.Hash{}, err
	}
	if err := os.RemoveAll(o.out); err != nil {
		return v1.Hash{}, err
	}
	lp, err := layout.Write(o.out, empty.Index)
	if err != nil {
		return v1.Hash{}, err
	}
	if err := lp.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": o.tag,
	})); err != nil {
		return v1.Hash{}, err
	}
	if o.tarOut != "" {
		if err := tarDir(o.out, o.tarOut, o.epoch); err != nil {
			return v1.Hash{}, err
		}
	}
	return digest, nil
}

// withoutArtifactTypes returns idx with no artifactType on its entries.
// go-containerregistry copies each image's config media type there, which
// OCI image-spec 1.1 allows for artifacts but an image does not need; and
// skopeo 1.9 (Debian 12) does not know the field: `skopeo copy --all`
// rewrites such an index without it, so the registry would serve another
// index digest than the one the chart's values pin, and the pods could not
// pull it. Without the field skopeo copies the index byte for byte.
func withoutArtifactTypes(idx v1.ImageIndex) (v1.ImageIndex, error) {
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	m = m.DeepCopy()
	for i := range m.Manifests {
		m.Manifests[i].ArtifactType = ""
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	digest, _, err := v1.SHA256(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	return &plainIndex{base: idx, manifest: m, raw: raw, digest: digest}, nil
}

// plainIndex serves its own manifest and delegates the images to the index
// it was made from (the entries' digests are unchanged).
type plainIndex struct {
	base     v1.ImageIndex
	manifest *v1.IndexManifest
	raw      []byte
	digest   v1.Hash
}

func (p *plainIndex) IndexManifest() (*v1.IndexManifest, error) { return p.manifest.DeepCopy(), nil }
func (p *plainIndex) RawManifest() ([]byte, error)              { return p.raw, nil }
func (p *plainIndex) Digest() (v1.Hash, error)                  { return p.digest, nil }
func (p *plainIndex) Size() (int64, error)                      { return int64(len(p.raw)), nil }
func (p *plainIndex) MediaType() (types.MediaType, error)       { return p.base.MediaType() }
func (p *plainIndex) Image(h v1.Hash) (v1.Image, error)         { return p.base.Image(h) }
func (p *plainIndex) ImageIndex(h v1.Hash) (v1.ImageIndex, error) {
	return p.base.ImageIndex(h)
}

var _ v1.ImageIndex = &plainIndex{}

func platformImage(o buildOptions, b platformBinary) (v1.Image, error) {
	if err := checkStaticBinary(b.file, b.platform); err != nil {
		return nil, err
	}
	layerTar, err := rootfs(o, b.file)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.ConfigFile(img, &v1.ConfigFile{
		Architecture: b.platform.Architecture,
		OS:           b.platform.OS,
		Variant:      b.platform.Variant,
		Config: v1.Config{
			User:       o.user,
			Entrypoint: []string{o.entrypoint},
			WorkingDir: "/",
			Labels:     o.labels,
		},
	})
	if err != nil {
		return nil, err
	}
	img, err = mutate.Append(img, mutate.Addendum{
		Layer: layer,
		History: v1.History{
			Created:   v1.Time{Time: o.epoch},
			CreatedBy: "imagebuild: " + o.entrypoint + " and /etc/{passwd,group}",
			Comment:   "clusterip-policy tools/imagebuild",
		},
	})
	if err != nil {
		return nil, err
	}
	return mutate.CreatedAt(img, v1.Time{Time: o.epoch})
}

// checkStaticBinary refuses a binary for another platform, or one that
// needs a dynamic loader: the image has no libc, so such a binary would fail
// at start with a bare "no such file or directory".
func checkStaticBinary(file string, p v1.Platform) error {
	bi, err := buildinfo.ReadFile(file)
	if err != nil {
		return fmt.Errorf("%s: not a Go binary with build information: %w", file, err)
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	if settings["GOOS"] != p.OS || settings["GOARCH"] != p.Architecture {
		return fmt.Errorf("%s: built for %s/%s, given as %s/%s", file, settings["GOOS"], settings["GOARCH"], p.OS, p.Architecture)
	}
	if settings["CGO_ENABLED"] != "0" {
		return fmt.Errorf("%s: built with CGO_ENABLED=%q; the image has no libc, build with CGO_ENABLED=0", file, settings["CGO_ENABLED"])
	}
	return nil
}

// passwd and group name the image's users for tools that resolve names;
// the runtime itself only needs the numeric --user.
func passwd(uid string) []byte {
	return []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:" + uid + ":" + uid + ":nonroot:/home/nonroot:/sbin/nologin\n")
}

func group(gid string) []byte {
	return []byte("root:x:0:\nnonroot:x:" + gid + ":\n")
}

// rootfs is the one layer: directories, the entrypoint (0755) and the
// files (0444), owned by root so the running user cannot change them,
// sorted, all with the epoch as their time.
func rootfs(o buildOptions, binary string) ([]byte, error) {
	uid, gid, _ := strings.Cut(o.user, ":")
	type entry struct {
		data []byte
		mode int64
	}
	entries := map[string]entry{
		"etc/passwd": {passwd(uid), 0o444},
		"etc/group":  {group(gid), 0o444},
	}
	bin, err := os.ReadFile(binary)
	if err != nil {
		return nil, err
	}
	entries[strings.TrimPrefix(o.entrypoint, "/")] = entry{bin, 0o755}
	for _, f := range o.files {
		data, err := os.ReadFile(f.src)
		if err != nil {
			return nil, fmt.Errorf("--file %s=%s: %w", f.dest, f.src, err)
		}
		entries[strings.TrimPrefix(f.dest, "/")] = entry{data, 0o444}
	}
	// Directories: every parent of a file, plus /tmp (1777) for libraries
	// that expect one; a read-only root keeps it unwritable unless the pod
	// mounts an emptyDir there.
	dirs := map[string]int64{"tmp": 0o1777}
	for name := range entries {
		for d := path.Dir(name); d != "."; d = path.Dir(d) {
			if _, ok := dirs[d]; !ok {
				dirs[d] = 0o755
			}
		}
	}
	var names []string
	for n := range entries {
		names = append(names, n)
	}
	for d := range dirs {
		names = append(names, d+"/")
	}
	sort.Strings(names)

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		h := &tar.Header{Name: n, ModTime: o.epoch, Uid: 0, Gid: 0, Format: tar.FormatPAX}
		if strings.HasSuffix(n, "/") {
			h.Typeflag = tar.TypeDir
			h.Mode = dirs[strings.TrimSuffix(n, "/")]
		} else {
			e := entries[n]
			h.Typeflag = tar.TypeReg
			h.Mode = e.mode
			h.Size = int64(len(e.data))
		}
		// PAX would record access and change times if set; keep them zero.
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(entries[n].data); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// tarDir writes dir as a tar with sorted entries, fixed times and owners,
// so the file is as reproducible as the digest.
func tarDir(dir, out string, epoch time.Time) error {
	var files []string
	if err := walkSorted(dir, "", &files); err != nil {
		return err
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	for _, rel := range files {
		full := dir + "/" + strings.TrimSuffix(rel, "/")
		h := &tar.Header{Name: rel, ModTime: epoch, Format: tar.FormatPAX}
		if strings.HasSuffix(rel, "/") {
			h.Typeflag, h.Mode = tar.TypeDir, 0o755
			if err := tw.WriteHeader(h); err != nil {
				f.Close()
				return err
			}
			continue
		}
		data, err := os.ReadFile(full)
		if err != nil {
			f.Close()
			return err
		}
		h.Typeflag, h.Mode, h.Size = tar.TypeReg, 0o644, int64(len(data))
		if err := tw.WriteHeader(h); err != nil {
			f.Close()
			return err
		}
		if _, err := tw.Write(data); err != nil {
			f.Close()
			return err
		}
	}
	if err := tw.Close(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func walkSorted(root, rel string, out *[]string) error {
	ents, err := os.ReadDir(path.Join(root, rel))
	if err != nil {
		return err
	}
	sort.Slice(ents, func(i, j int) bool { return ents[i].Name() < ents[j].Name() })
	for _, e := range ents {
		p := path.Join(rel, e.Name())
		if e.IsDir() {
			*out = append(*out, p+"/")
			if err := walkSorted(root, p, out); err != nil {
				return err
			}
			continue
		}
		if !e.Type().IsRegular() {
			return fmt.Errorf("%s: not a regular file or directory", path.Join(root, p))
		}
		*out = append(*out, p)
	}
	return nil
}

// indexOf reads the one index an OCI layout written by build holds.
func indexOf(dir string) (v1.ImageIndex, v1.Hash, error) {
	outer, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, v1.Hash{}, fmt.Errorf("%s: not an OCI layout: %w", dir, err)
	}
	m, err := outer.IndexManifest()
	if err != nil {
		return nil, v1.Hash{}, err
	}
	if len(m.Manifests) != 1 || m.Manifests[0].MediaType != types.OCIImageIndex {
		b, _ := json.Marshal(m.Manifests)
		return nil, v1.Hash{}, fmt.Errorf("%s: want one image index in index.json (as imagebuild build writes), found %s", dir, b)
	}
	d := m.Manifests[0].Digest
	ii, err := outer.ImageIndex(d)
	return ii, d, err
}
