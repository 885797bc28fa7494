package holds

import (
	"context"
	"net/netip"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/networking/v1"
	"k8s.io/client-go/tools/cache"

	"clusterip-policy/pkg/holds"
)

// Watch is every replica's list and watch of the holds (IPAddresses
// labelled holds.Selector): the local state a release is decided from
// before any API call, and the leader's list of its holds. A
// label-filtered watch costs the apiserver one scan at the list, then
// only the changes of the holds; it keeps one small object per held
// reservation, so its memory is bounded by the policy's reservations (and
// by whatever an account that may create IPAddresses labels as ours).
type Watch struct {
	factory informers.SharedInformerFactory
	lister  listersv1.IPAddressLister
	synced  cache.InformerSynced
}

// NewWatch watches the holds through client.
func NewWatch(client kubernetes.Interface) *Watch {
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = holds.Selector }))
	inf := factory.Networking().V1().IPAddresses()
	return &Watch{factory: factory, lister: inf.Lister(), synced: inf.Informer().HasSynced}
}

// Run follows the holds until ctx ends.
func (w *Watch) Run(ctx context.Context) {
	w.factory.Start(ctx.Done())
	<-ctx.Done()
	w.factory.Shutdown()
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
