// Package cli holds the offline commands of clusterip-policy: review
// (Service manifests against a policy, as if created), audit (a cluster's
// existing Services, read-only) and bands (a range's static and dynamic
// band). They decide with pkg/policy exactly as the webhook does, and share
// nothing with the server but that and the cluster reader.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"clusterip-policy/internal/version"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"clusterip-policy/internal/clusterread"
	"clusterip-policy/internal/exitcode"
	"clusterip-policy/pkg/allocview"
	"clusterip-policy/pkg/policy"
)

// cannotJudge is the footer of every audit: what a stored Service cannot tell.
const cannotJudge = "A stored address does not say whether it was asked for or allocated: an address in a dynamic band that is not reserved for its Service breaks static-ip-in-dynamic-band only if someone named it, so the audit does not report it (review the manifests with `clusterip-policy review`). Exempt users and groups cannot be applied either: a Service does not record who created it."

// auditJSON is the output of `audit -o json|yaml`; its keys are public API.
type auditJSON struct {
	Policy            string                `json:"policy"`
	Ranges            string                `json:"ranges"`
	Services          int                   `json:"services"`
	Checked           int                   `json:"checked"`
	Exempt            int                   `json:"exempt"`
	NotJudgedDynamic  int                   `json:"notJudgedDynamic"`
	TracksAllocations bool                  `json:"tracksAllocations"`
	Counts            map[policy.RuleID]int `json:"counts"`
	Findings          []policy.Finding      `json:"findings"`
	Omitted           map[policy.RuleID]int `json:"omitted"`
	CannotJudge       string                `json:"cannotJudge"`
}

type auditOptions struct {
	policyPath   string
	kube         kubeFlags
	serviceCIDRs []string
	output       string
	maxPerRule   int
	timeout      time.Duration
}

// auditLong is audit's help: what it does, what it cannot judge, and its
// exit statuses.
const auditLong = `Reports every existing Service whose addresses break the policy, before you
enforce it: an address outside the active or allowed ranges, an address
reserved for another Service, an address whose IPAddress names another holder,
and a reservation owner that holds another address than its reserved one. It
only reads: it lists Services (all namespaces), ServiceCIDRs and IPAddresses.
` + cannotJudge + `

The cluster is the kubeconfig's, as kubectl finds it, with kubectl's flags to
pick another (--kubeconfig, --context, --cluster, --user, --server) and to
impersonate (--as, --as-group, --as-uid): audit what a user may see.

Exit status: 0 nothing found, 1 findings, 2 bad flags, policy or kubeconfig,
3 the cluster could not be read (unreachable, timed out, or forbidden).`

