// Package sharedinformers is the one informer factory of a replica and the
// one of each leader term, as kube-controller-manager's ControllerContext
// hands every controller one InformerFactory: serve makes the replica's,
// hands it to every feature's build, and starts it once after every
// feature registered what it reads; the leader makes one when a term
// starts (leader.Run), hands it to every Work through the term's context
// (FromContext), and shuts it down when the term ends, so a replica that
// lost the Lease watches nothing of the leader's.
//
// A factory holds ONE informer per type: two features reading the same
// type share its list and watch, so they must agree on what it lists (its
// namespace, label and field selector). For is the only way to get an
// informer of a factory, and a second registration of a type with another
// filter is an error naming both registrations and the fix, returned to
// whoever asked (serve refuses to start; a term's Work logs it), never the
// silent first-come informer client-go's InformerFor would hand back. The
// two webhook configurations are the leader's shared reads: their filter
// is the factory's own (Configurations), so every reader gets the same.
//
// A leaf: it imports nothing of the application.
package sharedinformers

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Filter is what an informer lists and watches. The zero Filter is every
// object of the type.
type Filter struct {
	// Namespace is the one namespace listed; "" is every namespace (and
	// the only value for a cluster-scoped type).
	Namespace string
	// LabelSelector and FieldSelector are the list options' selectors.
	LabelSelector, FieldSelector string
}

// Named is the one object namespace/name (namespace "" for a
// cluster-scoped type): a list and watch with a field selector on the
// name, which RBAC authorizes with resourceNames.
func Named(namespace, name string) Filter {
	return Filter{Namespace: namespace, FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()}
}

// Labelled is every object whose labels match selector.
func Labelled(selector string) Filter { return Filter{LabelSelector: selector} }

// Tweak sets the filter's selectors on a list or watch request.
func (f Filter) Tweak(o *metav1.ListOptions) {
	o.LabelSelector, o.FieldSelector = f.LabelSelector, f.FieldSelector
}

func (f Filter) String() string {
	var parts []string
	if f.Namespace != "" {
		parts = append(parts, "namespace "+f.Namespace)
	}
	if f.LabelSelector != "" {
		parts = append(parts, "labels "+f.LabelSelector)
	}
	if f.FieldSelector != "" {
		parts = append(parts, "fields "+f.FieldSelector)
	}
	if len(parts) == 0 {
		return "every object"
	}
	return strings.Join(parts, ", ")
}

// NewInformerFunc makes the informer of one type listing filter: one of
// client-go's NewFilteredXInformer with filter.Namespace (for a namespaced
// type) and filter.Tweak. The resync is always 0: every reader here acts
// on changes and keeps its own timer.
type NewInformerFunc func(client kubernetes.Interface, filter Filter) cache.SharedIndexInformer

// Configurations are the two webhook configurations a leader term reads
// (the --mutating-webhook-configuration and
// --validating-webhook-configuration flags); empty in a replica's factory,
// which reads neither.
type Configurations struct {
	Mutating, Validating string
	// EveryMutating makes the MutatingWebhookConfigurations informer list
	// every one (the managed matchConditions weigh every other mutator),
	// which then serves ours too; otherwise it lists Mutating alone, by
	// name, as RBAC allows without the conditions' grant.
	EveryMutating bool
}

// Factory is one client-go SharedInformerFactory whose informers are got
// through For, so that every type has one filter, known and checked.
type Factory struct {
	factory informers.SharedInformerFactory
	cfgs    Configurations

	mu        sync.Mutex
	regs      map[reflect.Type]registration
	conflicts []error // every For refused, for the leader's log and the tests

	cfgMu          sync.Mutex
	configurations *WebhookConfigurations // nil until read
}

// registration is who first asked for a type's informer, and its filter.
type registration struct {
	kind   string
	filter Filter
	by     string
}

// New makes a factory over client; cfgs is a term's configurations (zero
// for a replica's factory).
func New(client kubernetes.Interface, cfgs Configurations) *Factory {
	return &Factory{factory: informers.NewSharedInformerFactory(client, 0), cfgs: cfgs, regs: map[reflect.Type]registration{}}
}

