// Package kubesource keeps an allocview.View current from the cluster: it
// watches ServiceCIDR and IPAddress objects (networking.k8s.io/v1) and
// nothing else. It is the only part of the view that talks to an apiserver.
package kubesource

import (
	"context"
	"net/netip"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
	"unique"

	"github.com/go-logr/logr"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"clusterip-policy/pkg/allocview"
)

// Source feeds a View from its own list+watch of each resource. It keeps
// no copy of the objects: the view is the only one (an informer's store
// would add about 45 MiB per 100,000 IPAddresses).
type Source struct {
	client kubernetes.Interface
	view   *allocview.View
	log    logr.Logger
	synced atomic.Bool
	// watching is true once the cluster serves both resources and the
	// source follows them (false in the no-API fallback).
	watching atomic.Bool
	state    [2]feedState

	// now, sleep and the backoff bounds are fields so tests can shorten
	// them.
	now            func() time.Time
	sleep          func(context.Context, time.Duration)
	backoffInitial time.Duration
	backoffMax     time.Duration
	idleTimeout    time.Duration

	mu      sync.Mutex
	pending []func(*allocview.Tx)
	// freeAfter is set when pending holds a large relist (see
	// largeRelist): apply then returns the list's memory to the system.
	freeAfter bool
	wake      chan struct{}

	// largeRelist is the number of IPAddresses from which a relist's
	// garbage (every page, and the map of all addresses it builds) is
	// returned to the system once the view holds them, with freeMemory.
	// At 100,000 addresses that garbage is about 30 MiB, which the Go
	// runtime would otherwise keep in the process's RSS for minutes.
	largeRelist int
	freeMemory  func()
}

// feedState is what the source knows of one resource's feed.
type feedState struct {
	// staleSince is when the resource last lost its watch stream, or when
	// the source started until its first watch (UnixNano); 0 while a watch
	// is established. Measured from what the source itself sees (a stream
	// that ends, a refused watch), not from client-go error callbacks,
	// which a crashed apiserver never triggers.
	staleSince atomic.Int64
	// lastReceived is when anything (list page, event, bookmark) last
	// arrived (UnixNano).
	lastReceived atomic.Int64
	restarts     [4]atomic.Uint64 // by RestartReasons index
	// lossLogged and watchedOnce are owned by the resource's follow
	// goroutine: an outage is logged once when it starts and once when it
	// ends, not per retry.
	lossLogged  bool
	watchedOnce bool
}

// New returns a Source that will feed view once Run is called.
func New(client kubernetes.Interface, view *allocview.View, log logr.Logger) *Source {
	s := &Source{client: client, view: view, log: log, wake: make(chan struct{}, 1),
		now: time.Now, sleep: sleepCtx, backoffInitial: 100 * time.Millisecond, backoffMax: 2 * time.Second,
		largeRelist: 10000, freeMemory: debug.FreeOSMemory,
		// Two and a half bookmark periods of the apiserver's watch cache.
		idleTimeout: 150 * time.Second}
	start := s.now().UnixNano()
	for i := range s.state {
		s.state[i].staleSince.Store(start)
		s.state[i].lastReceived.Store(start)
	}
	return s
}

// HasSynced reports whether the view holds the cluster's initial state.
func (s *Source) HasSynced() bool { return s.synced.Load() }

// The resources watched, as indexes of state.
const (
	serviceCIDRs = iota
	ipAddresses
)

var resourceNames = [2]string{"servicecidrs", "ipaddresses"}

// StaleFor returns how long the view has possibly been missing changes (a
// resource has had no established watch stream for that long), and which
// resource; zero when both watches are established.
func (s *Source) StaleFor(now time.Time) (time.Duration, string) {
	var worst time.Duration
	var which string
	for i := range s.state {
		if since := s.state[i].staleSince.Load(); since != 0 {
			if d := now.Sub(time.Unix(0, since)); d > worst {
				worst, which = d, resourceNames[i]
			}
		}
	}
	return worst, which
}

