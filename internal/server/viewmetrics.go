package server

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"clusterip-policy/pkg/allocview/kubesource"
)

// registerViewMetrics exposes how current the view's feed is: how long it
// has gone without an established watch (what --max-view-staleness
// judges), when each resource last delivered anything, and how often its
// watch was restarted and why.
func registerViewMetrics(reg prometheus.Registerer, source *kubesource.Source) {
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
