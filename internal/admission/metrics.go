package admission

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the admission path's: serve registers them in
// controller-runtime's registry, so one /metrics serves them beside the
// webhook server's own request metrics
// (controller_runtime_webhook_requests_total, ..._latency_seconds).
type metrics struct {
	decisions        *prometheus.CounterVec
	decisionCounters *decisionCounters // of decisions
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "clusterip_policy_decisions_total",
			Help: "Admission decisions by stage (mutate, validate, servicecidr), decision (allowed, denied, warned, patched) and rule (empty when none matched).",
		}, []string{"stage", "decision", "rule"}),
	}
	m.decisionCounters = &decisionCounters{vec: m.decisions}
	reg.MustRegister(m.decisions)
	return m
}
