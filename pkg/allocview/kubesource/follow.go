package kubesource

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"clusterip-policy/pkg/allocview"
)

// Why the source restarted a watch, as counted per resource.
const (
	// ReasonClosed: the stream ended without an error. The apiserver does
	// that when the watch's timeout ends, and the kernel does it for an
	// apiserver that crashed. The source re-watches at once.
	ReasonClosed = "closed"
	// ReasonError: the watch (or list) was refused or failed; the source
	// retries after a short backoff.
	ReasonError = "error"
	// ReasonExpired: the apiserver no longer has the resourceVersion to
	// resume from (410 Gone); the source relists and replaces the resource's
	// state in the view.
	ReasonExpired = "expired"
	// ReasonIdle: an established stream delivered nothing, not even the
	// bookmark the apiserver's watch cache sends about once a minute, for
	// idleTimeout: a connection that died without a reset looks like this.
	// The source re-watches at once.
	ReasonIdle = "idle"
)

// RestartReasons are every reason a restart is counted under.
var RestartReasons = []string{ReasonClosed, ReasonError, ReasonExpired, ReasonIdle}

// feed is how one resource is listed, watched and applied to the view.
type feed struct {
	name string
	// list reads one page and returns the change that replaces the
	// resource's state with all pages read so far (called again for the
	// next page with the same accumulator).
	list  func(ctx context.Context, opts metav1.ListOptions, acc *listAcc) (metav1.ListMeta, error)
	watch func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	// event turns an added, modified or deleted object into a change for
	// the view (nil to ignore it) and returns the object's resourceVersion.
	event func(t watch.EventType, obj any) (string, func(*allocview.Tx))
}

// listAcc collects a paginated list until it is complete.
type listAcc struct {
	cidrs  []allocview.ServiceCIDR
	allocs map[netip.Addr]allocview.Holder
}

// listPageSize bounds each LIST response: 100,000 IPAddresses come in 200
// requests of a few hundred KiB rather than one of 100 MiB.
const listPageSize = 500

// maxListPages bounds one relist (5 million objects, far beyond any
// cluster's Service addresses), and listPageTimeout each page, so an
// apiserver that keeps answering "continue" or stops answering cannot hold
// the source forever.
var (
	maxListPages    = 10000
	listPageTimeout = time.Minute
)

// watchTimeout is how long one watch may last before the apiserver ends
// it (randomised per watch, as client-go's reflector does, so replicas do
// not re-watch in step). It bounds how long a stream that silently stopped
// delivering goes unnoticed.
func watchTimeout() int64 { return int64((5*time.Minute + rand.N(5*time.Minute)).Seconds()) }

func (s *Source) serviceCIDRFeed() feed {
	api := s.client.NetworkingV1().ServiceCIDRs()
	return feed{
		name: resourceNames[serviceCIDRs],
		list: func(ctx context.Context, opts metav1.ListOptions, acc *listAcc) (metav1.ListMeta, error) {
			l, err := api.List(ctx, opts)
			if err != nil {
				return metav1.ListMeta{}, err
			}
			for i := range l.Items {
				acc.cidrs = append(acc.cidrs, ToServiceCIDR(&l.Items[i]))
			}
			return l.ListMeta, nil
		},
		watch: api.Watch,
		event: func(t watch.EventType, obj any) (string, func(*allocview.Tx)) {
			c, ok := obj.(*networkingv1.ServiceCIDR)
			if !ok {
				return "", nil
			}
			if t == watch.Deleted {
				return c.ResourceVersion, func(tx *allocview.Tx) { tx.DeleteServiceCIDR(c.Name) }
			}
			sc := ToServiceCIDR(c)
			return c.ResourceVersion, func(tx *allocview.Tx) { tx.SetServiceCIDR(sc) }
		},
	}
}

func (s *Source) ipAddressFeed() feed {
	api := s.client.NetworkingV1().IPAddresses()
	return feed{
		name: resourceNames[ipAddresses],
		list: func(ctx context.Context, opts metav1.ListOptions, acc *listAcc) (metav1.ListMeta, error) {
			l, err := api.List(ctx, opts)
			if err != nil {
				return metav1.ListMeta{}, err
			}
			if acc.allocs == nil {
				acc.allocs = make(map[netip.Addr]allocview.Holder, len(l.Items))
			}
			for i := range l.Items {
				a := &l.Items[i]
				ip, err := netip.ParseAddr(a.Name)
				if err != nil {
					s.log.Info("ignoring an IPAddress whose name is not an IP", "name", a.Name)
					continue
				}
				acc.allocs[ip] = HolderOf(a)
			}
			return l.ListMeta, nil
		},
		watch: api.Watch,
		event: func(t watch.EventType, obj any) (string, func(*allocview.Tx)) {
			a, ok := obj.(*networkingv1.IPAddress)
			if !ok {
				return "", nil
			}
			ip, err := netip.ParseAddr(a.Name)
			if err != nil {
				s.log.Info("ignoring an IPAddress whose name is not an IP", "name", a.Name)
				return a.ResourceVersion, nil
			}
			if t == watch.Deleted {
				return a.ResourceVersion, func(tx *allocview.Tx) { tx.DeleteAllocation(ip) }
			}
			h := HolderOf(a)
			return a.ResourceVersion, func(tx *allocview.Tx) { tx.SetAllocation(ip, h) }
		},
	}
}

