package docs

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"clusterip-policy/internal/cli"
	"clusterip-policy/internal/server"
	"clusterip-policy/pkg/apis/clusterippolicy/v1alpha1"
)

// The commands and flags named in running text (`clusterip-policy audit
// --policy FILE`, `--hold-reservations`, `make release-check`) go stale as
// silently as those in shell blocks: a renamed flag leaves every sentence
// naming it wrong. The test below holds each to what exists: our commands
// and their flags to the binary's command tree, make targets to the
// Makefile, conditions to the API, and a flag of another tool to the list
// below, which names the tool.

// foreignFlags are flags the pages name that belong to another program,
// with that program. A flag of ours is never listed here (the test says
// so), so the list cannot hide one of ours going away.
var foreignFlags = map[string]string{
	// kube-apiserver
	"admission-control-config-file": "kube-apiserver",
	"audit-log-path":                "kube-apiserver",
	"audit-policy-file":             "kube-apiserver",
	"emulated-version":              "kube-apiserver",
	"enable-aggregator-routing":     "kube-apiserver",
	"endpoint-reconciler-type":      "kube-apiserver",
	"event-ttl":                     "kube-apiserver",
	"service-cluster-ip-range":      "kube-apiserver",
	// kubectl
	"all":              "kubectl",
	"dry-run":          "kubectl",
	"field-selector":   "kubectl",
	"force-conflicts":  "kubectl",
	"ignore-not-found": "kubectl",
	"prefix":           "kubectl logs",
	"raw":              "kubectl",
	"server-side":      "kubectl",
	"show-labels":      "kubectl",
	"sort-by":          "kubectl",
	"tcp":              "kubectl create service",
	// helm
	"atomic":                  "helm",
	"include-crds":            "helm template",
	"no-hooks":                "helm",
	"plain-http":              "helm",
	"reset-then-reuse-values": "helm upgrade",
	"reuse-values":            "helm upgrade",
	"set":                     "helm",
	"set-file":                "helm",
	"set-json":                "helm",
	"show-only":               "helm template",
	"take-ownership":          "helm",
	"version":                 "helm",
	"wait":                    "helm",
	// cosign (docs/release.md)
	"tlog-upload":          "cosign sign",
	"insecure-ignore-tlog": "cosign verify",
	// Kyverno, compared in design.md
	"openreportsEnabled": "Kyverno",
	// skopeo
	"dest-tls-verify": "skopeo copy",
	"src-tls-verify":  "skopeo copy",
	// cert-manager's controller and webhook, and Gatekeeper, compared
	// with ours in operations.md
	"enable-certificate-owner-ref": "cert-manager's controller",
	"client-ca-path":               "cert-manager's webhook",
	"client-subject-names":         "cert-manager's webhook",
	"client-ca-name":               "Gatekeeper",
	"client-cn-name":               "Gatekeeper",
}

// proseSpans are code spans that begin like a command or a flag but quote
// something else, with what they quote.
var proseSpans = map[string]string{
	"clusterip-policy is not ready: ...; retry in a few seconds":              "the webhook's refusal while its view is not ready",
	"clusterip-policy webhook v0.1.0 (commit 1a2b3c4, go1.26.8, linux/amd64)": "the version line the binary prints",
	"clusterip-policy readiness probe (in memory)":                            "a row of a table of what is measured",
	"--name[=value]":  "the form of a flag in the chart's extraArgs",
	"--hold-max-wait": "a flag that does not exist: architecture.md's example of adding one",
}

// toolFlag finds a flag definition in a Go main package of ours that is
// not the binary (certs/cmd/gencerts, test/load, test/ipaddresses, ...):
// flag.String("name", ...) and the like.
var toolFlag = regexp.MustCompile(`\b[A-Za-z_]+\.(?:String|Int|Int64|Uint|Bool|Duration|Float64|Var|StringVar|IntVar|BoolVar|DurationVar|Func|TextVar)\((?:&?[A-Za-z_.]+, )?"([a-z][a-z0-9-]*)"`)

