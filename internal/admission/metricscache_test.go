package admission

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestCachedDecisionCountersCountIntoTheMetric(t *testing.T) {
	m := newMetrics(prometheus.NewRegistry())
	if n := testutil.CollectAndCount(m.decisions); n != 0 {
		t.Fatalf("%d series before any decision, want none", n)
	}
	for range 3 {
		m.decisionCounters.inc("mutate", "allowed", "")
	}
	m.decisionCounters.inc("validate", "denied", "reserved-for-other")
	if got := testutil.ToFloat64(m.decisions.WithLabelValues("mutate", "allowed", "")); got != 3 {
		t.Errorf("mutate/allowed = %v, want 3", got)
	}
	if got := testutil.ToFloat64(m.decisions.WithLabelValues("validate", "denied", "reserved-for-other")); got != 1 {
		t.Errorf("validate/denied/reserved-for-other = %v, want 1", got)
	}
	if n := testutil.CollectAndCount(m.decisions); n != 2 {
		t.Errorf("%d series, want 2", n)
	}
	if n := testing.AllocsPerRun(100, func() { m.decisionCounters.inc("mutate", "allowed", "") }); n != 0 {
		t.Errorf("counting a known decision allocates %v times", n)
	}
}
