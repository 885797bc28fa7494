package metricsauth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/time/rate"
	authenticationv1 "k8s.io/api/authentication/v1"

	"clusterip-policy/certs"
)

// fakeReviewer stands in for the apiserver in these unit tests (the e2e
// test TestSecureMetrics... asks a real one): tokens "good-<user>" are
// authenticated as <user>, and only the users in allowed may get /metrics.
type fakeReviewer struct {
	mu              sync.Mutex
	allowed         map[string]bool
	fail            error
	tokens, access  int
	lastAccessPath  string
	lastAccessGroup []string
}

func (f *fakeReviewer) Authenticate(_ context.Context, token string) (authenticationv1.UserInfo, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tokens++
	if f.fail != nil {
		return authenticationv1.UserInfo{}, false, f.fail
	}
	user, ok := strings.CutPrefix(token, "good-")
	return authenticationv1.UserInfo{Username: user, Groups: []string{"group-of-" + user}}, ok, nil
}

func (f *fakeReviewer) Authorize(_ context.Context, user authenticationv1.UserInfo, path string) (bool, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.access++
	f.lastAccessPath, f.lastAccessGroup = path, user.Groups
	if f.allowed[user.Username] {
		return true, "", nil
	}
	return false, "no RBAC policy matched", nil
}

func (f *fakeReviewer) calls() (int, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.tokens, f.access
}

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

// logLines collects the lines a logger wrote.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, args)
	}, funcr.Options{})
}

func (l *logLines) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

type guardFixture struct {
	reviewer *fakeReviewer
	clock    *clock
	logs     *logLines
	reg      *prometheus.Registry
	guard    *Guard
	handler  http.Handler
}

func newFixture(t *testing.T) *guardFixture {
	t.Helper()
	f := &guardFixture{reviewer: &fakeReviewer{allowed: map[string]bool{"scraper": true}}, clock: &clock{t: time.Unix(1_800_000_000, 0)}, logs: &logLines{}, reg: prometheus.NewRegistry()}
	f.guard = NewGuard(f.reviewer, NewMetrics(f.reg), f.logs.logger(), f.clock.now)
	f.handler = f.guard.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "the metrics") }))
	return f
}

func (f *guardFixture) get(method, authorization string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, "/metrics", nil)
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	rec := httptest.NewRecorder()
	f.handler.ServeHTTP(rec, req)
	return rec
}

func (f *guardFixture) requests(result string) float64 {
	return testutil.ToFloat64(f.guard.metrics.requests.WithLabelValues(result))
}

// Each caller gets its answer: no token and a token the apiserver does not
// authenticate 401 (never 500), a user without get on /metrics 403, an
// allowed user the metrics; a method other than GET 405. Only a token
// costs reviews, and the SubjectAccessReview asks for /metrics with the
// user's groups.
func TestGuardAnswersEachCaller(t *testing.T) {
	f := newFixture(t)
	for _, tt := range []struct {
		who, method, authorization string
		code                       int
		result                     string
	}{
		{"no header", http.MethodGet, "", http.StatusUnauthorized, ResultNoToken},
		{"basic credentials", http.MethodGet, "Basic dXNlcjpwYXNz", http.StatusUnauthorized, ResultNoToken},
		{"an empty bearer", http.MethodGet, "Bearer   ", http.StatusUnauthorized, ResultNoToken},
		{"a forged token", http.MethodGet, "Bearer forged", http.StatusUnauthorized, ResultUnauthenticated},
		{"an oversized token", http.MethodGet, "Bearer good-scraper" + strings.Repeat("x", maxTokenBytes), http.StatusUnauthorized, ResultUnauthenticated},
		{"a user without the grant", http.MethodGet, "Bearer good-stranger", http.StatusForbidden, ResultForbidden},
		{"the scraper", http.MethodGet, "Bearer good-scraper", http.StatusOK, ResultAllowed},
		{"the scraper, scheme in lower case", http.MethodGet, "bearer good-scraper", http.StatusOK, ResultAllowed},
		{"the scraper, HEAD", http.MethodHead, "Bearer good-scraper", http.StatusOK, ResultAllowed},
		{"the scraper, POST", http.MethodPost, "Bearer good-scraper", http.StatusMethodNotAllowed, ResultBadMethod},
	} {
		rec := f.get(tt.method, tt.authorization)
		if rec.Code != tt.code {
			t.Errorf("%s: status %d, want %d (%s)", tt.who, rec.Code, tt.code, rec.Body)
		}
		if got := strings.Contains(rec.Body.String(), "the metrics"); got != (tt.code == http.StatusOK) {
			t.Errorf("%s: the metrics in the answer: %t", tt.who, got)
		}
		if tt.code != http.StatusOK && !strings.Contains(rec.Body.String(), tt.result) {
			t.Errorf("%s: body %q does not name %s", tt.who, rec.Body, tt.result)
		}
		if tt.code == http.StatusUnauthorized && rec.Header().Get("WWW-Authenticate") == "" {
			t.Errorf("%s: 401 without WWW-Authenticate", tt.who)
		}
	}
	// forged, stranger, scraper: one TokenReview each; the scraper's
	// later requests and the oversized token cost none.
	if tokens, access := f.reviewer.calls(); tokens != 3 || access != 2 {
		t.Errorf("reviews: %d TokenReviews, %d SubjectAccessReviews; want 3 and 2", tokens, access)
	}
	if f.reviewer.lastAccessPath != "/metrics" || len(f.reviewer.lastAccessGroup) != 1 || f.reviewer.lastAccessGroup[0] != "group-of-scraper" {
		t.Errorf("the SubjectAccessReview asked for %q with groups %v; want /metrics with the user's groups", f.reviewer.lastAccessPath, f.reviewer.lastAccessGroup)
	}
	if got := f.requests(ResultAllowed); got != 3 {
		t.Errorf("clusterip_policy_metrics_requests_total{result=allowed} %v, want 3", got)
	}
}

