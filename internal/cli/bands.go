package cli

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"clusterip-policy/internal/exitcode"
	"clusterip-policy/pkg/allocview"
)

// bandsRow is one range of `bands -o json|yaml`; its keys are public.
type bandsRow struct {
	CIDR    string `json:"cidr"`
	Usable  string `json:"usable"`
	Static  string `json:"static"`
	Dynamic string `json:"dynamic"`
	Offset  uint64 `json:"offset"`
}

// newBandsCommand is `clusterip-policy bands`.
func newBandsCommand(streams IOStreams) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:               "bands [-o text|json|yaml] CIDR...",
		Short:             "print each range's static and dynamic band",
		Long:              "Prints each range's usable addresses and its static and dynamic band, as the\napiserver's allocator computes them.\n\nExit status: 0 printed, 2 a CIDR or a flag cannot be used.",
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE: func(_ *cobra.Command, args []string) error {
			return exitcode.Err(bands(output, args, streams.Out, streams.ErrOut))
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", outputHelp+" The document: ranges (one object per CIDR, in order).")
	completeOutput(cmd)
	return cmd
}

func bands(output string, cidrs []string, stdout, stderr io.Writer) int {
	if err := checkOutput(output); err != nil {
		fmt.Fprintf(stderr, "bands: %v\n", err)
		return exitcode.BadData
	}
	if len(cidrs) == 0 {
		fmt.Fprintln(stderr, "bands needs at least one CIDR, such as 10.96.0.0/16")
		return exitcode.BadData
	}
	rows := make([]bandsRow, 0, len(cidrs))
	for _, s := range cidrs {
		p, err := allocview.ParsePrefix(s)
		if err != nil {
			fmt.Fprintf(stderr, "bands: %v\n", err)
			return exitcode.BadData
		}
		r, err := allocview.NewRange("bands", p)
		if err != nil {
			fmt.Fprintf(stderr, "bands: %v\n", err)
			return exitcode.BadData
		}
		rows = append(rows, bandsRow{CIDR: p.String(), Usable: r.Usable().String(), Static: r.Static().String(), Dynamic: r.Dynamic().String(), Offset: r.Offset()})
	}
	if output != "text" {
		if err := writeDocument(stdout, output, struct {
			Ranges []bandsRow `json:"ranges"`
		}{rows}); err != nil {
			fmt.Fprintf(stderr, "bands: %v\n", err)
			return exitcode.BadData
		}
		return exitcode.OK
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CIDR\tUSABLE\tSTATIC BAND\tDYNAMIC BAND\tOFFSET")
	for _, row := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\n", row.CIDR, row.Usable, row.Static, row.Dynamic, row.Offset)
	}
	tw.Flush()
	return exitcode.OK
}
