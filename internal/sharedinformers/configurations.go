package sharedinformers

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/labels"
	admissionregistrationinformers "k8s.io/client-go/informers/admissionregistration/v1"
	"k8s.io/client-go/kubernetes"
	admissionregistrationlisters "k8s.io/client-go/listers/admissionregistration/v1"
	"k8s.io/client-go/tools/cache"
)

// WebhookConfigurations are a term's one watch of the two webhook
// configurations, read from memory by every leader loop (the namespace
// scope, the certificates, the managed matchConditions' mutators, the
// backstop) instead of each GETting or watching them. A write still reads
// fresh (webhookconfig.Update). The objects returned are the informer's:
// read them, never change them.
type WebhookConfigurations struct {
	names                Configurations
	mutating, validating cache.SharedIndexInformer
	mutatingLister       admissionregistrationlisters.MutatingWebhookConfigurationLister
	validatingLister     admissionregistrationlisters.ValidatingWebhookConfigurationLister
	// mutatingErr and validatingErr are each informer's last list or
	// watch error (RBAC refusing, the apiserver away): what a read before
	// the first list says, wrapped.
	mutatingErr, validatingErr atomic.Pointer[error]
}

// FirstList is how long a term's loop waits for the configurations' first
// list before its reads say why they have none.
const FirstList = 10 * time.Second

// TermConfigurations is what a leader loop reading the configurations
// does at its term's start: the term's one watch of them (registered for
// by in the factory ctx carries), the factory started for the term, and
// its first list waited for at most firstList (FirstList; 0: not waited
// for). A list
// that does not come in time (RBAC, the apiserver away) is not an error
// here: the reads say why until it comes. The error is a bug of the
// wiring (no term factory in ctx, another filter for a type).
func TermConfigurations(ctx context.Context, by string, firstList time.Duration) (*WebhookConfigurations, error) {
	f, err := FromContext(ctx)
	if err != nil {
		return nil, err
	}
	w, err := f.WebhookConfigurations(by)
	if err != nil {
		return nil, err
	}
	f.Start(ctx.Done())
	if firstList > 0 {
		sctx, cancel := context.WithTimeout(ctx, firstList)
		defer cancel()
		WaitForSync(sctx, w.Informers()...)
	}
	return w, nil
}

// WebhookConfigurations registers the informers of the factory's
// configurations (Configurations) for by, the first time, and returns the
// factory's one reader of them; the caller starts the factory.
func (f *Factory) WebhookConfigurations(by string) (*WebhookConfigurations, error) {
	f.cfgMu.Lock()
	defer f.cfgMu.Unlock()
	if f.configurations != nil {
		return f.configurations, nil
	}
	n := f.cfgs
	if n.Mutating == "" || n.Validating == "" {
		return nil, fmt.Errorf("%s reads the webhook configurations, but this informer factory names none (a replica's factory: they are read in a leader term's)", by)
	}
	mf := Named("", n.Mutating)
	if n.EveryMutating {
		mf = Filter{}
	}
	m, err := f.For(by, &admissionregistrationv1.MutatingWebhookConfiguration{}, mf, func(c kubernetes.Interface, fl Filter) cache.SharedIndexInformer {
		return admissionregistrationinformers.NewFilteredMutatingWebhookConfigurationInformer(c, 0, cache.Indexers{}, fl.Tweak)
	})
	if err != nil {
		return nil, err
	}
	v, err := f.For(by, &admissionregistrationv1.ValidatingWebhookConfiguration{}, Named("", n.Validating), func(c kubernetes.Interface, fl Filter) cache.SharedIndexInformer {
		return admissionregistrationinformers.NewFilteredValidatingWebhookConfigurationInformer(c, 0, cache.Indexers{}, fl.Tweak)
	})
	if err != nil {
		return nil, err
	}
	w := &WebhookConfigurations{
		names: n, mutating: m, validating: v,
		mutatingLister:   admissionregistrationlisters.NewMutatingWebhookConfigurationLister(m.GetIndexer()),
		validatingLister: admissionregistrationlisters.NewValidatingWebhookConfigurationLister(v.GetIndexer()),
	}
	for inf, last := range map[cache.SharedIndexInformer]*atomic.Pointer[error]{m: &w.mutatingErr, v: &w.validatingErr} {
		// Refused only once the informer runs: then someone else made
		// it, and its errors are not recorded (client-go logs them).
		_ = inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
			last.Store(&err)
			cache.DefaultWatchErrorHandler(ctx, r, err)
		})
	}
	f.configurations = w
	return w, nil
}

// Informers are the two informers, for WaitForSync and event handlers.
func (w *WebhookConfigurations) Informers() []cache.SharedIndexInformer {
	return []cache.SharedIndexInformer{w.mutating, w.validating}
}

// Synced reports whether both have listed their objects.
func (w *WebhookConfigurations) Synced() bool {
	return w.mutating.HasSynced() && w.validating.HasSynced()
}

// notSynced is the error of a read before the first list, with the
// informer's last list error.
func notSynced(kind, name string, last *atomic.Pointer[error]) error {
	if err := last.Load(); err != nil {
		return fmt.Errorf("%s %s is not listed yet: %w", kind, name, *err)
	}
	return fmt.Errorf("%s %s is not listed yet", kind, name)
}

// Mutating is our MutatingWebhookConfiguration as last watched; a NotFound
// error (apierrors.IsNotFound) when it does not exist.
func (w *WebhookConfigurations) Mutating() (*admissionregistrationv1.MutatingWebhookConfiguration, error) {
	if !w.mutating.HasSynced() {
		return nil, notSynced("MutatingWebhookConfiguration", w.names.Mutating, &w.mutatingErr)
	}
	return w.mutatingLister.Get(w.names.Mutating)
}

// Validating is our ValidatingWebhookConfiguration as last watched; a
// NotFound error when it does not exist.
func (w *WebhookConfigurations) Validating() (*admissionregistrationv1.ValidatingWebhookConfiguration, error) {
	if !w.validating.HasSynced() {
		return nil, notSynced("ValidatingWebhookConfiguration", w.names.Validating, &w.validatingErr)
	}
	return w.validatingLister.Get(w.names.Validating)
}

// EveryMutating is every MutatingWebhookConfiguration of the cluster; an
// error unless the factory lists them all (Configurations.EveryMutating).
func (w *WebhookConfigurations) EveryMutating() ([]*admissionregistrationv1.MutatingWebhookConfiguration, error) {
	if !w.names.EveryMutating {
		return nil, errors.New("this term lists only our MutatingWebhookConfiguration: every one is listed only with the managed matchConditions (--manage-match-conditions)")
	}
	if !w.mutating.HasSynced() {
		return nil, notSynced("every", "MutatingWebhookConfiguration", &w.mutatingErr)
	}
	return w.mutatingLister.List(labels.Everything())
}
