package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	"clusterip-policy/internal/clusterread"
	"clusterip-policy/internal/exitcode"
	"clusterip-policy/pkg/allocview"
	"clusterip-policy/pkg/policy"
)

// maxSuggestChecks bounds the addresses suggest tries, whatever the ranges:
// a /12's static band and every reserved range together stay far below it.
const maxSuggestChecks = 1 << 16

const suggestLong = `Prints free addresses a Service in --namespace (with --labels) may name,
read from the cluster: the static bands of the active ServiceCIDRs and the
reserved ranges the policy lets that namespace use, without the addresses an
IPAddress holds, each judged by the webhook's own rules (as its create would
be at the mutating stage, with nothing named that the policy would refuse
or warn about). The policy is the cluster's ClusterIPPolicy default, or
--policy. Read-only; needs list on ServiceCIDRs, IPAddresses and
namespaces (a reserved range's namespaceSelector) and get on the
ClusterIPPolicy.

Exit status: 0 at least one address printed, 1 none is free, 2 a flag or the
policy cannot be used, 3 the cluster could not be read.`

type suggestOptions struct {
	labels     string
	family     string
	count      int
	policyPath string
	output     string
	kube       kubeFlags
	timeout    time.Duration
}

// newSuggestCommand is `clusterip-policy suggest`.
func newSuggestCommand(streams IOStreams) *cobra.Command {
	var o suggestOptions
	cmd := &cobra.Command{
		Use:               "suggest [--namespace NS] [--labels K=V,...] [--family IPv4|IPv6] [-c N]",
		Short:             "print free addresses the policy lets a Service of a namespace name",
		Long:              suggestLong,
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE: func(_ *cobra.Command, args []string) error {
			return exitcode.Err(o.run(args, streams.Out, streams.ErrOut))
		},
	}
	fs := cmd.Flags()
	o.kube.addFlags(fs)
	// kubeFlags has --namespace for kubectl's sake; suggest's is the
	// Service's namespace, required.
	fs.Lookup("namespace").Usage = "Namespace of the Service to suggest addresses for (required)."
	fs.StringVarP(&o.labels, "labels", "l", "", "The Service's labels, k=v,k2=v2 (a reserved range's serviceSelector reads them).")
	fs.StringVar(&o.family, "family", "IPv4", "IP family of the addresses: IPv4 or IPv6.")
	fs.IntVarP(&o.count, "count", "c", 5, "How many addresses to print (1-100).")
	fs.StringVar(&o.policyPath, "policy", "", "ClusterIPPolicy file or object manifest to judge against; without it, the cluster's ClusterIPPolicy default.")
	fs.StringVarP(&o.output, "output", "o", "text", outputHelp+" The document: addresses (a list of objects with address and where).")
	fs.DurationVar(&o.timeout, "timeout", time.Minute, "Time allowed for reading the cluster (1s-1h).")
	o.kube.complete(cmd)
	return cmd
}

// suggestion is one address of `suggest -o json|yaml`; its keys are public.
type suggestion struct {
	Address string `json:"address"`
	Where   string `json:"where"`
}

