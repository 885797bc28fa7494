package manifests

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"clusterip-policy/docs"
)

// runbookBase is where an alert's runbook_url points: a heading of the
// repository's docs on GitHub. docs/observability.md has a heading per
// alert saying when it fires, why at that threshold, and what to do.
const runbookBase = "https://github.com/clusterip-policy/clusterip-policy/blob/main/"

// runbookProblems reports each alert whose runbook_url is missing, points
// outside the repository's docs/, or names a file or heading that docsDir
// does not have.
func runbookProblems(where string, groups []RuleGroup, docsDir string) []string {
	var p []string
	anchors := map[string]map[string]bool{}
	for _, g := range groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			u := r.Annotations["runbook_url"]
			path, ok := strings.CutPrefix(u, runbookBase+"docs/")
			if !ok {
				p = append(p, fmt.Sprintf("%s: %s: runbook_url %q is not a page under %sdocs/", where, r.Alert, u, runbookBase))
				continue
			}
			file, anchor, _ := strings.Cut(path, "#")
			if anchor == "" || strings.Contains(file, "/") || !strings.HasSuffix(file, ".md") {
				p = append(p, fmt.Sprintf("%s: %s: runbook_url %q names no heading of a page in docs/ (want docs/PAGE.md#heading)", where, r.Alert, u))
				continue
			}
			a, ok := anchors[file]
			if !ok {
				b, err := os.ReadFile(filepath.Join(docsDir, file))
				if err != nil {
					p = append(p, fmt.Sprintf("%s: %s: runbook_url %q: %v", where, r.Alert, u, err))
					continue
				}
				a = docs.Anchors(string(b))
				anchors[file] = a
			}
			if !a[anchor] {
				p = append(p, fmt.Sprintf("%s: %s: runbook_url %q: docs/%s has no heading with the anchor #%s", where, r.Alert, u, file, anchor))
			}
		}
	}
	return p
}

func TestEveryAlertHasARunbookInTheDocs(t *testing.T) {
	docsDir := filepath.Join("..", "docs")
	for _, f := range []string{
		filepath.Join("monitoring", AlertsFile),
		filepath.Join("..", "charts", "clusterip-policy", "files", AlertsFile),
	} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rf, err := ParseRulesFile(data)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, p := range runbookProblems(f, rf.Groups, docsDir) {
			t.Error(p)
		}
	}
	data, err := os.ReadFile(filepath.Join("monitoring", "prometheusrule.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	pr, err := ParsePrometheusRule(data)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range runbookProblems("prometheusrule.yaml", pr.Spec.Groups, docsDir) {
		t.Error(p)
	}
}

// The check must report a missing URL, one outside the docs, a missing page
// and a missing heading, and pass a good one.
func TestRunbookCheckReportsBrokenURLs(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "observability.md"), []byte("# O\n## Alerts\n### ClusterIPPolicyWebhookDown\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rule := func(name, url string) Rule {
		r := Rule{Alert: name, Annotations: map[string]string{}}
		if url != "" {
			r.Annotations["runbook_url"] = url
		}
		return r
	}
	groups := []RuleGroup{{Name: "g", Rules: []Rule{
		rule("Good", runbookBase+"docs/observability.md#clusterippolicywebhookdown"),
		rule("NoURL", ""),
		rule("Elsewhere", "https://example.com/runbook"),
		rule("NoPage", runbookBase+"docs/nothing.md#x"),
		rule("NoHeading", runbookBase+"docs/observability.md#clusterippolicynosuchalert"),
		rule("NoAnchor", runbookBase+"docs/observability.md"),
	}}}
	got := runbookProblems("test", groups, dir)
	for _, want := range []string{"NoURL:", "Elsewhere:", "NoPage:", "NoHeading:", "NoAnchor:"} {
		found := false
		for _, g := range got {
			found = found || strings.Contains(g, ": "+want)
		}
		if !found {
			t.Errorf("no problem reported for %s; got %q", strings.TrimSuffix(want, ":"), got)
		}
	}
	if len(got) != 5 {
		t.Errorf("got %d problems, want 5 (Good passes): %q", len(got), got)
	}
}
