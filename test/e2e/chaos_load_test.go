//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"clusterip-policy/test/e2e/framework"
	"clusterip-policy/test/fixtures"
)

// The load the fault scenarios run under: clients that create, update and
// delete Services through the apiservers' load balancer for a bounded time
// and a bounded number of requests, retrying on connection errors and 5xx
// as client-go users do, and remembering every answer they got so that the
// cluster can be checked against it afterwards.

// loadOptions shape one run of the load.
type loadOptions struct {
	Namespace string
	Clients   int           // concurrent clients, each with its own connection
	Duration  time.Duration // how long new requests are started
	MaxOps    int           // per client, whatever the duration
	// Forbidden returns a create the policy must deny and the text its
	// denial must carry; the default asks for a static address in the
	// dynamic band or the DNS address.
	Forbidden func(rng *rand.Rand, name string) (*corev1.Service, string)
	// StaticPool lists the static addresses client i may ask for; no two
	// clients share one, so a refusal is never another client's doing.
	StaticPool func(client int) []string
	// AcceptDenial marks a refusal the scenario provokes on purpose (for
	// example a dynamic create allocated in a ServiceCIDR being deleted):
	// counted as an expected denial, not as an error.
	AcceptDenial func(err error) bool
	// Config, when set, makes each client's configuration instead of
	// loadClientConfig (the real node's apiserver has no load balancer);
	// runLoad then needs no *framework.Cluster.
	Config func() *rest.Config
	// AllowedOnly sends no forbidden create (a dynamic create instead):
	// for a load that runs while the webhook is not installed yet, or no
	// longer, when such a create is admitted by design.
	AllowedOnly bool
}

// outcome classes of one logical request.
const (
	classOK             = "succeeded"
	classExpectedDenial = "expected denial"
	classHeld           = "refused: address still held"
	classError          = "real error"
)

// opRecord is one logical request (all its attempts).
type opRecord struct {
	Kind     string // create, create-static, create-forbidden, update, delete
	Name     string
	Class    string
	Attempts int
	Err      string
	Start    time.Time
	End      time.Time
	IP       string // the clusterIP a create was given
}

// loadResult is what the clients saw.
type loadResult struct {
	Ops []opRecord
	// Live are the Services the clients were told exist (created, not
	// deleted since), with the clusterIP they were given.
	Live map[string]string
	// CreatedAt is when each create was answered.
	CreatedAt map[string]time.Time
	// Deleted are the Services the clients were told are deleted, and when.
	Deleted map[string]time.Time
	// Unknown are creates whose every attempt failed: they may or may not
	// have gone through.
	Unknown map[string]bool
	// AdmittedOutside are forbidden creates that were admitted.
	AdmittedOutside []string
	// FailedAttempts are the times of attempts that failed and were
	// retried, to measure how long a fault disturbed the clients.
	FailedAttempts []time.Time
	// FailedAttemptErrs are the first few errors of those attempts (at
	// most maxFailedAttemptErrs), for a failure message that says what the
	// clients saw.
	FailedAttemptErrs []string
}

const maxFailedAttemptErrs = 5

// tally counts the records.
type tally struct {
	Sent, Succeeded, RetriedOK, ExpectedDenials, Held, RealErrors, Attempts, RetriedAttempts int
}

func (r *loadResult) tally() tally {
	var t tally
	for _, op := range r.Ops {
		t.Sent++
		t.Attempts += op.Attempts
		t.RetriedAttempts += op.Attempts - 1
		switch op.Class {
		case classOK:
			t.Succeeded++
			if op.Attempts > 1 {
				t.RetriedOK++
			}
		case classExpectedDenial:
			t.ExpectedDenials++
		case classHeld:
			t.Held++
		default:
			t.RealErrors++
		}
	}
	return t
}

// realErrors returns at most n of the real errors, for the failure message.
func (r *loadResult) realErrors(n int) []string {
	var out []string
	for _, op := range r.Ops {
		if op.Class == classError && len(out) < n {
			out = append(out, fmt.Sprintf("%s %s after %d attempts: %s", op.Kind, op.Name, op.Attempts, op.Err))
		}
	}
	return out
}

// disruption is how long after `from` clients still saw failed attempts.
func (r *loadResult) disruption(from time.Time) time.Duration {
	var last time.Time
	for _, t := range r.FailedAttempts {
		if t.After(from) && t.After(last) {
			last = t
		}
	}
	if last.IsZero() {
		return 0
	}
	return last.Sub(from)
}

