package server

import (
	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"clusterip-policy/pkg/allocview"
)

// metrics are registered in controller-runtime's registry, so one /metrics
// serves them beside the webhook server's own request metrics
// (controller_runtime_webhook_requests_total, ..._latency_seconds).
type metrics struct {
	decisions        *prometheus.CounterVec
	decisionCounters *decisionCounters // of decisions
	policyReloads    *prometheus.CounterVec
	policyGeneration prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer, view *allocview.View) *metrics {
	m := &metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "clusterip_policy_decisions_total",
			Help: "Admission decisions by stage (mutate, validate, servicecidr), decision (allowed, denied, warned, patched) and rule (empty when none matched).",
		}, []string{"stage", "decision", "rule"}),
		policyReloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "clusterip_policy_policy_reloads_total",
			Help: "Policy file loads by result (success, failure). A failure keeps the last good policy.",
		}, []string{"result"}),
		policyGeneration: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "clusterip_policy_policy_generation",
			Help: "Generation of the policy in force; grows with each accepted change.",
		}),
	}
	m.decisionCounters = &decisionCounters{vec: m.decisions}
	reg.MustRegister(m.decisions, m.policyReloads, m.policyGeneration,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "clusterip_policy_view_generation",
			Help: "Generation of the view of ServiceCIDRs and IPAddresses; grows with each change seen.",
		}, func() float64 { return float64(view.Snapshot().Generation) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "clusterip_policy_view_allocated_ips",
			Help: "IPAddress objects in the view.",
		}, func() float64 { return float64(view.Snapshot().AllocatedCount()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "clusterip_policy_view_service_cidrs",
			Help: "ServiceCIDR objects in the view (active or not).",
		}, func() float64 { return float64(len(view.Snapshot().ServiceCIDRs())) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "clusterip_policy_view_synced",
			Help: "1 once the view holds the cluster's initial state; until then every review is denied as not ready.",
		}, func() float64 {
			if view.Snapshot().Synced {
				return 1
			}
			return 0
		}),
	)
	return m
}

// defaultRegistry is controller-runtime's, where the webhook server's own
// metrics live.
var defaultRegistry = crmetrics.Registry
