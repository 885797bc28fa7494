//go:build e2e

package e2e

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"clusterip-policy/internal/metricsauth"
	"clusterip-policy/test/e2e/framework"
)

// With --metrics-secure, /metrics is HTTPS and answers only a bearer token
// the real apiserver authenticates (TokenReview) and authorizes for get on
// /metrics (SubjectAccessReview). Without the RBAC for the reviews
// (manifests/base has none: it stays plain HTTP) a scrape gets 503 and the
// log names the grant; with it (the chart's metrics.secure rules): no token
// 401, a forged token 401 (never 500), a service account without the grant
// 403, one bound to it the metrics, POST 405, plain HTTP nothing. Then 300
// distinct forged tokens: every answer 401 or 429, at most the review
// budget's TokenReviews (counted by the apiserver itself) and at most two
// log lines.
func TestSecureMetricsAnswerOnlyAnAuthorizedToken(t *testing.T) {
	c := own(t, framework.Options{Policy: sharedPolicy, Webhooks: 1, WebhookArgs: []string{"--metrics-secure"}})
	ctx := testContext(t, 3*time.Minute)
	cs := c.Client(0)
	ns := namespace(t, c, "metrics-secure")
	w := c.Webhooks[0]

	for _, sa := range []string{"scraper", "stranger"} {
		if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The chart's clusterip-policy-metrics-reader, bound to the scraper.
	grant(t, cs, "e2e-metrics-reader", []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}},
		rbacv1.Subject{Kind: "ServiceAccount", Name: "scraper", Namespace: ns})
	scraperUser := "system:serviceaccount:" + ns + ":scraper"
	eventually(t, 30*time.Second, "the apiserver authorizes "+scraperUser+" for /metrics", func() error {
		sar, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: scraperUser, NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: "/metrics", Verb: "get"}}}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		if !sar.Status.Allowed {
			return fmt.Errorf("not allowed: %s", sar.Status.Reason)
		}
		return nil
	})
	token := func(sa string) string {
		tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptrTo(int64(600))}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("a token of %s: %v", sa, err)
		}
		return tr.Status.Token
	}
	scraperToken, strangerToken := token("scraper"), token("stranger")

	// The certificate is controller-runtime's self-signed one: the test
	// does not verify it, as a Prometheus with insecureSkipVerify.
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the metrics port's certificate is self-signed
	scrape := func(method, scheme, bearer string) (int, string, error) {
		req, err := http.NewRequestWithContext(ctx, method, scheme+"://"+w.MetricsAddr+"/metrics", nil)
		if err != nil {
			return 0, "", err
		}
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
		return resp.StatusCode, string(body), err
	}
	eventually(t, 20*time.Second, "the metrics port answers HTTPS", func() error {
		_, _, err := scrape(http.MethodGet, "https", "")
		return err
	})

	// The careless operator: --metrics-secure without the reviews' RBAC.
	logStart := logSize(t, w)
	if code, body, err := scrape(http.MethodGet, "https", scraperToken); err != nil || code != http.StatusServiceUnavailable || strings.Contains(body, "clusterip_policy_") {
		t.Errorf("a scrape while the webhook may not create TokenReviews: %d %v (%.200s); want 503 without the metrics", code, err, body)
	}
	if lines := refusalLines(t, w, logStart); len(lines) != 1 || !strings.Contains(lines[0], "create on tokenreviews and subjectaccessreviews") || !strings.Contains(lines[0], `cannot create resource \"tokenreviews\"`) {
		t.Errorf("the log after a scrape without the reviews' RBAC: %q; want one line naming the grant and the apiserver's refusal", lines)
	}
	// The chart's grant with metrics.secure, to the webhook's identity.
	grant(t, cs, "e2e-metrics-reviews", []rbacv1.PolicyRule{
		{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
		{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}},
	}, rbacv1.Subject{Kind: "User", Name: c.RBAC.UserName()})
	// A failed review is not cached: the scraper gets in once the
	// apiserver has the grant (polled well within the review budget).
	eventually(t, 30*time.Second, "the scraper gets the metrics once the webhook may review", func() error {
		code, _, err := scrape(http.MethodGet, "https", scraperToken)
		if err != nil {
			return err
		}
		if code != http.StatusOK {
			return fmt.Errorf("status %d", code)
		}
		return nil
	})

	for _, tt := range []struct {
		who, method, scheme, bearer string
		want                        int
	}{
		{"no token", http.MethodGet, "https", "", http.StatusUnauthorized},
		{"a forged token", http.MethodGet, "https", "forged-" + strconv.FormatInt(time.Now().UnixNano(), 10), http.StatusUnauthorized},
		{"a service account without get on /metrics", http.MethodGet, "https", strangerToken, http.StatusForbidden},
		{"a service account bound to get on /metrics", http.MethodGet, "https", scraperToken, http.StatusOK},
		{"a POST of the scraper", http.MethodPost, "https", scraperToken, http.StatusMethodNotAllowed},
	} {
		code, body, err := scrape(tt.method, tt.scheme, tt.bearer)
		if err != nil {
			t.Errorf("%s: %v", tt.who, err)
			continue
		}
		if code != tt.want {
			t.Errorf("%s: status %d, want %d (%.200s)", tt.who, code, tt.want, body)
		}
		if got := strings.Contains(body, "clusterip_policy_"); got != (tt.want == http.StatusOK) {
			t.Errorf("%s: the answer holds the metrics: %t, want %t", tt.who, got, tt.want == http.StatusOK)
		}
	}
	if code, body, err := scrape(http.MethodGet, "http", scraperToken); err == nil && (code == http.StatusOK || strings.Contains(body, "clusterip_policy_")) {
		t.Errorf("plain HTTP on the TLS port got status %d and the metrics: %t", code, strings.Contains(body, "clusterip_policy_"))
	}
	t.Logf("e2e: --metrics-secure: 503 without the reviews' RBAC; with it 401 without a token and with a forged one, 403 for a service account without get on /metrics, 200 with one bound to it, 405 for POST")

	// The port speaks HTTP/1.1 only (the admission port's TLS options):
	// no HTTP/2 and its rapid-reset exposure, whatever the client offers.
	conn, err := tls.Dial("tcp", w.MetricsAddr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2", "http/1.1"}}) //nolint:gosec // self-signed
	if err != nil {
		t.Fatalf("TLS to the metrics port: %v", err)
	}
	if p := conn.ConnectionState().NegotiatedProtocol; p == "h2" {
		t.Errorf("the metrics port negotiated %q; want HTTP/1.1 only", p)
	}
	conn.Close()

	// The attacker: 300 distinct forged tokens from 10 connections at
	// once, as fast as they answer. The apiserver counts the TokenReviews
	// it served.
	const flood, workers = 300, 10
	reviewsBefore := tokenReviews(t, cs)
	logStart = logSize(t, w)
	codes := map[int]int{}
	var codesMu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	for worker := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := worker; i < flood; i += workers {
				code, _, err := scrape(http.MethodGet, "https", fmt.Sprintf("forged-%d-%d", start.UnixNano(), i))
				if err != nil {
					t.Errorf("forged token %d: %v", i, err)
					return
				}
				codesMu.Lock()
				codes[code]++
				codesMu.Unlock()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	reviews := tokenReviews(t, cs) - reviewsBefore
	lines := refusalLines(t, w, logStart)
	budget := metricsauth.ReviewBurst + int(elapsed.Seconds()+1)*metricsauth.ReviewRate
	t.Logf("e2e: %d forged tokens in %s: answers %v, %d TokenReviews (budget %d), %d log lines", flood, elapsed.Round(time.Millisecond), codes, reviews, budget, len(lines))
	if codes[http.StatusUnauthorized]+codes[http.StatusTooManyRequests] != flood {
		t.Errorf("answers to %d forged tokens: %v; want each 401 or 429", flood, codes)
	}
	if reviews > budget || reviews < 1 {
		t.Errorf("%d TokenReviews for %d forged tokens in %s; want 1-%d (burst %d, then %d a second)", reviews, flood, elapsed, budget, metricsauth.ReviewBurst, metricsauth.ReviewRate)
	}
	if reviews != codes[http.StatusUnauthorized] {
		t.Errorf("%d TokenReviews for %d 401 answers; want one each (the rest 429, no API call)", reviews, codes[http.StatusUnauthorized])
	}
	// At most one line per kind a minute: throttled, and unauthenticated
	// unless the forged token above logged it within the minute.
	if len(lines) > 2 {
		t.Errorf("%d log lines for %d refused requests; want at most 2: %q", len(lines), flood, lines[:3])
	}
	// Every refusal is counted, though few are logged.
	_, body, err := scrape(http.MethodGet, "https", scraperToken)
	if err != nil {
		t.Fatal(err)
	}
	refused := seriesValue(body, `clusterip_policy_metrics_requests_total{result="unauthenticated"}`) + seriesValue(body, `clusterip_policy_metrics_requests_total{result="throttled"}`)
	if refused < flood {
		t.Errorf("clusterip_policy_metrics_requests_total counts %v unauthenticated and throttled requests, want at least %d", refused, flood)
	}
}

// grant creates a ClusterRole of rules and binds it to subject.
func grant(t *testing.T, cs kubernetes.Interface, name string, rules []rbacv1.PolicyRule, subject rbacv1.Subject) {
	t.Helper()
	ctx := testContext(t, 30*time.Second)
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name}, Subjects: []rbacv1.Subject{subject}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// eventually retries check every 200 ms until it succeeds or d passes.
func eventually(t *testing.T, d time.Duration, what string, check func() error) {
	t.Helper()
	var err error
	for deadline := time.Now().Add(d); ; time.Sleep(200 * time.Millisecond) {
		if err = check(); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %v", what, d, err)
		}
	}
}