// commandTree is the binary's command tree, serve included.
func commandTree() *cobra.Command {
	tree := cli.NewRoot("clusterip-policy", cli.IOStreams{In: strings.NewReader(""), Out: io.Discard, ErrOut: io.Discard}, server.Command(io.Discard))
	tree.InitDefaultHelpCmd()
	return tree
}

// ourFlags returns every flag of every command of the binary (the
// command paths that define it), and every flag of the repository's other
// Go programs (their directory).
func ourFlags(t *testing.T, tree *cobra.Command) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		add := func(f *pflag.Flag) { out[f.Name] = append(out[f.Name], c.CommandPath()) }
		c.LocalFlags().VisitAll(add)
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(tree)
	for _, dir := range []string{"certs", "test", "hack"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return err
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			for _, m := range toolFlag.FindAllStringSubmatch(string(b), -1) {
				out[m[1]] = append(out[m[1]], rel(filepath.Dir(p)))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// ourCommand is how a span runs the binary: as itself, as a kubectl plugin
// or as the built file.
var ourCommand = regexp.MustCompile(`^(?:kubectl clusterip-policy|clusterip-policy|\.?/?bin/clusterip-policy)(?:\s|$)`)

// flagToken is one --flag (or --flag=value) of a span; a name ending in
// '-' names a family (`--leader-election-*`).
var flagToken = regexp.MustCompile(`(?:^|\s)--([a-z][a-zA-Z0-9-]*)`)

// conditionWait is a wait on one of the ClusterIPPolicy's conditions.
var conditionWait = regexp.MustCompile(`--for=condition=([A-Za-z]+)\b.*clusterippolic|clusterippolic.*--for=condition=([A-Za-z]+)\b`)

// policyConditions are the condition types the ClusterIPPolicy's status
// carries.
var policyConditions = map[string]bool{
	v1alpha1.ConditionReady:                  true,
	v1alpha1.ConditionAudited:                true,
	v1alpha1.ConditionMatchConditionsInForce: true,
	v1alpha1.ConditionWebhookReachable:       true,
	v1alpha1.ConditionBackstopInForce:        true,
}

// checkSpan reports what a code span names that does not exist.
func checkSpan(span string, tree *cobra.Command, flags map[string][]string) []error {
	if proseSpans[span] != "" {
		return nil
	}
	var errs []error
	if m := conditionWait.FindStringSubmatch(span); m != nil {
		if cond := m[1] + m[2]; !policyConditions[cond] {
			errs = append(errs, fmt.Errorf("waits for the condition %s, which a ClusterIPPolicy never has (it has %s)", cond, strings.Join(sortedKeys(policyConditions), ", ")))
		}
	}
	if loc := ourCommand.FindStringIndex(span); loc != nil {
		return append(errs, checkOurCommand(span[loc[1]:], tree)...)
	}
	if strings.HasPrefix(span, "make ") || strings.HasPrefix(span, "go test ") {
		return append(errs, checkNamesUsed(span)...)
	}
	// Another program's command line: its flags are its own.
	if !strings.HasPrefix(span, "--") {
		return errs
	}
	name := flagToken.FindStringSubmatch(span)[1]
	if strings.HasSuffix(name, "-") {
		for f := range flags {
			if strings.HasPrefix(f, name) {
				return errs
			}
		}
		return append(errs, fmt.Errorf("names the flags --%s*, and no flag of ours starts so", name))
	}
	if _, ok := flags[name]; !ok && foreignFlags[name] == "" {
		errs = append(errs, fmt.Errorf("names the flag --%s, which no command of ours has; fix the page, or add it to foreignFlags in docs/inline_test.go with the program it belongs to", name))
	}
	return errs
}

// checkOurCommand holds `clusterip-policy ARGS` to the command tree: the
// command exists, and every --flag it gives is one that command takes.
func checkOurCommand(args string, tree *cobra.Command) []error {
	// Placeholders (CIDR..., FILE, <TAB>) stand for what the reader types.
	var fields []string
	for _, f := range strings.Fields(args) {
		if strings.HasPrefix(f, "<") || strings.ToUpper(f) == f && !strings.HasPrefix(f, "-") {
			continue
		}
		fields = append(fields, f)
	}
	c, rest, err := tree.Find(fields)
	if err != nil {
		return []error{fmt.Errorf("runs clusterip-policy %s: %w", args, err)}
	}
	if c == tree && len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		return []error{fmt.Errorf("runs clusterip-policy %s, which has no command %q", args, rest[0])}
	}
	var errs []error
	for _, m := range flagToken.FindAllStringSubmatch(args, -1) {
		if c.Flags().Lookup(m[1]) == nil && c.InheritedFlags().Lookup(m[1]) == nil {
			errs = append(errs, fmt.Errorf("gives %s the flag --%s, which it does not take (%s --help)", c.CommandPath(), m[1], c.CommandPath()))
		}
	}
	return errs
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func TestInlineCommandsNameWhatExists(t *testing.T) {
	tree := commandTree()
	flags := ourFlags(t, tree)
	if len(flags) < 40 {
		t.Fatalf("found %d flags of ours; the command tree or the tools' flag pattern no longer reads them", len(flags))
	}
	usedForeign, usedProse := map[string]bool{}, map[string]bool{}
	checked := 0
	for _, f := range docFiles(t) {
		for _, s := range CodeSpans(read(t, f)) {
			checked++
			usedProse[s.Text] = true
			for _, m := range flagToken.FindAllStringSubmatch(s.Text, -1) {
				usedForeign[m[1]] = true
			}
			for _, err := range checkSpan(s.Text, tree, flags) {
				t.Errorf("%s:%d: `%s` %v", rel(f), s.Line, s.Text, err)
			}
		}
		for _, b := range Blocks(read(t, f)) {
			for _, c := range Commands(b) {
				for _, m := range flagToken.FindAllStringSubmatch(c, -1) {
					usedForeign[m[1]] = true
				}
			}
		}
	}
	if checked < 500 {
		t.Errorf("read %d code spans; CodeSpans no longer finds them", checked)
	}
	for _, span := range sortedKeys(proseSpans) {
		if !usedProse[span] {
			t.Errorf("proseSpans lists `%s`, which no page shows any more: remove it", span)
		}
	}
	for _, name := range sortedKeys(foreignFlags) {
		if paths, ok := flags[name]; ok {
			t.Errorf("foreignFlags lists --%s as %s's, but it is ours (%s): remove it", name, foreignFlags[name], strings.Join(paths, ", "))
		}
		if !usedForeign[name] {
			t.Errorf("foreignFlags lists --%s, which no page names any more: remove it", name)
		}
	}
}

// The check must see a stale flag, a stale command, a stale make target and
// a stale condition, and pass what exists.
func TestInlineCheckReportsWhatIsGone(t *testing.T) {
	tree := commandTree()
	flags := ourFlags(t, tree)
	for span, want := range map[string]int{
		"clusterip-policy audit --policy FILE":                          0,
		"kubectl clusterip-policy bands --usage":                        0,
		"clusterip-policy serve --hold-reservations --audit-interval=0": 0,
		"clusterip-policy serve --no-such-flag":                         1,
		"clusterip-policy no-such-command":                              1,
		"clusterip-policy bands CIDR...":                                0,
		"--hold-reservations":                                           0,
		"--leader-election-":                                            0,
		"--no-such-flag":                                                1,
		"--service-cluster-ip-range":                                    0,
		"--reuse-ca":                                                    0,
		"make release-check":                                            0,
		"make no-such-target":                                           1,
		"kubectl wait --for=condition=WebhookReachable clusterippolicy/default": 0,
		"kubectl wait --for=condition=NoSuchCondition clusterippolicy/default":  1,
		"kubectl apply --server-side --no-such-kubectl-flag -k manifests/base":  0,
	} {
		if got := checkSpan(span, tree, flags); len(got) != want {
			t.Errorf("checkSpan(%q) = %v, want %d errors", span, got, want)
		}
	}
	spans := CodeSpans("a `x`\n```sh\n`not a span`\n```\nb `y  z` and `w`\n")
	if len(spans) != 3 || spans[0] != (Span{1, "x"}) || spans[1] != (Span{5, "y z"}) || spans[2] != (Span{5, "w"}) {
		t.Errorf("CodeSpans = %v", spans)
	}
}
