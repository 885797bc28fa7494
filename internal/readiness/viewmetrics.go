package readiness

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"clusterip-policy/pkg/allocview"
	"clusterip-policy/pkg/allocview/kubesource"
)

// RegisterViewMetrics exposes the view the gate reads: its generation and
// size, whether it has synced, how long it has gone without an established
// watch (what --max-view-staleness judges), when each resource last
// delivered anything, and how often its watch was restarted and why.
// source is nil where nothing feeds the view (tests).
func RegisterViewMetrics(reg prometheus.Registerer, view *allocview.View, source *kubesource.Source) {
	reg.MustRegister(
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
	if source == nil {
		return
	}
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "clusterip_policy_view_stale_seconds",
			Help: "How long ServiceCIDRs or IPAddresses (the worse of the two) have had no established watch stream, so the view may miss changes (0 when both are watched); past --max-view-staleness reviews are denied as not ready.",
		}, func() float64 { d, _ := source.StaleFor(time.Now()); return d.Seconds() }),
		feedCollector{source},
	)
}

var (
	lastReceivedDesc = prometheus.NewDesc("clusterip_policy_view_last_received_seconds",
		"Seconds since the view last received anything (list page, event or bookmark) for the resource. A healthy watch gets a bookmark about once a minute even in a quiet cluster.",
		[]string{"resource"}, nil)
	watchRestartsDesc = prometheus.NewDesc("clusterip_policy_view_watch_restarts_total",
		"Watch restarts by resource and reason: closed (the stream ended: the apiserver's watch timeout, or a crashed apiserver), error (a watch or list refused or failed; retried every 100ms-2s), expired (410 Gone: relisted and replaced), idle (nothing, not even a bookmark, for 150s: re-watched).",
		[]string{"resource", "reason"}, nil)
)

// feedCollector reads the source's counters at scrape time, so the
// source itself stays free of Prometheus.
type feedCollector struct{ source *kubesource.Source }

func (c feedCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- lastReceivedDesc
	ch <- watchRestartsDesc
}

func (c feedCollector) Collect(ch chan<- prometheus.Metric) {
	now := time.Now()
	for _, f := range c.source.Feeds() {
		ch <- prometheus.MustNewConstMetric(lastReceivedDesc, prometheus.GaugeValue, now.Sub(f.LastReceived).Seconds(), f.Resource)
		for _, reason := range kubesource.RestartReasons {
			ch <- prometheus.MustNewConstMetric(watchRestartsDesc, prometheus.CounterValue, float64(f.Restarts[reason]), f.Resource, reason)
		}
	}
}
