package sharedinformers

import (
	"context"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
)

func secrets(c kubernetes.Interface, f Filter) cache.SharedIndexInformer {
	return coreinformers.NewFilteredSecretInformer(c, f.Namespace, 0, cache.Indexers{}, f.Tweak)
}

// TestOneInformerPerTypeAndFilter: the same type with the same filter is
// one informer; with another filter it is an error naming both askers and
// both filters, never the first informer handed back in silence.
func TestOneInformerPerTypeAndFilter(t *testing.T) {
	f := New(fake.NewClientset(), Configurations{})
	a, err := f.For("certificates", &corev1.Secret{}, Named("ns", "tls"), secrets)
	if err != nil {
		t.Fatal(err)
	}
	b, err := f.For("certificates (leader)", &corev1.Secret{}, Named("ns", "tls"), secrets)
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Error("the same type and filter gave two informers; want the one shared")
	}
	_, err = f.For("holds", &corev1.Secret{}, Labelled("a=b"), secrets)
	if err == nil {
		t.Fatal("a second filter for Secrets was accepted; want an error")
	}
	for _, want := range []string{"holds", "certificates", "Secret", "labels a=b", "namespace ns, fields metadata.name=tls", "one informer per type"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if got := f.Conflicts(); len(got) != 1 || got[0].Error() != err.Error() {
		t.Errorf("Conflicts() = %v, want the one refused", got)
	}
	if got := f.Registered(); len(got) != 1 || got[0] != "Secret: namespace ns, fields metadata.name=tls (certificates)" {
		t.Errorf("Registered() = %q", got)
	}
}

// TestTheConfigurationsAreReadFromTheTermsWatch: both configurations, by
// name, from one list and watch; a missing one is NotFound; every mutating
// configuration only when the factory lists them all; none in a replica's
// factory.
func TestTheConfigurationsAreReadFromTheTermsWatch(t *testing.T) {
	mine := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "ours"}}
	other := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "istio"}}
	client := fake.NewClientset(mine, other)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	if _, err := New(client, Configurations{}).WebhookConfigurations("judged"); err == nil || !strings.Contains(err.Error(), "judged") {
		t.Errorf("a replica's factory gave the configurations (error %v); want an error naming the asker", err)
	}

	f := New(client, Configurations{Mutating: "ours", Validating: "ours", EveryMutating: true})
	w, err := f.WebhookConfigurations("match-conditions")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Mutating(); err == nil {
		t.Error("read before the first list; want an error")
	}
	again, err := f.WebhookConfigurations("judged")
	if err != nil {
		t.Fatal(err)
	}
	if again != w {
		t.Error("a second reader got informers of its own; want the term's")
	}
	f.Start(ctx.Done())
	if !WaitForSync(ctx, w.Informers()...) {
		t.Fatal("not synced")
	}
	if m, err := w.Mutating(); err != nil || m.Name != "ours" {
		t.Errorf("Mutating() = %v, %v", m, err)
	}
	if _, err := w.Validating(); !apierrors.IsNotFound(err) {
		t.Errorf("Validating() error %v; want NotFound", err)
	}
	if all, err := w.EveryMutating(); err != nil || len(all) != 2 {
		t.Errorf("EveryMutating() = %d objects, %v; want 2", len(all), err)
	}

	// A factory of named configurations refuses a reader that wants them all.
	named := New(client, Configurations{Mutating: "ours", Validating: "ours"})
	nw, err := named.WebhookConfigurations("backstop")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nw.EveryMutating(); err == nil {
		t.Error("EveryMutating() of a factory listing ours alone; want an error")
	}
	if _, err := named.For("match-conditions", &admissionregistrationv1.MutatingWebhookConfiguration{}, Filter{}, func(kubernetes.Interface, Filter) cache.SharedIndexInformer { return nil }); err == nil {
		t.Error("every MutatingWebhookConfiguration asked of a factory listing ours by name; want an error")
	}
	cancel()
	f.Shutdown()
}

func TestFromContext(t *testing.T) {
	if _, err := FromContext(context.Background()); err == nil {
		t.Error("no factory in the context, no error")
	}
	f := New(fake.NewClientset(), Configurations{})
	if got, err := FromContext(NewContext(context.Background(), f)); err != nil || got != f {
		t.Errorf("FromContext = %p, %v; want %p", got, err, f)
	}
}
