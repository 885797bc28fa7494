package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// pushCmd pushes the index of a layout under a tag. Loopback and private
// registry addresses are spoken to over plain HTTP (go-containerregistry's
// rule for 127.0.0.1, localhost and RFC 1918 hosts); any other registry
// over HTTPS with the credentials of ~/.docker/config.json.
func pushCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("push", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("layout", "", "OCI layout directory written by `imagebuild build`")
	ref := fs.String("ref", "", "REGISTRY/REPOSITORY:TAG to push to, e.g. 127.0.0.1:5000/clusterip-policy:v0.1.0")
	timeout := fs.Duration("timeout", 5*time.Minute, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" || *ref == "" {
		return fmt.Errorf("--layout and --ref are required")
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	tag, err := name.NewTag(*ref, name.StrictValidation)
	if err != nil {
		return fmt.Errorf("--ref %q: want REGISTRY/REPOSITORY:TAG: %w", *ref, err)
	}
	idx, digest, err := indexOf(*dir)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := remote.WriteIndex(tag, idx, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return fmt.Errorf("push %s: %w", tag, err)
	}
	fmt.Fprintf(stdout, "%s@%s\n", tag.Context().Name(), digest)
	return nil
}

func digestCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("digest", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("layout", "", "OCI layout directory written by `imagebuild build`")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" {
		return fmt.Errorf("--layout is required")
	}
	_, digest, err := indexOf(*dir)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, digest)
	return nil
}
