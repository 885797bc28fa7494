package admission

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// decisionCounters caches the counter of each (stage, decision, rule) of
// clusterip_policy_decisions_total, so that counting a review is one map
// read instead of prometheus' label hashing, validation and locking. The
// labels come from fixed sets (stages, outcomes, rule IDs; never from a
// request), so the cache stays as small as the metric itself, and a series
// appears in /metrics exactly when it did before: on its first use.
type decisionCounters struct {
	vec *prometheus.CounterVec
	m   sync.Map // decisionLabels -> prometheus.Counter
}

type decisionLabels struct{ stage, decision, rule string }

func (c *decisionCounters) inc(stage, decision, rule string) {
	k := decisionLabels{stage, decision, rule}
	if counter, ok := c.m.Load(k); ok {
		counter.(prometheus.Counter).Inc()
		return
	}
	counter, _ := c.m.LoadOrStore(k, c.vec.WithLabelValues(stage, decision, rule))
	counter.(prometheus.Counter).Inc()
}
