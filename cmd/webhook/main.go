// Command webhook is clusterip-policy: an admission webhook (serve) that keeps
// Service ClusterIPs where the policy says, an offline evaluator of Service
// manifests (review), a read-only audit of a cluster's existing Services
// (audit), and a calculator of a range's bands (bands). The commands are one
// cobra tree (internal/cli.NewRoot); main hands it serve and runs it.
package main

import (
	"io"
	"os"

	"github.com/spf13/cobra"

	"clusterip-policy/internal/cli"
	"clusterip-policy/internal/server"
)

func main() { os.Exit(run(cli.DisplayName(os.Args[0]), os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) }

// run runs the command line args as the binary called display (argv[0]:
// clusterip-policy, or kubectl clusterip-policy as a kubectl plugin) and
// returns the exit code.
func run(display string, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return cli.Run(newRoot(display, stdin, stdout, stderr), args)
}

// newRoot is the whole command tree: the offline commands and serve.
func newRoot(display string, stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	return cli.NewRoot(display, cli.IOStreams{In: stdin, Out: stdout, ErrOut: stderr}, server.Command(stderr))
}
