package manifests

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"clusterip-policy/internal/testutil"
)

// promtool is Prometheus' own rule checker and rule unit tester. It is not
// a Go dependency of this repository (the prometheus module is large):
// Debian ships it in the package prometheus. Without it these tests skip
// and say how to get it; the checks in monitoring_test.go run regardless.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		testutil.MissingTool(t, "promtool is not installed (apt-get install prometheus): the alerts' PromQL and their unit tests in testdata/alerts-promtool-test.yaml are not run")
	}
	return p
}

// runPromtool runs promtool with args in dir, bounded in time.
func runPromtool(t *testing.T, bin, dir string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestAlertsParseWithPromtool(t *testing.T) {
	bin := promtool(t)
	out, err := runPromtool(t, bin, MonitoringDir, "check", "rules", AlertsFile)
	if err != nil {
		t.Fatalf("promtool check rules %s: %v\n%s", AlertsFile, err, out)
	}
	// A broken copy fails, so the run above checked something.
	dir := t.TempDir()
	broken := strings.Replace(string(readMonitoring(t, AlertsFile)), "> 0.05)", "> 0.05", 1)
	if err := os.WriteFile(filepath.Join(dir, AlertsFile), []byte(broken), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := runPromtool(t, bin, dir, "check", "rules", AlertsFile); err == nil {
		t.Errorf("promtool check rules accepted an expression with an unclosed parenthesis:\n%s", out)
	}
}

// The alerts fire on the series they are meant for, and only then:
// testdata/alerts-promtool-test.yaml and
// alerts-promtool-reachability-test.yaml, run against alerts.yaml without its
// annotations (promtool would otherwise want every text repeated).
func TestAlertsFireOnTheirSeries(t *testing.T) {
	bin := promtool(t)
	rf := loadRulesFile(t)
	if out, err := runAlertTests(t, bin, rf); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
	// Broken copies: each loses the part of an expression that a case in
	// the test file exists for, and the run fails on that alert.
	for _, c := range []struct {
		alert, cut string
	}{
		// A pod's first refusal (the failure series starts at 1).
		{"ClusterIPPolicyPolicyRefused", ` or (clusterip_policy_policy_reloads_total{result="failure"} unless clusterip_policy_policy_reloads_total{result="failure"} offset 15m)`},
		// The leader's verdict, not each replica's (whose -1 means "not
		// probing here"): without max by (stage) the alert carries the
		// replica's labels.
		{"ClusterIPPolicyWebhookUnreachable", "max by (stage) "},
		// The same for the configurations' presence.
		{"ClusterIPPolicyWebhookNotRegistered", "max by (stage) "},
		// The reserved ranges are not room the allocator may use.
		{"ClusterIPPolicyDynamicBandFilling", `, state=~"free|allocated"`},
		// A rule that denied nothing the day before.
		{"ClusterIPPolicyDenialsRising", "\n         or 0 * sum by (stage, rule) (rate(clusterip_policy_decisions_total{decision=\"denied\"}[15m]))"},
	} {
		t.Run(c.alert, func(t *testing.T) {
			rf := loadRulesFile(t)
			found := false
			for gi := range rf.Groups {
				for ri, r := range rf.Groups[gi].Rules {
					if r.Alert == c.alert && strings.Contains(r.Expr, c.cut) {
						rf.Groups[gi].Rules[ri].Expr = strings.Replace(r.Expr, c.cut, "", 1)
						found = true
					}
				}
			}
			if !found {
				t.Fatalf("the expression of %s no longer holds %q", c.alert, c.cut)
			}
			out, err := runAlertTests(t, bin, rf)
			if err == nil || !strings.Contains(out, "alertname: "+c.alert) {
				t.Errorf("promtool test rules did not fail on %s without %q: %v\n%s", c.alert, c.cut, err, out)
			}
		})
	}
}

// runAlertTests writes rf without annotations as rules.yaml beside the
// test file and runs promtool test rules.
func runAlertTests(t *testing.T, bin string, rf *RulesFile) (string, error) {
	t.Helper()
	dir := t.TempDir()
	for gi := range rf.Groups {
		for ri := range rf.Groups[gi].Rules {
			rf.Groups[gi].Rules[ri].Annotations = nil
		}
	}
	rules, err := yaml.Marshal(rf)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{"rules.yaml": rules}
	for name, src := range map[string]string{"tests.yaml": "alerts-promtool-test.yaml", "reachability.yaml": "alerts-promtool-reachability-test.yaml"} {
		data, err := os.ReadFile(filepath.Join("testdata", src))
		if err != nil {
			t.Fatal(err)
		}
		files[name] = data
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return runPromtool(t, bin, dir, "test", "rules", "tests.yaml", "reachability.yaml")
}

// chartTunedAlertValues are the non-default values of
// testdata/alerts-promtool-chart-tuned-test.yaml.
var chartTunedAlertValues = []string{
	"--set", "monitoring.prometheusRule.enabled=true",
	"--set", "monitoring.prometheusRule.capacity.dynamicBand.warning.usedPercent=50",
	"--set", "monitoring.prometheusRule.customRules.ClusterIPPolicyDynamicBandFilling.for=1m",
	"--set", "monitoring.prometheusRule.customRules.ClusterIPPolicyDynamicBandFilling.severity=page",
	"--set", "monitoring.prometheusRule.customRules.ClusterIPPolicyDynamicBandFilling.labels.team=netops",
	"--set", "monitoring.prometheusRule.capacity.reservedRange.critical.freeAddresses=2",
	"--set", "monitoring.prometheusRule.additionalRuleLabels.cluster=prod",
	"--set-json", `monitoring.prometheusRule.extraRules=[{"alert":"MyTeamWebhookScrapeDown","expr":"up{job=\"clusterip-policy-webhook\"} == 0","for":"2m","labels":{"team":"netops"}}]`,
}

// renderedRules renders the chart's PrometheusRule with args and returns
// its groups as a rules file.
func renderedRules(t *testing.T, args ...string) *RulesFile {
	t.Helper()
	out, err := helmTemplate(t, args...)
	if err != nil {
		t.Fatalf("helm template %s: %v", strings.Join(args, " "), err)
	}
	docs, err := SplitYAML(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range docs {
		if !strings.Contains(string(doc), "kind: PrometheusRule") {
			continue
		}
		pr, err := ParsePrometheusRule(doc)
		if err != nil {
			t.Fatalf("the rendered PrometheusRule: %v", err)
		}
		return &RulesFile{Groups: pr.Spec.Groups}
	}
	t.Fatalf("helm template %s rendered no PrometheusRule", strings.Join(args, " "))
	return nil
}

// The chart's alerts as the values tune them are still rules Prometheus
// loads, and they fire at the tuned levels: promtool checks the rendered
// groups and runs testdata/alerts-promtool-chart-tuned-test.yaml on them.
// The same test run on the default render fails on the alerts whose
// levels changed, so it does test the tuning.
func TestChartTunedAlertsWithPromtool(t *testing.T) {
	bin := promtool(t)
	run := func(rf *RulesFile) (string, error) {
		dir := t.TempDir()
		full, err := yaml.Marshal(rf)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "full.yaml"), full, 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := runPromtool(t, bin, dir, "check", "rules", "full.yaml"); err != nil {
			t.Fatalf("promtool check rules on the rendered PrometheusRule: %v\n%s", err, out)
		}
		// Without annotations, as runAlertTests: promtool would want every
		// text repeated in the test.
		for gi := range rf.Groups {
			for ri := range rf.Groups[gi].Rules {
				rf.Groups[gi].Rules[ri].Annotations = nil
			}
		}
		rules, err := yaml.Marshal(rf)
		if err != nil {
			t.Fatal(err)
		}
		test, err := os.ReadFile(filepath.Join("testdata", "alerts-promtool-chart-tuned-test.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		for name, data := range map[string][]byte{"rules.yaml": rules, "tuned.yaml": test} {
			if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return runPromtool(t, bin, dir, "test", "rules", "tuned.yaml")
	}
	if out, err := run(renderedRules(t, chartTunedAlertValues...)); err != nil {
		t.Fatalf("promtool test rules on the tuned render: %v\n%s", err, out)
	}
	out, err := run(renderedRules(t, "--set", "monitoring.prometheusRule.enabled=true"))
	if err == nil {
		t.Fatal("the tuned alerts' test passed on the default render: it does not test the tuning")
	}
	for _, alert := range []string{"ClusterIPPolicyDynamicBandFilling", "ClusterIPPolicyReservedRangeFull", "MyTeamWebhookScrapeDown"} {
		if !strings.Contains(out, "alertname: "+alert) {
			t.Errorf("on the default render the test did not fail on %s:\n%s", alert, out)
		}
	}
}
