package server

import (
	"io"

	"github.com/spf13/cobra"

	"clusterip-policy/internal/exitcode"
)

// serveLong is serve's help: what it runs and its exit statuses.
const serveLong = `Runs the admission webhook: the mutating and validating Service webhooks and
the ServiceCIDR webhook on --port (HTTPS), /healthz and /readyz on
--health-probe-bind-address, /metrics on --metrics-bind-address, and the
leader-only work the flags turn on. It logs JSON lines on stderr. Every flag
is checked before anything starts. It is the command when none is given.

Exit status: 0 stopped by SIGTERM or SIGINT, 1 stopped on an error, 2 a flag
or the policy file cannot be used.`

// Command is `clusterip-policy serve` for the command tree (cmd/webhook):
// its flags are serveFlags' (their names, defaults and help are public
// API, kept here beside what reads them), and it logs to stderr.
func Command(stderr io.Writer) *cobra.Command {
	var o serveOptions
	fs := serveFlags(&o)
	cmd := &cobra.Command{
		Use:               "serve [flags]",
		Short:             "run the admission webhook",
		Long:              serveLong,
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE: func(_ *cobra.Command, args []string) error {
			return exitcode.Err(serve(o, fs, args, stderr))
		},
	}
	cmd.Flags().AddFlagSet(fs)
	_ = cmd.RegisterFlagCompletionFunc("policy-source", cobra.FixedCompletions([]cobra.Completion{"file", "crd"}, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("log-level", cobra.FixedCompletions([]cobra.Completion{"debug", "info", "error"}, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.MarkFlagFilename("policy", "yaml", "yml", "json")
	_ = cmd.MarkFlagFilename("kubeconfig")
	_ = cmd.MarkFlagFilename("client-ca-file")
	_ = cmd.MarkFlagDirname("cert-dir")
	return cmd
}
