//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"

	"clusterip-policy/test/e2e/framework"
	"clusterip-policy/test/fixtures"
)

// An apiserver killed with SIGKILL ends the webhook's watch streams like a
// normal close, and client-go's reflector would retry its re-watch inside
// itself for up to 30 s without telling anyone. The webhook must notice at
// once (audit line, gauge), stop deciding past --max-view-staleness, and
// follow the apiserver again within a second or two of it answering.
func TestAKilledAPIServerMakesTheViewStaleAndARestartedOneIsFollowedAtOnce(t *testing.T) {
	c := own(t, framework.Options{Policy: sharedPolicy})
	ctx := testContext(t, 4*time.Minute)
	const maxStaleness = 3 * time.Second
	w, err := c.StartWebhookWithArgs(ctx, "", "--max-view-staleness="+maxStaleness.String())
	if err != nil {
		t.Fatal(err)
	}
	review := func(name, ip string) (*admissionv1.AdmissionResponse, map[string]any) {
		t.Helper()
		from := w.LogSize()
		resp, err := w.Review(ctx, framework.MutatePath, serviceReview(t, fixtures.Service("default", name, fixtures.WithClusterIP(ip))))
		if err != nil {
			t.Fatalf("review %s: %v", name, err)
		}
		var line map[string]any
		for _, d := range w.DecisionsFrom(from) {
			if d.Name == name {
				if err := json.Unmarshal([]byte(d.Raw), &line); err != nil {
					t.Fatal(err)
				}
			}
		}
		if line == nil {
			t.Fatalf("no audit line for %s", name)
		}
		return resp, line
	}

	if resp, line := review("before", "10.96.0.20"); !resp.Allowed || line["viewStaleSeconds"] != 0.0 {
		t.Fatalf("before the kill: allowed %v, viewStaleSeconds %v; want allowed and 0", resp.Allowed, line["viewStaleSeconds"])
	}
	if s := staleGauge(t, w); s != 0 {
		t.Fatalf("stale gauge %v before the kill", s)
	}

	a := c.APIServers[0]
	killed := time.Now()
	if err := syscall.Kill(-a.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	fixtures.Eventually(t, "the apiserver to exit", 10*time.Second, func() bool { exited, _ := a.Exited(); return exited })

	fixtures.Eventually(t, "the stale gauge to rise", 2*time.Second, func() bool { return staleGauge(t, w) > 0 })
	seen := time.Since(killed)
	resp, line := review("while-stale", "10.96.0.21")
	stale, _ := line["viewStaleSeconds"].(float64)
	if stale <= 0 || !resp.Allowed {
		t.Fatalf("within --max-view-staleness of the kill: allowed %v, viewStaleSeconds %v; want allowed and > 0", resp.Allowed, line["viewStaleSeconds"])
	}
	t.Logf("e2e: staleness visible %s after the kill (audit line: viewStaleSeconds %.3f)", seen.Round(time.Millisecond), stale)

	fixtures.Eventually(t, "/readyz to fail", maxStaleness+5*time.Second, func() bool { return readyzCode(w) != http.StatusOK })
	notReadyAfter := time.Since(killed)
	resp, line = review("past-max-staleness", "10.96.0.22")
	if resp.Allowed || resp.Result == nil || resp.Result.Code != http.StatusServiceUnavailable || line["decision"] != "denied" {
		t.Fatalf("past --max-view-staleness: %+v (audit %v); want a 503 not-ready denial", resp.Result, line)
	}
	t.Logf("e2e: /readyz failed %s after the kill (--max-view-staleness %s); review denied: %s", notReadyAfter.Round(time.Millisecond), maxStaleness, resp.Result.Message)

	// The supervisor restarts the apiserver on the same port and etcd.
	if err := c.RestartAPIServer(ctx, 0); err != nil {
		t.Fatal(err)
	}
	apiReady := time.Now()
	fixtures.Eventually(t, "the stale gauge to return to 0", 10*time.Second, func() bool { return staleGauge(t, w) == 0 })
	recovered := time.Since(apiReady)
	fixtures.Eventually(t, "the webhook's /readyz to pass again", 10*time.Second, func() bool { return readyzCode(w) == http.StatusOK })
	readyAgain := time.Since(apiReady)
	if resp, line := review("after", "10.96.0.23"); !resp.Allowed || line["viewStaleSeconds"] != 0.0 {
		t.Errorf("after recovery: allowed %v, viewStaleSeconds %v; want allowed and 0", resp.Allowed, line["viewStaleSeconds"])
	}

	// An address allocated after the recovery reaches the view.
	svc := mustCreate(t, ctx, c.Client(0), fixtures.Service("default", "after-recovery", fixtures.WithClusterIP("10.96.0.77")))
	created := time.Now()
	var denial string
	fixtures.Eventually(t, "the new IPAddress to reach the view", 10*time.Second, func() bool {
		resp, _ := review(fmt.Sprintf("steal-%d", time.Now().UnixNano()), "10.96.0.77")
		if resp.Allowed {
			return false
		}
		denial = resp.Result.Message
		return true
	})
	if !regexp.MustCompile(`10\.96\.0\.77.*Service default/after-recovery`).MatchString(denial) {
		t.Errorf("denial %q does not name the holder default/after-recovery", denial)
	}
	t.Logf("e2e: after the restarted apiserver was ready: stale 0 after %s, webhook ready after %s; %s (created after recovery) seen within %s",
		recovered.Round(time.Millisecond), readyAgain.Round(time.Millisecond), svc.Spec.ClusterIP, time.Since(created).Round(time.Millisecond))
	if recovered > 3*time.Second {
		t.Errorf("the view recovered %s after the apiserver was ready again, want within about 2s", recovered)
	}
	t.Logf("e2e: watch restarts after the outage:\n%s", grepLines(metricsText(t, w), "clusterip_policy_view_watch_restarts_total{"))
}

var staleRE = regexp.MustCompile(`(?m)^clusterip_policy_view_stale_seconds ([0-9.e+-]+)$`)

func staleGauge(t *testing.T, w *framework.Webhook) float64 {
	t.Helper()
	m := staleRE.FindStringSubmatch(metricsText(t, w))
	if m == nil {
		t.Fatal("no clusterip_policy_view_stale_seconds in /metrics")
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func metricsText(t *testing.T, w *framework.Webhook) string {
	t.Helper()
	m, err := w.Metrics()
	if err != nil {
		t.Fatalf("read /metrics: %v", err)
	}
	return m
}

func grepLines(text, prefix string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func readyzCode(w *framework.Webhook) int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+w.HealthAddr+"/readyz", nil)
	if err != nil {
		return 0
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// Two apiservers behind a load balancer, as in the incident: the webhook's
// connection goes to one of them, which is killed. Its streams end; the
// re-watch reaches the other apiserver through the load balancer, so the
// view must be current again within moments, not after client-go's backoff.
func TestTheViewFollowsAnotherAPIServerBehindTheLoadBalancerAtOnce(t *testing.T) {
	c := own(t, framework.Options{
		Policy: sharedPolicy,
		APIServers: []framework.APIServerOptions{
			{ServiceClusterIPRange: "10.96.0.0/16"},
			{ServiceClusterIPRange: "10.96.0.0/16"},
		},
		LoadBalancer: true,
	})
	ctx := testContext(t, 4*time.Minute)
	w, err := c.StartWebhookWithArgs(ctx, c.APIServerLB.URL(), "--max-view-staleness=3s")
	if err != nil {
		t.Fatal(err)
	}
	// haproxy picked an apiserver for the webhook's one HTTP/2
	// connection; each apiserver also watches IPAddresses for itself, so
	// the one with more watches carries the webhook's.
	var watches [2]float64
	for i := range watches {
		if watches[i], err = c.APIServerMetric(ctx, i, "apiserver_longrunning_requests", `resource="ipaddresses"`, `verb="WATCH"`); err != nil {
			t.Fatal(err)
		}
	}
	victim, survivor := 0, 1
	if watches[1] > watches[0] {
		victim, survivor = 1, 0
	}
	if watches[0] == watches[1] {
		t.Fatalf("cannot tell which apiserver carries the webhook's IPAddress watch: WATCH counts %v", watches)
	}
	closedBefore := restarts(t, w, "ipaddresses", "closed")

	killed := time.Now()
	if err := syscall.Kill(-c.APIServers[victim].Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	fixtures.Eventually(t, "the webhook's IPAddress stream through the killed apiserver to end", 5*time.Second, func() bool {
		return restarts(t, w, "ipaddresses", "closed") > closedBefore
	})
	fixtures.Eventually(t, "the view to follow the other apiserver", 5*time.Second, func() bool { return staleGauge(t, w) == 0 })
	recovered := time.Since(killed)
	if readyzCode(w) != http.StatusOK {
		t.Error("the webhook is not ready after following the other apiserver")
	}

	// A change made through the surviving apiserver reaches the view.
	mustCreate(t, ctx, c.Client(survivor), fixtures.Service("default", "through-the-other", fixtures.WithClusterIP("10.96.0.78")))
	created := time.Now()
	fixtures.Eventually(t, "the new IPAddress to reach the view", 5*time.Second, func() bool {
		resp, err := w.Review(ctx, framework.MutatePath, serviceReview(t, fixtures.Service("default", fmt.Sprintf("steal-%d", time.Now().UnixNano()), fixtures.WithClusterIP("10.96.0.78"))))
		return err == nil && !resp.Allowed
	})
	t.Logf("e2e: %s killed behind the load balancer: view current again through %s within %s of the kill; a Service created through it seen within %s\n%s",
		c.APIServers[victim].Name, c.APIServers[survivor].Name, recovered.Round(time.Millisecond), time.Since(created).Round(time.Millisecond), grepLines(metricsText(t, w), "clusterip_policy_view_watch_restarts_total{"))
	if recovered > 3*time.Second {
		t.Errorf("the view took %s to follow the other apiserver, want within about 2s", recovered)
	}
}

func restarts(t *testing.T, w *framework.Webhook, resource, reason string) float64 {
	t.Helper()
	re := regexp.MustCompile(`(?m)^clusterip_policy_view_watch_restarts_total\{reason="` + reason + `",resource="` + resource + `"\} ([0-9.e+]+)$`)
	m := re.FindStringSubmatch(metricsText(t, w))
	if m == nil {
		t.Fatalf("no watch restarts of %s (%s) in /metrics", resource, reason)
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}
