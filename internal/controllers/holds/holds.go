// Package holds is the leader's loop that keeps an IPAddress for each
// reserved address its owner does not hold, and the release of such a hold
// in the mutating stage, for an owner being created. pkg/holds decides;
// this package talks to the apiserver. The admission package calls the
// release through its AllocationHook interface and never imports this one.
package holds

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/flowcontrol"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"clusterip-policy/internal/judged"
	"clusterip-policy/internal/leader"
	"clusterip-policy/internal/poll"
	"clusterip-policy/internal/readiness"
	"clusterip-policy/pkg/allocview"
	"clusterip-policy/pkg/allocview/kubesource"
	"clusterip-policy/pkg/holds"
	"clusterip-policy/pkg/policy"
)

// Holds: the leader keeps an IPAddress for each reserved address its owner
// does not hold, so the apiserver's allocator skips it; every replica
// releases the hold of an owner being created, in the mutating stage,
// before the apiserver allocates. pkg/holds decides; this file talks to
// the apiserver. The races are in docs/design.md, "Reservation holds: the races".

const (
	// A pass runs at least every holdPassInterval, as soon as the view
	// changes (an IPAddress came or went: a release) but not more often
	// than every holdMinPassGap, and when a waiting address ends its grace.
	// So a hold comes back about --hold-grace after the address was freed.
	holdPassInterval = time.Second
	holdMinPassGap   = 250 * time.Millisecond
	// holdPollInterval is how often the leader looks at the view's
	// generation: the view announces no change.
	holdPollInterval = 50 * time.Millisecond
	// holdCallTimeout bounds each call of a pass or a release.
	holdCallTimeout = 2 * time.Second
	// maxHoldCreatesPerPass bounds the owner GETs and creates of one pass;
	// the rest follow on the next passes.
	maxHoldCreatesPerPass = 100
	// maxHoldDeletesPerPass bounds the deletes of one pass the same way, so
	// a pass lasts about two seconds at the default write rate whatever
	// changed.
	maxHoldDeletesPerPass = 100
	// ReleaseBurst and ReleaseRefill are each address's budget of releases
	// (holds.ReleaseBudget): a failed owner create and two retries at once,
	// then one a minute, so forged reviews free an address for about
	// three graces and then one grace a minute. The budget lives in each
	// replica's memory: a replica that restarts starts with full buckets.
	ReleaseBurst  = 3
	ReleaseRefill = time.Minute
	// RangeReleaseBurst and RangeReleaseRefill are each reserved range's
	// budget of releases, all its addresses together: 20 hand-picked
	// creates at once, then 2 a second. Forged reviews then free at most 20
	// of a range's addresses at first and about 2 a second after, each for
	// about a grace, however large the range; a real team creating Services
	// in its range faster is told to retry.
	RangeReleaseBurst  = 20
	RangeReleaseRefill = 500 * time.Millisecond
	// ClientQPS and ClientBurst bound the API calls of the holds (the
	// releases of every replica, and the leader's creates and deletes) on a
	// client of their own, rather than client-go's default of 5 a second
	// shared with everything else: a release costs two calls (the owner's
	// GET, the DELETE), so 50 owners created at once are served within
	// about a second. Reviews that the watch of the holds and the view
	// already answer make no call at all (Releaser.release).
	ClientQPS   = 50
	ClientBurst = 100
	// refusalLogInterval bounds the log of refused releases: a hostile
	// caller must not be able to fill the log; the metric counts each.
	refusalLogInterval = 10 * time.Second
)

// Options are the holds' flags.
type Options struct {
	Enabled bool
	Grace   time.Duration
	// WriteRate bounds the leader's creates and deletes of holds, per
	// second (--hold-write-rate).
	WriteRate float64
}

// DefaultWriteRate is --hold-write-rate's default: a /22 reserved range
// (1,024 addresses) is held in about 20 s, and the apiserver sees no more
// than a small controller's writes.
const DefaultWriteRate = 50

