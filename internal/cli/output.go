package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"clusterip-policy/internal/exitcode"
	"clusterip-policy/internal/version"
	"clusterip-policy/pkg/policy"
)

// The output formats every command takes with -o, as kubectl's -o: text for
// people, json or yaml for scripts. json and yaml print exactly one
// document per run (json on one line), so `jq` or `yq` read the whole
// result at once; the documents' keys are public API.
const outputHelp = "Output format: text (for people), json or yaml (one document, for scripts)."

// checkOutput refuses a format that is not one of the three, naming it.
func checkOutput(format string) error {
	switch format {
	case "text", "json", "yaml":
		return nil
	}
	return fmt.Errorf("-o %q: use text, json or yaml", format)
}

// writeDocument prints v as one json or yaml document. yaml is converted
// from the json, so both carry the same keys in the same spelling.
func writeDocument(w io.Writer, format string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if format == "yaml" {
		if data, err = yaml.JSONToYAML(data); err != nil {
			return err
		}
	} else {
		data = append(data, '\n')
	}
	_, err = w.Write(data)
	return err
}

// versionDocument is `version -o json|yaml`; its keys are public API.
type versionDocument struct {
	Version  string `json:"version"`
	Commit   string `json:"commit"`
	Go       string `json:"go"`
	Platform string `json:"platform"`
}

// newVersionCommand is `clusterip-policy version`.
func newVersionCommand(streams IOStreams) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:               "version [-o text|json|yaml]",
		Short:             "print version information",
		Long:              "Prints the release, the commit it was built from, the Go version and the platform.\n\nExit status: 0 printed, 2 a flag or an argument cannot be used.",
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE: func(_ *cobra.Command, args []string) error {
			return exitcode.Err(printVersion(output, args, streams.Out, streams.ErrOut))
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", outputHelp)
	completeOutput(cmd)
	return cmd
}

func printVersion(output string, args []string, stdout, stderr io.Writer) int {
	if err := checkOutput(output); err != nil {
		fmt.Fprintf(stderr, "version: %v\n", err)
		return exitcode.BadData
	}
	if len(args) > 0 {
		fmt.Fprintf(stderr, "version: unexpected argument %q; it takes only -o\n", policy.Echo(args[0]))
		return exitcode.BadData
	}
	if output == "text" {
		fmt.Fprintln(stdout, version.String())
		return exitcode.OK
	}
	doc := versionDocument{Version: version.Version(), Commit: version.Commit(), Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if err := writeDocument(stdout, output, doc); err != nil {
		fmt.Fprintf(stderr, "version: %v\n", err)
		return exitcode.BadData
	}
	return exitcode.OK
}

// The completions of the flags every command shares.
func completeOutput(cmd *cobra.Command) {
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]cobra.Completion{"text", "json", "yaml"}, cobra.ShellCompDirectiveNoFileComp))
}

func completePolicyFile(cmd *cobra.Command) {
	_ = cmd.MarkFlagFilename("policy", "yaml", "yml", "json")
}

// manifestFiles completes review's FILE arguments: manifests and
// directories.
func manifestFiles(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
	return []cobra.Completion{"yaml", "yml", "json"}, cobra.ShellCompDirectiveFilterFileExt
}