// For returns the factory's informer of obj's type, listing filter, made
// by newInformer the first time. by names who asks (a feature, a loop),
// for the error and Registered. A later call for the same type must give
// the same filter: the informer lists what the first asked for, so the
// second would read another set of objects than it thinks; that is an
// error naming both and the fix.
func (f *Factory) For(by string, obj runtime.Object, filter Filter, newInformer NewInformerFunc) (cache.SharedIndexInformer, error) {
	t := reflect.TypeOf(obj)
	kind := t.String()
	if t.Kind() == reflect.Pointer {
		kind = t.Elem().Name()
	}
	if _, err := meta.Accessor(obj); err != nil {
		return nil, fmt.Errorf("%s: %s is not an API object with metadata: %w", by, kind, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if r, ok := f.regs[t]; ok {
		if r.filter != filter {
			err := fmt.Errorf("%s asks for an informer of %s over %s, but %s registered this factory's over %s; a factory holds one informer per type: make both read the same filter (the wider one, each reader skipping what it does not want), or give one of them a list and watch of its own", by, kind, filter, r.by, r.filter)
			f.conflicts = append(f.conflicts, err)
			return nil, err
		}
	} else {
		f.regs[t] = registration{kind: kind, filter: filter, by: by}
	}
	return f.factory.InformerFor(obj, func(client kubernetes.Interface, _ time.Duration) cache.SharedIndexInformer {
		return newInformer(client, filter)
	}), nil
}

// Registered describes every informer of the factory ("Namespace: every
// object (judged)"), sorted: what it lists and watches once started.
func (f *Factory) Registered() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]string, 0, len(f.regs))
	for _, r := range f.regs {
		out = append(out, fmt.Sprintf("%s: %s (%s)", r.kind, r.filter, r.by))
	}
	slices.Sort(out)
	return out
}

// Conflicts are the errors of every For refused for another filter of a
// type already registered: a bug of the wiring, which the leader logs at
// the end of each term and the tests require to be none.
func (f *Factory) Conflicts() []error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.conflicts)
}

// Start starts every informer registered and not started yet, until stop
// closes. It may be called again after more were registered (a Work
// registers what it reads, then starts them, then waits for their sync).
func (f *Factory) Start(stop <-chan struct{}) { f.factory.Start(stop) }

// Shutdown waits until every started informer has stopped (their stop
// channel must be closed); nothing starts after it.
func (f *Factory) Shutdown() { f.factory.Shutdown() }

// Run starts the factory, runs until ctx ends, then shuts it down: the
// replica's factory, run once every feature registered its informers.
func (f *Factory) Run(ctx context.Context) error {
	f.Start(ctx.Done())
	<-ctx.Done()
	f.Shutdown()
	return nil
}

// WaitForSync waits until each informer has listed its objects, or ctx
// ends (false).
func WaitForSync(ctx context.Context, informers ...cache.SharedIndexInformer) bool {
	synced := make([]cache.InformerSynced, len(informers))
	for i, inf := range informers {
		synced[i] = inf.HasSynced
	}
	return cache.WaitForCacheSync(ctx.Done(), synced...)
}

type contextKey struct{}

// NewContext returns ctx carrying a term's factory: leader.Run hands it to
// every Work of the term this way, so a Work keeps its one argument.
func NewContext(ctx context.Context, f *Factory) context.Context {
	return context.WithValue(ctx, contextKey{}, f)
}

// ErrNoFactory is FromContext's error outside a term.
var ErrNoFactory = errors.New("no informer factory in the context: a leader Work runs within leader.Run's term, which carries the term's factory (tests: sharedinformers.NewContext)")

// FromContext returns the term's factory ctx carries.
func FromContext(ctx context.Context) (*Factory, error) {
	if f, ok := ctx.Value(contextKey{}).(*Factory); ok && f != nil {
		return f, nil
	}
	return nil, ErrNoFactory
}