// AddFlags declares the holds' flags, checked by Validate.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&o.Enabled, "hold-reservations", false, "Keep an IPAddress (label "+holds.Selector+") for each reserved address whose owner Service does not exist, so the apiserver's allocator never hands it out; the mutating stage deletes it when the owner is created. One replica, elected with a Lease, keeps the holds. Needs create/delete on ipaddresses, get on services and the Lease (manifests/base/rbac.yaml). Off: reservations are defended by the validating stage alone.")
	fs.Float64Var(&o.WriteRate, "hold-write-rate", DefaultWriteRate, "With --hold-reservations: at most this many creates and deletes of holds a second by the leader (1-1000). Every free address of a reserved range is held, up to 4,096 in all: at the default a /22 range is held in about 20 s after it is added. The releases of the mutating stage have a client of their own and never wait for these.")
	fs.DurationVar(&o.Grace, "hold-grace", time.Second, "How long a reserved address must stay free before the leader holds it again: it outlasts an owner's create between the mutating stage (which released the hold) and the allocation, and bounds how soon a hold comes back after a failed owner create.")
}

// Validate checks the flags, naming the flag, the value and the fix.
func (o *Options) Validate() error {
	if o.Enabled && (o.Grace < 100*time.Millisecond || o.Grace > time.Minute) {
		return fmt.Errorf("--hold-grace %s is outside 100ms-1m; the default 1s outlasts an owner's create between the mutating stage and the allocation", o.Grace)
	}
	// Written so that NaN (which strconv.ParseFloat accepts) is refused too.
	if o.Enabled && !(o.WriteRate >= 1 && o.WriteRate <= 1000) {
		return fmt.Errorf("--hold-write-rate %g is outside 1-1000 writes a second; the default %d holds a /22 reserved range in about 20 s", o.WriteRate, DefaultWriteRate)
	}
	return nil
}

// Metrics are the holds' own, shared by the keeper and the releaser.
type Metrics struct {
	states      *prometheus.GaugeVec
	rangeStates *prometheus.GaugeVec
	changes     *prometheus.CounterVec
	releases    *prometheus.CounterVec
	passes      *prometheus.CounterVec
}

// NewMetrics registers the metrics in reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		states: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "clusterip_policy_holds",
			Help: "Reservations by hold state, as the leader last saw them: held (an IPAddress of ours), owner (the owner Service holds it), other (someone else's IPAddress), waiting (free, within the grace), candidate (free past the grace), not-applied (not held by design). Zero on replicas that are not the leader.",
		}, []string{"state"}),
		rangeStates: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "clusterip_policy_range_holds",
			Help: "Addresses of the reserved ranges by hold state, as the leader last saw them: held (an IPAddress of ours), used (any other IPAddress: a Service's allocation), waiting (free, within the grace), candidate (free past the grace, to be held). Zero on replicas that are not the leader.",
		}, []string{"state"}),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "clusterip_policy_hold_changes_total",
			Help: "Holds created and deleted by this replica as leader (action: created, deleted, failed).",
		}, []string{"action"}),
		releases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "clusterip_policy_hold_releases_total",
			Help: "Holds released in the mutating stage for an owner being created (result: released, absent, failed), and releases refused: owner-exists (a create of an owner that already exists, whose own IPAddress holds the address or whose GET found it, or an update of one that does not: a forged or duplicate review), rate-limited (the address was released too often without its owner appearing; see docs/operations.md \"Who can release a hold\").",
		}, []string{"result"}),
	}
	m.passes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "clusterip_policy_hold_passes_total",
		Help: "The leader's passes over the holds (result: done, every change of the plan tried; failed, some change or the list failed; skipped, the policy or view not ready or the judged namespaces not known yet). At least one a second while leading.",
	}, []string{"result"})
	reg.MustRegister(m.states, m.rangeStates, m.changes, m.releases, m.passes)
	for _, r := range []string{passDone, passFailed, passSkipped} {
		m.passes.WithLabelValues(r)
	}
	for _, s := range holds.States {
		m.states.WithLabelValues(s)
	}
	for _, s := range holds.RangeStates {
		m.rangeStates.WithLabelValues(s)
	}
	for _, r := range []string{releaseReleased, releaseAbsent, releaseFailed, releaseOwnerExists, releaseRateLimited} {
		m.releases.WithLabelValues(r)
	}
	return m
}