// FeedStatus is the health of one watched resource, for metrics.
type FeedStatus struct {
	Resource string
	// LastReceived is when a list page, event or bookmark last arrived.
	LastReceived time.Time
	// Restarts counts watch restarts by reason (RestartReasons).
	Restarts map[string]uint64
}

// Feeds reports each watched resource; none when the cluster does not
// serve them (static ranges).
func (s *Source) Feeds() []FeedStatus {
	if !s.watching.Load() {
		return nil
	}
	out := make([]FeedStatus, len(s.state))
	for i := range s.state {
		st := &s.state[i]
		out[i] = FeedStatus{Resource: resourceNames[i], LastReceived: time.Unix(0, st.lastReceived.Load()), Restarts: map[string]uint64{}}
		for j, r := range RestartReasons {
			out[i].Restarts[r] = st.restarts[j].Load()
		}
	}
	return out
}

// lost records that resource i has no watch stream (any more), why, and
// logs the start of an outage once.
func (s *Source) lost(i int, reason string, err error) {
	st := &s.state[i]
	for j, r := range RestartReasons {
		if r == reason {
			st.restarts[j].Add(1)
		}
	}
	st.staleSince.CompareAndSwap(0, s.now().UnixNano())
	// A stream that ends cleanly is re-watched at once: an apiserver's
	// watch timeout is no outage. If the re-watch fails, that is logged.
	if err != nil && !st.lossLogged {
		st.lossLogged = true
		msg := "watch lost; the view may miss changes until it is re-established"
		if !st.watchedOnce {
			msg = "cannot list and watch yet; retrying"
		}
		s.log.Error(err, msg, "resource", resourceNames[i], "reason", reason)
	}
}

// established records that resource i has a watch stream again.
func (s *Source) established(i int) {
	st := &s.state[i]
	msg := "watch re-established"
	if !st.watchedOnce {
		msg = "watch established"
	}
	st.watchedOnce = true
	since := st.staleSince.Swap(0)
	if st.lossLogged {
		st.lossLogged = false
		s.log.Info(msg, "resource", resourceNames[i], "after", s.now().Sub(time.Unix(0, since)).Round(time.Millisecond).String())
	}
}

// received records that resource i delivered something.
func (s *Source) received(i int) { s.state[i].lastReceived.Store(s.now().UnixNano()) }

// Run watches the cluster until ctx ends. It returns an error only when it
// cannot start at all.
func (s *Source) Run(ctx context.Context) error {
	hasAPI, err := s.discover(ctx)
	if err != nil {
		return err
	}
	if !hasAPI {
		// An older cluster: ranges come from --service-cidr or the policy,
		// and the apiserver itself refuses duplicates.
		s.log.Info("the cluster does not serve networking.k8s.io/v1 ServiceCIDRs and IPAddresses; using static ranges, not tracking allocations")
		for i := range s.state {
			s.state[i].staleSince.Store(0) // nothing is watched, so nothing goes stale
		}
		s.view.Update(func(tx *allocview.Tx) { tx.MarkSynced(false) })
		s.synced.Store(true)
		<-ctx.Done()
		return nil
	}

	s.watching.Store(true)
	go s.apply(ctx)
	start := time.Now()
	feeds := [2]feed{serviceCIDRs: s.serviceCIDRFeed(), ipAddresses: s.ipAddressFeed()}
	listed := [2]chan struct{}{make(chan struct{}), make(chan struct{})}
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := range feeds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.follow(ctx, i, feeds[i], listed[i])
		}()
	}
	for _, l := range listed {
		select {
		case <-l:
		case <-ctx.Done():
			return nil
		}
	}
	// Queued behind both initial lists, so the snapshot that says synced
	// holds all of them.
	done := make(chan struct{})
	s.enqueue(func(tx *allocview.Tx) { tx.MarkSynced(true); close(done) })
	select {
	case <-done:
	case <-ctx.Done():
		return nil
	}
	s.synced.Store(true)
	snap := s.view.Snapshot()
	s.log.Info("view synced", "serviceCIDRs", len(snap.ServiceCIDRs()), "allocatedIPs", snap.AllocatedCount(), "generation", snap.Generation, "took", time.Since(start).String())
	<-ctx.Done()
	return nil
}

