package server

import (
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"clusterip-policy/internal/admission"
)

// describedNames is a prometheus.Registerer that keeps the name of every
// metric registered in it, from the collectors' descriptions.
type describedNames map[string]bool

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

func (d describedNames) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc)
	go func() { c.Describe(ch); close(ch) }()
	for desc := range ch {
		if m := fqName.FindStringSubmatch(desc.String()); m != nil {
			d[m[1]] = true
		}
	}
	return nil
}

func (d describedNames) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		_ = d.Register(c)
	}
}

func (d describedNames) Unregister(prometheus.Collector) bool { return true }

// A metric is added in its package's NewMetrics (or Register...) and in
// docs/observability.md's table of metrics: every metric the webhook's
// packages register, as serve registers them, is named there.
func TestEveryMetricIsDocumented(t *testing.T) {
	reg := describedNames{}
	// As serve builds them, with every feature on: the core, the table of
	// features, and the admission endpoints.
	c := testHostContext(t, reg, append(everyRoleArgs, "--policy-reports", "--metrics-secure")...)
	if _, err := buildCore(c, nil); err != nil {
		t.Fatal(err)
	}
	h, err := buildFeatures(c)
	if err != nil {
		t.Fatal(err)
	}
	leaderElection(c, h.works)
	admission.Endpoints(admission.Config{Gate: c.gate, DecisionLog: logr.Discard(), Registry: reg})
	if _, err := metricsServing(c); err != nil {
		t.Fatal(err)
	}
	if len(reg) < 20 {
		t.Fatalf("only %d metrics described: %v", len(reg), reg)
	}

	doc, err := os.ReadFile("../../docs/observability.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(doc), "\n## Metrics\n")
	if !ok {
		t.Fatal(`docs/observability.md has no "## Metrics" section`)
	}
	if i := strings.Index(table, "\n## "); i >= 0 {
		table = table[:i]
	}
	var missing []string
	for name := range reg {
		if !strings.Contains(table, "`"+name+"`") {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("docs/observability.md's table of metrics does not name %v: add a row for each metric you register", missing)
	}
}
