// Command imagebuild builds clusterip-policy's container images without a
// Docker engine: one static binary per platform, a few fixed files, a fixed
// creation time, all put into an OCI image index written as an OCI layout
// (and, optionally, a tar of it) with an SPDX SBOM beside it. It also pushes
// such a layout to a registry.
//
//	imagebuild build --out _output/image --name clusterip-policy --tag v0.1.0 \
//	    --entrypoint /clusterip-policy --user 65532:65532 --epoch 1764547200 \
//	    --binary linux/amd64=_output/bin/linux_amd64/clusterip-policy \
//	    --binary linux/arm64=_output/bin/linux_arm64/clusterip-policy \
//	    --file /licenses/LICENSE=LICENSE --label org.opencontainers.image.version=v0.1.0 \
//	    --sbom _output/image.spdx.json
//	imagebuild push --layout _output/image --ref 127.0.0.1:5000/clusterip-policy:v0.1.0
//	imagebuild digest --layout _output/image
//
// Two builds from the same inputs give the same digest: every tar entry has
// the same owner, mode and time (--epoch, the commit's time), entries are
// sorted, the config's "created" is --epoch, and gzip writes no timestamp.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

const usage = `Usage:
  imagebuild build  [flags]   build the image index into an OCI layout (and SBOM)
  imagebuild push   [flags]   push an OCI layout's index to a registry; prints REF@DIGEST
  imagebuild digest [flags]   print the digest of an OCI layout's index
  imagebuild extract [flags]  copy one file out of one platform's image
Run 'imagebuild COMMAND -h' for a command's flags.
`

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "build":
		err = buildCmd(args[1:], stdout, stderr)
	case "push":
		err = pushCmd(args[1:], stdout, stderr)
	case "digest":
		err = digestCmd(args[1:], stdout, stderr)
	case "extract":
		err = extractCmd(args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "imagebuild: unknown command %q\n%s", args[0], usage)
		return 2
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "imagebuild %s: %v\n", args[0], err)
		return 1
	}
	return 0
}

// multiFlag collects a repeated flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// splitPair splits KEY=VALUE, naming the flag in the error.
func splitPair(flagName, v string) (string, string, error) {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" || val == "" {
		return "", "", fmt.Errorf("--%s %q: want KEY=VALUE with both sides set", flagName, v)
	}
	return k, val, nil
}
