package kubesource

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"clusterip-policy/pkg/allocview"
	"clusterip-policy/test/fixtures"
)

// ipAPI plays the apiserver for IPAddresses: the test decides what a LIST
// returns, whether calls are refused, and drives every watch stream.
type ipAPI struct {
	mu       sync.Mutex
	items    []networkingv1.IPAddress
	listRV   string
	refused  bool
	watchErr error    // returned by the next watch call, once
	watchRVs []string // the resourceVersion each watch call asked for
	lists    int
	watches  chan *watch.FakeWatcher
}

func newIPAPI(client *fake.Clientset, rv string, items ...*networkingv1.IPAddress) *ipAPI {
	api := &ipAPI{listRV: rv, watches: make(chan *watch.FakeWatcher, 16)}
	api.setItems(rv, items...)
	client.PrependReactor("list", "ipaddresses", func(k8stesting.Action) (bool, runtime.Object, error) {
		api.mu.Lock()
		defer api.mu.Unlock()
		if api.refused {
			return true, nil, errors.New("dial tcp 127.0.0.1:6443: connect: connection refused")
		}
		api.lists++
		return true, &networkingv1.IPAddressList{ListMeta: metav1.ListMeta{ResourceVersion: api.listRV}, Items: append([]networkingv1.IPAddress(nil), api.items...)}, nil
	})
	client.PrependWatchReactor("ipaddresses", func(a k8stesting.Action) (bool, watch.Interface, error) {
		api.mu.Lock()
		defer api.mu.Unlock()
		api.watchRVs = append(api.watchRVs, a.(k8stesting.WatchAction).GetWatchRestrictions().ResourceVersion)
		if api.refused {
			return true, nil, errors.New("dial tcp 127.0.0.1:6443: connect: connection refused")
		}
		if err := api.watchErr; err != nil {
			api.watchErr = nil
			return true, nil, err
		}
		w := watch.NewFakeWithChanSize(16, false)
		api.watches <- w
		return true, w, nil
	})
	return api
}

func (api *ipAPI) setItems(rv string, items ...*networkingv1.IPAddress) {
	api.mu.Lock()
	defer api.mu.Unlock()
	api.listRV = rv
	api.items = nil
	for _, it := range items {
		api.items = append(api.items, *it)
	}
}

func (api *ipAPI) refuse(b bool) {
	api.mu.Lock()
	defer api.mu.Unlock()
	api.refused = b
}

func (api *ipAPI) counts() (lists int, watchRVs []string) {
	api.mu.Lock()
	defer api.mu.Unlock()
	return api.lists, append([]string(nil), api.watchRVs...)
}

// nextWatch waits for the source's next established IPAddress watch.
func (api *ipAPI) nextWatch(t *testing.T) *watch.FakeWatcher {
	t.Helper()
	select {
	case w := <-api.watches:
		return w
	case <-time.After(10 * time.Second):
		t.Fatal("the source never watched IPAddresses (again)")
		return nil
	}
}

// logLines collects what the source logs, to check that an outage is
// logged once, not per retry.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logger(t *testing.T) logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		l.lines = append(l.lines, args)
		l.mu.Unlock()
		t.Log(args)
	}, funcr.Options{})
}

func (l *logLines) count(substr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.lines {
		if strings.Contains(s, substr) {
			n++
		}
	}
	return n
}