func (o *suggestOptions) run(args []string, stdout, stderr io.Writer) int {
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(stderr, "suggest: "+format+"\n", a...)
		return code
	}
	ns := o.kube.namespace
	var svcLabels map[string]string
	switch {
	case checkOutput(o.output) != nil:
		return fail(exitcode.BadData, "%v", checkOutput(o.output))
	case len(args) > 0:
		return fail(exitcode.BadData, "unexpected argument %q: suggest takes flags only", args[0])
	case ns == "":
		return fail(exitcode.BadData, "--namespace is required: the namespace of the Service to suggest addresses for")
	case len(validation.IsDNS1123Label(ns)) > 0:
		return fail(exitcode.BadData, "--namespace %q is not a namespace name", policy.Echo(ns))
	case o.family != string(allocview.IPv4) && o.family != string(allocview.IPv6):
		return fail(exitcode.BadData, "--family %q: use IPv4 or IPv6", policy.Echo(o.family))
	case o.count < 1 || o.count > 100:
		return fail(exitcode.BadData, "--count %d: use 1 to 100", o.count)
	case o.timeout < time.Second || o.timeout > time.Hour:
		return fail(exitcode.BadData, "--timeout %s: use 1s to 1h", o.timeout)
	}
	if o.labels != "" {
		set, err := labels.ConvertSelectorToLabelsMap(o.labels)
		if err != nil {
			return fail(exitcode.BadData, "--labels %q: %v; write k=v,k2=v2", policy.Echo(o.labels), err)
		}
		svcLabels = set
	}
	env, err := toolEnv("suggest", o.policyPath, nil, stderr)
	if err != nil {
		return fail(exitcode.BadData, "%v", err)
	}
	kube := o.kube
	kube.namespace = "" // the cluster-wide reads are not namespaced
	client, err := toolClient(kube, "suggest", o.timeout)
	if err != nil {
		return fail(exitcode.BadData, "%v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	if o.policyPath == "" {
		if code := useClusterPolicy(ctx, client, "suggest", &env, stderr); code != exitcode.OK {
			return code
		}
	}
	snap, err := clusterread.Allocations(ctx, client)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return fail(exitcode.Unreadable, "%v (no complete answer within --timeout %s)", err, o.timeout)
	case err != nil:
		return fail(exitcode.Unreadable, "%v", err)
	case !snap.TracksAllocations:
		return fail(exitcode.Unreadable, "the cluster serves no IPAddress objects, so which addresses are free is not known")
	}
	env.Snapshot = snap
	if nsLabels, err := clusterread.NamespaceLabels(ctx, client); err == nil {
		env.NamespaceLabels = func(n string) (map[string]string, bool) { l, ok := nsLabels[n]; return l, ok }
	} else {
		fmt.Fprintf(stderr, "suggest: note: %v; a reserved range's namespaceSelector matches %s by its name label only\n", err, ns)
	}
	found := suggest(env, ns, svcLabels, allocview.Family(o.family), o.count)
	if o.output != "text" {
		if found == nil {
			found = []suggestion{}
		}
		if err := writeDocument(stdout, o.output, struct {
			Addresses []suggestion `json:"addresses"`
		}{found}); err != nil {
			return fail(exitcode.BadData, "%v", err)
		}
	} else {
		for _, s := range found {
			fmt.Fprintf(stdout, "%s\t%s\n", s.Address, s.Where)
		}
	}
	if len(found) == 0 {
		fmt.Fprintf(stderr, "suggest: no free %s address the policy lets namespace %s name; leave clusterIP empty to get one allocated, or ask for a reservation\n", o.family, ns)
		return exitcode.Denied
	}
	return exitcode.OK
}

// suggest returns up to n addresses of family f that a Service of
// namespace ns with svcLabels may name, in address order: first the
// reserved ranges it may use, then the static bands. Each is judged by
// policy.Mutate on a Service naming it, and kept only when the decision is
// "allowed" with no warning: free (no IPAddress), in an active range, not
// reserved for another, not in another namespace's range, not dynamic.
func suggest(env policy.Env, ns string, svcLabels map[string]string, f allocview.Family, n int) []suggestion {
	rs := env.Ranges()
	type source struct {
		band  allocview.Band
		where string
	}
	var sources []source
	for _, r := range env.Policy.ReservedRanges {
		if allocview.FamilyOf(r.Band.First) == f && r.Allows(ns, svcLabels, env.NamespaceLabels) {
			sources = append(sources, source{r.Band, "reserved range " + r.String()})
		}
	}
	for _, a := range rs.Active {
		if a.Family() == f && !a.Static().IsZero() {
			sources = append(sources, source{a.Static(), "static band of " + a.Name()})
		}
	}
	var out []suggestion
	seen := map[netip.Addr]bool{}
	checks := 0
	for _, s := range sources {
		for ip := s.band.First; ip.IsValid() && s.band.Contains(ip); ip = ip.Next() {
			if checks++; checks > maxSuggestChecks || len(out) == n {
				return out
			}
			if seen[ip] {
				continue
			}
			seen[ip] = true
			if _, held := env.Snapshot.Holder(ip); held {
				continue
			}
			svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "clusterip-policy-suggest", Labels: svcLabels},
				Spec: corev1.ServiceSpec{ClusterIP: ip.String(), ClusterIPs: []string{ip.String()}, IPFamilies: []corev1.IPFamily{corev1.IPFamily(f)}}}
			d := policy.Mutate(env, policy.Request{Operation: policy.Create, Service: svc})
			if d.Outcome == policy.Allowed && len(d.Violations) == 0 {
				out = append(out, suggestion{Address: ip.String(), Where: strings.TrimSpace(s.where)})
			}
		}
	}
	return out
}
