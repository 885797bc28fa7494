// Package metricsauth guards /metrics with --metrics-secure: the filter
// controller-runtime's metrics server puts around its handler. A request's
// bearer token goes to the apiserver (a TokenReview: who is it), then its
// user (a SubjectAccessReview: may it get the non-resource URL /metrics),
// as kube-rbac-proxy and controller-runtime's own filter do; the answers are
// cached for a short, bounded time, the reviews a cache miss costs are
// bounded per second, and the log lines refused callers cause are bounded
// per minute. docs/design.md says why not controller-runtime's filter.
package metricsauth

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	"golang.org/x/time/rate"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// Options are the flags of the guarded /metrics.
type Options struct {
	// Secure serves /metrics over HTTPS to authorized bearer tokens only.
	Secure bool
	// CertDir holds tls.crt and tls.key for the metrics port; empty:
	// controller-runtime's self-signed certificate, made at start.
	CertDir string
}

// AddFlags declares --metrics-secure and --metrics-cert-dir.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&o.Secure, "metrics-secure", false, fmt.Sprintf("Serve /metrics over HTTPS (TLS 1.2 or newer, HTTP/1.1) and answer only a request whose bearer token the apiserver authenticates (a TokenReview) and authorizes for get on the non-resource URL /metrics (a SubjectAccessReview): 401 without a token or with one the apiserver does not authenticate, 403 without the permission, 429 while more new tokens arrive than %d a second (burst %d) would review, 503 when a review itself fails (such as missing RBAC). Answers are cached per token (allowed %s, refused %s; at most %d and %d tokens); refused requests log at most one line per kind a minute, with the count of those not logged. Needs create on tokenreviews and subjectaccessreviews (the chart grants both with metrics.secure). Off (the default): plain HTTP, open to whoever reaches the port.", ReviewRate, ReviewBurst, AllowedTTL, RefusedTTL, MaxAllowed, MaxRefused))
	fs.StringVar(&o.CertDir, "metrics-cert-dir", "", "With --metrics-secure: directory holding the metrics port's certificate as tls.crt and tls.key, reloaded when they change. Empty: a self-signed certificate made at start (scrape with insecureSkipVerify).")
}

// Validate checks the flags against serve's --metrics-bind-address,
// naming the flag, the value and the fix.
func (o Options) Validate(metricsAddr string) error {
	if !o.Secure {
		if o.CertDir != "" {
			return fmt.Errorf("--metrics-cert-dir %s without --metrics-secure: /metrics is plain HTTP and would not use it; add --metrics-secure, or drop --metrics-cert-dir", o.CertDir)
		}
		return nil
	}
	if metricsAddr == "0" {
		return errors.New("--metrics-secure and --metrics-bind-address=0 contradict each other: \"0\" turns /metrics off; give an address such as :8080, or drop --metrics-secure")
	}
	if o.CertDir != "" {
		// controller-runtime falls back to a self-signed certificate when
		// either file is missing, without a word: a mistyped directory
		// would silently serve a certificate nobody can verify.
		if _, err := tls.LoadX509KeyPair(filepath.Join(o.CertDir, "tls.crt"), filepath.Join(o.CertDir, "tls.key")); err != nil {
			return fmt.Errorf("--metrics-cert-dir %s: %w; mount a kubernetes.io/tls Secret there (tls.crt and tls.key), or drop the flag for a self-signed certificate", o.CertDir, err)
		}
	}
	return nil
}

// ServerOptions are controller-runtime's metrics server options for these
// flags, the TLS options (tlsOpts) and the filter (filter): HTTPS with the
// certificate of --metrics-cert-dir or a self-signed one.
func (o Options) ServerOptions(bindAddress string, tlsOpts []func(*tls.Config), filter func(*rest.Config, *http.Client) (metricsserver.Filter, error)) metricsserver.Options {
	mo := metricsserver.Options{BindAddress: bindAddress, SecureServing: true, TLSOpts: tlsOpts, FilterProvider: filter}
	if o.CertDir != "" {
		mo.CertDir = o.CertDir // Validate loaded both files
	}
	return mo
}

