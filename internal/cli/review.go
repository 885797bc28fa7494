package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	sigsjson "sigs.k8s.io/json"

	"clusterip-policy/internal/exitcode"
	"clusterip-policy/pkg/allocview"
	"clusterip-policy/pkg/policy"
)

// reviewResult is one Service of `review -o json|yaml`; its keys are
// public API.
type reviewResult struct {
	Namespace  string           `json:"namespace"`
	Name       string           `json:"name"`
	Allowed    bool             `json:"allowed"`
	Decision   policy.Outcome   `json:"decision"`
	Rules      []policy.RuleID  `json:"rules"`
	Mutations  []string         `json:"mutations"`
	ClusterIPs []string         `json:"clusterIPs"`
	Message    string           `json:"message"`
	Patch      []policy.PatchOp `json:"patch"`
}

type reviewOptions struct {
	policyPath   string
	serviceCIDRs []string
	allocated    []string
	output       string
}

// reviewLong is review's help: what it does and its exit statuses.
const reviewLong = `Evaluates Service manifests offline, as if each were created in order (a
Service allowed earlier holds its IPs for the ones after it). FILE holds YAML
or JSON: one Service, several documents, or a v1 List; "-" reads stdin, and a
directory means its *.yaml, *.yml and *.json files. v1 Namespace objects
among them give their labels to the namespaceSelector of the policy's
reservedRanges (a namespace not among them is matched by its name label,
kubernetes.io/metadata.name, only). Other kinds are skipped with a note on
stderr. A Service without a namespace is in "default".

Exit status: 0 every Service allowed, 1 any denied, 2 an input or the policy
cannot be read.`

// newReviewCommand is `clusterip-policy review`.
func newReviewCommand(streams IOStreams) *cobra.Command {
	var o reviewOptions
	cmd := &cobra.Command{
		Use:   "review [--policy FILE] [--service-cidr CIDR]... [--allocated IP=NAMESPACE/NAME]... [-o text|json|yaml] FILE...",
		Short: "evaluate Service manifests offline, as if created",
		Long:  reviewLong,
		RunE: func(_ *cobra.Command, args []string) error {
			return exitcode.Err(o.run(args, streams.In, streams.Out, streams.ErrOut))
		},
		ValidArgsFunction: manifestFiles,
	}
	fs := cmd.Flags()
	fs.StringVar(&o.policyPath, "policy", "", "ClusterIPPolicy file, or a ClusterIPPolicy object manifest (clusterip-policy.io/v1alpha1, loaded as the webhook loads the object). Without it: the default policy (deny, first address of the primary range reserved for default/kubernetes).")
	fs.StringArrayVar(&o.serviceCIDRs, "service-cidr", nil, "Service CIDR of the cluster to review against, as --service-cluster-ip-range (repeatable, primary family first). Replaces the policy's serviceCIDRs.")
	fs.StringArrayVar(&o.allocated, "allocated", nil, "An IP the cluster already has allocated, as IP=NAMESPACE/NAME (repeatable), to check already-allocated.")
	fs.StringVarP(&o.output, "output", "o", "text", outputHelp+" The document: services (one object per Service, in order), allowed, denied.")
	completeOutput(cmd)
	completePolicyFile(cmd)
	_ = cmd.RegisterFlagCompletionFunc("service-cidr", cobra.NoFileCompletions)
	_ = cmd.RegisterFlagCompletionFunc("allocated", cobra.NoFileCompletions)
	return cmd
}

// run reviews the manifests of files; it returns the exit code.
func (o *reviewOptions) run(files []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "review: "+format+"\n", a...)
		return exitcode.BadData
	}
	if err := checkOutput(o.output); err != nil {
		return fail("%v", err)
	}
	if len(files) == 0 {
		return fail("no input: name one or more files of Service manifests, or - for stdin")
	}
	env, err := toolEnv("review", o.policyPath, o.serviceCIDRs, stderr)
	if err != nil {
		return fail("%v", err)
	}
	pol := env.Policy
	if len(env.StaticCIDRs) == 0 && len(pol.ServiceCIDRs) == 0 {
		return fail("no Service CIDRs to review against: give --service-cidr (the cluster's --service-cluster-ip-range) or serviceCIDRs in the policy")
	}
	held, err := parseAllocated(o.allocated)
	if err != nil {
		return fail("%v", err)
	}
	in, err := readServices(files, stdin, stderr)
	if err != nil {
		return fail("%v", err)
	}
	services := in.services
	env.NamespaceLabels = in.namespaceLabels

	view := allocview.NewView()
	view.Update(func(tx *allocview.Tx) {
		for ip, h := range held {
			tx.SetAllocation(ip, h)
		}
		tx.MarkSynced(true)
	})
	results := make([]reviewResult, 0, len(services))
	for _, svc := range services {
		env.Snapshot = view.Snapshot()
		res := reviewOne(env, svc)
		results = append(results, res)
		if res.Allowed {
			view.Update(func(tx *allocview.Tx) {
				for _, s := range res.ClusterIPs {
					if ip, err := allocview.ParseIP(s); err == nil {
						tx.SetAllocation(ip, allocview.ServiceHolder(res.Namespace, res.Name))
					}
				}
			})
		}
	}
	if o.output == "text" {
		writeTable(stdout, results)
	} else if err := writeDocument(stdout, o.output, newReviewDocument(results)); err != nil {
		return fail("%v", err)
	}
	if slices.ContainsFunc(results, func(r reviewResult) bool { return !r.Allowed }) {
		return exitcode.Denied
	}
	return exitcode.OK
}