// Answers are cached: allowed for AllowedTTL, refused for RefusedTTL;
// after that the apiserver is asked again (a revoked grant stops working,
// a new one starts).
func TestGuardCachesAnswersForTheirTTL(t *testing.T) {
	f := newFixture(t)
	for range 5 {
		f.get(http.MethodGet, "Bearer good-scraper")
		f.get(http.MethodGet, "Bearer forged")
	}
	if tokens, _ := f.reviewer.calls(); tokens != 2 {
		t.Fatalf("%d TokenReviews for 2 tokens asked 5 times each, want 2", tokens)
	}
	f.clock.t = f.clock.t.Add(RefusedTTL)
	f.get(http.MethodGet, "Bearer good-scraper")
	f.get(http.MethodGet, "Bearer forged")
	if tokens, _ := f.reviewer.calls(); tokens != 3 {
		t.Errorf("%d TokenReviews once the refusal expired, want 3 (the forged token asked again, the scraper's still cached)", tokens)
	}
	f.reviewer.allowed["scraper"] = false // the grant revoked
	f.clock.t = f.clock.t.Add(AllowedTTL - RefusedTTL)
	if rec := f.get(http.MethodGet, "Bearer good-scraper"); rec.Code != http.StatusForbidden {
		t.Errorf("after AllowedTTL with the grant revoked: status %d, want 403", rec.Code)
	}
}

// A flood of distinct forged tokens costs at most ReviewBurst reviews at
// once and ReviewRate a second after (the rest get 429, no API call), logs
// at most one line per kind a minute, and never evicts the scraper's
// cached answer: the scraper keeps its metrics through the flood.
func TestGuardBoundsReviewsAndLogsUnderAFlood(t *testing.T) {
	f := newFixture(t)
	if rec := f.get(http.MethodGet, "Bearer good-scraper"); rec.Code != http.StatusOK {
		t.Fatalf("the scraper: %d", rec.Code)
	}
	linesBefore := len(f.logs.all())
	codes := map[int]int{}
	const flood = 3000 // over MaxRefused, to fill the refused cache
	for i := range flood {
		if i%100 == 0 {
			f.clock.t = f.clock.t.Add(100 * time.Millisecond)
		}
		codes[f.get(http.MethodGet, fmt.Sprintf("Bearer forged-%d", i)).Code]++
		if i%500 == 0 {
			if rec := f.get(http.MethodGet, "Bearer good-scraper"); rec.Code != http.StatusOK {
				t.Fatalf("the scraper during the flood, request %d: %d", i, rec.Code)
			}
		}
	}
	// 3 s of flood: the burst, then ReviewRate a second.
	tokens, _ := f.reviewer.calls()
	reviewed := tokens - 1 // the scraper's
	if limit := ReviewBurst + 3*ReviewRate; reviewed > limit || reviewed < ReviewBurst {
		t.Errorf("%d TokenReviews for %d forged tokens in 3 s, want %d-%d", reviewed, flood, ReviewBurst, limit)
	}
	if codes[http.StatusUnauthorized] != reviewed || codes[http.StatusTooManyRequests] != flood-reviewed || codes[http.StatusInternalServerError] != 0 {
		t.Errorf("answers %v; want %d 401 (one per review) and the rest 429", codes, reviewed)
	}
	lines := f.logs.all()[linesBefore:]
	if len(lines) != 2 {
		t.Errorf("%d log lines for %d refused requests, want 2 (one unauthenticated, one throttled); the first: %v", len(lines), flood, lines[:min(3, len(lines))])
	}
	if n := f.guard.refused.len(); n > MaxRefused {
		t.Errorf("%d refused answers cached, over %d", n, MaxRefused)
	}
	// A minute later, the next refusal logs one line with the count of
	// those not logged.
	f.clock.t = f.clock.t.Add(LogEvery)
	f.get(http.MethodGet, "Bearer forged-after")
	lines = f.logs.all()
	last := lines[len(lines)-1]
	if want := fmt.Sprintf(`"notLoggedSinceLastLine"=%d`, reviewed-1); !strings.Contains(last, want) || !strings.Contains(last, ResultUnauthenticated) {
		t.Errorf("the line a minute later: %s; want %s and the result %s", last, want, ResultUnauthenticated)
	}
}