// The bounds of the guard: exported for the flag's help and the docs.
const (
	// ReviewRate and ReviewBurst bound the token checks a second (a
	// TokenReview, then a SubjectAccessReview when it authenticates) that
	// cache misses may start; beyond them a request gets 429, never an API
	// call. A Prometheus scrapes with one token, reviewed once per
	// AllowedTTL.
	ReviewRate  = 5
	ReviewBurst = 10
	// AllowedTTL is how long an allowed token is served without asking
	// again: a revoked grant or token stops working within it.
	AllowedTTL = time.Minute
	// RefusedTTL is how long a refused token (401, 403) is refused without
	// asking again: a grant just given works within it.
	RefusedTTL = 10 * time.Second
	// MaxAllowed and MaxRefused bound the cached tokens. The two caches
	// are apart so that a flood of forged tokens never evicts a scraper's.
	MaxAllowed = 256
	MaxRefused = 1024
	// LogEvery is how often each kind of refusal may log a line.
	LogEvery = time.Minute
	// reviewTimeout bounds each review call.
	reviewTimeout = 5 * time.Second
	// maxTokenBytes bounds a token sent to the apiserver; service account
	// and OIDC tokens are a few KiB.
	maxTokenBytes = 16 << 10
	// maxLoggedBytes bounds a user name or an error in a log line.
	maxLoggedBytes = 256
	// metricsPath is the non-resource URL a scraper must be allowed to get.
	metricsPath = "/metrics"
)

// The results of a request, the label result of
// clusterip_policy_metrics_requests_total and the kinds the log lines are
// bounded by.
const (
	ResultAllowed         = "allowed"
	ResultNoToken         = "no-token"
	ResultUnauthenticated = "unauthenticated"
	ResultForbidden       = "forbidden"
	ResultThrottled       = "throttled"
	ResultReviewFailed    = "review-failed"
	ResultBadMethod       = "bad-method"
)

// Reviewer asks the apiserver about a token and a user.
type Reviewer interface {
	// Authenticate returns the token's user, or ok false when the
	// apiserver does not authenticate it; err is a failed call.
	Authenticate(ctx context.Context, token string) (user authenticationv1.UserInfo, ok bool, err error)
	// Authorize says whether user may get the non-resource URL path.
	Authorize(ctx context.Context, user authenticationv1.UserInfo, path string) (allowed bool, reason string, err error)
}

// NewFilterProvider is the FilterProvider of controller-runtime's metrics
// server: the guard, over a client of the server's rest.Config whose own
// limit matches the guard's.
func NewFilterProvider(reg prometheus.Registerer, log logr.Logger) func(*rest.Config, *http.Client) (metricsserver.Filter, error) {
	return func(cfg *rest.Config, httpClient *http.Client) (metricsserver.Filter, error) {
		cfg = rest.CopyConfig(cfg)
		cfg.QPS, cfg.Burst = 2*ReviewRate, 2*ReviewBurst // two calls a token check at most
		client, err := kubernetes.NewForConfigAndClient(cfg, httpClient)
		if err != nil {
			return nil, fmt.Errorf("the client of the metrics guard: %w", err)
		}
		g := NewGuard(ClientReviewer{Client: client}, NewMetrics(reg), log, time.Now)
		return func(_ logr.Logger, next http.Handler) (http.Handler, error) { return g.Wrap(next), nil }, nil
	}
}

// ClientReviewer reviews through the apiserver.
type ClientReviewer struct{ Client kubernetes.Interface }

// Authenticate creates a TokenReview with the apiserver's own audiences.
func (r ClientReviewer) Authenticate(ctx context.Context, token string) (authenticationv1.UserInfo, bool, error) {
	tr, err := r.Client.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return authenticationv1.UserInfo{}, false, fmt.Errorf("create a TokenReview: %w", err)
	}
	return tr.Status.User, tr.Status.Authenticated, nil
}

// Authorize creates a SubjectAccessReview for get on path.
func (r ClientReviewer) Authorize(ctx context.Context, user authenticationv1.UserInfo, path string) (bool, string, error) {
	extra := make(map[string]authorizationv1.ExtraValue, len(user.Extra))
	for k, v := range user.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	sar, err := r.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: user.Username, UID: user.UID, Groups: user.Groups, Extra: extra,
		NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: path, Verb: "get"},
	}}, metav1.CreateOptions{})
	if err != nil {
		return false, "", fmt.Errorf("create a SubjectAccessReview: %w", err)
	}
	return sar.Status.Allowed, sar.Status.Reason, nil
}

// Metrics count the guard's answers and the reviews it asked for.
type Metrics struct {
	requests *prometheus.CounterVec
	reviews  *prometheus.CounterVec
}

