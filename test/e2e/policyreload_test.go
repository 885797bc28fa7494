//go:build e2e

package e2e

import (
	"bufio"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"clusterip-policy/certs"
	"clusterip-policy/test/e2e/framework"
	"clusterip-policy/test/fixtures"
)

// metricValue reads one sample of the webhook's /metrics, 0 when absent.
type warningRecorder struct {
	mu       sync.Mutex
	warnings []string
}

func (r *warningRecorder) HandleWarningHeader(code int, agent, text string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.warnings = append(r.warnings, text)
}

func (r *warningRecorder) get() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.warnings...)
}

func metricValue(t *testing.T, w *framework.Webhook, sample string) float64 {
	t.Helper()
	text, err := w.Metrics()
	if err != nil {
		t.Fatalf("read /metrics: %v", err)
	}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), sample+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("metric %s: %v", sample, err)
			}
			return f
		}
	}
	return 0
}

// withReservation is sharedPolicy with one more reservation.
func withReservation(service, ip, note string) string {
	const dns = "  note: cluster DNS\n"
	return fixtures.Policy(strings.Replace(sharedSpec, dns, dns+"- ip: "+ip+"\n  service: "+service+"\n  note: "+note+"\n", 1))
}

// The webhook re-reads its policy file; a file that does not load is
// refused and the last good policy stays.
func TestPolicyReload(t *testing.T) {
	c := shared(t)
	cs := c.Client(0)
	w := c.Webhooks[0]
	ctx := testContext(t, 2*60e9)
	ns := namespace(t, c, "policy-reload")
	const (
		successes = `clusterip_policy_policy_reloads_total{result="success"}`
		failures  = `clusterip_policy_policy_reloads_total{result="failure"}`
	)
	writePolicy := func(t *testing.T, text string) {
		t.Helper()
		if err := certs.WriteFileAtomic(c.PolicyFile, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	waitMetric := func(t *testing.T, sample string, above float64) time.Duration {
		t.Helper()
		start := time.Now()
		fixtures.Eventually(t, fmt.Sprintf("%s to pass %v after the policy file changed", sample, above), 15*time.Second, func() bool {
			return metricValue(t, w, sample) > above
		})
		return time.Since(start)
	}
	t.Cleanup(func() {
		before := metricValue(t, w, successes)
		writePolicy(t, sharedPolicy)
		waitMetric(t, successes, before)
	})

	t.Run("a reservation added to the policy file is enforced without a restart", func(t *testing.T) {
		before := metricValue(t, w, successes)
		writePolicy(t, withReservation(ns+"/payments", "10.96.0.77", "added at run time"))
		took := waitMetric(t, successes, before)
		t.Logf("e2e: the webhook loaded the changed policy %s after the file was replaced", took.Round(time.Millisecond))
		_, err := create(ctx, cs, fixtures.Service(ns, "squatter", fixtures.WithClusterIP("10.96.0.77")))
		requireDenied(t, err, mutating, `"10.96.0.77": is reserved for Service `+ns+"/payments (added at run time)")
	})

	t.Run("a policy file that fails to load is refused and the last good policy stays", func(t *testing.T) {
		before := metricValue(t, w, failures)
		// Were this policy taken, 10.96.0.77 would be free for anyone.
		writePolicy(t, withReservation(ns+"/broken", "10.96.0.300", "not an address"))
		waitMetric(t, failures, before)
		if log, _ := w.Log(); !strings.Contains(lastLines(log, 20), `10.96.0.300`) {
			t.Errorf("the webhook's log does not say why it refused the policy:\n%s", lastLines(log, 5))
		}
		_, err := create(ctx, cs, fixtures.Service(ns, "squatter", fixtures.WithClusterIP("10.96.0.77")))
		requireDenied(t, err, mutating, "is reserved for Service "+ns+"/payments")
		got := mustCreate(t, ctx, cs, fixtures.Service(ns, "payments"))
		if got.Spec.ClusterIP != "10.96.0.77" {
			t.Fatalf("payments got %s, want its reserved 10.96.0.77", got.Spec.ClusterIP)
		}
		if exited, err := w.Exited(); exited {
			t.Fatalf("the webhook exited on a bad policy: %v", err)
		}
	})

	t.Run("a rule set to warn admits the request with an admission warning", func(t *testing.T) {
		before := metricValue(t, w, successes)
		writePolicy(t, fixtures.Policy(strings.Replace(sharedSpec, "  default: deny\n", "  default: deny\n  rules:\n    static-ip-in-dynamic-band: warn\n", 1)))
		waitMetric(t, successes, before)
		warnings := &warningRecorder{}
		cfg := c.RESTConfig(0)
		cfg.WarningHandler = warnings
		// The backstop follows the reload too: the leader writes it
		// within a tenth of a second, and the apiserver reloads admission
		// policies once a second.
		waitBackstopPolicy(t, ctx, c, policyDigest(t, readText(t, c.PolicyFile)))
		got := mustCreate(t, ctx, kubernetes.NewForConfigOrDie(cfg), fixtures.Service(ns, "warned", fixtures.WithClusterIP("10.96.200.9")))
		if got.Spec.ClusterIP != "10.96.200.9" {
			t.Fatalf("clusterIP %s, want 10.96.200.9", got.Spec.ClusterIP)
		}
		if !strings.Contains(strings.Join(warnings.get(), "\n"), `"10.96.200.9": lies in the dynamic band`) {
			t.Errorf("warnings %q lack the rule's message", warnings.get())
		}
		var warned bool
		for _, d := range decisionsFor(c, ns, "warned") {
			warned = warned || (d.Stage == "mutate" && d.Decision == "warned")
		}
		if !warned {
			t.Error("no audit line with decision warned")
		}
		// Other rules still deny.
		_, err := create(ctx, cs, fixtures.Service(ns, "not-dns", fixtures.WithClusterIP("10.96.0.10")))
		requireDenied(t, err, mutating, "is reserved for Service kube-system/kube-dns")
	})

	t.Run("decisions are counted by stage, decision and rule", func(t *testing.T) {
		for _, s := range []string{
			`clusterip_policy_decisions_total{decision="denied",rule="reserved-for-other",stage="mutate"}`,
			`clusterip_policy_decisions_total{decision="patched",rule="",stage="mutate"}`,
			`clusterip_policy_decisions_total{decision="allowed",rule="",stage="validate"}`,
			`clusterip_policy_decisions_total{decision="warned",rule="static-ip-in-dynamic-band",stage="mutate"}`,
		} {
			if v := metricValue(t, w, s); v < 1 {
				t.Errorf("%s = %v, want at least 1", s, v)
			}
		}
	})
}
