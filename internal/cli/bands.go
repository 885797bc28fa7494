package cli

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"clusterip-policy/internal/exitcode"
	"clusterip-policy/pkg/allocview"
	"clusterip-policy/pkg/policy"
)

// bandsRow is one range of `bands -o json|yaml`; its keys are public.
type bandsRow struct {
	CIDR    string `json:"cidr"`
	Usable  string `json:"usable"`
	Static  string `json:"static"`
	Dynamic string `json:"dynamic"`
	Offset  uint64 `json:"offset"`
}

// reservedRangeRow is one reserved range of `bands --policy -o json|yaml`;
// its keys are public.
type reservedRangeRow struct {
	Range string `json:"range"`
	// CIDR is the argument that holds the range, "" when none does.
	CIDR string `json:"cidr"`
	// Band is static, dynamic, "static and dynamic", or outside.
	Band string `json:"band"`
	Who  string `json:"who"`
	Note string `json:"note"`
}

// newBandsCommand is `clusterip-policy bands`.
func newBandsCommand(streams IOStreams) *cobra.Command {
	var output, policyPath string
	cmd := &cobra.Command{
		Use:               "bands [--policy FILE] [-o text|json|yaml] CIDR...",
		Short:             "print each range's static and dynamic band",
		Long:              "Prints each range's usable addresses and its static and dynamic band, as the\napiserver's allocator computes them; with --policy, also the policy's reserved\nranges, the band of these CIDRs each lies in and who may use it.\n\nExit status: 0 printed, 2 a CIDR, the policy or a flag cannot be used.",
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE: func(_ *cobra.Command, args []string) error {
			return exitcode.Err(bands(output, policyPath, args, streams.Out, streams.ErrOut))
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", outputHelp+" The document: ranges (one object per CIDR, in order); with --policy also reservedRanges.")
	cmd.Flags().StringVar(&policyPath, "policy", "", "ClusterIPPolicy file or object manifest whose reservedRanges to show against the CIDRs.")
	completeOutput(cmd)
	completePolicyFile(cmd)
	return cmd
}

func bands(output, policyPath string, cidrs []string, stdout, stderr io.Writer) int {
	if err := checkOutput(output); err != nil {
		fmt.Fprintf(stderr, "bands: %v\n", err)
		return exitcode.BadData
	}
	if len(cidrs) == 0 {
		fmt.Fprintln(stderr, "bands needs at least one CIDR, such as 10.96.0.0/16")
		return exitcode.BadData
	}
	var pol *policy.Policy
	if policyPath != "" {
		p, note, err := policy.LoadForTools(policyPath)
		if err != nil {
			fmt.Fprintf(stderr, "bands: %v\n", err)
			return exitcode.BadData
		}
		if note != "" {
			fmt.Fprintln(stderr, "bands: "+note)
		}
		pol = p
	}
	rows := make([]bandsRow, 0, len(cidrs))
	ranges := make([]allocview.Range, 0, len(cidrs))
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
		ranges = append(ranges, r)
	}
	var reserved []reservedRangeRow
	if pol != nil {
		reserved = reservedRows(pol, ranges)
	}
	if output != "text" {
		if err := writeDocument(stdout, output, struct {
			Ranges         []bandsRow         `json:"ranges"`
			ReservedRanges []reservedRangeRow `json:"reservedRanges,omitempty"`
		}{rows, reserved}); err != nil {
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
	if len(reserved) > 0 {
		fmt.Fprintln(stdout)
		tw = tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "RESERVED RANGE\tIN\tBAND\tWHO MAY USE IT\tNOTE")
		for _, r := range reserved {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Range, orDash(r.CIDR), r.Band, r.Who, orDash(r.Note))
		}
		tw.Flush()
	}
	return exitcode.OK
}

// reservedRows places each reserved range of p in the first of ranges
// that holds it whole, and names the band(s) it covers there.
func reservedRows(p *policy.Policy, ranges []allocview.Range) []reservedRangeRow {
	out := make([]reservedRangeRow, 0, len(p.ReservedRanges))
	for _, rr := range p.ReservedRanges {
		row := reservedRangeRow{Range: rr.Written, Band: "outside", Who: rr.Who(), Note: rr.Note}
		for _, r := range ranges {
			if !r.Prefix.Contains(rr.Band.First) || !r.Prefix.Contains(rr.Band.Last) {
				continue
			}
			st, dyn := r.Static(), r.Dynamic()
			inStatic := !st.IsZero() && rr.Band.First.Compare(st.Last) <= 0 && st.First.Compare(rr.Band.Last) <= 0
			inDynamic := !dyn.IsZero() && rr.Band.First.Compare(dyn.Last) <= 0 && dyn.First.Compare(rr.Band.Last) <= 0
			row.CIDR = r.Prefix.String()
			switch {
			case inStatic && inDynamic:
				row.Band = "static and dynamic"
			case inStatic:
				row.Band = "static"
			case inDynamic:
				row.Band = "dynamic"
			default:
				row.Band = "unusable" // a network or broadcast address only
			}
			break
		}
		out = append(out, row)
	}
	return out
}
