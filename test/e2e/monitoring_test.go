//go:build e2e

package e2e

import (
	"bufio"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"clusterip-policy/manifests"
	"clusterip-policy/test/e2e/framework"
	"clusterip-policy/test/fixtures"
)

// Every metric that the alerts (manifests/monitoring/prometheusrule.yaml)
// and the dashboard (dashboard.json) read is served, with samples, by a
// real webhook (holds and the periodic audit on) or a real kube-apiserver
// v1.37.2 once they have reviewed an allowed, a denied and a reservation
// owner's Service create and the audit has passed once (the policy holds a
// reserved range, whose gauge exists only then). The only
// exception: up, which Prometheus makes for each scrape itself. Then,
// with the webhook stopped, the series ClusterIPPolicyWebhookCallsFailing
// selects grows by the one create that failed.
func TestMonitoringMetricsExist(t *testing.T) {
	c := own(t, framework.Options{
		Policy:      fixtures.Policy(sharedSpec + "reservedRanges:\n- {cidr: 10.96.0.40/29, namespaces: [team-db]}\n"),
		Webhooks:    1,
		WebhookArgs: []string{"--hold-reservations", "--audit-interval=1s"},
	})
	cs := c.Client(0)
	ctx := testContext(t, 2*time.Minute)
	ns := namespace(t, c, "monitoring")

	// The traffic the metrics count: a hold (kube-dns does not exist), an
	// allowed create, a denied one (the apiserver counts the rejection),
	// and the owner's create, which releases the hold.
	waitHold(t, ctx, cs, "10.96.0.10", 30*time.Second)
	mustCreate(t, ctx, cs, fixtures.Service(ns, "dynamic"))
	_, err := create(ctx, cs, fixtures.Service(ns, "squatter", fixtures.WithClusterIP("10.96.0.10")))
	requireDenied(t, err, mutating, "is reserved for Service kube-system/kube-dns")
	if _, stderr, err := c.Kubectl(ctx, kubeDNSWithoutIP, "create", "-f", "-"); err != nil {
		t.Fatalf("create kube-dns: %v: %s", err, stderr)
	}
	// The audit's gauges are set by its first successful pass (1 s apart).
	fixtures.EventuallyNil(t, "a successful periodic audit pass", 10*time.Second, func() error {
		n, err := c.WebhookMetric(ctx, 0, "clusterip_policy_audit_passes_total", `result="success"`)
		if err != nil {
			return fmt.Errorf("read clusterip_policy_audit_passes_total: %w", err)
		}
		if n < 1 {
			return fmt.Errorf("%v passes", n)
		}
		return nil
	})

	webhookText, err := c.Webhooks[0].Metrics()
	if err != nil {
		t.Fatalf("webhook /metrics: %v", err)
	}
	apiserverRaw, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Fatalf("kube-apiserver /metrics: %v", err)
	}
	served := map[string]map[string]bool{} // metric name -> who serves samples of it
	for who, text := range map[string]string{"the webhook": webhookText, "kube-apiserver": string(apiserverRaw)} {
		sc := bufio.NewScanner(strings.NewReader(text))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if line == "" || line[0] == '#' {
				continue
			}
			if i := strings.IndexAny(line, "{ "); i > 0 {
				if served[line[:i]] == nil {
					served[line[:i]] = map[string]bool{}
				}
				served[line[:i]][who] = true
			}
		}
		if err := sc.Err(); err != nil {
			t.Fatalf("read the metrics of %s: %v", who, err)
		}
	}

	exprs, err := manifests.MonitoringExprs(filepath.Join("..", "..", "manifests", manifests.MonitoringDir))
	if err != nil {
		t.Fatal(err)
	}
	readBy := map[string][]string{} // metric name -> the rules and panels that read it
	for where, expr := range exprs {
		names, err := manifests.ExprMetrics(expr)
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		for _, n := range names {
			readBy[n] = append(readBy[n], where)
		}
	}
	names := make([]string, 0, len(readBy))
	for n := range readBy {
		names = append(names, n)
	}
	sort.Strings(names)
	found := 0
	for _, n := range names {
		by, ok := served[n]
		wantWho := "the webhook"
		if strings.HasPrefix(n, "apiserver_") {
			wantWho = "kube-apiserver"
		}
		switch {
		case n == "up":
			t.Logf("e2e: monitoring: up is Prometheus' own scrape health, not served by a target")
		case !ok:
			sort.Strings(readBy[n])
			t.Errorf("%s is served by neither the webhook nor kube-apiserver, but %s read it", n, strings.Join(readBy[n], "; "))
		case !by[wantWho]:
			t.Errorf("%s is served by %v, not by %s", n, by, wantWho)
		default:
			found++
		}
	}
	t.Logf("e2e: monitoring: %d of the %d metrics the alerts and the dashboard read are served with samples", found, len(names))

	// ClusterIPPolicyWebhookCallsFailing selects the series the apiserver
	// counts when it cannot call the webhook: with the webhook stopped, a
	// create fails and that series grows.
	const unreachable = `error_type="calling_webhook_error"`
	mutateName := `name="` + mutating + `"`
	before, err := c.APIServerMetric(ctx, 0, "apiserver_admission_webhook_rejection_count", mutateName, unreachable)
	if err != nil {
		t.Fatal(err)
	}
	c.Webhooks[0].Stop(15 * time.Second)
	if _, err := create(ctx, cs, fixtures.Service(ns, "while-down")); err == nil || !strings.Contains(err.Error(), "failed calling webhook") {
		t.Fatalf("with the webhook stopped, a create should fail calling it: %v", err)
	}
	after, err := c.APIServerMetric(ctx, 0, "apiserver_admission_webhook_rejection_count", mutateName, unreachable)
	if err != nil {
		t.Fatal(err)
	}
	if after != before+1 {
		t.Fatalf("apiserver_admission_webhook_rejection_count{%s,%s} %v -> %v, want one more", mutateName, unreachable, before, after)
	}
	if !strings.Contains(exprs[manifests.PrometheusRuleFile+" alert ClusterIPPolicyWebhookCallsFailing"], unreachable) {
		t.Errorf("ClusterIPPolicyWebhookCallsFailing no longer selects %s", unreachable)
	}
}