// NewMetrics registers the guard's metrics in reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "clusterip_policy_metrics_requests_total",
			Help: "With --metrics-secure: requests to /metrics by result (allowed; no-token, unauthenticated: 401; forbidden: 403; throttled: 429, over the review budget; review-failed: 503, a review call failed; bad-method: 405). A scrape that is refused is not counted in its own answer.",
		}, []string{"result"}),
		reviews: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "clusterip_policy_metrics_reviews_total",
			Help: "With --metrics-secure: reviews asked of the apiserver for /metrics requests, by review (token: a TokenReview, access: a SubjectAccessReview) and result (ok: answered, failed: the call failed).",
		}, []string{"review", "result"}),
	}
	reg.MustRegister(m.requests, m.reviews)
	return m
}

// Guard is the filter: a bounded cache of answers, a budget of reviews and
// bounded log lines.
type Guard struct {
	reviewer Reviewer
	metrics  *Metrics
	log      logr.Logger
	now      func() time.Time
	budget   *rate.Limiter
	allowed  *answers
	refused  *answers
	logs     *boundedLog
}

// NewGuard is a guard asking reviewer, with a clock (time.Now).
func NewGuard(reviewer Reviewer, m *Metrics, log logr.Logger, now func() time.Time) *Guard {
	return &Guard{
		reviewer: reviewer, metrics: m, log: log, now: now,
		budget:  rate.NewLimiter(ReviewRate, ReviewBurst),
		allowed: newAnswers(MaxAllowed),
		refused: newAnswers(MaxRefused),
		logs:    &boundedLog{every: LogEvery, last: map[string]time.Time{}, suppressed: map[string]int{}},
	}
}

// answer is what a token got: the status code, and for the log the user
// and why.
type answer struct {
	code    int
	result  string
	user    string
	reason  string
	expires time.Time
}

// Wrap guards next.
func (g *Guard) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := g.decide(r)
		g.metrics.requests.WithLabelValues(a.result).Inc()
		if a.code == http.StatusOK {
			next.ServeHTTP(w, r)
			return
		}
		g.logRefusal(r, a)
		switch a.code {
		case http.StatusUnauthorized:
			w.Header().Set("WWW-Authenticate", `Bearer realm="clusterip-policy metrics"`)
		case http.StatusTooManyRequests:
			w.Header().Set("Retry-After", "1")
		case http.StatusMethodNotAllowed:
			w.Header().Set("Allow", "GET, HEAD")
		}
		// The text names the fix, never the token or the user: a caller
		// learns nothing it did not send.
		http.Error(w, http.StatusText(a.code)+": "+a.result+": "+fixOf[a.result], a.code)
	})
}

var fixOf = map[string]string{
	ResultNoToken:         "send a bearer token (Authorization: Bearer <token>) of a user allowed get on the non-resource URL /metrics",
	ResultUnauthenticated: "the apiserver does not authenticate this token; send a valid one",
	ResultForbidden:       "the token's user may not get the non-resource URL /metrics; bind it to a ClusterRole with nonResourceURLs [/metrics] verbs [get]",
	ResultThrottled:       fmt.Sprintf("more new tokens than %d a second; retry after a second", ReviewRate),
	ResultReviewFailed:    "the webhook could not ask the apiserver about the token; its log says why",
	ResultBadMethod:       "use GET",
}

func (g *Guard) decide(r *http.Request) answer {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return answer{code: http.StatusMethodNotAllowed, result: ResultBadMethod}
	}
	token, ok := bearerToken(r.Header.Get("Authorization"))
	if !ok {
		return answer{code: http.StatusUnauthorized, result: ResultNoToken}
	}
	if len(token) > maxTokenBytes {
		return answer{code: http.StatusUnauthorized, result: ResultUnauthenticated, reason: fmt.Sprintf("a token of %d bytes, over %d: not sent to the apiserver", len(token), maxTokenBytes)}
	}
	key := sha256.Sum256([]byte(token))
	now := g.now()
	if a, ok := g.allowed.get(key, now); ok {
		return a
	}
	if a, ok := g.refused.get(key, now); ok {
		return a
	}
	// Only a token not cached costs reviews, and only within the budget:
	// whatever arrives, the apiserver sees at most ReviewRate token checks
	// a second from this replica.
	if !g.budget.AllowN(now, 1) {
		return answer{code: http.StatusTooManyRequests, result: ResultThrottled}
	}
	a := g.review(r.Context(), token)
	a.expires = now.Add(RefusedTTL)
	switch a.code {
	case http.StatusOK:
		a.expires = now.Add(AllowedTTL)
		g.allowed.put(key, a, now)
	case http.StatusUnauthorized, http.StatusForbidden:
		g.refused.put(key, a, now)
	}
	// A failed review is not cached: the next request asks again, within
	// the budget.
	return a
}

