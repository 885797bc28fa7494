// Package kubesource keeps an allocview.View current from the cluster: it
// watches ServiceCIDR and IPAddress objects (networking.k8s.io/v1) and
// nothing else. It is the only part of the view that talks to an apiserver.
package kubesource

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"clusterip-policy/pkg/allocview"
)

// Source feeds a View from informers.
type Source struct {
	client kubernetes.Interface
	view   *allocview.View
	log    logr.Logger
	synced atomic.Bool
	// staleSince is, per watched resource, when its watch last failed
	// (UnixNano), or 0 once events flow again: the view may then miss
	// changes, and the webhook must say so rather than decide silently.
	staleSince [2]atomic.Int64

	mu      sync.Mutex
	pending []func(*allocview.Tx)
	wake    chan struct{}
}

// New returns a Source that will feed view once Run is called.
func New(client kubernetes.Interface, view *allocview.View, log logr.Logger) *Source {
	return &Source{client: client, view: view, log: log, wake: make(chan struct{}, 1)}
}

// HasSynced reports whether the view holds the cluster's initial state.
func (s *Source) HasSynced() bool { return s.synced.Load() }

// The resources watched, as indexes of staleSince.
const (
	serviceCIDRs = iota
	ipAddresses
)

var resourceNames = [2]string{"servicecidrs", "ipaddresses"}

// StaleFor returns how long the view has possibly been missing changes
// (a watch failed and has not delivered an event since), and which
// resource; zero when both watches are healthy.
func (s *Source) StaleFor(now time.Time) (time.Duration, string) {
	var worst time.Duration
	var which string
	for i := range s.staleSince {
		if since := s.staleSince[i].Load(); since != 0 {
			if d := now.Sub(time.Unix(0, since)); d > worst {
				worst, which = d, resourceNames[i]
			}
		}
	}
	return worst, which
}

// watchFailed marks resource stale and starts probing the apiserver. In a
// quiet cluster a recovered watch delivers no event (it resumes from its
// resourceVersion), so events alone cannot clear the mark: a successful
// LIST of the resource does. The watch replays what it missed once it
// reconnects, or relists when its resourceVersion has expired.
func (s *Source) watchFailed(ctx context.Context, resource int, err error) {
	if !s.staleSince[resource].CompareAndSwap(0, time.Now().UnixNano()) {
		return // already stale; a probe is running
	}
	s.log.Error(err, "watch failed; the view may miss changes until it recovers", "resource", resourceNames[resource])
	go s.probe(ctx, resource)
}

// probe lists resource (one item) every probeInterval until that works,
// then clears the stale mark.
func (s *Source) probe(ctx context.Context, resource int) {
	t := time.NewTicker(probeInterval)
	defer t.Stop()
	for s.staleSince[resource].Load() != 0 {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		opts := metav1.ListOptions{Limit: 1}
		var err error
		if resource == serviceCIDRs {
			_, err = s.client.NetworkingV1().ServiceCIDRs().List(ctx, opts)
		} else {
			_, err = s.client.NetworkingV1().IPAddresses().List(ctx, opts)
		}
		if err == nil {
			s.seen(resource)
			return
		}
	}
}

// probeInterval is how often a stale resource is probed.
var probeInterval = time.Second

// seen records that the resource can be read again.
func (s *Source) seen(resource int) {
	if s.staleSince[resource].Swap(0) != 0 {
		s.log.Info("watch recovered", "resource", resourceNames[resource])
	}
}

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
		s.view.Update(func(tx *allocview.Tx) { tx.MarkSynced(false) })
		s.synced.Store(true)
		<-ctx.Done()
		return nil
	}

	factory := informers.NewSharedInformerFactoryWithOptions(s.client, 0, informers.WithTransform(trim))
	cidrs := factory.Networking().V1().ServiceCIDRs().Informer()
	ips := factory.Networking().V1().IPAddresses().Informer()
	for i, inf := range []cache.SharedIndexInformer{cidrs, ips} {
		err := inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
			cache.DefaultWatchErrorHandler(ctx, r, err)
			s.watchFailed(ctx, i, err)
		})
		if err != nil {
			return fmt.Errorf("watch %s: %w", resourceNames[i], err)
		}
	}
	cidrReg, err := cidrs.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    s.setServiceCIDR,
		UpdateFunc: func(_, obj any) { s.setServiceCIDR(obj) },
		DeleteFunc: s.deleteServiceCIDR,
	})
	if err != nil {
		return fmt.Errorf("watch ServiceCIDRs: %w", err)
	}
	ipReg, err := ips.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    s.setIPAddress,
		UpdateFunc: func(_, obj any) { s.setIPAddress(obj) },
		DeleteFunc: s.deleteIPAddress,
	})
	if err != nil {
		return fmt.Errorf("watch IPAddresses: %w", err)
	}
	go s.apply(ctx)
	factory.Start(ctx.Done())
	defer factory.Shutdown()

	start := time.Now()
	if !cache.WaitForCacheSync(ctx.Done(), cidrReg.HasSynced, ipReg.HasSynced) {
		return nil // ctx ended first
	}
	// Queued behind every initial event, so the snapshot that says synced
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