// loadClientConfig is a client through the load balancer without client-side
// rate limiting, with a per-request timeout above the webhooks' 5 s. Its
// own dialer keeps client-go from sharing one cached transport (and so one
// HTTP/2 connection, to one apiserver) among all clients: each client is a
// separate connection, as separate programs would be.
func loadClientConfig(c *framework.Cluster) *rest.Config {
	cfg := c.LBRESTConfig()
	cfg.Dial = (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	cfg.QPS, cfg.Burst = 1000, 2000
	cfg.Timeout = 15 * time.Second
	cfg.UserAgent = "clusterip-policy-chaos"
	return cfg
}

// runLoad runs the clients until Duration has passed (or MaxOps each) and
// returns what they saw. ctx bounds everything, retries included.
func runLoad(ctx context.Context, t *testing.T, c *framework.Cluster, o loadOptions) *loadResult {
	t.Helper()
	if o.Forbidden == nil {
		o.Forbidden = defaultForbidden
	}
	res := &loadResult{Live: map[string]string{}, CreatedAt: map[string]time.Time{}, Deleted: map[string]time.Time{}, Unknown: map[string]bool{}}
	var mu sync.Mutex
	deadline := time.Now().Add(o.Duration)
	var wg sync.WaitGroup
	newConfig := o.Config
	if newConfig == nil {
		newConfig = func() *rest.Config { return loadClientConfig(c) }
	}
	for i := range o.Clients {
		cs := kubernetes.NewForConfigOrDie(newConfig())
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := &loadClient{id: i, cs: cs, o: o, res: res, mu: &mu, rng: rand.New(rand.NewPCG(uint64(i), uint64(time.Now().UnixNano()))),
				live: map[string]string{}, pool: o.StaticPool(i), cooling: map[string]time.Time{}}
			for seq := 0; seq < o.MaxOps && time.Now().Before(deadline) && ctx.Err() == nil; seq++ {
				w.step(ctx, seq)
			}
		}()
	}
	wg.Wait()
	return res
}

type loadClient struct {
	id   int
	cs   kubernetes.Interface
	o    loadOptions
	res  *loadResult
	mu   *sync.Mutex
	rng  *rand.Rand
	live map[string]string // name -> clusterIP, this client's own
	pool []string
	// cooling holds static addresses freed a moment ago; the view of the
	// webhook and the apiserver may still hold them for a few
	// milliseconds.
	cooling map[string]time.Time
	held    []string // addresses refused as still held; not asked for again
}

func defaultForbidden(rng *rand.Rand, name string) (*corev1.Service, string) {
	if rng.IntN(4) == 0 {
		return fixtures.Service("", name, fixtures.WithClusterIP("10.96.0.10")), "is reserved for Service kube-system/kube-dns"
	}
	ip := fmt.Sprintf("10.96.%d.%d", 2+rng.IntN(250), 1+rng.IntN(250))
	return fixtures.Service("", name, fixtures.WithClusterIP(ip)), "lies in the dynamic band"
}

func (w *loadClient) step(ctx context.Context, seq int) {
	name := fmt.Sprintf("c%d-%04d", w.id, seq)
	p := w.rng.IntN(100)
	switch {
	case len(w.live) > 0 && p < 15:
		w.update(ctx, w.pick())
	case len(w.live) > 0 && (p < 30 || len(w.live) > 25):
		w.delete(ctx, w.pick())
	case p < 40 && w.o.AllowedOnly:
		w.create(ctx, "create", fixtures.Service("", name))
	case p < 40:
		svc, want := w.o.Forbidden(w.rng, name)
		w.createForbidden(ctx, svc, want)
	case p < 50:
		if ip := w.freeStatic(); ip != "" {
			w.create(ctx, "create-static", fixtures.Service("", name, fixtures.WithClusterIP(ip)))
			return
		}
		fallthrough
	default:
		w.create(ctx, "create", fixtures.Service("", name))
	}
}

func (w *loadClient) pick() string {
	names := make([]string, 0, len(w.live))
	for n := range w.live {
		names = append(names, n)
	}
	sort.Strings(names)
	return names[w.rng.IntN(len(names))]
}

func (w *loadClient) freeStatic() string {
	used := map[string]bool{}
	for _, ip := range w.live {
		used[ip] = true
	}
	for _, ip := range w.pool {
		if used[ip] || slices.Contains(w.held, ip) || time.Since(w.cooling[ip]) < 3*time.Second {
			continue
		}
		return ip
	}
	return ""
}