func (g *Guard) review(ctx context.Context, token string) answer {
	ctx, cancel := context.WithTimeout(ctx, reviewTimeout)
	defer cancel()
	user, ok, err := g.reviewer.Authenticate(ctx, token)
	g.countReview("token", err)
	if err != nil {
		return answer{code: http.StatusServiceUnavailable, result: ResultReviewFailed, reason: err.Error()}
	}
	if !ok {
		return answer{code: http.StatusUnauthorized, result: ResultUnauthenticated, reason: "the apiserver does not authenticate the token"}
	}
	allowed, why, err := g.reviewer.Authorize(ctx, user, metricsPath)
	g.countReview("access", err)
	if err != nil {
		return answer{code: http.StatusServiceUnavailable, result: ResultReviewFailed, user: user.Username, reason: err.Error()}
	}
	if !allowed {
		return answer{code: http.StatusForbidden, result: ResultForbidden, user: user.Username, reason: why}
	}
	return answer{code: http.StatusOK, result: ResultAllowed, user: user.Username}
}

func (g *Guard) countReview(review string, err error) {
	result := "ok"
	if err != nil {
		result = "failed"
	}
	g.metrics.reviews.WithLabelValues(review, result).Inc()
}

// logRefusal logs a refused request, at most one line per result a
// LogEvery: whoever reaches the port cannot grow the log at its request
// rate. The line counts the refusals of that kind not logged since the
// last one.
func (g *Guard) logRefusal(r *http.Request, a answer) {
	suppressed, ok := g.logs.allow(a.result, g.now())
	if !ok {
		return
	}
	kv := []any{"result", a.result, "status", a.code, "remote", clip(r.RemoteAddr), "notLoggedSinceLastLine", suppressed, "nextLineAfter", LogEvery.String()}
	if a.user != "" {
		kv = append(kv, "user", clip(a.user))
	}
	if a.result == ResultReviewFailed {
		g.log.Error(errors.New(clip(a.reason)), "refused a /metrics request: the review failed; the webhook needs create on tokenreviews and subjectaccessreviews", kv...)
		return
	}
	if a.reason != "" {
		kv = append(kv, "reason", clip(a.reason))
	}
	g.log.Info("refused a /metrics request", kv...)
}

// bearerToken is the token of an "Authorization: Bearer <token>" header
// (the scheme in any case, RFC 6750).
func bearerToken(header string) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(header), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

func clip(s string) string {
	if len(s) <= maxLoggedBytes {
		return s
	}
	return s[:maxLoggedBytes] + "..."
}

// answers is a bounded cache of answers by the token's SHA-256: the
// tokens themselves are never kept.
type answers struct {
	mu      sync.Mutex
	max     int
	entries map[[sha256.Size]byte]answer
}

func newAnswers(max int) *answers {
	return &answers{max: max, entries: make(map[[sha256.Size]byte]answer, max)}
}

func (c *answers) get(key [sha256.Size]byte, now time.Time) (answer, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	a, ok := c.entries[key]
	if !ok {
		return answer{}, false
	}
	if !now.Before(a.expires) {
		delete(c.entries, key)
		return answer{}, false
	}
	return a, true
}

// put stores a; a full cache first drops what expired, then the entry
// that expires first. The scan is bounded by max, and puts by the review
// budget.
func (c *answers) put(key [sha256.Size]byte, a answer, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.entries[key]; !ok && len(c.entries) >= c.max {
		var oldest [sha256.Size]byte
		var oldestExpiry time.Time
		for k, e := range c.entries {
			if !now.Before(e.expires) {
				delete(c.entries, k)
				continue
			}
			if oldestExpiry.IsZero() || e.expires.Before(oldestExpiry) {
				oldest, oldestExpiry = k, e.expires
			}
		}
		if len(c.entries) >= c.max {
			delete(c.entries, oldest)
		}
	}
	c.entries[key] = a
}

func (c *answers) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}

// boundedLog allows one line per kind every `every`, and counts the rest.
// The kinds are the results: a fixed handful, so the maps stay small.
type boundedLog struct {
	mu         sync.Mutex
	every      time.Duration
	last       map[string]time.Time
	suppressed map[string]int
}

// allow says whether a line of kind may be logged now, and how many were
// not logged since the last one.
func (l *boundedLog) allow(kind string, now time.Time) (int, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if last, ok := l.last[kind]; ok && now.Sub(last) < l.every {
		l.suppressed[kind]++
		return 0, false
	}
	n := l.suppressed[kind]
	l.last[kind], l.suppressed[kind] = now, 0
	return n, true
}