// discover reports whether the cluster serves both resources the view
// needs, retrying while the apiserver cannot answer.
func (s *Source) discover(ctx context.Context) (bool, error) {
	for {
		list, err := s.client.Discovery().ServerResourcesForGroupVersion(networkingv1.SchemeGroupVersion.String())
		if err == nil {
			have := map[string]bool{}
			for _, r := range list.APIResources {
				have[r.Name] = true
			}
			return have["servicecidrs"] && have["ipaddresses"], nil
		}
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		s.log.Error(err, "discovering networking.k8s.io/v1; retrying")
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}

// enqueue hands a change to the apply loop. The watch loops never wait for
// the view: changes pile up and are published together.
func (s *Source) enqueue(fn func(*allocview.Tx)) { s.enqueueFreeing(fn, false) }

// enqueueFreeing queues fn and, with free, has apply return memory to the
// system once fn's batch is in the view (a large relist, see largeRelist).
func (s *Source) enqueueFreeing(fn func(*allocview.Tx), free bool) {
	s.mu.Lock()
	s.pending = append(s.pending, fn)
	s.freeAfter = s.freeAfter || free
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// apply publishes queued changes, one snapshot per batch: a burst of
// watch events becomes a handful of snapshots, not one each.
func (s *Source) apply(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		}
		s.mu.Lock()
		batch, free := s.pending, s.freeAfter
		s.pending, s.freeAfter = nil, false
		s.mu.Unlock()
		if len(batch) == 0 {
			continue
		}
		s.view.Update(func(tx *allocview.Tx) {
			for _, fn := range batch {
				fn(tx)
			}
		})
		if free {
			batch = nil // the relist's map is garbage only once this goes
			s.freeMemory()
		}
	}
}

// ToServiceCIDR keeps what the view needs of a ServiceCIDR: the apiserver
// allocates from it unless it is being deleted or its Ready condition
// exists and is not True.
func ToServiceCIDR(c *networkingv1.ServiceCIDR) allocview.ServiceCIDR {
	out := allocview.ServiceCIDR{Name: c.Name, Ready: true, Deleting: c.DeletionTimestamp != nil}
	for _, cond := range c.Status.Conditions {
		if cond.Type == networkingv1.ServiceCIDRConditionReady && cond.Status != metav1.ConditionTrue {
			out.Ready = false
		}
	}
	for _, s := range c.Spec.CIDRs {
		if p, err := netip.ParsePrefix(s); err == nil {
			out.CIDRs = append(out.CIDRs, p.Masked())
		}
	}
	return out
}

// HolderOf is the holder an IPAddress names in spec.parentRef.
func HolderOf(a *networkingv1.IPAddress) allocview.Holder {
	if a.Spec.ParentRef == nil {
		return allocview.Holder{Name: "(no parentRef) IPAddress " + a.Name}
	}
	r := a.Spec.ParentRef
	// The view keeps a holder for every allocated IP (100,000 in a large
	// cluster) and the decoder gives each its own copy of each string;
	// group, resource and namespace repeat, so they are kept once.
	return allocview.Holder{Group: intern(r.Group), Resource: intern(r.Resource), Namespace: intern(r.Namespace), Name: r.Name,
		Ours: a.Labels[managedByLabel] == allocview.HoldManager}
}

// managedByLabel is the label that names an IPAddress's manager.
const managedByLabel = "ipaddress.kubernetes.io/managed-by"

func intern(s string) string { return unique.Make(s).Value() }
