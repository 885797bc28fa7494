package cli

import (
	"errors"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/pflag"

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

// Bands is `clusterip-policy bands`; it returns the exit code.
func Bands(args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("bands", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	output := fs.StringP("output", "o", "text", outputHelp+" The document: ranges (one object per CIDR, in order).")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: clusterip-policy bands [-o text|json|yaml] CIDR...\n\nPrints each range's usable addresses and its static and dynamic band, as the\napiserver's allocator computes them.\n\n%s", fs.FlagUsages())
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return exitcode.OK
		}
		return exitcode.BadData
	}
	if err := checkOutput(*output); err != nil {
		fmt.Fprintf(stderr, "bands: %v\n", err)
		return exitcode.BadData
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(stderr, "bands needs at least one CIDR, such as 10.96.0.0/16")
		return exitcode.BadData
	}
	rows := make([]bandsRow, 0, fs.NArg())
	for _, s := range fs.Args() {
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
	if *output != "text" {
		if err := writeDocument(stdout, *output, struct {
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