func logSize(t *testing.T, w *framework.Webhook) int {
	t.Helper()
	s, err := w.Log()
	if err != nil {
		t.Fatal(err)
	}
	return len(s)
}

// refusalLines are the metrics guard's lines the webhook logged past offset.
func refusalLines(t *testing.T, w *framework.Webhook, offset int) []string {
	t.Helper()
	s, err := w.Log()
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for line := range strings.Lines(s[offset:]) {
		if strings.Contains(line, "refused a /metrics request") {
			lines = append(lines, strings.TrimSpace(line))
		}
	}
	return lines
}

// tokenReviews is the apiserver's count of TokenReviews it served.
func tokenReviews(t *testing.T, cs kubernetes.Interface) int {
	t.Helper()
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(testContext(t, 30*time.Second))
	if err != nil {
		t.Fatalf("kube-apiserver /metrics: %v", err)
	}
	n := 0.0
	sc := bufio.NewScanner(strings.NewReader(string(raw)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "apiserver_request_total{") && strings.Contains(line, `resource="tokenreviews"`) {
			if v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64); err == nil {
				n += v
			}
		}
	}
	return int(n)
}

// seriesValue is the value of the series named exactly so in a Prometheus
// text, 0 when absent.
func seriesValue(text, series string) float64 {
	for line := range strings.Lines(text) {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), series+" "); ok {
			v, _ := strconv.ParseFloat(rest, 64)
			return v
		}
	}
	return 0
}
