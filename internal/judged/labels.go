package judged

import (
	"context"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"clusterip-policy/internal/poll"
	"clusterip-policy/internal/sharedinformers"
)

// Labels keeps the namespaces' labels on every replica, for the
// namespaceSelector of the policy's reserved ranges (a Service's admission
// review carries no namespace labels). Scope reads the same labels, but
// only in the leader's term. The watch is the replica's informer factory's
// Namespace informer: one list and watch of the namespaces per replica.
type Labels struct {
	informer cache.SharedIndexInformer
	lister   atomic.Pointer[corelisters.NamespaceLister] // nil until listed once
}

// NewLabels registers the namespaces' informer in the replica's factory
// (every namespace); the Labels know nothing until Run has seen them
// listed.
func NewLabels(f *sharedinformers.Factory) (*Labels, error) {
	inf, err := f.For("namespace labels", &corev1.Namespace{}, sharedinformers.Filter{}, func(c kubernetes.Interface, fl sharedinformers.Filter) cache.SharedIndexInformer {
		return coreinformers.NewFilteredNamespaceInformer(c, 0, cache.Indexers{}, fl.Tweak)
	})
	if err != nil {
		return nil, err
	}
	return &Labels{informer: inf}, nil
}

// Of returns the labels of namespace, and false while they are not known
// (not listed yet, or no such namespace): the decision then matches the
// namespace by its name label only (policy.NamespaceLabels).
func (l *Labels) Of(namespace string) (map[string]string, bool) {
	lister := l.lister.Load()
	if lister == nil {
		return nil, false
	}
	ns, err := (*lister).Get(namespace)
	if err != nil {
		return nil, false
	}
	return ns.Labels, true
}

// Synced reports whether the namespaces are listed (and Run still runs).
func (l *Labels) Synced() bool { return l.lister.Load() != nil }

// WaitForSync waits until the namespaces are listed, or ctx ends (false).
func (l *Labels) WaitForSync(ctx context.Context) bool {
	for !l.Synced() {
		if !poll.Sleep(ctx, syncPoll) {
			return false
		}
	}
	return true
}

// syncPoll is how often WaitForSync looks: the first list of the
// namespaces takes a round trip or more.
const syncPoll = 50 * time.Millisecond

// Run publishes the namespaces' lister once the factory (started by its
// owner) has listed them, until ctx ends.
func (l *Labels) Run(ctx context.Context) {
	if !sharedinformers.WaitForSync(ctx, l.informer) {
		return
	}
	lister := corelisters.NewNamespaceLister(l.informer.GetIndexer())
	l.lister.Store(&lister)
	<-ctx.Done()
	l.lister.Store(nil)
}