// newAuditCommand is `clusterip-policy audit`: it lists the cluster's
// Services, ServiceCIDRs and IPAddresses (read-only) and reports every
// Service whose addresses break the policy (policy.Audit).
func newAuditCommand(streams IOStreams) *cobra.Command {
	var o auditOptions
	cmd := &cobra.Command{
		Use:               "audit [--policy FILE] [--kubeconfig FILE] [-o text|json|yaml]",
		Short:             "report existing Services that break the policy (read-only)",
		Long:              auditLong,
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE: func(_ *cobra.Command, args []string) error {
			return exitcode.Err(o.run(args, streams.Out, streams.ErrOut))
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.policyPath, "policy", "", "ClusterIPPolicy file (or object manifest, clusterip-policy.io/v1alpha1) to audit against, the one you mean to enforce. Without it: the cluster's ClusterIPPolicy default, as the webhook enforces it; where the cluster has none, the default policy (first address of the primary range reserved for default/kubernetes).")
	o.kube.addFlags(fs)
	fs.StringArrayVar(&o.serviceCIDRs, "service-cidr", nil, "Service CIDR of the cluster, as --service-cluster-ip-range (repeatable, primary family first); only for a cluster that serves no ServiceCIDR objects (before 1.33). Replaces the policy's serviceCIDRs.")
	fs.StringVarP(&o.output, "output", "o", "text", outputHelp)
	fs.IntVar(&o.maxPerRule, "max-per-rule", 20, "Findings listed per rule (1-1000); the rest are counted in a \"... and N more\" line. Counts are always complete.")
	fs.DurationVar(&o.timeout, "timeout", time.Minute, "Time allowed for reading the cluster (1s-1h).")
	completeOutput(cmd)
	completePolicyFile(cmd)
	o.kube.complete(cmd)
	return cmd
}

// run audits the cluster; it returns the exit code.
func (o *auditOptions) run(args []string, stdout, stderr io.Writer) int {
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(stderr, "audit: "+format+"\n", a...)
		return code
	}
	switch {
	case checkOutput(o.output) != nil:
		return fail(exitcode.BadData, "%v", checkOutput(o.output))
	case len(args) > 0:
		return fail(exitcode.BadData, "unexpected argument %q: audit reads the cluster, not files (use `clusterip-policy review` for manifests)", args[0])
	case o.maxPerRule < 1 || o.maxPerRule > 1000:
		return fail(exitcode.BadData, "--max-per-rule %d: use 1 to 1000", o.maxPerRule)
	case o.timeout < time.Second || o.timeout > time.Hour:
		return fail(exitcode.BadData, "--timeout %s: use 1s to 1h", o.timeout)
	case o.kube.check() != nil:
		return fail(exitcode.BadData, "%v", o.kube.check())
	}
	env, err := toolEnv("audit", o.policyPath, o.serviceCIDRs, stderr)
	if err != nil {
		return fail(exitcode.BadData, "%v", err)
	}
	client, err := toolClient(o.kube, "audit", o.timeout)
	if err != nil {
		return fail(exitcode.BadData, "%v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	if o.policyPath == "" {
		if code := useClusterPolicy(ctx, client, "audit", &env, stderr); code != exitcode.OK {
			return code
		}
	}
	pol := env.Policy
	services, snap, err := clusterread.Cluster(ctx, client)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return fail(exitcode.Unreadable, "%v (no complete answer within --timeout %s; raise it for a large cluster)", err, o.timeout)
		}
		return fail(exitcode.Unreadable, "%v", err)
	}
	env.Snapshot = snap
	if rangesSelectNamespaces(pol) {
		// Only a namespaceSelector needs the labels; without list on
		// namespaces the audit goes on by names, and says so.
		if labels, err := clusterread.NamespaceLabels(ctx, client); err != nil {
			fmt.Fprintf(stderr, "audit: note: %v; reservedRanges' namespaceSelector matches each namespace by its name label (kubernetes.io/metadata.name) only\n", err)
		} else {
			env.NamespaceLabels = func(ns string) (map[string]string, bool) { l, ok := labels[ns]; return l, ok }
		}
	}
	if len(snap.ServiceCIDRs()) == 0 && len(env.StaticCIDRs) == 0 && len(pol.ServiceCIDRs) == 0 {
		return fail(exitcode.BadData, "the cluster serves no ServiceCIDR objects: give --service-cidr (its --service-cluster-ip-range) or serviceCIDRs in the policy")
	}
	report := policy.Audit(env, services)
	shown, omitted := report.Shown(o.maxPerRule)
	if o.output != "text" {
		out := auditJSON{Policy: pol.Digest, Ranges: env.Ranges().Describe(), Services: report.Services, Checked: report.Checked,
			Exempt: report.Exempt, NotJudgedDynamic: report.NotJudged, TracksAllocations: report.TracksAllocations,
			Counts: report.CountByRule(), Findings: shown, Omitted: omitted, CannotJudge: cannotJudge}
		if out.Findings == nil {
			out.Findings = []policy.Finding{}
		}
		if err := writeDocument(stdout, o.output, out); err != nil {
			return fail(exitcode.BadData, "%v", err)
		}
	} else {
		writeAuditText(stdout, pol, env.Ranges(), report, shown, omitted)
	}
	if len(report.Findings) > 0 {
		return exitcode.Denied
	}
	return exitcode.OK
}

// useClusterPolicy puts the cluster's ClusterIPPolicy into env when it has
// one (a command given no --policy judges as the installed webhook does),
// says on stderr which policy is used, and returns the exit code of a
// failure: a policy object that does not load is one, not a reason to
// judge against another policy silently.
func useClusterPolicy(ctx context.Context, client kubernetes.Interface, command string, env *policy.Env, stderr io.Writer) int {
	p, gen, found, err := clusterread.Policy(ctx, client)
	switch {
	case err != nil && found:
		fmt.Fprintf(stderr, "%s: %v\n(the webhook keeps enforcing its last good generation; fix the object, or give --policy FILE)\n", command, err)
		return exitcode.BadData
	case err != nil:
		// Unreachable or not allowed: the reads that follow say which;
		// the judgement is against the default policy, and says so.
		fmt.Fprintf(stderr, "%s: note: %v: judging against the default policy; give --policy FILE for the one you enforce\n", command, err)
		return exitcode.OK
	case !found:
		fmt.Fprintf(stderr, "%s: note: the cluster has no ClusterIPPolicy %s: judging against the default policy (the first address of the primary range reserved for default/kubernetes); give --policy FILE for another\n", command, policy.ObjectName)
		return exitcode.OK
	}
	env.Policy = p
	fmt.Fprintf(stderr, "%s: judging against the cluster's ClusterIPPolicy %s, generation %d (policy digest %s)\n", command, policy.ObjectName, gen, p.Digest)
	return exitcode.OK
}

