package manifests

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// The files of manifests/monitoring. Their checks are in monitoring_test.go;
// the e2e test TestMonitoringMetricsExist scrapes a real webhook and
// kube-apiserver for the metrics they name.
const (
	MonitoringDir      = "monitoring"
	PrometheusRuleFile = "prometheusrule.yaml"
	AlertsFile         = "alerts.yaml"
	DashboardFile      = "dashboard.json"
)

// RuleGroup is a group of Prometheus rules, as in a rules file and in a
// PrometheusRule's spec.groups.
type RuleGroup struct {
	Name     string `json:"name"`
	Interval string `json:"interval,omitempty"`
	Rules    []Rule `json:"rules"`
}

// Rule is one alerting rule. Record is here only so a recording rule is
// decoded (and refused by the checks) rather than failing as unknown.
type Rule struct {
	Alert       string            `json:"alert,omitempty"`
	Record      string            `json:"record,omitempty"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// PrometheusRule is the part of a monitoring.coreos.com/v1 PrometheusRule
// these files use.
type PrometheusRule struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string            `json:"name"`
		Namespace string            `json:"namespace"`
		Labels    map[string]string `json:"labels,omitempty"`
	} `json:"metadata"`
	Spec struct {
		Groups []RuleGroup `json:"groups"`
	} `json:"spec"`
}

// RulesFile is a plain Prometheus rules file.
type RulesFile struct {
	Groups []RuleGroup `json:"groups"`
}

// ParsePrometheusRule decodes a PrometheusRule strictly: a misspelt field
// (`expression:`, `annotation:`) is an error, not a rule without it.
func ParsePrometheusRule(data []byte) (*PrometheusRule, error) {
	var pr PrometheusRule
	if err := yaml.UnmarshalStrict(data, &pr); err != nil {
		return nil, err
	}
	return &pr, nil
}

// ParseRulesFile decodes a Prometheus rules file strictly.
func ParseRulesFile(data []byte) (*RulesFile, error) {
	var rf RulesFile
	if err := yaml.UnmarshalStrict(data, &rf); err != nil {
		return nil, err
	}
	return &rf, nil
}

// Dashboard is the part of a Grafana dashboard the checks read.
type Dashboard struct {
	Title      string  `json:"title"`
	UID        string  `json:"uid"`
	Panels     []Panel `json:"panels"`
	Templating struct {
		List []Variable `json:"list"`
	} `json:"templating"`
}

// Variable is a dashboard variable. A query variable's Definition is
// Grafana's `label_values(metric, label)`.
type Variable struct {
	Name       string `json:"name"`
	Type       string `json:"type"`
	Definition string `json:"definition"`
}

// Panel is a dashboard panel; a row may hold panels of its own.
type Panel struct {
	ID      int    `json:"id"`
	Title   string `json:"title"`
	Type    string `json:"type"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []Panel `json:"panels"`
}

// ParseDashboard decodes a Grafana dashboard's JSON.
func ParseDashboard(data []byte) (*Dashboard, error) {
	var d Dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, err
	}
	return &d, nil
}