// Keeper is the leader's loop.
type Keeper struct {
	client kubernetes.Interface
	watch  *Watch
	gate   *readiness.Gate
	// skip says which namespaces the webhook is never called for (its own,
	// and those the configurations' namespaceSelector leaves out): no
	// review releases a hold there, so none is kept.
	skip  judged.Source
	grace time.Duration
	// holds lists our holds: from the watch every replica keeps.
	holds   func() ([]*networkingv1.IPAddress, error)
	log     logr.Logger
	metrics *Metrics
	// writes paces the creates and deletes (--hold-write-rate): a reserved
	// range brings up to policy.MaxReservedRangeAddresses creates at once
	// (a new range, a new leader after a wipe), spread out rather than
	// sent as fast as the client allows.
	writes flowcontrol.RateLimiter
	// unheld is what the last pass logged of the ranges left unheld
	// (holds.UnheldRanges): each change is logged once, not every pass.
	unheld string
}

// NewKeeper keeps the holds the gate's policy and view call for, in every
// namespace skip says is judged, reading them from watch and writing
// through client, at most writeRate creates and deletes a second. The
// client should be the keeper's own: the releases of the mutating stage
// must not queue behind a range's creates on a shared client limit.
func NewKeeper(client kubernetes.Interface, watch *Watch, gate *readiness.Gate, skip judged.Source, grace time.Duration, writeRate float64, log logr.Logger, m *Metrics) *Keeper {
	// Burst 1: a pass's creates leave at an even pace.
	return &Keeper{client: client, watch: watch, gate: gate, skip: skip, grace: grace, log: log, metrics: m,
		writes: flowcontrol.NewTokenBucketRateLimiter(float32(writeRate), 1)}
}

// Work keeps the holds while this replica leads; at the term's end the
// gauges say nothing is kept here.
func (k *Keeper) Work() leader.Work {
	return leader.Term(k.log, "leading: keeping reservation holds", nil, k.keep, func() {
		for _, s := range holds.States {
			k.metrics.states.WithLabelValues(s).Set(0)
		}
		for _, s := range holds.RangeStates {
			k.metrics.rangeStates.WithLabelValues(s).Set(0)
		}
	})
}

// keep runs passes while ctx (the leadership) lasts. A new leader starts
// with no memory of when addresses became free, so it waits the whole
// grace before its first creates.
func (k *Keeper) keep(ctx context.Context) {
	// The leader reads its holds from the watch every replica keeps,
	// rather than listing them each pass: a label-selected list makes the
	// apiserver scan every IPAddress of the cluster.
	if !k.watch.WaitForSync(ctx) {
		k.log.Info("stopped before the holds were listed")
		return
	}
	k.holds = k.watch.List
	free := holds.FreeSince{}
	loop := &poll.Loop{
		Pass: func(ctx context.Context) (time.Duration, error) {
			next, err := k.pass(ctx, free)
			switch due := time.Until(next); {
			case next.IsZero():
				return 0, err
			case due > 0:
				return due, err
			}
			return -1, err // a grace ended during the pass
		},
		Resync: holdPassInterval, MinGap: holdMinPassGap,
		Log: k.log, Failing: "hold pass failed; retrying every pass, logged again when the error changes (clusterip_policy_hold_changes_total{action=\"failed\"} counts each failure)",
		Recovered: "hold pass done again",
	}
	go func() {
		seen := k.gate.View.Snapshot().Generation
		for poll.Sleep(ctx, holdPollInterval) {
			if gen := k.gate.View.Snapshot().Generation; gen != seen {
				seen = gen
				loop.Kick()
			}
		}
	}()
	loop.Run(ctx)
}

