package readiness

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"clusterip-policy/pkg/allocview"
	"clusterip-policy/pkg/allocview/kubesource"
	"clusterip-policy/test/fixtures"
)

func TestViewMetricsReportEachWatchedResource(t *testing.T) {
	client := fake.NewClientset(fixtures.ServiceCIDR("kubernetes", "10.96.0.0/16"))
	client.Resources = []*metav1.APIResourceList{{
		GroupVersion: "networking.k8s.io/v1",
		APIResources: []metav1.APIResource{{Name: "servicecidrs"}, {Name: "ipaddresses"}},
	}}
	source := kubesource.New(client, allocview.NewView(), logr.Discard())
	reg := prometheus.NewRegistry()
	RegisterViewMetrics(reg, allocview.NewView(), source)

	// Before the source runs nothing is watched: no per-resource series,
	// and the stale gauge counts from the start.
	if n, err := testutil.GatherAndCount(reg, "clusterip_policy_view_last_received_seconds", "clusterip_policy_view_watch_restarts_total"); err != nil || n != 0 {
		t.Fatalf("%d per-resource series before the source runs (%v)", n, err)
	}
	if s := staleSeconds(t, reg); s <= 0 {
		t.Fatalf("stale %v before the source has watched anything, want > 0", s)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = source.Run(ctx) }()
	defer func() { cancel(); <-done }()
	fixtures.Eventually(t, "synced with both watches established", 30*time.Second, func() bool {
		return source.HasSynced() && staleSeconds(t, reg) == 0
	})
	// 2 resources: one last-received gauge and one counter per reason each.
	want := 2 + 2*len(kubesource.RestartReasons)
	if n, err := testutil.GatherAndCount(reg, "clusterip_policy_view_last_received_seconds", "clusterip_policy_view_watch_restarts_total"); err != nil || n != want {
		t.Fatalf("%d per-resource series, want %d (%v)", n, want, err)
	}
	expected := `# HELP clusterip_policy_view_watch_restarts_total Watch restarts by resource and reason: closed (the stream ended: the apiserver's watch timeout, or a crashed apiserver), error (a watch or list refused or failed; retried every 100ms-2s), expired (410 Gone: relisted and replaced), idle (nothing, not even a bookmark, for 150s: re-watched).
# TYPE clusterip_policy_view_watch_restarts_total counter
clusterip_policy_view_watch_restarts_total{reason="closed",resource="ipaddresses"} 0
clusterip_policy_view_watch_restarts_total{reason="closed",resource="servicecidrs"} 0
clusterip_policy_view_watch_restarts_total{reason="error",resource="ipaddresses"} 0
clusterip_policy_view_watch_restarts_total{reason="error",resource="servicecidrs"} 0
clusterip_policy_view_watch_restarts_total{reason="expired",resource="ipaddresses"} 0
clusterip_policy_view_watch_restarts_total{reason="expired",resource="servicecidrs"} 0
clusterip_policy_view_watch_restarts_total{reason="idle",resource="ipaddresses"} 0
clusterip_policy_view_watch_restarts_total{reason="idle",resource="servicecidrs"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(expected), "clusterip_policy_view_watch_restarts_total"); err != nil {
		t.Fatal(err)
	}
}

func staleSeconds(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "clusterip_policy_view_stale_seconds" {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatal("no clusterip_policy_view_stale_seconds")
	return 0
}
