//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"clusterip-policy/test/e2e/framework"
	"clusterip-policy/test/fixtures"
)

// auditEventReason is the reason of the periodic audit's Events (public API).
const auditEventReason = "ClusterIPPolicyViolation"

// policyEvents lists the periodic audit's Events in all namespaces, as
// "namespace/service" with how many Events each has.
func policyEvents(t *testing.T, ctx context.Context, cs kubernetes.Interface) map[string]int {
	t.Helper()
	l, err := cs.EventsV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "reason=" + auditEventReason})
	if err != nil {
		t.Fatalf("list Events: %v", err)
	}
	out := map[string]int{}
	for _, e := range l.Items {
		if e.Type != corev1.EventTypeWarning || e.ReportingController != "clusterip-policy" || e.Regarding.Kind != "Service" || e.Regarding.UID == "" {
			t.Errorf("Event %s/%s: type %s controller %s regarding %+v", e.Namespace, e.Name, e.Type, e.ReportingController, e.Regarding)
		}
		out[e.Regarding.Namespace+"/"+e.Regarding.Name]++
	}
	return out
}

// Offending Services created before the webhook exists are found by the
// leader's periodic audit: the gauge per rule says how many, and each
// offending Service gets one Warning Event that `kubectl describe service`
// shows, not repeated by later passes nor by the other replica.
func TestPeriodicAuditReportsExistingViolationsAsGaugeAndEvents(t *testing.T) {
	c := own(t, framework.Options{Policy: auditPolicy, Webhooks: 0})
	if _, err := os.Stat(c.Bin.Webhook); err != nil {
		t.Fatalf("%s is missing (run `make build`): %v", c.Bin.Webhook, err)
	}
	cs := c.Client(0)
	ctx := testContext(t, 4*time.Minute)
	for _, ns := range []string{"audit-legacy", "clusterip-policy"} {
		if err := framework.EnsureNamespace(ctx, cs, ns); err != nil {
			t.Fatal(err)
		}
	}
	// No webhook is registered: the apiserver takes all of these.
	for _, s := range []*corev1.Service{
		fixtures.Service("default", "dynamic-1"),
		fixtures.Service("default", "static", fixtures.WithClusterIP("10.96.0.53")),
		fixtures.Service("default", "early-bird", fixtures.WithClusterIP("10.96.0.10")),   // reserved-for-other
		fixtures.Service("kube-system", "kube-dns", fixtures.WithClusterIP("10.96.0.11")), // reservation-not-held
	} {
		mustCreate(t, ctx, cs, s)
	}
	if _, err := cs.NetworkingV1().ServiceCIDRs().Create(ctx, fixtures.ServiceCIDR("audit-unapproved", "10.97.0.0/24"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create ServiceCIDR: %v", err)
	}
	for _, s := range []*corev1.Service{
		fixtures.Service("default", "spilled-1", fixtures.WithClusterIP("10.97.0.31")),    // outside-service-cidrs
		fixtures.Service("audit-legacy", "old", fixtures.WithClusterIP("10.97.0.40")),     // exempt namespace
		fixtures.Service("clusterip-policy", "own", fixtures.WithClusterIP("10.97.0.41")), // the webhook's namespace: never reviewed
	} {
		if err := retryUntil(ctx, 15*time.Second, func() error { _, err := create(ctx, cs, s); return err }); err != nil {
			t.Fatalf("create %s/%s at %s: %v", s.Namespace, s.Name, s.Spec.ClusterIP, err)
		}
	}
	offending := map[string]int{"default/early-bird": 1, "kube-system/kube-dns": 1, "default/spilled-1": 1}

	// `webhook audit` does not know which namespace the webhook runs in, so
	// it also reports clusterip-policy/own; the server leaves its own
	// namespace out, as its webhook configurations do.
	t.Run("webhook audit reports the offending Services", func(t *testing.T) {
		policyFile := filepath.Join(c.Dir, "audit-policy.yaml")
		if err := os.WriteFile(policyFile, []byte(auditPolicy), 0o644); err != nil {
			t.Fatal(err)
		}
		code, out, stderr := runAudit(t, c, nil, "--kubeconfig="+c.AdminKubeconfig, "--policy", policyFile)
		if code != 1 || !strings.Contains(out, "4 findings (2 outside-service-cidrs, 1 reserved-for-other, 1 reservation-not-held)") || !strings.Contains(out, "clusterip-policy/own") {
			t.Fatalf("exit %d, want 1 and 4 findings; stderr %s\n%s", code, stderr, out)
		}
		t.Logf("e2e: periodic audit: the report of `webhook audit`:\n%s", out)
	})

	// Two replicas with a short interval, as the manifests' service account.
	start := time.Now()
	for range 2 {
		if _, err := c.StartWebhookWithArgs(ctx, "", "--audit-interval=2s"); err != nil {
			t.Fatalf("start a webhook: %v", err)
		}
	}
	ready := time.Since(start)

	t.Run("the leader's gauge counts the violations per rule", func(t *testing.T) {
		want := map[string]float64{"invalid-ip": 0, "outside-service-cidrs": 1, "reserved-for-other": 1, "already-allocated": 0, "reservation-not-held": 1}
		fixtures.EventuallyNil(t, fmt.Sprintf("a pass with the gauge at %v", want), 30*time.Second, func() error {
			ok := metricSum(t, ctx, c, "clusterip_policy_audit_passes_total", `result="success"`) > 0
			for rule, w := range want {
				ok = ok && metricSum(t, ctx, c, "clusterip_policy_existing_violations", `rule="`+rule+`"`) == w
			}
			if !ok {
				m, _ := c.Webhooks[0].Metrics()
				return fmt.Errorf("metrics of replica 1:\n%s", auditMetricLines(m))
			}
			return nil
		})
		t.Logf("e2e: periodic audit: gauge at its values %s after the replicas were started (%s to ready)", time.Since(start).Round(10*time.Millisecond), ready.Round(10*time.Millisecond))
		// Only the leader exposes the gauge: one replica's series, not two.
		series := 0
		for i := range c.Webhooks {
			m, err := c.Webhooks[i].Metrics()
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(m, `clusterip_policy_existing_violations{rule="reserved-for-other"}`) {
				series++
				if !regexp.MustCompile(`(?m)^clusterip_policy_audit_last_success_timestamp_seconds [1-9]`).MatchString(m) {
					t.Errorf("the leader's last success timestamp is not set:\n%s", auditMetricLines(m))
				}
				t.Logf("e2e: periodic audit: the leader's metrics:\n%s", auditMetricLines(m))
			}
		}
		if series != 1 {
			t.Errorf("%d replicas expose the violations gauge, want 1 (the leader)", series)
		}
	})

	t.Run("each offending Service has one Warning Event, shown by kubectl describe", func(t *testing.T) {
		var got map[string]int
		_ = fixtures.Wait(20*time.Second, func() bool {
			got = policyEvents(t, ctx, cs)
			return len(got) == len(offending)
		})
		if !maps.Equal(got, offending) {
			t.Fatalf("Events by Service = %v, want %v", got, offending)
		}
		t.Logf("e2e: periodic audit: Events on %v %s after the replicas were started", slices.Sorted(maps.Keys(got)), time.Since(start).Round(10*time.Millisecond))
		out, _, err := c.Kubectl(ctx, "", "describe", "service", "early-bird", "-n", "default")
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{
			`Warning\s+ClusterIPPolicyViolation\s+.*clusterip-policy`,
			`10\.96\.0\.10 is reserved for Service kube-system/kube-dns \(cluster DNS\)\. Rule reserved-for-other \(spec\.clusterIP; deny at admission\)\. Fix: delete default/early-bird and create it again without clusterIP`,
		} {
			if !regexp.MustCompile(want).MatchString(out) {
				t.Errorf("kubectl describe service early-bird lacks %s:\n%s", want, out)
			}
		}
		t.Logf("e2e: periodic audit: kubectl describe service early-bird -n default:\n%s", out[strings.Index(out, "Events:"):])
		out, _, err = c.Kubectl(ctx, "", "describe", "service", "kube-dns", "-n", "kube-system")
		if err != nil || !strings.Contains(out, "kube-system/kube-dns holds 10.96.0.11, but 10.96.0.10 is reserved for it (cluster DNS). Rule reservation-not-held (spec.clusterIP). Fix: first move default/early-bird off 10.96.0.10") {
			t.Errorf("kubectl describe service kube-dns (%v):\n%s", err, out)
		}
	})

	t.Run("later passes and the other replica add no Event", func(t *testing.T) {
		before := metricSum(t, ctx, c, "clusterip_policy_audit_passes_total", `result="success"`)
		fixtures.Eventually(t, "3 more passes with --audit-interval=2s", 30*time.Second, func() bool {
			return metricSum(t, ctx, c, "clusterip_policy_audit_passes_total", `result="success"`) >= before+3
		})
		if got := policyEvents(t, ctx, cs); !maps.Equal(got, offending) {
			t.Fatalf("after 3 more passes: Events by Service = %v, want still %v", got, offending)
		}
		if n := metricSum(t, ctx, c, "clusterip_policy_audit_events_total", `result="created"`); n != 3 {
			t.Errorf("audit_events_total{created} summed over the replicas = %v, want 3", n)
		}
	})

	t.Run("the leader stops, the other replica takes over the gauge and repeats no Event of the hour", func(t *testing.T) {
		lead := -1
		for i := range c.Webhooks {
			if v, err := c.WebhookMetric(ctx, i, "clusterip_policy_audit_last_success_timestamp_seconds"); err == nil && v > 0 {
				lead = i
			}
		}
		if lead < 0 {
			t.Fatal("no leader")
		}
		hour := time.Now().Truncate(time.Hour)
		c.Webhooks[lead].Stop(10 * time.Second) // SIGTERM: the Lease is released on the way out
		stopped := time.Now()
		other := 1 - lead
		deadline := time.Now().Add(30 * time.Second)
		fixtures.Eventually(t, "the remaining replica to report the gauge", time.Until(deadline), func() bool {
			v, err := c.WebhookMetric(ctx, other, "clusterip_policy_existing_violations", `rule="reserved-for-other"`)
			return err == nil && v == 1
		})
		t.Logf("e2e: periodic audit: replica %d reported the gauge %s after replica %d stopped", other+1, time.Since(stopped).Round(10*time.Millisecond), lead+1)
		// A pass sets the gauge before it looks at the Events: wait until
		// the new leader has looked at all three offending Services.
		var existing float64
		_ = fixtures.Wait(time.Until(deadline), func() bool {
			var err error
			if existing, err = c.WebhookMetric(ctx, other, "clusterip_policy_audit_events_total", `result="existing"`); err != nil {
				t.Fatal(err)
			}
			created, err := c.WebhookMetric(ctx, other, "clusterip_policy_audit_events_total", `result="created"`)
			if err != nil {
				t.Fatal(err)
			}
			return existing+created >= 3
		})
		got := policyEvents(t, ctx, cs)
		if time.Now().Truncate(time.Hour).Equal(hour) {
			if !maps.Equal(got, offending) || existing != 3 {
				t.Fatalf("after the leader change: Events = %v (new leader: %v existing), want still %v and 3", got, existing, offending)
			}
		} else {
			t.Logf("the clock hour changed during the takeover: the new leader may emit once more; Events = %v", got)
		}
	})

	t.Run("a fixed Service leaves the gauge at the next pass", func(t *testing.T) {
		if err := cs.CoreV1().Services("default").Delete(ctx, "early-bird", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		fixtures.Eventually(t, "reserved-for-other to leave the gauge after default/early-bird was deleted", 20*time.Second, func() bool {
			return metricSum(t, ctx, c, "clusterip_policy_existing_violations", `rule="reserved-for-other"`) == 0
		})
		if v := metricSum(t, ctx, c, "clusterip_policy_existing_violations", `rule="reservation-not-held"`); v != 1 {
			t.Errorf("reservation-not-held = %v, want 1 (kube-dns still holds 10.96.0.11)", v)
		}
	})
}

// auditMetricLines keeps the periodic audit's samples of a /metrics page.
func auditMetricLines(m string) string {
	return grepLines(m, "clusterip_policy_existing_violations") + "\n" + grepLines(m, "clusterip_policy_audit_")
}