// pass runs one plan and returns when the next one is due at the latest
// (zero: after holdPassInterval).
func (k *Keeper) pass(ctx context.Context, free holds.FreeSince) (time.Time, error) {
	st, err := k.gate.ForLoop(time.Now())
	if err != nil {
		k.metrics.passes.WithLabelValues(passSkipped).Inc()
		return time.Time{}, nil // not ready: the next pass tries again
	}
	scope, err := k.skip.Current()
	if err != nil {
		k.metrics.passes.WithLabelValues(passSkipped).Inc()
		return time.Time{}, nil // not known yet (the scope logs why): hold nothing on a guess
	}
	if lines := holds.UnheldRanges(st.Env.Policy, scope.Skipped); strings.Join(lines, "\n") != k.unheld {
		k.unheld = strings.Join(lines, "\n")
		for _, l := range lines {
			k.log.Info(l)
		}
	}
	wants, notApplied := holds.Wants(st.Env.Policy, st.Env.Ranges(), scope.Skipped)
	rangeWants, _ := holds.RangeWants(st.Env.Policy, st.Env.Ranges(), scope.Skipped)
	wants = append(wants, rangeWants...)
	objs, err := k.holds()
	if err != nil {
		k.metrics.passes.WithLabelValues(passFailed).Inc()
		return time.Time{}, fmt.Errorf("list the holds (IPAddresses -l %s): %w", holds.Selector, err)
	}
	listed := make([]holds.Hold, 0, len(objs))
	uids := map[netip.Addr]*networkingv1.IPAddress{}
	for _, o := range objs {
		ip, err := netip.ParseAddr(o.Name)
		if err != nil {
			continue // not a name the apiserver accepts for an IPAddress; never ours
		}
		listed = append(listed, holds.Hold{IP: ip, Owner: kubesource.HolderOf(o)})
		uids[ip] = o
	}
	plan := holds.Decide(wants, notApplied, listed, st.Snap.Holder, free, time.Now(), k.grace)
	var failures poll.Failures
	for s, n := range plan.States {
		k.metrics.states.WithLabelValues(s).Set(float64(n))
	}
	for s, n := range plan.RangeStates {
		k.metrics.rangeStates.WithLabelValues(s).Set(float64(n))
	}
	for i, h := range plan.Delete {
		if i == maxHoldDeletesPerPass {
			break // a changed range may bring thousands: the rest on the next passes
		}
		o := uids[h.IP]
		if err := k.writes.Wait(ctx); err != nil {
			return plan.Next, nil // leadership ended
		}
		cctx, cancel := context.WithTimeout(ctx, holdCallTimeout)
		err := k.client.NetworkingV1().IPAddresses().Delete(cctx, o.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &o.UID}})
		cancel()
		switch {
		case err == nil:
			k.metrics.changes.WithLabelValues("deleted").Inc()
			level := 0
			if h.Owner.Resource == allocview.RangeHoldResource {
				level = 1 // a range that left brings up to thousands at once
			}
			k.log.V(level).Info("hold deleted: its reservation or range left the policy, or it names another owner or range", "ip", h.IP.String(), "owner", h.Owner.String())
		case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		default:
			failures.Add(fmt.Errorf("delete the hold on %s: %w", h.IP, err))
		}
	}
	for i, w := range plan.Create {
		if i == maxHoldCreatesPerPass || ctx.Err() != nil {
			break
		}
		failures.Add(k.create(ctx, w, free))
	}
	k.metrics.changes.WithLabelValues("failed").Add(float64(failures.N))
	if ctx.Err() == nil {
		// Counted once the whole plan was tried, so a test (or an
		// operator) that sees the counter advance knows the leader acted
		// on what it saw; a pass cut by the end of the term is not one.
		result := passDone
		if failures.N > 0 {
			result = passFailed
		}
		k.metrics.passes.WithLabelValues(result).Inc()
	}
	return plan.Next, failures.Err()
}

// The results of clusterip_policy_hold_passes_total.
const (
	passDone    = "done"
	passFailed  = "failed"
	passSkipped = "skipped"
)