// fakeClock is a settable clock for exact staleness figures.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}
func (c *fakeClock) Now() time.Time       { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Step(d time.Duration) { c.ns.Add(int64(d)) }

// startSource runs a source on client with short backoffs and a fake
// clock, and waits for its initial sync.
func startSource(t *testing.T, client *fake.Clientset, logs *logLines) (*Source, *allocview.View, *fakeClock, func() []time.Duration) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	servesNetworkingV1(client)
	view := allocview.NewView()
	src := New(client, view, logs.logger(t))
	clock := newFakeClock()
	src.now = clock.Now
	var mu sync.Mutex
	var sleeps []time.Duration
	src.backoffInitial, src.backoffMax = 5*time.Millisecond, 40*time.Millisecond
	src.sleep = func(ctx context.Context, d time.Duration) {
		mu.Lock()
		sleeps = append(sleeps, d)
		mu.Unlock()
		sleepCtx(ctx, d)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := src.Run(ctx); err != nil {
			t.Error(err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	fixtures.Eventually(t, "the initial sync", 30*time.Second, func() bool { s := view.Snapshot(); return s.Synced })
	waits := func() []time.Duration {
		mu.Lock()
		defer mu.Unlock()
		return append([]time.Duration(nil), sleeps...)
	}
	return src, view, clock, waits
}

func addEvent(ip, ns, name, rv string) *networkingv1.IPAddress {
	a := fixtures.IPAddress(ip, "ipallocator.k8s.io", ns, name)
	a.ResourceVersion = rv
	return a
}

func TestAStreamThatEndsLikeACrashMarksTheViewStaleUntilReWatched(t *testing.T) {
	client := fake.NewClientset(fixtures.ServiceCIDR("kubernetes", "10.96.0.0/16"))
	api := newIPAPI(client, "10", fixtures.IPAddress("10.96.0.1", "ipallocator.k8s.io", "default", "kubernetes"))
	var logs logLines
	src, view, clock, _ := startSource(t, client, &logs)
	w := api.nextWatch(t)
	if d, which := src.StaleFor(clock.Now()); d != 0 {
		t.Fatalf("stale %s (%s) with both watches established", d, which)
	}

	w.Add(addEvent("10.96.0.20", "default", "web", "11"))
	fixtures.Eventually(t, "the watched IPAddress", 30*time.Second, func() bool { s := view.Snapshot(); _, ok := s.Holder(netip.MustParseAddr("10.96.0.20")); return ok })

	// The apiserver dies: its stream ends like a normal close, and the
	// re-watch is refused.
	api.refuse(true)
	ended := clock.Now()
	w.Stop()
	fixtures.Eventually(t, "the view marked stale by a closed stream", 30*time.Second, func() bool {
		_, rvs := api.counts()
		return len(rvs) >= 3 // the immediate re-watch and some retries
	})
	clock.Step(1500 * time.Millisecond)
	if d, which := src.StaleFor(clock.Now()); d != 1500*time.Millisecond || which != "ipaddresses" {
		t.Fatalf("StaleFor = %s (%s), want 1.5s (ipaddresses) measured from the end of the stream at %s", d, which, ended)
	}

	api.refuse(false)
	api.nextWatch(t)
	fixtures.Eventually(t, "the stale mark cleared by the re-established watch", 30*time.Second, func() bool { d, _ := src.StaleFor(clock.Now()); return d == 0 })
	lists, rvs := api.counts()
	if lists != 1 {
		t.Errorf("%d lists, want only the initial one: a closed stream resumes from its resourceVersion", lists)
	}
	if rvs[0] != "10" || rvs[len(rvs)-1] != "11" {
		t.Errorf("watches asked for resourceVersions %v, want 10 first and 11 (the last event) on re-watch", rvs)
	}
}

func TestARefusedReWatchKeepsTheViewStaleAndLogsTheOutageOnce(t *testing.T) {
	client := fake.NewClientset(fixtures.ServiceCIDR("kubernetes", "10.96.0.0/16"))
	api := newIPAPI(client, "10")
	var logs logLines
	src, _, clock, _ := startSource(t, client, &logs)
	w := api.nextWatch(t)

	api.refuse(true)
	w.Stop()
	var last time.Duration
	for step := range 5 {
		_, before := api.counts()
		fixtures.Eventually(t, "a retry", 30*time.Second, func() bool { _, rvs := api.counts(); return len(rvs) > len(before) })
		clock.Step(time.Second)
		d, which := src.StaleFor(clock.Now())
		if which != "ipaddresses" || d != time.Duration(step+1)*time.Second || d <= last {
			t.Fatalf("after %d refused re-watches StaleFor = %s (%s), want %ds and growing", step+1, d, which, step+1)
		}
		last = d
	}
	// The fifth refusal is counted just after the watch call returns: wait
	// for it (bounded) rather than race the reflector.
	fixtures.Eventually(t, "the fifth refused re-watch counted", 30*time.Second, func() bool {
		return src.Feeds()[ipAddresses].Restarts[ReasonError] >= 5
	})
	feeds := src.Feeds()
	if got := feeds[ipAddresses].Restarts; got[ReasonClosed] != 1 || got[ReasonError] < 5 || got[ReasonExpired] != 0 {
		t.Errorf("restarts of ipaddresses %v, want closed 1, error >= 5, expired 0", got)
	}
	if got := feeds[serviceCIDRs].Restarts; got[ReasonClosed]+got[ReasonError]+got[ReasonExpired] != 0 {
		t.Errorf("restarts of servicecidrs %v, want none", got)
	}

	api.refuse(false)
	api.nextWatch(t)
	fixtures.Eventually(t, "the recovery (not stale)", 30*time.Second, func() bool { d, _ := src.StaleFor(clock.Now()); return d == 0 })
	fixtures.Eventually(t, "the recovery logged", 30*time.Second, func() bool { return logs.count("watch re-established") == 1 })
	if n := logs.count("watch lost"); n != 1 {
		t.Errorf("the outage was logged %d times, want once", n)
	}
	if n := logs.count(`"after"="5s"`); n != 1 {
		t.Errorf("the recovery log does not say how long the outage lasted (5s)")
	}
}

func TestA410OnReWatchRelistsAndReplacesTheState(t *testing.T) {
	for _, how := range []string{"as an error event in the stream", "as the watch call's error"} {
		t.Run(how, func(t *testing.T) {
			client := fake.NewClientset(fixtures.ServiceCIDR("kubernetes", "10.96.0.0/16"))
			api := newIPAPI(client, "10",
				fixtures.IPAddress("10.96.0.1", "ipallocator.k8s.io", "default", "kubernetes"),
				fixtures.IPAddress("10.96.0.50", "ipallocator.k8s.io", "default", "deleted-while-disconnected"))
			var logs logLines
			src, view, clock, _ := startSource(t, client, &logs)
			w := api.nextWatch(t)
			if _, ok := view.Snapshot().Holder(netip.MustParseAddr("10.96.0.50")); !ok {
				t.Fatal("the initial list is not in the view")
			}

			// While the watch is down, one IPAddress goes and another
			// comes, and etcd compacts away the resourceVersion.
			api.setItems("500",
				fixtures.IPAddress("10.96.0.1", "ipallocator.k8s.io", "default", "kubernetes"),
				fixtures.IPAddress("10.96.0.60", "ipallocator.k8s.io", "default", "created-while-disconnected"))
			gone := apierrors.NewResourceExpired("too old resource version: 10 (400)")
			if how == "as the watch call's error" {
				api.mu.Lock()
				api.watchErr = gone
				api.mu.Unlock()
				w.Stop()
			} else {
				w.Error(&gone.ErrStatus)
			}
			api.nextWatch(t)
			// The relist's replacement is queued before the new watch
			// starts; the view publishes it a moment later.
			fixtures.Eventually(t, "the relisted state replacing the old one", 30*time.Second, func() bool {
				s := view.Snapshot()
				_, stale := s.Holder(netip.MustParseAddr("10.96.0.50"))
				_, fresh := s.Holder(netip.MustParseAddr("10.96.0.60"))
				return !stale && fresh && s.AllocatedCount() == 2
			})
			lists, rvs := api.counts()
			if lists != 2 || rvs[len(rvs)-1] != "500" {
				t.Errorf("%d lists and watches from %v, want 2 lists and the last watch from the relist's 500", lists, rvs)
			}
			if got := src.Feeds()[ipAddresses].Restarts[ReasonExpired]; got != 1 {
				t.Errorf("expired restarts %d, want 1", got)
			}
			fixtures.Eventually(t, "not stale after the relist", 30*time.Second, func() bool { d, _ := src.StaleFor(clock.Now()); return d == 0 })
		})
	}
}

func TestRecoveryWaitsAtMostTheCappedBackoff(t *testing.T) {
	client := fake.NewClientset(fixtures.ServiceCIDR("kubernetes", "10.96.0.0/16"))
	api := newIPAPI(client, "10")
	var logs logLines
	src, _, clock, sleeps := startSource(t, client, &logs)
	w := api.nextWatch(t)

	api.refuse(true)
	w.Stop()
	// Enough refusals for the delay to reach its cap (5ms doubling to 40ms).
	fixtures.Eventually(t, "eight retries", 30*time.Second, func() bool { _, rvs := api.counts(); return len(rvs) >= 8 })
	api.refuse(false)
	start := time.Now()
	api.nextWatch(t)
	took := time.Since(start)
	fixtures.Eventually(t, "the recovery (not stale)", 30*time.Second, func() bool { d, _ := src.StaleFor(clock.Now()); return d == 0 })

	got := sleeps()
	if len(got) < 7 {
		t.Fatalf("backoff waits %v, want at least 7", got)
	}
	for i, d := range got {
		if d > src.backoffMax {
			t.Errorf("wait %d was %s, above the cap %s", i, d, src.backoffMax)
		}
	}
	if last := got[len(got)-1]; last < src.backoffMax/2 {
		t.Errorf("the last wait %s never reached the capped range [%s, %s]: waits %v", last, src.backoffMax/2, src.backoffMax, got)
	}
	// One capped wait plus scheduling; client-go's reflector would wait
	// up to 30s here.
	if took > src.backoffMax+time.Second {
		t.Errorf("recovered %s after the apiserver answered again, want within about %s", took, src.backoffMax)
	}
	t.Logf("recovered %s after the apiserver answered again (cap %s), waits %v", took, src.backoffMax, got)
}

func TestWhatArrivesIsTimestampedPerResource(t *testing.T) {
	client := fake.NewClientset(fixtures.ServiceCIDR("kubernetes", "10.96.0.0/16"))
	api := newIPAPI(client, "10")
	var logs logLines
	src, _, clock, _ := startSource(t, client, &logs)
	w := api.nextWatch(t)
	listedAt := src.Feeds()[ipAddresses].LastReceived

	clock.Step(time.Minute)
	bookmark := &networkingv1.IPAddress{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "42"}}
	w.Action(watch.Bookmark, bookmark)
	fixtures.Eventually(t, "a bookmark counted as received", 30*time.Second, func() bool {
		return src.Feeds()[ipAddresses].LastReceived.Equal(clock.Now())
	})
	if got := src.Feeds()[serviceCIDRs].LastReceived; got.After(listedAt) {
		t.Errorf("servicecidrs last received %s, moved with an IPAddress bookmark", got)
	}
	// The next watch resumes from the bookmark.
	w.Stop()
	api.nextWatch(t)
	if _, rvs := api.counts(); rvs[len(rvs)-1] != "42" {
		t.Errorf("re-watch from %v, want the bookmark's 42", rvs)
	}
}

func TestAStreamThatDeliversNothingIsReplaced(t *testing.T) {
	client := fake.NewClientset(fixtures.ServiceCIDR("kubernetes", "10.96.0.0/16"))
	api := newIPAPI(client, "10")
	servesNetworkingV1(client)
	view := allocview.NewView()
	var logs logLines
	src := New(client, view, logs.logger(t))
	// Long enough that the test's own steps never trip it by accident.
	src.idleTimeout = 300 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = src.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	fixtures.Eventually(t, "the initial sync", 30*time.Second, func() bool { s := view.Snapshot(); return s.Synced })

	w := api.nextWatch(t)
	w.Add(addEvent("10.96.0.20", "default", "web", "11"))
	// The stream stays open but silent, like a connection whose packets
	// are dropped: the source gives up on it and watches again.
	// The reason recorded says the idle timeout replaced it (not how long
	// the test's own steps took on a loaded machine).
	api.nextWatch(t)
	if got := src.Feeds()[ipAddresses].Restarts[ReasonIdle]; got < 1 {
		t.Errorf("idle restarts %d, want at least 1", got)
	}
	if _, rvs := api.counts(); rvs[1] != "11" {
		t.Errorf("re-watch from %v, want 11 (the last event)", rvs)
	}
	if n := logs.count("watch lost"); n != 0 {
		t.Errorf("an idle stream replaced at once was logged as an outage %d times", n)
	}
}

func TestAListThatNeverEndsIsGivenUpAndRetried(t *testing.T) {
	maxListPages = 3
	t.Cleanup(func() { maxListPages = 10000 })
	client := fake.NewClientset(fixtures.ServiceCIDR("kubernetes", "10.96.0.0/16"))
	servesNetworkingV1(client)
	var pages atomic.Int64
	client.PrependReactor("list", "ipaddresses", func(k8stesting.Action) (bool, runtime.Object, error) {
		pages.Add(1)
		return true, &networkingv1.IPAddressList{ListMeta: metav1.ListMeta{ResourceVersion: "1", Continue: "more"}}, nil
	})
	var logs logLines
	src := New(client, allocview.NewView(), logs.logger(t))
	src.backoffInitial, src.backoffMax = time.Millisecond, 5*time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = src.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	fixtures.Eventually(t, "a retry after the page limit", 30*time.Second, func() bool { return pages.Load() >= 7 })
	if src.HasSynced() {
		t.Fatal("synced on a list that never ended")
	}
	fixtures.Eventually(t, "the endless list logged", 30*time.Second, func() bool { return logs.count("more than 3 pages") == 1 })
}

func TestAWatchThatClosesAsSoonAsItOpensIsBackedOff(t *testing.T) {
	client := fake.NewClientset(fixtures.ServiceCIDR("kubernetes", "10.96.0.0/16"))
	api := newIPAPI(client, "10")
	var logs logLines
	src, _, _, sleeps := startSource(t, client, &logs)
	// Every watch is closed the moment it opens, as a broken proxy might.
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case w := <-api.watches:
				w.Stop()
			case <-stop:
				return
			}
		}
	}()
	defer close(stop)
	// Twelve watches opened and closed: the backoff between them is what
	// the source asked to sleep, 5ms doubling to 40ms, jittered to half or
	// more of that, so from the fourth wait on at least 20ms; a loop
	// without backoff asks for none.
	fixtures.Eventually(t, "twelve watch calls", 30*time.Second, func() bool { _, rvs := api.counts(); return len(rvs) >= 12 })
	waits := sleeps()
	if len(waits) < 10 {
		t.Fatalf("%d backoff waits between twelve watches that close at once, want one before each re-watch: %v", len(waits), waits)
	}
	for i, d := range waits[3:] {
		if d < 20*time.Millisecond || d > 40*time.Millisecond {
			t.Fatalf("backoff wait %d is %s, want 20ms-40ms (half to all of the 40ms cap): %v", i+3, d, waits)
		}
	}
	_, rvs := api.counts()
	t.Logf("%d watch calls; waits %v; restarts %v", len(rvs), waits, src.Feeds()[ipAddresses].Restarts)
}
