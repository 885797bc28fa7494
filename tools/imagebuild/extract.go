package main

import (
	"archive/tar"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// extractCmd copies one file out of one platform's image in a layout, so a
// test can run the binary the image holds rather than the one it was made
// from (make image runs `version` on it).
func extractCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("extract", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("layout", "", "OCI layout directory written by `imagebuild build`")
	platform := fs.String("platform", "linux/amd64", "OS/ARCH of the image to read")
	file := fs.String("path", "", "absolute path of the file in the image")
	out := fs.String("out", "", "where to write it (mode 0755)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" || *file == "" || *out == "" {
		return fmt.Errorf("--layout, --path and --out are required")
	}
	p, ok := supportedPlatforms[*platform]
	if !ok {
		return fmt.Errorf("--platform %q: use linux/amd64 or linux/arm64", *platform)
	}
	idx, _, err := indexOf(*dir)
	if err != nil {
		return err
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	var img v1.Image
	for _, d := range m.Manifests {
		if d.Platform != nil && d.Platform.OS == p.OS && d.Platform.Architecture == p.Architecture {
			if img, err = idx.Image(d.Digest); err != nil {
				return err
			}
		}
	}
	if img == nil {
		return fmt.Errorf("%s: no %s image in the index", *dir, *platform)
	}
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	want := strings.TrimPrefix(*file, "/")
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			return err
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				rc.Close()
				return err
			}
			if h.Name != want || h.Typeflag != tar.TypeReg {
				continue
			}
			f, err := os.OpenFile(*out, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o755)
			if err != nil {
				rc.Close()
				return err
			}
			_, err = io.Copy(f, tr)
			rc.Close()
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err == nil {
				// OpenFile keeps the mode of a file that already existed.
				err = os.Chmod(*out, 0o755)
			}
			return err
		}
		rc.Close()
	}
	return fmt.Errorf("%s: %s is not in the %s image", *dir, *file, *platform)
}
