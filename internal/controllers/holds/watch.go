package holds

import (
	"context"
	"net/netip"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/labels"
	networkinginformers "k8s.io/client-go/informers/networking/v1"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/networking/v1"
	"k8s.io/client-go/tools/cache"

	"clusterip-policy/internal/sharedinformers"
	"clusterip-policy/pkg/holds"
)

// Watch is every replica's list and watch of the holds (IPAddresses
// labelled holds.Selector): the local state a release is decided from
// before any API call, and the leader's list of its holds. A
// label-filtered watch costs the apiserver one scan at the list, then
// only the changes of the holds; it keeps one small object per held
// reservation, so its memory is bounded by the policy's reservations (and
// by whatever an account that may create IPAddresses labels as ours).
//
// The informer is the replica's informer factory's IPAddress informer, over
// the holds' label selector: the view's watch of every IPAddress
// (pkg/allocview/kubesource) is a list and watch of its own, kept out of
// any informer store for memory, so nothing else asks the factory for
// IPAddresses.
type Watch struct {
	lister listersv1.IPAddressLister
	synced cache.InformerSynced
}

// NewWatch registers the holds' informer in the replica's factory, which
// its owner starts.
func NewWatch(f *sharedinformers.Factory) (*Watch, error) {
	inf, err := f.For("holds", &networkingv1.IPAddress{}, sharedinformers.Labelled(holds.Selector), func(c kubernetes.Interface, fl sharedinformers.Filter) cache.SharedIndexInformer {
		return networkinginformers.NewFilteredIPAddressInformer(c, 0, cache.Indexers{}, fl.Tweak)
	})
	if err != nil {
		return nil, err
	}
	return &Watch{lister: listersv1.NewIPAddressLister(inf.GetIndexer()), synced: inf.HasSynced}, nil
}

// Synced reports whether the first list is in: until then no release can
// be decided locally (the readiness check "holds" fails).
func (w *Watch) Synced() bool { return w.synced() }

// WaitForSync waits until the first list is in, or ctx ends (false).
func (w *Watch) WaitForSync(ctx context.Context) bool {
	return cache.WaitForCacheSync(ctx.Done(), w.synced)
}

// Get returns the hold at ip, if there is one.
func (w *Watch) Get(ip netip.Addr) (*networkingv1.IPAddress, bool) {
	a, err := w.lister.Get(ip.String())
	return a, err == nil
}

// List returns every hold.
func (w *Watch) List() ([]*networkingv1.IPAddress, error) {
	return w.lister.List(labels.SelectorFromSet(labels.Set{holds.ManagedByLabel: holds.ManagedBy}))
}
