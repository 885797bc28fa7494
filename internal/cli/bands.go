package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"clusterip-policy/internal/clusterread"
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

// usageRow is one band of `bands --usage -o json|yaml`; its keys are public.
type usageRow struct {
	ServiceCIDR   string `json:"serviceCIDR"`
	CIDR          string `json:"cidr"`
	Band          string `json:"band"`
	Addresses     string `json:"addresses"`
	Size          uint64 `json:"size"`
	Free          uint64 `json:"free"`
	Allocated     uint64 `json:"allocated"`
	Held          uint64 `json:"held"`
	ReservedRange uint64 `json:"reservedRange"`
}

// rangeUsageRow is one reserved range of `bands --usage -o json|yaml`
// (key reservedRanges); its keys are public.
type rangeUsageRow struct {
	Range string `json:"range"`
	Who   string `json:"who"`
	Size  uint64 `json:"size"`
	Used  uint64 `json:"used"`
	Free  uint64 `json:"free"`
}

type bandsOptions struct {
	output     string
	usage      bool
	policyPath string
	kube       kubeFlags
	timeout    time.Duration
}

const bandsLong = `Prints each range's usable addresses and its static and dynamic band, as the
apiserver's allocator computes them; with --policy, also the policy's reserved
ranges, the band of these CIDRs each lies in and who may use it.

With --usage and no CIDR it reads the cluster instead (its ServiceCIDRs and
IPAddresses, read-only; kubectl's flags pick the cluster) and prints how each
band of each active ServiceCIDR is used: free (what the allocator may still
pick), allocated, held (clusterip-policy's holds) and in reserved ranges, the
counts of the metric clusterip_policy_band_addresses. When a dynamic band has
no free address left, new Services get static-band addresses.

Exit status: 0 printed, 2 a CIDR, the policy or a flag cannot be used, 3 the cluster
could not be read (unreachable, timed out, forbidden, or it serves no
IPAddress objects).`

// newBandsCommand is `clusterip-policy bands`.
func newBandsCommand(streams IOStreams) *cobra.Command {
	var o bandsOptions
	cmd := &cobra.Command{
		Use:               "bands [--policy FILE] [-o text|json|yaml] [--usage] [CIDR...]",
		Short:             "print each range's static and dynamic band, or (--usage) how full they are",
		Long:              bandsLong,
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE: func(_ *cobra.Command, args []string) error {
			if o.usage {
				return exitcode.Err(o.runUsage(args, streams.Out, streams.ErrOut))
			}
			return exitcode.Err(bands(o.output, o.policyPath, args, streams.Out, streams.ErrOut))
		},
	}
	fs := cmd.Flags()
	fs.StringVarP(&o.output, "output", "o", "text", outputHelp+" The document: ranges (one object per CIDR, in order), with --policy also reservedRanges; with --usage, usage (one object per band).")
	fs.BoolVar(&o.usage, "usage", false, "Read the cluster's ServiceCIDRs and IPAddresses and print how each band is used, instead of the bands of CIDRs given.")
	fs.StringVar(&o.policyPath, "policy", "", "ClusterIPPolicy file or object manifest whose reservedRanges to show against the CIDRs; with --usage, the policy whose reservedRanges are counted apart (reserved-range); without it, the cluster's ClusterIPPolicy default.")
	o.kube.addFlags(fs)
	fs.DurationVar(&o.timeout, "timeout", time.Minute, "With --usage: time allowed for reading the cluster (1s-1h).")
	completeOutput(cmd)
	completePolicyFile(cmd)
	o.kube.complete(cmd)
	return cmd
}