// attempt runs do until it succeeds, fails for good, or ctx ends; it
// returns the number of attempts and the last error.
func (w *loadClient) attempt(ctx context.Context, do func() error) (int, error) {
	backoff := 100 * time.Millisecond
	for n := 1; ; n++ {
		err := do()
		if err == nil || !retryable(err) || n >= 30 || ctx.Err() != nil {
			return n, err
		}
		w.mu.Lock()
		w.res.FailedAttempts = append(w.res.FailedAttempts, time.Now())
		if len(w.res.FailedAttemptErrs) < maxFailedAttemptErrs {
			w.res.FailedAttemptErrs = append(w.res.FailedAttemptErrs, fmt.Sprintf("%s: %.300s", time.Now().Format("15:04:05.000"), err))
		}
		w.mu.Unlock()
		select {
		case <-ctx.Done():
			return n, err
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// retryable: what a client-go user retries: the connection failed, the
// server answered 5xx or 429 (an apiserver shutting down, a webhook that
// could not be called, the webhook saying it is not ready), or the request
// timed out.
func retryable(err error) bool {
	var se *apierrors.StatusError
	if errors.As(err, &se) {
		code := se.Status().Code
		return code >= 500 || code == 429
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	s := err.Error()
	for _, m := range []string{"connection refused", "connection reset", "EOF", "http2: client connection lost", "TLS handshake", "broken pipe", "timeout"} {
		if strings.Contains(s, m) {
			return true
		}
	}
	return false
}

func (w *loadClient) record(op opRecord) {
	op.End = time.Now()
	w.mu.Lock()
	w.res.Ops = append(w.res.Ops, op)
	w.mu.Unlock()
}

func (w *loadClient) key(name string) string { return w.o.Namespace + "/" + name }

func (w *loadClient) create(ctx context.Context, kind string, svc *corev1.Service) {
	svc.Namespace = w.o.Namespace
	op := opRecord{Kind: kind, Name: svc.Name, Start: time.Now()}
	var got *corev1.Service
	n, err := w.attempt(ctx, func() error {
		var err error
		got, err = w.cs.CoreV1().Services(svc.Namespace).Create(ctx, svc.DeepCopy(), metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			// An earlier attempt went through although its answer was
			// lost: names are never reused, so the object is ours.
			got, err = w.cs.CoreV1().Services(svc.Namespace).Get(ctx, svc.Name, metav1.GetOptions{})
		}
		return err
	})
	op.Attempts = n
	switch {
	case err == nil:
		op.Class, op.IP = classOK, got.Spec.ClusterIP
		w.live[svc.Name] = got.Spec.ClusterIP
		w.mu.Lock()
		w.res.Live[w.key(svc.Name)] = got.Spec.ClusterIP
		w.res.CreatedAt[w.key(svc.Name)] = time.Now()
		w.mu.Unlock()
	case kind == "create-static" && w.heldByGoneService(err):
		// The address is still held by an IPAddress whose Service is
		// gone: the apiservers' repair loops can re-create an IPAddress
		// for a Service being deleted, and delete it only about a minute
		// later. Counted apart and not asked for again in this run.
		op.Class, op.Err = classHeld, err.Error()
		w.held = append(w.held, svc.Spec.ClusterIP)
	case w.o.AcceptDenial != nil && w.o.AcceptDenial(err):
		op.Class, op.Err = classExpectedDenial, err.Error()
	default:
		op.Class, op.Err = classError, err.Error()
		if retryable(err) {
			w.mu.Lock()
			w.res.Unknown[w.key(svc.Name)] = true
			w.mu.Unlock()
		}
	}
	w.record(op)
}

// heldByGoneService reports whether err refuses a static address because an
// IPAddress still holds it for a Service that no client believes exists
// (the webhook's already-allocated names the Service; the apiserver's own
// "provided IP is already allocated" names none). A holder the clients
// believe alive would be a real error: no two clients share an address.
func (w *loadClient) heldByGoneService(err error) bool {
	s := err.Error()
	if strings.Contains(s, "provided IP is already allocated") {
		return true
	}
	m := heldBy.FindStringSubmatch(s)
	if m == nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	_, alive := w.res.Live[m[1]]
	return !alive
}

var heldBy = regexp.MustCompile(`is held by IPAddress \S+ for Service ([^\s/]+/[^\s(;]+)`)

func (w *loadClient) createForbidden(ctx context.Context, svc *corev1.Service, want string) {
	svc.Namespace = w.o.Namespace
	op := opRecord{Kind: "create-forbidden", Name: svc.Name, Start: time.Now()}
	n, err := w.attempt(ctx, func() error {
		_, err := w.cs.CoreV1().Services(svc.Namespace).Create(ctx, svc.DeepCopy(), metav1.CreateOptions{})
		return err
	})
	op.Attempts = n
	switch {
	case err == nil || apierrors.IsAlreadyExists(err):
		op.Class, op.Err = classError, "admitted outside policy: clusterIP "+svc.Spec.ClusterIP
		w.mu.Lock()
		w.res.AdmittedOutside = append(w.res.AdmittedOutside, w.key(svc.Name)+" "+svc.Spec.ClusterIP)
		w.mu.Unlock()
	case deniedBy(err, mutating) && strings.Contains(err.Error(), want):
		op.Class = classExpectedDenial
	default:
		op.Class, op.Err = classError, err.Error()
	}
	w.record(op)
}

func (w *loadClient) update(ctx context.Context, name string) {
	op := opRecord{Kind: "update", Name: name, Start: time.Now()}
	patch := []byte(fmt.Sprintf(`{"metadata":{"labels":{"chaos-touch":"%d"}}}`, time.Now().UnixNano()))
	n, err := w.attempt(ctx, func() error {
		_, err := w.cs.CoreV1().Services(w.o.Namespace).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	})
	op.Attempts = n
	if err == nil {
		op.Class = classOK
	} else {
		// NotFound here means a Service the client was told exists is gone.
		op.Class, op.Err = classError, err.Error()
	}
	w.record(op)
}

func (w *loadClient) delete(ctx context.Context, name string) {
	op := opRecord{Kind: "delete", Name: name, Start: time.Now()}
	retried := false
	n, err := w.attempt(ctx, func() error {
		err := w.cs.CoreV1().Services(w.o.Namespace).Delete(ctx, name, metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) && retried {
			return nil // an earlier attempt went through although its answer was lost
		}
		retried = true
		return err
	})
	op.Attempts = n
	if err == nil {
		op.Class = classOK
		if ip := w.live[name]; ip != "" {
			w.cooling[ip] = time.Now()
		}
		delete(w.live, name)
		w.mu.Lock()
		delete(w.res.Live, w.key(name))
		w.res.Deleted[w.key(name)] = time.Now()
		w.mu.Unlock()
	} else {
		op.Class, op.Err = classError, err.Error()
	}
	w.record(op)
}

// clusterCheck is the state of the cluster after a run, held against the
// policy and against what the clients were told.
type clusterCheck struct {
	Lost        []string   // told created, not there
	Resurrected []string   // told deleted, still there
	Outside     []string   // Services whose clusterIP breaks the policy
	Duplicates  []string   // one address on two Services
	Orphaned    []string   // Services on a ServiceCIDR deleted after they were admitted
	Leftovers   []leftover // IPAddresses whose Service is gone
	Services    int
}

// policyRanges is what the chaos policy allows: ServiceCIDRs inside
// 10.96.0.0/12 (allowedCIDRs), the DNS address for kube-system/kube-dns
// only, the first address for default/kubernetes only.
var chaosAllowed = netip.MustParsePrefix("10.96.0.0/12")

// checkCluster lists every Service and IPAddress (through the load
// balancer, retrying while it cannot answer) and checks them. orphanedIn
// names ServiceCIDRs deleted during the run: Services inside them are
// reported as orphaned rather than as outside the policy when their create
// was answered before deletedAt.
func checkCluster(ctx context.Context, t *testing.T, c *framework.Cluster, res *loadResult, ns string, deleted []netip.Prefix, deletedAt time.Time) clusterCheck {
	t.Helper()
	cs := kubernetes.NewForConfigOrDie(loadClientConfig(c))
	var svcs *corev1.ServiceList
	var cidrs []netip.Prefix
	var ipas map[string]string
	err := retryUntil(ctx, 30*time.Second, func() error {
		l, err := cs.CoreV1().Services("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		sc, err := cs.NetworkingV1().ServiceCIDRs().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		ia, err := cs.NetworkingV1().IPAddresses().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		svcs, cidrs, ipas = l, nil, map[string]string{}
		for _, s := range sc.Items {
			if s.DeletionTimestamp != nil {
				continue
			}
			for _, cidr := range s.Spec.CIDRs {
				if p, err := netip.ParsePrefix(cidr); err == nil {
					cidrs = append(cidrs, p)
				}
			}
		}
		for _, a := range ia.Items {
			if a.Spec.ParentRef != nil {
				ipas[a.Name] = a.Spec.ParentRef.Namespace + "/" + a.Spec.ParentRef.Name
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("list the cluster's Services, ServiceCIDRs and IPAddresses: %v", err)
	}
	var out clusterCheck
	exists := map[string]string{}
	byIP := map[string]string{}
	for _, s := range svcs.Items {
		key := s.Namespace + "/" + s.Name
		exists[key] = s.Spec.ClusterIP
		out.Services++
		for _, ipStr := range s.Spec.ClusterIPs {
			if ipStr == "" || ipStr == corev1.ClusterIPNone {
				continue
			}
			if other, dup := byIP[ipStr]; dup {
				out.Duplicates = append(out.Duplicates, fmt.Sprintf("%s on %s and %s", ipStr, other, key))
			}
			byIP[ipStr] = key
			if why := breaksChaosPolicy(key, ipStr, cidrs); why != "" {
				ip := netip.MustParseAddr(ipStr)
				if in := slices.ContainsFunc(deleted, func(p netip.Prefix) bool { return p.Contains(ip) }); in && res.CreatedAt[key].Before(deletedAt) {
					out.Orphaned = append(out.Orphaned, key+" "+ipStr)
					continue
				}
				out.Outside = append(out.Outside, fmt.Sprintf("%s %s: %s", key, ipStr, why))
			}
		}
	}
	for key, ip := range res.Live {
		if got, ok := exists[key]; !ok {
			out.Lost = append(out.Lost, key)
		} else if got != ip {
			out.Lost = append(out.Lost, fmt.Sprintf("%s (had %s, now %s)", key, ip, got))
		}
	}
	for key := range res.Deleted {
		if _, ok := exists[key]; ok {
			out.Resurrected = append(out.Resurrected, key)
		}
	}
	for ip, owner := range ipas {
		if strings.HasPrefix(owner, ns+"/") {
			if _, ok := exists[owner]; !ok {
				out.Leftovers = append(out.Leftovers, leftover{IP: ip, Service: owner, DeletedAt: res.Deleted[owner]})
			}
		}
	}
	sort.Slice(out.Leftovers, func(i, j int) bool { return out.Leftovers[i].IP < out.Leftovers[j].IP })
	return out
}

// leftover is an IPAddress that outlived its Service.
type leftover struct {
	IP, Service string
	DeletedAt   time.Time // when the client was told the Service is deleted; zero if it never was
}

func (l leftover) String() string { return l.IP + " for " + l.Service }

// waitLeftoversGone polls until no IPAddress of the list still names its
// gone Service, at most timeout, and returns how long each lived after its
// Service was deleted (nil for those still there).
func waitLeftoversGone(ctx context.Context, cs kubernetes.Interface, list []leftover, timeout time.Duration) map[leftover]time.Duration {
	lived := map[leftover]time.Duration{}
	// A pass a second, not fixtures.Wait: each pass gets every leftover.
	deadline := time.Now().Add(timeout)
	for len(lived) < len(list) && time.Now().Before(deadline) && ctx.Err() == nil {
		for _, l := range list {
			if _, done := lived[l]; done {
				continue
			}
			a, err := cs.NetworkingV1().IPAddresses().Get(ctx, l.IP, metav1.GetOptions{})
			gone := apierrors.IsNotFound(err) || (err == nil && (a.Spec.ParentRef == nil || a.Spec.ParentRef.Namespace+"/"+a.Spec.ParentRef.Name != l.Service))
			if gone && !l.DeletedAt.IsZero() {
				lived[l] = time.Since(l.DeletedAt)
			} else if gone {
				lived[l] = -1
			}
		}
		time.Sleep(time.Second)
	}
	return lived
}

// breaksChaosPolicy says why a Service's address breaks the chaos policy,
// or "" when it does not. Written apart from pkg/policy on purpose: the
// product must not be its own judge.
func breaksChaosPolicy(key, ipStr string, cidrs []netip.Prefix) string {
	ip, err := netip.ParseAddr(ipStr)
	if err != nil {
		return "not an IP"
	}
	if !chaosAllowed.Contains(ip) {
		return "outside allowedCIDRs " + chaosAllowed.String()
	}
	inRange := false
	for _, p := range cidrs {
		if p.Contains(ip) && chaosAllowed.Contains(p.Addr()) && ip != p.Addr() {
			inRange = true
		}
	}
	if !inRange {
		return "outside every active approved ServiceCIDR"
	}
	switch {
	case ipStr == "10.96.0.10" && key != "kube-system/kube-dns":
		return "the DNS address, reserved for kube-system/kube-dns"
	case ipStr == "10.96.0.1" && key != "default/kubernetes":
		return "the kubernetes Service's address"
	}
	return ""
}

// retryUntil calls do until it succeeds or timeout passes.
func retryUntil(ctx context.Context, timeout time.Duration, do func() error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		err := do()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(200 * time.Millisecond):
		}
	}
}
