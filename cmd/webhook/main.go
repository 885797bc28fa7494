// Command webhook is clusterip-policy: an admission webhook (serve) that keeps
// Service ClusterIPs where the policy says, an offline evaluator of Service
// manifests (review), a read-only audit of a cluster's existing Services
// (audit), and a calculator of a range's bands (bands).
package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"clusterip-policy/internal/server"

	"clusterip-policy/internal/version"

	"clusterip-policy/internal/cli"

	"clusterip-policy/internal/exitcode"
)

func main() { os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) }

const usage = `clusterip-policy keeps Kubernetes Service ClusterIPs where policy says.

Usage:
  clusterip-policy [serve] [flags]        run the admission webhook (the default)
  clusterip-policy review [flags] FILE... evaluate Service manifests offline, as if created
  clusterip-policy audit [flags]          report existing Services that break the policy (read-only)
  clusterip-policy bands [flags] CIDR...  print each range's static and dynamic band
  clusterip-policy version [-o json]      print version information
  clusterip-policy help                   print this list

Run 'clusterip-policy COMMAND --help' for a command's flags.
`

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	cmd, named := "serve", false
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args, named = args[0], args[1:], true
	}
	// --help alone asks what the binary does: the commands, not the flags
	// of the default command (`serve --help` prints those, so the command
	// must not have been named).
	if cmd == "serve" && !named && len(args) == 1 && (args[0] == "--help" || args[0] == "-h" || args[0] == "-help") {
		cmd = "help"
	}
	switch cmd {
	case "serve":
		for _, a := range args {
			if a == "--version" || a == "-version" {
				fmt.Fprintln(stdout, version.String())
				return exitcode.OK
			}
		}
		return server.Serve(args, stderr)
	case "review":
		return cli.Review(args, stdin, stdout, stderr)
	case "audit":
		return cli.Audit(args, stdout, stderr)
	case "bands":
		return cli.Bands(args, stdout, stderr)
	case "version":
		return cli.Version(args, stdout, stderr)
	case "help":
		fmt.Fprint(stdout, usage)
		return exitcode.OK
	}
	fmt.Fprintf(stderr, "unknown command %q\n\n%s", cmd, usage)
	return exitcode.BadData
}