// runUsage reads the cluster and prints each band's usage; it returns
// the exit code.
func (o *bandsOptions) runUsage(args []string, stdout, stderr io.Writer) int {
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(stderr, "bands: "+format+"\n", a...)
		return code
	}
	switch {
	case checkOutput(o.output) != nil:
		return fail(exitcode.BadData, "%v", checkOutput(o.output))
	case len(args) > 0:
		return fail(exitcode.BadData, "unexpected argument %q: --usage reads the cluster's ServiceCIDRs; drop --usage to print the bands of CIDRs", args[0])
	case o.timeout < time.Second || o.timeout > time.Hour:
		return fail(exitcode.BadData, "--timeout %s: use 1s to 1h", o.timeout)
	case o.kube.check() != nil:
		return fail(exitcode.BadData, "%v", o.kube.check())
	}
	env, err := toolEnv("bands", o.policyPath, nil, stderr)
	if err != nil {
		return fail(exitcode.BadData, "%v", err)
	}
	client, err := toolClient(o.kube, "bands", o.timeout)
	if err != nil {
		return fail(exitcode.BadData, "%v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	if o.policyPath == "" {
		if code := useClusterPolicy(ctx, client, "bands", &env, stderr); code != exitcode.OK {
			return code
		}
	}
	reserved := make([]allocview.Band, 0, len(env.Policy.ReservedRanges))
	for _, r := range env.Policy.ReservedRanges {
		reserved = append(reserved, r.Band)
	}
	snap, err := clusterread.Allocations(ctx, client)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return fail(exitcode.Unreadable, "%v (no complete answer within --timeout %s; raise it for a large cluster)", err, o.timeout)
	case err != nil:
		return fail(exitcode.Unreadable, "%v", err)
	case !snap.TracksAllocations:
		return fail(exitcode.Unreadable, "the cluster serves no IPAddress objects (networking.k8s.io/v1, Kubernetes 1.33 and later), so which addresses are allocated is not known")
	}
	rows := []usageRow{}
	for _, u := range snap.Usage(reserved) {
		rows = append(rows, usageRow{ServiceCIDR: u.ServiceCIDR, CIDR: u.CIDR.String(), Band: u.Band.String(), Addresses: u.Addresses.String(),
			Size: u.Size, Free: u.Free, Allocated: u.Allocated, Held: u.Held, ReservedRange: u.ReservedRange})
	}
	ranges := []rangeUsageRow{}
	for i, u := range snap.RangeUsage(reserved) {
		r := env.Policy.ReservedRanges[i]
		ranges = append(ranges, rangeUsageRow{Range: r.String(), Who: r.Who(), Size: u.Size, Used: u.Used, Free: u.Free})
	}
	if o.output != "text" {
		if err := writeDocument(stdout, o.output, struct {
			Usage          []usageRow      `json:"usage"`
			ReservedRanges []rangeUsageRow `json:"reservedRanges"`
		}{rows, ranges}); err != nil {
			return fail(exitcode.BadData, "%v", err)
		}
		return exitcode.OK
	}
	if len(rows) == 0 {
		fmt.Fprintln(stdout, "No active ServiceCIDR: the apiserver allocates from none.")
		return exitcode.OK
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVICECIDR\tCIDR\tBAND\tADDRESSES\tSIZE\tFREE\tALLOCATED\tHELD\tRESERVED-RANGE")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\n", r.ServiceCIDR, r.CIDR, r.Band, r.Addresses, r.Size, r.Free, r.Allocated, r.Held, r.ReservedRange)
	}
	tw.Flush()
	if len(ranges) > 0 {
		fmt.Fprintln(stdout)
		tw = tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "RESERVED RANGE\tFOR\tSIZE\tUSED\tFREE")
		for _, r := range ranges {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\n", r.Range, r.Who, r.Size, r.Used, r.Free)
		}
		tw.Flush()
	}
	return exitcode.OK
}

func bands(output, policyPath string, cidrs []string, stdout, stderr io.Writer) int {
	if err := checkOutput(output); err != nil {
		fmt.Fprintf(stderr, "bands: %v\n", err)
		return exitcode.BadData
	}
	if len(cidrs) == 0 {
		fmt.Fprintln(stderr, "bands needs at least one CIDR, such as 10.96.0.0/16, or --usage to read the cluster's")
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