// create holds w.IP if its owner Service does not exist. An owner that
// exists either holds the address already (the view lagged) or holds
// another one, which `clusterip-policy audit` reports as reservation-not-held; and
// while an owner exists it may be updated to dual-stack, when the mutating
// stage would release a hold of its added family.
//
// An address of a reserved range has no owner to look up: it is held once
// it has stayed free for the grace, whoever may use the range.
func (k *Keeper) create(ctx context.Context, w holds.Want, free holds.FreeSince) error {
	if !w.IsRange() {
		cctx, cancel := context.WithTimeout(ctx, holdCallTimeout)
		_, err := k.client.CoreV1().Services(w.Owner.Namespace).Get(cctx, w.Owner.Name, metav1.GetOptions{})
		cancel()
		if err == nil {
			delete(free, w.IP)
			return nil
		}
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("get the owner %s of the reservation %s (not held this pass): %w", w.Owner, w.IP, err)
		}
	}
	if err := k.writes.Wait(ctx); err != nil {
		return nil // leadership ended
	}
	cctx, cancel := context.WithTimeout(ctx, holdCallTimeout)
	defer cancel()
	_, err := k.client.NetworkingV1().IPAddresses().Create(cctx, holdObject(w), metav1.CreateOptions{})
	switch {
	case err == nil:
		delete(free, w.IP) // until the informer and the view show it, it counts as newly free
		k.metrics.changes.WithLabelValues("created").Inc()
		k.log.V(holdCreatedLogLevel(w)).Info("hold created", "ip", w.IP.String(), "for", w.Holder().String())
	case apierrors.IsAlreadyExists(err):
		// Someone allocated it since the view was read: it is not free.
		delete(free, w.IP)
	default:
		return fmt.Errorf("create the hold on %s for %s: %w", w.IP, w.Holder(), err)
	}
	return nil
}

// holdCreatedLogLevel logs a reservation's hold at the default level and a
// range's at 1: a range brings up to thousands at once.
func holdCreatedLogLevel(w holds.Want) int {
	if w.IsRange() {
		return 1
	}
	return 0
}

func holdObject(w holds.Want) *networkingv1.IPAddress {
	family := "IPv4"
	if w.IP.Is6() {
		family = "IPv6"
	}
	return &networkingv1.IPAddress{
		ObjectMeta: metav1.ObjectMeta{
			Name: w.IP.String(), // canonical, as the apiserver names IPAddresses
			Labels: map[string]string{
				holds.ManagedByLabel:              holds.ManagedBy,
				networkingv1.LabelIPAddressFamily: family,
			},
		},
		Spec: networkingv1.IPAddressSpec{ParentRef: parentRef(w.Holder())},
	}
}

func parentRef(h allocview.Holder) *networkingv1.ParentReference {
	return &networkingv1.ParentReference{Group: h.Group, Resource: h.Resource, Namespace: h.Namespace, Name: h.Name}
}

// The results of clusterip_policy_hold_releases_total.
const (
	releaseReleased    = "released"
	releaseAbsent      = "absent"
	releaseFailed      = "failed"
	releaseOwnerExists = "owner-exists"
	releaseRateLimited = "rate-limited"
)

// Releaser deletes the hold of an owner being created, from the
// mutating stage: the apiserver allocates right after it, and would refuse
// an address an IPAddress still holds.
//
// The review that asks for a release may not come from an apiserver:
// without client certificates (--client-ca-file; impossible on managed
// control planes) anything that reaches the webhook port can send one. So
// a release is decided in this order, and a forged review costs no API
// call until the last step:
//   - from local state: the watch of the holds must show a hold of ours
//     at the address naming this owner; when the view shows the owner's
//     own IPAddress there instead, a CREATE is of an owner that exists
//     (counted owner-exists); anything else is counted absent;
//   - within each address's budget (holds.ReleaseBudget): forged creates
//     of an absent owner free the address for about three graces and then
//     one grace a minute, however many are sent;
//   - against the cluster: a CREATE releases only if a GET finds no owner
//     Service (the apiserver refuses a create of one that exists anyway),
//     an UPDATE only if it finds one.
type Releaser struct {
	client  kubernetes.Interface
	watch   *Watch
	log     logr.Logger
	metrics *Metrics
	budget  *holds.ReleaseBudget
	// rangeBudget bounds the releases of each reserved range's addresses
	// together, keyed by the range's first address (at most
	// policy.MaxReservedRanges entries).
	rangeBudget *holds.ReleaseBudget
	now         func() time.Time

	lastRefusalLog atomic.Int64 // unix nanoseconds
}