// enqueue hands a change to the apply loop. Event handlers never wait for
// the view: changes pile up and are published together.
func (s *Source) enqueue(fn func(*allocview.Tx)) {
	s.mu.Lock()
	s.pending = append(s.pending, fn)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// apply publishes queued changes, one snapshot per batch: the initial list
// of many thousand IPAddresses becomes a handful of snapshots, not one each.
func (s *Source) apply(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		}
		s.mu.Lock()
		batch := s.pending
		s.pending = nil
		s.mu.Unlock()
		if len(batch) == 0 {
			continue
		}
		s.view.Update(func(tx *allocview.Tx) {
			for _, fn := range batch {
				fn(tx)
			}
		})
	}
}

func (s *Source) setServiceCIDR(obj any) {
	s.seen(serviceCIDRs)
	c, ok := obj.(*networkingv1.ServiceCIDR)
	if !ok {
		return
	}
	sc := ToServiceCIDR(c)
	s.enqueue(func(tx *allocview.Tx) { tx.SetServiceCIDR(sc) })
}

func (s *Source) deleteServiceCIDR(obj any) {
	s.seen(serviceCIDRs)
	c, ok := withoutTombstone(obj).(*networkingv1.ServiceCIDR)
	if !ok {
		return
	}
	s.enqueue(func(tx *allocview.Tx) { tx.DeleteServiceCIDR(c.Name) })
}

func (s *Source) setIPAddress(obj any) {
	s.seen(ipAddresses)
	a, ok := obj.(*networkingv1.IPAddress)
	if !ok {
		return
	}
	ip, err := netip.ParseAddr(a.Name)
	if err != nil {
		s.log.Info("ignoring an IPAddress whose name is not an IP", "name", a.Name)
		return
	}
	h := HolderOf(a)
	s.enqueue(func(tx *allocview.Tx) { tx.SetAllocation(ip, h) })
}

func (s *Source) deleteIPAddress(obj any) {
	s.seen(ipAddresses)
	a, ok := withoutTombstone(obj).(*networkingv1.IPAddress)
	if !ok {
		return
	}
	if ip, err := netip.ParseAddr(a.Name); err == nil {
		s.enqueue(func(tx *allocview.Tx) { tx.DeleteAllocation(ip) })
	}
}

// withoutTombstone returns the last known object of a delete the informer
// missed while its watch was down.
func withoutTombstone(obj any) any {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return t.Obj
	}
	return obj
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
	return allocview.Holder{Group: r.Group, Resource: r.Resource, Namespace: r.Namespace, Name: r.Name}
}

// trim drops everything the view does not read before an object enters the
// informer's store: an IPAddress keeps its name and parentRef (about 100
// bytes instead of about 1 KiB with labels and managedFields), since a
// cluster may hold hundreds of thousands of them.
func trim(obj any) (any, error) {
	switch o := obj.(type) {
	case *networkingv1.IPAddress:
		return &networkingv1.IPAddress{
			ObjectMeta: metav1.ObjectMeta{Name: o.Name, ResourceVersion: o.ResourceVersion},
			Spec:       networkingv1.IPAddressSpec{ParentRef: o.Spec.ParentRef},
		}, nil
	case *networkingv1.ServiceCIDR:
		o.ManagedFields = nil
		o.Annotations = nil
		return o, nil
	}
	return obj, nil
}