// toolClient is the clientset a command that reads the cluster uses: the
// kubeconfig kubectl would load, the command named in the user agent, every
// request bounded by timeout (0: none).
func toolClient(kube kubeFlags, command string, timeout time.Duration) (kubernetes.Interface, error) {
	cfg, err := toolRESTConfig(kube, command, timeout)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

// toolQPS and toolBurst are kubectl's defaults for a command's client.
const (
	toolQPS   = 50
	toolBurst = 300
)

// toolRESTConfig is toolClient's configuration, for a command that sets
// more (its request rate).
func toolRESTConfig(kube kubeFlags, command string, timeout time.Duration) (*rest.Config, error) {
	cfg, err := auditRESTConfig(kube)
	if err != nil {
		return nil, err
	}
	cfg.UserAgent = "clusterip-policy-" + command + "/" + version.Version()
	cfg.Timeout = timeout
	// kubectl's own rate (50 a second, burst 300) rather than client-go's
	// 5: a list of 20,000 IPAddresses is 40 pages, which at 5 a second
	// took 6.5 s of waiting on the limiter (make bench-cli). The
	// apiserver's own fairness still applies.
	cfg.QPS, cfg.Burst = toolQPS, toolBurst
	return cfg, nil
}

// auditRESTConfig loads a kubeconfig the way kubectl does ($KUBECONFIG,
// else ~/.kube/config; --kubeconfig wins; kubectl's flags override it),
// and falls back to the pod's service account when there is none.
func auditRESTConfig(kube kubeFlags) (*rest.Config, error) {
	cfg, err := kube.loader().ClientConfig()
	if err != nil {
		where := "$KUBECONFIG or ~/.kube/config"
		if kube.kubeconfig != "" {
			where = "--kubeconfig " + kube.kubeconfig
		}
		// client-go's own advice (KUBERNETES_MASTER) does not apply here.
		msg := strings.TrimSuffix(err.Error(), ", try setting KUBERNETES_MASTER environment variable")
		fix := "name one with --kubeconfig"
		if kube.overrides.CurrentContext != "" {
			fix = "check --context against the kubeconfig's contexts"
		}
		return nil, fmt.Errorf("kubeconfig (%s): %s; %s", where, msg, fix)
	}
	return cfg, nil
}

func writeAuditText(w io.Writer, pol *policy.Policy, rs allocview.RangeSet, r policy.AuditReport, shown []policy.Finding, omitted map[policy.RuleID]int) {
	if len(shown) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "SERVICE\tRULE\tADDRESS\tACTION\tPROBLEM\tFIX")
		for i, f := range shown {
			fmt.Fprintf(tw, "%s/%s\t%s\t%s\t%s\t%s\t%s\n", f.Namespace, f.Name, f.Rule, f.IP, orDash(string(f.Action)), f.Problem, f.Fix)
			if last := i == len(shown)-1 || shown[i+1].Rule != f.Rule; last && omitted[f.Rule] > 0 {
				fmt.Fprintf(tw, "... and %d more %s\n", omitted[f.Rule], f.Rule)
			}
		}
		tw.Flush()
		fmt.Fprintln(w)
	}
	counts := r.CountByRule()
	var parts []string
	for _, id := range policy.AuditRules {
		if counts[id] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[id], id))
		}
	}
	found := "no findings"
	if len(parts) > 0 {
		noun := "findings"
		if len(r.Findings) == 1 {
			noun = "finding"
		}
		found = fmt.Sprintf("%d %s (%s)", len(r.Findings), noun, strings.Join(parts, ", "))
	}
	fmt.Fprintf(w, "%d Services, %d with a ClusterIP checked, %d in exempt namespaces not checked: %s.\n", r.Services, r.Checked, r.Exempt, found)
	fmt.Fprintf(w, "Policy %s; active ranges: %s.\n", pol.Digest, rs.Describe())
	if !r.TracksAllocations {
		fmt.Fprintln(w, "already-allocated was not checked: the cluster serves no IPAddress objects.")
	}
	fmt.Fprintf(w, "Not judged: %d addresses in a dynamic band not reserved for their Service. %s\n", r.NotJudged, cannotJudge)
}

// rangesSelectNamespaces reports whether a reserved range of p chooses
// namespaces by label, so that the audit needs the namespaces' labels.
func rangesSelectNamespaces(p *policy.Policy) bool {
	for _, r := range p.ReservedRanges {
		if r.NamespaceSelector != nil {
			return true
		}
	}
	return false
}