// NewReleaser releases the holds watch shows through client (ClientQPS),
// within each address's budget (refilled by the clock now: time.Now but
// in tests).
func NewReleaser(client kubernetes.Interface, watch *Watch, log logr.Logger, m *Metrics, now func() time.Time) *Releaser {
	return &Releaser{client: client, watch: watch, log: log, metrics: m,
		budget:      &holds.ReleaseBudget{Burst: ReleaseBurst, Refill: ReleaseRefill},
		rangeBudget: &holds.ReleaseBudget{Burst: RangeReleaseBurst, Refill: RangeReleaseRefill}, now: now}
}

// BeforeAllocation is the mutating stage's hook: for an allowed,
// non-dry-run CREATE or UPDATE, it deletes our holds on the addresses the
// Service will ask the apiserver for (the decision's FinalIPs: the ones it
// names, or those the decision assigns), where the hold is for this
// Service (its reservation) or for a reserved range this Service may use.
// If a release fails, or a budget is spent, it returns the message of a
// 503 refusal (the apiserver would otherwise fail the request with
// "provided IP is already allocated"), and the client retries. svc, d and
// env are what the decision read, said and was made against: nothing is
// decoded or looked up again.
func (r *Releaser) BeforeAllocation(ctx context.Context, req admission.Request, svc *corev1.Service, d *policy.Decision, env policy.Env) string {
	dryRun := req.DryRun != nil && *req.DryRun
	if !d.Allowed() || dryRun || env.Policy == nil || (req.Operation != admissionv1.Create && req.Operation != admissionv1.Update) {
		return ""
	}
	// Most requests are neither an owner's nor in a range: a reservation
	// names its owner, so the Service has a name.
	owner := policy.Owner{Namespace: svc.Namespace, Name: svc.Name}
	if len(env.Policy.ReservedRanges) == 0 && len(env.Policy.ReservationsOf(owner, allocview.RangeSet{})) == 0 {
		return ""
	}
	seen := map[netip.Addr]bool{}
	for _, s := range d.FinalIPs {
		// As the apiserver will read it: with StrictIPCIDRValidation off,
		// 010.096.000.010 and ::ffff:10.96.0.10 are 10.96.0.10.
		ip, ok := allocview.ParseIPAsAPIServer(s)
		if !ok || seen[ip] || len(seen) == 2 {
			continue // not an address, or more than a Service can hold
		}
		t, ok := releaseTarget(ip, owner, svc, env)
		if !ok {
			continue
		}
		seen[ip] = true
		out, wait, err := r.release(ctx, req.Operation, ip, owner, t, env.Snapshot)
		switch {
		case err != nil:
			r.metrics.releases.WithLabelValues(releaseFailed).Inc()
			r.log.Error(err, "could not release a hold before the Service's allocation; refusing the request so it is retried", "ip", ip.String(), "owner", owner.String(), "hold", t.what, "uid", policy.Echo(string(req.UID)))
			of := ""
			if t.isRange() {
				of = " (" + t.what + ")"
			}
			return fmt.Sprintf("clusterip-policy could not release its hold on %s%s for Service %s before the apiserver allocates it: %s; retry in a few seconds", ip, of, owner, policy.Clip(err.Error(), policy.MaxMessageBytes/2))
		case out == releaseRateLimited && t.isRange():
			r.logRefusal("range hold not released: the range's addresses, or this one, were released too often recently (creates that failed, or reviews not sent by an apiserver)", ip, owner, req)
			return fmt.Sprintf("clusterip-policy holds %s for %s and released it or other addresses of that range too often recently (at most %d of an address, %d of a range at once, then one a minute and %s); it releases it again in %s: retry then (see \"Who can release a hold\" in docs/operations.md)", ip, t.what, ReleaseBurst, RangeReleaseBurst, rangeRate(), (wait + time.Second - 1).Truncate(time.Second))
		case out == releaseRateLimited:
			r.logRefusal("hold not released: this address was released "+fmt.Sprint(ReleaseBurst)+" times recently without its owner appearing (creates that failed, or reviews not sent by an apiserver)", ip, owner, req)
			return fmt.Sprintf("clusterip-policy holds %s for Service %s and released it %d times recently without that Service appearing; it releases it again in %s: retry then (if this Service was not being created that often, something that is not an apiserver is calling the webhook: see \"Who can release a hold\" in docs/operations.md)", ip, owner, ReleaseBurst, (wait + time.Second - 1).Truncate(time.Second))
		case out == releaseOwnerExists:
			r.logRefusal("hold not released: the review contradicts the cluster (a CREATE of a Service that exists, or an UPDATE of one that does not); a duplicate request, or one not sent by an apiserver", ip, owner, req)
			return "" // the apiserver answers this request itself (AlreadyExists, NotFound)
		}
	}
	return ""
}