// follow keeps resource i of the view current until ctx ends: a full
// (paginated) LIST replaces its state, then a WATCH from the list's
// resourceVersion applies each change. A stream that ends is re-watched at
// once from the last resourceVersion seen; 410 Gone relists and any other
// failure retries, both after a short capped backoff (reset by a watch that
// lasted, so a relist after 410 waits at most backoffInitial). listed is
// closed after the first list has been queued for the view.
func (s *Source) follow(ctx context.Context, i int, f feed, listed chan<- struct{}) {
	rv := ""
	needList := true
	delay := s.backoffInitial
	// failed waits before the next attempt after a failure, doubling the
	// delay up to backoffMax; with jitter so replicas do not retry in step.
	failed := func(reason string, err error) {
		s.lost(i, reason, err)
		d := delay/2 + rand.N(delay/2+1)
		delay = min(2*delay, s.backoffMax)
		s.sleep(ctx, d)
	}
	for ctx.Err() == nil {
		if needList {
			newRV, err := s.relist(ctx, i, f)
			if err != nil {
				if ctx.Err() == nil {
					failed(ReasonError, fmt.Errorf("list %s: %w", f.name, err))
				}
				continue
			}
			rv, needList = newRV, false
			if listed != nil {
				close(listed)
				listed = nil
			}
		}
		w, err := f.watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true, TimeoutSeconds: ptrTo(watchTimeout())})
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if isExpired(err) {
				needList = true
				failed(ReasonExpired, err)
				continue
			}
			failed(ReasonError, fmt.Errorf("watch %s from resourceVersion %q: %w", f.name, rv, err))
			continue
		}
		s.established(i)
		opened := time.Now()
		reason, err := s.consume(ctx, i, f, w, &rv)
		w.Stop()
		if ctx.Err() != nil {
			return
		}
		// A stream that lasted ends the backoff. One that closes as soon
		// as it opens (a proxy or apiserver in trouble) backs off like an
		// error, so the source never re-watches in a tight loop.
		lasted := time.Since(opened) >= minHealthyWatch
		if lasted {
			delay = s.backoffInitial
		}
		if lasted && (reason == ReasonClosed || reason == ReasonIdle) {
			s.lost(i, reason, nil) // re-watch at once
			continue
		}
		needList = reason == ReasonExpired
		failed(reason, err)
	}
}

// minHealthyWatch is how long a watch must last for its end to count as
// normal (re-watched at once) rather than as a failure (backed off).
const minHealthyWatch = time.Second

// relist reads every page of the resource and queues one change that
// replaces its state in the view: objects deleted while the watch was down
// disappear, which a resumed watch cannot promise after 410 Gone.
func (s *Source) relist(ctx context.Context, i int, f feed) (string, error) {
	var acc listAcc
	opts := metav1.ListOptions{Limit: listPageSize}
	for page := 1; ; page++ {
		if page > maxListPages {
			return "", fmt.Errorf("more than %d pages of %d; giving up this list", maxListPages, listPageSize)
		}
		pageCtx, cancel := context.WithTimeout(ctx, listPageTimeout)
		meta, err := f.list(pageCtx, opts, &acc)
		cancel()
		if err != nil {
			return "", err
		}
		s.received(i)
		if meta.Continue == "" {
			if i == serviceCIDRs {
				s.enqueue(func(tx *allocview.Tx) { tx.ReplaceServiceCIDRs(acc.cidrs) })
			} else {
				s.enqueueFreeing(func(tx *allocview.Tx) { tx.ReplaceAllocations(acc.allocs) }, len(acc.allocs) >= s.largeRelist)
			}
			return meta.ResourceVersion, nil
		}
		opts.Continue = meta.Continue
	}
}

// consume applies the events of one watch until it ends, keeping *rv at the
// last resourceVersion seen, and says why it ended.
func (s *Source) consume(ctx context.Context, i int, f feed, w watch.Interface, rv *string) (string, error) {
	idle := time.NewTimer(s.idleTimeout)
	defer idle.Stop()
	for {
		var ev watch.Event
		var ok bool
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-idle.C:
			return ReasonIdle, nil
		case ev, ok = <-w.ResultChan():
		}
		if !ok {
			return ReasonClosed, nil
		}
		idle.Reset(s.idleTimeout)
		s.received(i)
		switch ev.Type {
		case watch.Error:
			err := apierrors.FromObject(ev.Object)
			if isExpired(err) {
				return ReasonExpired, err
			}
			return ReasonError, fmt.Errorf("watch %s: %w", f.name, err)
		case watch.Bookmark:
			if m, err := metaOf(ev.Object); err == nil && m != "" {
				*rv = m
			}
		case watch.Added, watch.Modified, watch.Deleted:
			newRV, change := f.event(ev.Type, ev.Object)
			if newRV != "" {
				*rv = newRV
			}
			if change != nil {
				s.enqueue(change)
			}
		}
	}
}

// metaOf is the resourceVersion of a bookmark's object.
func metaOf(obj any) (string, error) {
	if m, ok := obj.(metav1.Object); ok {
		return m.GetResourceVersion(), nil
	}
	return "", errors.New("bookmark without metadata")
}

// isExpired reports the apiserver's "410 Gone" / "too old resource
// version": the resourceVersion to resume from is compacted away.
func isExpired(err error) bool {
	return apierrors.IsResourceExpired(err) || apierrors.IsGone(err)
}

func ptrTo[T any](v T) *T { return &v }

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
