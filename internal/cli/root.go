package cli

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"clusterip-policy/internal/exitcode"
	"clusterip-policy/internal/version"
)

// Name is the binary's name; PluginName is the name kubectl finds it by
// as a plugin (`kubectl clusterip-policy`: kubectl turns the dash of a
// plugin's file name into a space and an underscore into a dash).
const (
	Name       = "clusterip-policy"
	PluginName = "kubectl-clusterip_policy"
)

// DisplayName is how the binary was called, for its help and completion:
// "kubectl clusterip-policy" when argv[0] is the plugin's name, else
// clusterip-policy.
func DisplayName(argv0 string) string {
	if strings.TrimSuffix(filepath.Base(argv0), ".exe") == PluginName {
		return "kubectl " + Name
	}
	return Name
}

// IOStreams are where the commands read and write: the process's stdin,
// stdout and stderr, or a test's buffers.
type IOStreams struct {
	In     io.Reader
	Out    io.Writer
	ErrOut io.Writer
}

func init() {
	// The commands are listed in the order NewRoot adds them: serve, the
	// default, first.
	cobra.EnableCommandSorting = false
}

// NewRoot is the command tree of clusterip-policy, the one list of its
// commands: main runs it, the tests dispatch through it, and
// hack/generate-cli-doc.sh writes docs/cli.md from it (the hidden
// `commands` command). serve is handed in by cmd/webhook, the one package
// that may import the server; the offline tests pass nil. display is
// DisplayName's answer.
func NewRoot(display string, streams IOStreams, serve *cobra.Command) *cobra.Command {
	root := &cobra.Command{
		Use:   Name,
		Short: "keeps Kubernetes Service ClusterIPs where policy says",
		Long:  Name + " keeps Kubernetes Service ClusterIPs where policy says.",
		// Run prints cobra's refusals, and the flag error function the
		// flags': the message, naming the value, and where the help is.
		SilenceErrors: true,
		SilenceUsage:  true,
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: display},
	}
	root.SetIn(streams.In)
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	// -h and --help work everywhere and are listed nowhere, as before.
	root.PersistentFlags().BoolP("help", "h", false, "Print the command's help.")
	_ = root.PersistentFlags().MarkHidden("help")
	root.SetHelpFunc(func(c *cobra.Command, _ []string) { fmt.Fprint(helpOut(c), usage(c)) })
	root.SetUsageFunc(func(c *cobra.Command) error { fmt.Fprint(c.ErrOrStderr(), usage(c)); return nil })
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		fmt.Fprintf(c.ErrOrStderr(), "%s: %v\nRun '%s --help' for its flags.\n", c.Name(), err, c.CommandPath())
		return exitcode.Err(exitcode.BadData)
	})
	if serve != nil {
		root.AddCommand(serve)
	}
	root.AddCommand(newReviewCommand(streams), newAuditCommand(streams), newBandsCommand(streams), newSuggestCommand(streams), newApplyCRDCommand(streams), newUnregisterCommand(streams), newCleanupCommand(streams), newVersionCommand(streams))
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		if c.Name() == "completion" {
			c.Use, c.Short = "completion SHELL", "print the shell completion script (bash, zsh, fish or powershell)"
			c.Args = func(_ *cobra.Command, args []string) error { // runs only when no shell matched
				if len(args) != 1 {
					return errors.New("name the shell: bash, zsh, fish or powershell")
				}
				return nil
			}
			c.RunE = func(c *cobra.Command, args []string) error {
				fmt.Fprintf(c.ErrOrStderr(), "completion: no shell %q; use bash, zsh, fish or powershell\n", args[0])
				return exitcode.Err(exitcode.BadData)
			}
			walk(c, func(c *cobra.Command) { annotate(c, helpToStdout, "true") })
		}
	}
	root.SetHelpCommand(newHelpCommand())
	root.InitDefaultHelpCmd()
	root.AddCommand(&cobra.Command{
		Use:    "commands",
		Short:  "print the commands, one a line (for hack/generate-cli-doc.sh)",
		Hidden: true,
		Args:   cobra.NoArgs,
		Run: func(c *cobra.Command, _ []string) {
			for _, name := range Commands(c.Root()) {
				fmt.Fprintln(c.OutOrStdout(), name)
			}
		},
	})
	walk(root, func(c *cobra.Command) { c.DisableFlagsInUseLine = true })
	return root
}