// target is the hold a release may delete at an address: the owner's, for
// a reservation, or the range's.
type target struct {
	what string // for messages: "reserved for Service ns/name", "reserved range 10.96.0.16/28"
	// releasable checks an IPAddress's labels and parentRef.
	releasable func(labels map[string]string, h allocview.Holder) error
	// rng is the range's band; zero for a reservation.
	rng allocview.Band
}

func (t target) isRange() bool { return !t.rng.IsZero() }

// releaseTarget says which hold, if any, the Service may have released at
// ip: its own reservation's (never the implicit default/kubernetes one:
// that is never held), or, at an address no reservation names, the hold
// of a reserved range whose namespaces and selector admit the Service. A
// Service the decision allowed only because the range rule warns or
// audits, or because its namespace is exempt, releases nothing: the range
// is held for the Services that may use it.
func releaseTarget(ip netip.Addr, owner policy.Owner, svc *corev1.Service, env policy.Env) (target, bool) {
	if res, ok := env.Policy.ReservedOwner(ip, allocview.RangeSet{}); ok {
		if res.Implicit || res.Owner != owner {
			return target{}, false
		}
		return target{what: "reserved for Service " + owner.String(), releasable: func(l map[string]string, h allocview.Holder) error {
			return holds.Releasable(l, h, owner)
		}}, true
	}
	rng, ok := env.Policy.ReservedRangeOf(ip)
	if !ok || !rng.Allows(svc.Namespace, svc.Labels, env.NamespaceLabels) {
		return target{}, false
	}
	return target{what: "reserved range " + rng.String(), rng: rng.Band, releasable: func(l map[string]string, h allocview.Holder) error {
		return holds.RangeReleasable(l, h, rng.Band)
	}}, true
}

func rangeRate() string {
	return fmt.Sprintf("%g a second", float64(time.Second)/float64(RangeReleaseRefill))
}

// contradictsCluster reports whether the owner's existence contradicts
// the operation: a CREATE of a Service that exists, an UPDATE of one that
// does not. Such a review is a duplicate or not from an apiserver, and
// releasing a hold for it would free the address for nothing.
func (r *Releaser) contradictsCluster(ctx context.Context, op admissionv1.Operation, owner policy.Owner) (bool, error) {
	cctx, cancel := context.WithTimeout(ctx, holdCallTimeout)
	defer cancel()
	_, err := r.client.CoreV1().Services(owner.Namespace).Get(cctx, owner.Name, metav1.GetOptions{})
	switch {
	case err == nil:
		return op == admissionv1.Create, nil
	case apierrors.IsNotFound(err):
		return op == admissionv1.Update, nil
	default:
		return false, fmt.Errorf("get Service %s: %w", owner, err)
	}
}

// logRefusal logs a refused release, at most once per refusalLogInterval:
// the requests may be hostile and unbounded; the metric counts them all.
func (r *Releaser) logRefusal(msg string, ip netip.Addr, owner policy.Owner, req admission.Request) {
	now := r.now().UnixNano()
	last := r.lastRefusalLog.Load()
	if now-last < int64(refusalLogInterval) || !r.lastRefusalLog.CompareAndSwap(last, now) {
		return
	}
	r.log.Info(msg+"; logged at most every "+refusalLogInterval.String()+", clusterip_policy_hold_releases_total counts each", "ip", ip.String(), "owner", owner.String(), "uid", policy.Echo(string(req.UID)), "user", policy.Echo(req.UserInfo.Username))
}

