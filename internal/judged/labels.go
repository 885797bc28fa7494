package judged

import (
	"context"
	"sync/atomic"
	"time"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"

	"clusterip-policy/internal/poll"
)

// Labels keeps the namespaces' labels on every replica, for the
// namespaceSelector of the policy's reserved ranges (a Service's admission
// review carries no namespace labels). Scope reads the same labels, but
// only in the leader's term.
type Labels struct {
	client kubernetes.Interface
	lister atomic.Pointer[corelisters.NamespaceLister] // nil until listed once
}

// NewLabels returns a Labels that knows nothing until Run has listed the
// namespaces.
func NewLabels(client kubernetes.Interface) *Labels { return &Labels{client: client} }

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

// Run watches the namespaces until ctx ends.
func (l *Labels) Run(ctx context.Context) {
	factory := informers.NewSharedInformerFactory(l.client, 0)
	lister := factory.Core().V1().Namespaces().Lister()
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	for _, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return
		}
	}
	l.lister.Store(&lister)
	<-ctx.Done()
	l.lister.Store(nil)
}