// reviewOne reports what a create of svc comes to; policy.ReplayCreate
// knows the apiserver's order of the stages.
func reviewOne(env policy.Env, svc *corev1.Service) reviewResult {
	c := policy.ReplayCreate(env, svc)
	return reviewResult{Namespace: svc.Namespace, Name: svc.Name, Allowed: c.Allowed, Decision: c.Outcome,
		Rules: orEmpty(c.Rules), Mutations: orEmpty(c.Mutations), ClusterIPs: orEmpty(c.ClusterIPs),
		Message: c.Message, Patch: orEmpty(c.Patch)}
}

func parseAllocated(in []string) (map[netip.Addr]allocview.Holder, error) {
	out := map[netip.Addr]allocview.Holder{}
	for _, s := range in {
		ipStr, ref, ok := strings.Cut(s, "=")
		ns, name, ok2 := strings.Cut(ref, "/")
		if !ok || !ok2 || ns == "" || name == "" {
			return nil, fmt.Errorf("--allocated %q: write IP=NAMESPACE/NAME, such as 10.96.0.10=kube-system/kube-dns", s)
		}
		ip, err := allocview.ParseIP(ipStr)
		if err != nil {
			return nil, fmt.Errorf("--allocated %q: %w", s, err)
		}
		out[ip] = allocview.ServiceHolder(ns, name)
	}
	return out, nil
}

// inputs are the objects review reads: the Services, in order, and the
// labels of the Namespaces among them.
type inputs struct {
	services   []*corev1.Service
	namespaces map[string]map[string]string
}

// namespaceLabels is a policy.NamespaceLabels over the Namespaces read.
func (in *inputs) namespaceLabels(ns string) (map[string]string, bool) {
	l, ok := in.namespaces[ns]
	return l, ok
}

// readServices reads every Service and Namespace from the inputs, in order.
func readServices(paths []string, stdin io.Reader, stderr io.Writer) (*inputs, error) {
	out := &inputs{namespaces: map[string]map[string]string{}}
	for _, path := range paths {
		files := []string{path}
		if path != "-" {
			if fi, err := os.Stat(path); err != nil {
				return nil, fmt.Errorf("%s: %w", path, errors.Unwrap(err))
			} else if fi.IsDir() {
				files = nil
				entries, err := os.ReadDir(path)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", path, err)
				}
				for _, e := range entries {
					if ext := filepath.Ext(e.Name()); !e.IsDir() && (ext == ".yaml" || ext == ".yml" || ext == ".json") {
						files = append(files, filepath.Join(path, e.Name()))
					}
				}
				sort.Strings(files)
			}
		}
		for _, f := range files {
			if err := readFile(f, stdin, stderr, out); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

func readFile(path string, stdin io.Reader, stderr io.Writer, in *inputs) error {
	r := stdin
	name := "stdin"
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return fmt.Errorf("%s: %w", path, errors.Unwrap(err))
		}
		defer f.Close()
		r, name = f, path
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bufio.NewReader(r), 4096)
	for doc := 1; ; doc++ {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("%s: document %d: %w", name, doc, err)
		}
		if len(bytes.TrimSpace(raw)) == 0 || string(raw) == "null" {
			continue
		}
		svcs, err := servicesIn(raw, fmt.Sprintf("%s: document %d", name, doc), stderr, in)
		if err != nil {
			return err
		}
		in.services = append(in.services, svcs...)
	}
}