func walk(c *cobra.Command, fn func(*cobra.Command)) {
	fn(c)
	for _, sub := range c.Commands() {
		walk(sub, fn)
	}
}

// helpToStdout marks the commands whose help goes to stdout: cobra's
// (help, completion). The application's commands print theirs on stderr,
// as before cobra, so their stdout carries only what they produce.
const helpToStdout = "clusterip-policy.io/help-to-stdout"

func helpOut(c *cobra.Command) io.Writer {
	if !c.HasParent() || c.Annotations[helpToStdout] == "true" {
		return c.OutOrStdout()
	}
	return c.ErrOrStderr()
}

func annotate(c *cobra.Command, key, value string) {
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations[key] = value
}

// newHelpCommand is `help [COMMAND]`: cobra's own prints the root's help
// and exits 0 for a command that does not exist.
func newHelpCommand() *cobra.Command {
	return &cobra.Command{
		Annotations: map[string]string{helpToStdout: "true"},
		Use:         "help [COMMAND]",
		Short:       "print this list, or a command's help",
		Long:        "Prints the list of commands, or with COMMAND (such as review, or completion bash) that command's help.",
		ValidArgsFunction: func(c *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
			cmd, rest, err := c.Root().Find(args)
			if err != nil || len(rest) > 0 {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			var out []cobra.Completion
			for _, sub := range cmd.Commands() {
				if sub.IsAvailableCommand() {
					out = append(out, cobra.CompletionWithDesc(sub.Name(), sub.Short))
				}
			}
			return out, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(c *cobra.Command, args []string) error {
			cmd, rest, err := c.Root().Find(args)
			if err != nil || len(rest) > 0 {
				fmt.Fprintf(c.ErrOrStderr(), "help: no command %q; the commands are %s\n", strings.Join(args, " "), strings.Join(topLevel(c.Root()), ", "))
				return exitcode.Err(exitcode.BadData)
			}
			fmt.Fprint(c.OutOrStdout(), usage(cmd))
			return nil
		},
	}
}

// Commands names the commands of the tree that a user runs, in order:
// what the root's help lists and docs/cli.md documents.
func Commands(root *cobra.Command) []string {
	var out []string
	for _, c := range root.Commands() {
		if c.IsAvailableCommand() || c.Name() == "help" {
			out = append(out, c.Name())
			for _, sub := range c.Commands() {
				if sub.IsAvailableCommand() {
					out = append(out, c.Name()+" "+sub.Name())
				}
			}
		}
	}
	return out
}

// Run runs args (os.Args[1:]) through root and returns the exit code. As
// before cobra: no command, or a flag first, is serve; --help alone is the
// root's help; --version (or -version) with serve prints the version.
func Run(root *cobra.Command, args []string) int {
	if len(args) == 1 && (args[0] == "--help" || args[0] == "-h" || args[0] == "-help") || len(args) == 0 {
		// No command lists the commands: someone who runs the binary (or
		// the kubectl plugin) to see what it is gets the help, not a
		// webhook refusing its missing --policy. The manifests name serve.
		args = []string{"help"}
	}
	// Go's flag package spells it -help, and the commands took it before
	// cobra; pflag would read -h -e -l -p.
	args = slices.Clone(args)
	for i, a := range args {
		if a == "-help" {
			args[i] = "--help"
		}
	}
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		args = append([]string{"serve"}, args...)
	}
	if args[0] == "serve" {
		for _, a := range args[1:] {
			if a == "--version" || a == "-version" {
				fmt.Fprintln(root.OutOrStdout(), version.String())
				return exitcode.OK
			}
		}
	}
	root.SetArgs(args)
	c, err := root.ExecuteC()
	var said exitcode.Error
	if err != nil && !errors.As(err, &said) {
		// Refused by cobra: an unknown command, or arguments a command's
		// Args does not take.
		if c == root && strings.HasPrefix(err.Error(), "unknown command") {
			msg := fmt.Sprintf("unknown command %q", args[0])
			if near := root.SuggestionsFor(args[0]); len(near) > 0 {
				msg += fmt.Sprintf("; did you mean %s?", strings.Join(near, " or "))
			}
			fmt.Fprintf(root.ErrOrStderr(), "%s\n\n%s", msg, usage(root))
		} else {
			fmt.Fprintf(root.ErrOrStderr(), "%s: %v\n", c.Name(), err)
		}
	}
	return exitcode.Of(err)
}

// usage is a command's help, in the form the commands had before cobra:
// for the root, one line per command; for a command, "Usage:" and its
// synopsis, what it does and its exit statuses (Long), then its flags.
func usage(c *cobra.Command) string {
	if !c.HasParent() {
		return rootUsage(c)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Usage: %s\n\n", c.UseLine())
	long := c.Long
	if long == "" {
		long = c.Short
	}
	b.WriteString(strings.TrimRight(long, "\n"))
	b.WriteString("\n")
	if c.HasAvailableSubCommands() {
		b.WriteString("\nCommands:\n")
		for _, sub := range c.Commands() {
			if sub.IsAvailableCommand() {
				fmt.Fprintf(&b, "  %-12s %s\n", sub.Name(), sub.Short)
			}
		}
	}
	if flags := c.LocalFlags().FlagUsages(); flags != "" {
		b.WriteString("\n")
		b.WriteString(flags)
	}
	return b.String()
}

func rootUsage(root *cobra.Command) string {
	type line struct{ synopsis, short string }
	var lines []line
	width := 0
	for _, c := range root.Commands() {
		if !c.IsAvailableCommand() && c.Name() != "help" {
			continue
		}
		l := line{root.DisplayName() + " " + synopsis(c), c.Short}
		if c.Name() == "serve" {
			l.synopsis = root.DisplayName() + " [serve] [flags]"
			l.short += " (the default)"
		}
		lines = append(lines, l)
		width = max(width, len(l.synopsis))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n\nUsage:\n", strings.Replace(root.Long, Name, root.DisplayName(), 1))
	for _, l := range lines {
		fmt.Fprintf(&b, "  %-*s %s\n", width, l.synopsis, l.short)
	}
	fmt.Fprintf(&b, "\nRun '%s COMMAND --help' for a command's flags.\n", root.DisplayName())
	return b.String()
}

// synopsis is a command's line in the root's list: its name, [flags] if it
// has any, and the arguments its Use names (FILE..., CIDR..., SHELL),
// without the flags Use spells out.
func synopsis(c *cobra.Command) string {
	parts := []string{c.Name()}
	if c.HasAvailableLocalFlags() {
		parts = append(parts, "[flags]")
	}
	_, rest, _ := strings.Cut(c.Use, " ")
	depth, word := 0, ""
	for _, r := range rest + " " {
		switch r {
		case '[':
			depth++
		case ']':
			depth--
		}
		if r == ' ' && depth == 0 {
			if word != "" && !strings.HasPrefix(word, "[-") {
				parts = append(parts, word)
			}
			word = ""
			continue
		}
		word += string(r)
	}
	return strings.Join(parts, " ")
}

// topLevel is Commands without the subcommands (completion bash, ...).
func topLevel(root *cobra.Command) []string {
	var out []string
	for _, name := range Commands(root) {
		if !strings.Contains(name, " ") {
			out = append(out, name)
		}
	}
	return out
}
