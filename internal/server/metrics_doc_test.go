package server

import (
	"crypto/x509"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes/fake"

	"clusterip-policy/internal/admission"
	"clusterip-policy/internal/controllers/arming"
	"clusterip-policy/internal/controllers/backstop"
	"clusterip-policy/internal/controllers/holds"
	"clusterip-policy/internal/controllers/matchconditions"
	"clusterip-policy/internal/controllers/periodicaudit"
	"clusterip-policy/internal/controllers/servingcerts"
	"clusterip-policy/internal/leader"
	"clusterip-policy/internal/policysource"
	"clusterip-policy/internal/readiness"
	"clusterip-policy/internal/readiness/readinesstest"
	"clusterip-policy/pkg/allocview"
	"clusterip-policy/pkg/allocview/kubesource"
	"clusterip-policy/pkg/policy"
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
	r := readinesstest.New(t, readinesstest.Spec, true, logr.Discard())
	admission.Endpoints(admission.Config{Gate: r.Gate, DecisionLog: logr.Discard(), Registry: reg})
	policysource.NewMetrics(reg)
	view := allocview.NewView()
	readiness.RegisterViewMetrics(reg, view, kubesource.New(fake.NewClientset(), view, logr.Discard()))
	readiness.RegisterBandUsage(reg, view, func() []allocview.Band { return nil })
	readiness.RegisterRangeUsage(reg, view, func() []policy.ReservedRange { return nil })
	holds.NewMetrics(reg)
	leader.NewMetrics(reg)
	periodicaudit.NewMetrics(reg)
	periodicaudit.NewReportMetrics(reg)
	matchconditions.NewMetrics(reg)
	arming.NewMetrics(reg)
	backstop.NewMetrics(reg)
	servingcerts.NewMetrics(reg)
	servingcerts.RegisterExpiry(reg, func() (leaf, ca *x509.Certificate) { return nil, nil })
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