// servicesIn returns the Services in one document: a Service, or the
// Services among a List's items. A v1 Namespace's labels go into in.
func servicesIn(raw []byte, where string, stderr io.Writer, in *inputs) ([]*corev1.Service, error) {
	var head struct {
		APIVersion string            `json:"apiVersion"`
		Kind       string            `json:"kind"`
		Items      []json.RawMessage `json:"items"`
		Metadata   struct {
			Name string `json:"name"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	switch {
	case head.Kind == "List" || strings.HasSuffix(head.Kind, "List") && head.Items != nil:
		var out []*corev1.Service
		for i, item := range head.Items {
			svcs, err := servicesIn(item, fmt.Sprintf("%s, item %d", where, i), stderr, in)
			if err != nil {
				return nil, err
			}
			out = append(out, svcs...)
		}
		return out, nil
	case head.Kind == "Service" && head.APIVersion == "v1":
		svc := &corev1.Service{}
		// Case-sensitive and strict, as the apiserver decodes: kubectl's
		// default --validate=strict refuses a misspelt "clusterIp" too.
		strict, err := sigsjson.UnmarshalStrict(raw, svc, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields)
		if err == nil && len(strict) > 0 {
			err = strict[0]
		}
		if err != nil {
			return nil, fmt.Errorf("%s: Service %q: %w", where, head.Metadata.Name, err)
		}
		if svc.Name == "" {
			return nil, fmt.Errorf("%s: a Service without metadata.name", where)
		}
		if svc.Namespace == "" {
			svc.Namespace = "default"
		}
		if svc.Spec.Type == "" {
			svc.Spec.Type = corev1.ServiceTypeClusterIP
		}
		return []*corev1.Service{svc}, nil
	case head.Kind == "Namespace" && head.APIVersion == "v1":
		ns := &corev1.Namespace{}
		if err := json.Unmarshal(raw, ns); err != nil {
			return nil, fmt.Errorf("%s: Namespace %q: %w (labels are a map of strings)", where, head.Metadata.Name, err)
		}
		if ns.Name == "" {
			return nil, fmt.Errorf("%s: a Namespace without metadata.name", where)
		}
		l := map[string]string{}
		for k, v := range ns.Labels {
			l[k] = v
		}
		l[corev1.LabelMetadataName] = ns.Name // the apiserver sets it, whatever the manifest says
		in.namespaces[ns.Name] = l
		return nil, nil
	case head.Kind == "":
		return nil, fmt.Errorf("%s: no kind; is this a Kubernetes manifest?", where)
	}
	fmt.Fprintf(stderr, "review: %s: skipping %s %s %q (not a v1 Service)\n", where, head.APIVersion, head.Kind, head.Metadata.Name)
	return nil, nil
}

// reviewDocument is `review -o json|yaml`: one document per run.
type reviewDocument struct {
	Services []reviewResult `json:"services"`
	Allowed  int            `json:"allowed"`
	Denied   int            `json:"denied"`
}

func newReviewDocument(results []reviewResult) reviewDocument {
	d := reviewDocument{Services: results}
	for _, r := range results {
		if r.Allowed {
			d.Allowed++
		} else {
			d.Denied++
		}
	}
	return d
}

func writeTable(w io.Writer, results []reviewResult) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVICE\tDECISION\tCLUSTER-IPS\tRULES\tMESSAGE")
	for _, r := range results {
		ips := strings.Join(r.ClusterIPs, ",")
		if ips == "" {
			ips = "(dynamic)"
			if !r.Allowed {
				ips = "-"
			}
		}
		rules := make([]string, len(r.Rules))
		for i, id := range r.Rules {
			rules[i] = string(id)
		}
		fmt.Fprintf(tw, "%s/%s\t%s\t%s\t%s\t%s\n", r.Namespace, r.Name, r.Decision, ips, orDash(strings.Join(rules, ",")), r.Message)
	}
	tw.Flush()
	allowed := 0
	for _, r := range results {
		if r.Allowed {
			allowed++
		}
	}
	fmt.Fprintf(w, "\n%d Services: %d allowed, %d denied\n", len(results), allowed, len(results)-allowed)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// toolEnv is the decision environment of the offline commands (review,
// audit): the policy of --policy (the default policy without it; the old
// file format's note goes to stderr, prefixed by the command) and the
// --service-cidr ranges.
func toolEnv(command, policyPath string, serviceCIDRs []string, stderr io.Writer) (policy.Env, error) {
	env := policy.Env{Policy: policy.Default()}
	if policyPath != "" {
		p, note, err := policy.LoadForTools(policyPath)
		if err != nil {
			return env, err
		}
		if note != "" {
			fmt.Fprintln(stderr, command+": "+note)
		}
		env.Policy = p
	}
	for _, s := range serviceCIDRs {
		p, err := allocview.ParsePrefix(s)
		if err != nil {
			return env, fmt.Errorf("--service-cidr: %w", err)
		}
		env.StaticCIDRs = append(env.StaticCIDRs, p)
	}
	return env, nil
}

// orEmpty makes a nil list an empty one, so JSON shows [] rather than null.
func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