// AllPanels returns the panels with those inside rows, in order.
func (d *Dashboard) AllPanels() []Panel {
	var out []Panel
	var walk func([]Panel)
	walk = func(ps []Panel) {
		for _, p := range ps {
			out = append(out, p)
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

// promqlFunctions are the PromQL functions and aggregations the files may
// call. A name outside it, followed by "(", is reported as unknown, so a
// typo (`rates(`) does not pass as a function of a metric nobody checks.
var promqlFunctions = map[string]bool{
	"sum": true, "min": true, "max": true, "avg": true, "count": true, "topk": true, "bottomk": true,
	"quantile": true, "stddev": true, "group": true, "count_values": true,
	"rate": true, "irate": true, "increase": true, "delta": true, "idelta": true, "deriv": true,
	"changes": true, "resets": true, "absent": true, "absent_over_time": true,
	"histogram_quantile": true, "clamp_min": true, "clamp_max": true, "abs": true,
	"max_over_time": true, "min_over_time": true, "avg_over_time": true, "sum_over_time": true,
	"last_over_time": true, "time": true, "timestamp": true, "vector": true, "scalar": true,
	"label_replace": true, "label_join": true, "sort": true, "sort_desc": true, "round": true,
}

// promqlKeywords are the words of PromQL that are neither metrics nor
// functions.
var promqlKeywords = map[string]bool{
	"and": true, "or": true, "unless": true, "offset": true, "bool": true,
	"by": true, "without": true, "on": true, "ignoring": true,
	"group_left": true, "group_right": true, "inf": true, "nan": true,
}

var (
	// groupingClause is `by (a, b)` and its kin, whose parentheses hold
	// label names, not metrics.
	groupingClause = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\(([^()]*)\)`)
	// token is a number or duration (skipped) or an identifier.
	token = regexp.MustCompile(`[0-9][0-9a-zA-Z_.]*|[a-zA-Z_:][a-zA-Z0-9_:]*`)
)

// ExprMetrics checks a PromQL expression's shape and returns the metric
// names it reads. It is not a PromQL parser (that is the prometheus module,
// far heavier than this repository's dependencies): it catches what a
// careless edit breaks. Strings must close; (), [] and {} must balance
// outside them; every name followed by "(" must be a known function; every
// other name outside {} and [] is a metric. Grafana's $variables may stand
// inside strings and ranges.
func ExprMetrics(expr string) ([]string, error) {
	if strings.TrimSpace(expr) == "" {
		return nil, fmt.Errorf("empty expression")
	}
	// 1. Blank out strings, checking brackets outside them.
	var code strings.Builder
	var stack []rune
	pairs := map[rune]rune{')': '(', ']': '[', '}': '{'}
	rs := []rune(expr)
	for i := 0; i < len(rs); i++ {
		c := rs[i]
		switch c {
		case '"', '\'', '`':
			j := i + 1
			for ; j < len(rs) && rs[j] != c; j++ {
				if rs[j] == '\\' && c != '`' {
					j++
				}
			}
			if j >= len(rs) {
				return nil, fmt.Errorf("the string starting at offset %d is not closed", i)
			}
			code.WriteString(`""`)
			i = j
			continue
		case '(', '[', '{':
			stack = append(stack, c)
		case ')', ']', '}':
			if len(stack) == 0 || stack[len(stack)-1] != pairs[c] {
				return nil, fmt.Errorf("unbalanced %q at offset %d", c, i)
			}
			stack = stack[:len(stack)-1]
		}
		code.WriteRune(c)
	}
	if len(stack) > 0 {
		return nil, fmt.Errorf("%d unclosed bracket(s), the last %q", len(stack), stack[len(stack)-1])
	}
	// 2. Drop label matchers and ranges, then grouping clauses.
	s := dropBetween(code.String(), '{', '}')
	s = dropBetween(s, '[', ']')
	s = groupingClause.ReplaceAllString(s, " ")
	// 3. What is left: functions, keywords, numbers and metrics.
	var names []string
	for _, loc := range token.FindAllStringIndex(s, -1) {
		word := s[loc[0]:loc[1]]
		if word[0] >= '0' && word[0] <= '9' || promqlKeywords[word] {
			continue
		}
		if strings.HasPrefix(strings.TrimLeft(s[loc[1]:], " \t\n"), "(") {
			if !promqlFunctions[word] {
				return nil, fmt.Errorf("unknown function %q", word)
			}
			continue
		}
		if !slices.Contains(names, word) {
			names = append(names, word)
		}
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("reads no metric")
	}
	return names, nil
}

// dropBetween removes what lies between open and close (brackets known
// to balance and not to nest within their own kind).
func dropBetween(s string, open, close byte) string {
	var b strings.Builder
	depth := 0
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == open:
			depth++
		case s[i] == close:
			depth--
		case depth == 0:
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

// MonitoringExprs returns every PromQL expression of the monitoring
// files in dir (manifests/monitoring), each with where it is.
func MonitoringExprs(dir string) (map[string]string, error) {
	out := map[string]string{}
	data, err := os.ReadFile(filepath.Join(dir, PrometheusRuleFile))
	if err != nil {
		return nil, err
	}
	pr, err := ParsePrometheusRule(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", PrometheusRuleFile, err)
	}
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			out[PrometheusRuleFile+" alert "+r.Alert] = r.Expr
		}
	}
	data, err = os.ReadFile(filepath.Join(dir, DashboardFile))
	if err != nil {
		return nil, err
	}
	d, err := ParseDashboard(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", DashboardFile, err)
	}
	for _, p := range d.AllPanels() {
		for _, t := range p.Targets {
			out[fmt.Sprintf("%s panel %q query %s", DashboardFile, p.Title, t.RefID)] = t.Expr
		}
	}
	return out, nil
}

// SeriesBase maps a histogram's series (x_bucket, x_sum, x_count) to the
// metric x when x is one of histograms; any other name to itself.
func SeriesBase(name string, histograms map[string]bool) string {
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && histograms[base] {
			return base
		}
	}
	return name
}