// release deletes the hold on ip if it is ours and names owner; anything
// else at that address is left alone (an allocation of the owner being
// re-created, someone else's IPAddress: the apiserver then decides). What
// the watch of the holds and the view (snap) answer costs no API call: no
// hold of ours naming owner at ip is "absent", or "owner-exists" for a
// CREATE when the owner's own IPAddress holds ip. A hold of ours is deleted
// only within the address's budget (otherwise wait says when the next
// release is due) and only if a GET of the owner agrees with op
// (contradictsCluster); a contradiction spends the budget too, so the GETs
// are bounded by it. Only a review that spends the budget makes API calls:
// two at most. It returns the result it counted.
func (r *Releaser) release(ctx context.Context, op admissionv1.Operation, ip netip.Addr, owner policy.Owner, t target, snap *allocview.Snapshot) (result string, wait time.Duration, err error) {
	if !r.watch.Synced() {
		return releaseFailed, 0, errors.New("the holds are not listed yet")
	}
	a, ok := r.watch.Get(ip)
	if !ok || t.releasable(a.Labels, kubesource.HolderOf(a)) != nil {
		// Not our hold for owner or the range. The view shows every
		// IPAddress: one naming owner that is not our hold is the owner's
		// own allocation, so a CREATE of owner is of a Service that exists.
		if h, held := holderAt(snap, ip); held && h.IsService(owner.Namespace, owner.Name) && op == admissionv1.Create {
			r.metrics.releases.WithLabelValues(releaseOwnerExists).Inc()
			return releaseOwnerExists, 0, nil
		}
		r.metrics.releases.WithLabelValues(releaseAbsent).Inc()
		return releaseAbsent, 0, nil
	}
	if ok, wait := r.budget.Take(ip, r.now()); !ok {
		r.metrics.releases.WithLabelValues(releaseRateLimited).Inc()
		return releaseRateLimited, wait, nil
	}
	if t.isRange() {
		// A range has up to policy.MaxReservedRangeAddresses addresses,
		// each with its own budget: forged reviews naming them in turn
		// would free the whole range. Its budget bounds how many of its
		// addresses are released at once, whichever.
		if ok, wait := r.rangeBudget.Take(t.rng.First, r.now()); !ok {
			r.budget.Refund(ip, r.now())
			r.metrics.releases.WithLabelValues(releaseRateLimited).Inc()
			return releaseRateLimited, wait, nil
		}
	}
	refund := func() {
		r.budget.Refund(ip, r.now())
		if t.isRange() {
			r.rangeBudget.Refund(t.rng.First, r.now())
		}
	}
	cctx, cancel := context.WithTimeout(ctx, holdCallTimeout)
	defer cancel()
	contradicts, err := r.contradictsCluster(cctx, op, owner)
	if err != nil {
		refund() // nothing was freed, and no review chose to fail it
		return releaseFailed, 0, err
	}
	if contradicts {
		// Not refunded: a stream of such reviews would otherwise cost a GET
		// each, without bound.
		r.metrics.releases.WithLabelValues(releaseOwnerExists).Inc()
		return releaseOwnerExists, 0, nil
	}
	err = r.client.NetworkingV1().IPAddresses().Delete(cctx, a.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &a.UID}})
	if err != nil && !apierrors.IsNotFound(err) {
		refund()
		return releaseFailed, 0, fmt.Errorf("delete IPAddress %s: %w", ip, err)
	}
	r.metrics.releases.WithLabelValues(releaseReleased).Inc()
	r.log.Info("hold released for the Service's allocation", "ip", ip.String(), "service", owner.String(), "hold", t.what)
	return releaseReleased, 0, nil
}

// holderAt is the view's holder of ip; none without a view.
func holderAt(snap *allocview.Snapshot, ip netip.Addr) (allocview.Holder, bool) {
	if snap == nil {
		return allocview.Holder{}, false
	}
	return snap.Holder(ip)
}