// The allowed cache holds at most MaxAllowed tokens: past it, the entry
// that expires first goes.
func TestGuardAllowedCacheIsBounded(t *testing.T) {
	f := newFixture(t)
	f.guard.budget = rate.NewLimiter(rate.Inf, 1) // the cache alone is under test
	for i := range MaxAllowed + 50 {
		user := fmt.Sprintf("scraper-%d", i)
		f.reviewer.allowed[user] = true
		f.clock.t = f.clock.t.Add(time.Millisecond) // each entry expires later, none within the test
		if rec := f.get(http.MethodGet, "Bearer good-"+user); rec.Code != http.StatusOK {
			t.Fatalf("%s: %d", user, rec.Code)
		}
	}
	if n := f.guard.allowed.len(); n != MaxAllowed {
		t.Errorf("%d allowed answers cached, want %d", n, MaxAllowed)
	}
	tokens, _ := f.reviewer.calls()
	f.get(http.MethodGet, "Bearer good-scraper-0") // evicted: asked again
	f.get(http.MethodGet, fmt.Sprintf("Bearer good-scraper-%d", MaxAllowed+49))
	if after, _ := f.reviewer.calls(); after != tokens+1 {
		t.Errorf("%d TokenReviews for the oldest and the newest token, want 1 (the oldest, evicted)", after-tokens)
	}
}

// A review that fails (the webhook lacks the RBAC, the apiserver is away)
// is 503, logged as an error naming the missing grant, and not cached: the
// next request asks again.
func TestGuardReviewFailureIs503AndNotCached(t *testing.T) {
	f := newFixture(t)
	f.reviewer.fail = errors.New(`tokenreviews.authentication.k8s.io is forbidden: User "system:serviceaccount:x:y" cannot create resource "tokenreviews"`)
	for range 2 {
		if rec := f.get(http.MethodGet, "Bearer good-scraper"); rec.Code != http.StatusServiceUnavailable || strings.Contains(rec.Body.String(), "forbidden: User") {
			t.Errorf("a failed review: %d %q; want 503 without the apiserver's error", rec.Code, rec.Body)
		}
	}
	if tokens, _ := f.reviewer.calls(); tokens != 2 {
		t.Errorf("%d TokenReviews for 2 requests after a failure, want 2 (a failure is not cached)", tokens)
	}
	lines := f.logs.all()
	if len(lines) != 1 || !strings.Contains(lines[0], "create on tokenreviews and subjectaccessreviews") || !strings.Contains(lines[0], "cannot create resource") {
		t.Errorf("log lines %v; want one naming the grant and the apiserver's error", lines)
	}
	if got := testutil.ToFloat64(f.guard.metrics.reviews.WithLabelValues("token", "failed")); got != 2 {
		t.Errorf("clusterip_policy_metrics_reviews_total{review=token,result=failed} %v, want 2", got)
	}
	f.reviewer.fail = nil
	if rec := f.get(http.MethodGet, "Bearer good-scraper"); rec.Code != http.StatusOK {
		t.Errorf("once the review works: %d, want 200", rec.Code)
	}
}

func TestValidateNamesTheFlagAndTheFix(t *testing.T) {
	dir := t.TempDir()
	ca, err := certs.NewCA("metrics-test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	kp, err := ca.Sign(certs.Options{CommonName: "localhost", DNSNames: []string{"localhost"}, Validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "good")
	if err := certs.WriteServing(good, ca, kp); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		o    Options
		addr string
		want string
	}{
		{Options{}, ":8080", ""},
		{Options{Secure: true}, ":8080", ""},
		{Options{Secure: true, CertDir: good}, ":8080", ""},
		{Options{Secure: true}, "0", "--metrics-secure and --metrics-bind-address=0 contradict each other"},
		{Options{CertDir: good}, ":8080", "--metrics-cert-dir " + good + " without --metrics-secure"},
		{Options{Secure: true, CertDir: dir}, ":8080", "--metrics-cert-dir " + dir + ": open " + filepath.Join(dir, "tls.crt")},
	} {
		err := tt.o.Validate(tt.addr)
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%+v with --metrics-bind-address=%s: %v; want %q", tt.o, tt.addr, err, tt.want)
		}
	}
}
