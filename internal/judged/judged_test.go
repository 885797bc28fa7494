package judged

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"clusterip-policy/internal/logging"
	"clusterip-policy/internal/names"
	"clusterip-policy/internal/sharedinformers"
	"clusterip-policy/test/fixtures"
)

// termContext is ctx carrying a leader term's informer factory over
// client, as leader.Run hands it to the Works.
func termContext(ctx context.Context, client *fake.Clientset) context.Context {
	return sharedinformers.NewContext(ctx, sharedinformers.New(client, sharedinformers.Configurations{Mutating: "clusterip-policy", Validating: "clusterip-policy"}))
}

// readOnce has s read the configurations of client through a term's
// watch, as its Run does, until done (at most 10s).
func readOnce(t *testing.T, s *Scope, client *fake.Clientset, done func() bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f, err := sharedinformers.FromContext(termContext(ctx, client))
	if err != nil {
		t.Fatal(err)
	}
	if s.cfgs, err = f.WebhookConfigurations("judged"); err != nil {
		t.Fatal(err)
	}
	f.Start(ctx.Done())
	fixtures.Eventually(t, "the configurations read", 10*time.Second, func() bool { _ = s.read(); return done() })
}

// chartSelector is what the chart renders for
// webhook.excludedNamespaces=[batch] and webhook.namespaceSelector with one
// expression: the names, the release namespace, then the labels.
var chartSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
	{Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpNotIn, Values: []string{"clusterip-policy", "batch"}},
	{Key: "clusterip-policy.io/excluded", Operator: metav1.LabelSelectorOpDoesNotExist},
}}

func namespaceObj(name string, l map[string]string) *corev1.Namespace {
	all := map[string]string{corev1.LabelMetadataName: name}
	for k, v := range l {
		all[k] = v
	}
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: all}}
}

func configurations(mutating, validating *metav1.LabelSelector) (*admissionregistrationv1.MutatingWebhookConfiguration, *admissionregistrationv1.ValidatingWebhookConfiguration) {
	return &admissionregistrationv1.MutatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: "clusterip-policy"},
			Webhooks:   []admissionregistrationv1.MutatingWebhook{{Name: names.MutatingServiceWebhook, NamespaceSelector: mutating}},
		}, &admissionregistrationv1.ValidatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: "clusterip-policy"},
			Webhooks: []admissionregistrationv1.ValidatingWebhook{
				// A cluster-scoped webhook first: only the Service webhook's selector counts.
				{Name: "validate-servicecidrs.clusterip-policy.io", NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"never": "matches"}}},
				{Name: names.ValidatingServiceWebhook, NamespaceSelector: validating},
			},
		}
}

func TestJudgedAsTheApiserverMatches(t *testing.T) {
	labelled := map[string]map[string]string{
		"team-a":      {"team": "a"},
		"legacy":      {"clusterip-policy.io/excluded": "true"},
		"kube-system": nil,
	}
	lookup := func(ns string) (map[string]string, bool) {
		l, ok := labelled[ns]
		if !ok {
			return nil, false
		}
		return namespaceObj(ns, l).Labels, true
	}
	sels, _, err := Selectors(chartSelector, chartSelector)
	if err != nil {
		t.Fatal(err)
	}
	n := Namespaces{excluded: []string{"clusterip-policy"}, selectors: sels, labelsOf: lookup}
	cases := []struct {
		ns   string
		want bool
	}{
		{"team-a", true},            // labels match
		{"kube-system", true},       // only its name label
		{"legacy", false},           // excluded by label
		{"batch", false},            // excluded by name, in the list
		{"clusterip-policy", false}, // the release namespace, by name
		{"not-created-yet", true},   // absent: its name label alone decides
	}
	for _, c := range cases {
		if got := n.Judged(c.ns); got != c.want {
			t.Errorf("Judged(%q) = %v, want %v", c.ns, got, c.want)
		}
		if n.Skipped(c.ns) == c.want {
			t.Errorf("Skipped(%q) = %v, want %v", c.ns, !c.want, !c.want)
		}
	}

	// The lease namespace is skipped even when the selector selects it.
	all, _, _ := Selectors(nil, nil)
	if n := (Namespaces{excluded: []string{"ops"}, selectors: all, labelsOf: lookup}); n.Judged("ops") || !n.Judged("legacy") {
		t.Errorf("nil selectors (every namespace, as the apiserver defaults them) with ops excluded: ops %v legacy %v, want false true", n.Judged("ops"), n.Judged("legacy"))
	}

	// Two different selectors: judged only where both webhooks are called.
	onlyTeamA := &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}
	sels, desc, err := Selectors(chartSelector, onlyTeamA)
	if err != nil {
		t.Fatal(err)
	}
	if len(sels) != 2 || !strings.Contains(desc, "mutating: ") || !strings.Contains(desc, "validating: team=a") {
		t.Errorf("two selectors described as %q (%d parsed)", desc, len(sels))
	}
	n = Namespaces{selectors: sels, labelsOf: lookup}
	if !n.Judged("team-a") || n.Judged("kube-system") {
		t.Errorf("mutating by chart, validating team=a: team-a %v kube-system %v, want true false", n.Judged("team-a"), n.Judged("kube-system"))
	}

	// A selector the apiserver would refuse is an error, not "everything".
	if _, _, err := Selectors(&metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Near"}}}, nil); err == nil {
		t.Error("a selector with operator Near parsed")
	}
}

// syncLog is a log the scope writes from its goroutine while the test reads.
type syncLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestScopeFollowsTheLiveConfigurationsAndLabels(t *testing.T) {
	m, v := configurations(chartSelector, chartSelector)
	client := fake.NewClientset(m, v, namespaceObj("team-a", nil), namespaceObj("legacy", map[string]string{"clusterip-policy.io/excluded": "true"}), namespaceObj("kube-system", nil))
	var log syncLog
	replica := sharedinformers.New(client, sharedinformers.Configurations{})
	labels, err := NewLabels(replica)
	if err != nil {
		t.Fatal(err)
	}
	s := NewScope(labels, "clusterip-policy", "clusterip-policy", []string{"clusterip-policy"}, logging.New(&log))
	s.interval = 10 * time.Millisecond
	if _, err := s.Current(); !errors.Is(err, ErrNotKnown) {
		t.Fatalf("before Run: %v, want ErrNotKnown", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	// The term's scope waits for the replica's watch of the namespaces.
	go func() { defer close(done); s.Run(termContext(ctx, client)) }()
	go labels.Run(ctx)
	go func() { _ = replica.Run(ctx) }()
	judged := func(ns string) bool {
		n, err := s.Current()
		return err == nil && n.Judged(ns)
	}
	fixtures.Eventually(t, "the scope never knew team-a judged", 30*time.Second, func() bool { return judged("team-a") })
	for ns, want := range map[string]bool{"legacy": false, "batch": false, "clusterip-policy": false, "kube-system": true} {
		if got := judged(ns); got != want {
			t.Errorf("Judged(%q) = %v, want %v", ns, got, want)
		}
	}
	if !strings.Contains(log.String(), "namespaces judged here") || !strings.Contains(log.String(), "clusterip-policy.io/excluded") {
		t.Errorf("the selector in force is not logged:\n%s", log.String())
	}

	// A label added to a namespace is followed (watch), and so is a changed selector (re-read).
	ns, _ := client.CoreV1().Namespaces().Get(ctx, "team-a", metav1.GetOptions{})
	ns.Labels["clusterip-policy.io/excluded"] = ""
	if _, err := client.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	fixtures.Eventually(t, "team-a still judged after it was labelled excluded", 30*time.Second, func() bool { return !judged("team-a") })
	m.Webhooks[0].NamespaceSelector = &metav1.LabelSelector{}
	v.Webhooks[1].NamespaceSelector = &metav1.LabelSelector{}
	if _, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(ctx, m, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(ctx, v, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	fixtures.Eventually(t, "legacy still skipped after the selectors were emptied", 30*time.Second, func() bool { return judged("legacy") })
	if judged("clusterip-policy") {
		t.Error("the Lease namespace is judged once the selectors select everything")
	}

	// kube-system labelled out: the leader says so.
	m.Webhooks[0].NamespaceSelector = chartSelector
	v.Webhooks[1].NamespaceSelector = chartSelector
	_, _ = client.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(ctx, m, metav1.UpdateOptions{})
	_, _ = client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(ctx, v, metav1.UpdateOptions{})
	ks, _ := client.CoreV1().Namespaces().Get(ctx, "kube-system", metav1.GetOptions{})
	ks.Labels["clusterip-policy.io/excluded"] = "true"
	if _, err := client.CoreV1().Namespaces().Update(ctx, ks, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	fixtures.Eventually(t, "no warning that kube-system is not judged", 30*time.Second, func() bool {
		return strings.Contains(log.String(), "the Service webhooks are not called for namespace kube-system")
	})

	// The configuration deleted: the webhook is called for nothing and
	// nothing says what to skip: every namespace but the Lease's, as
	// before the selector was read, and the log says so.
	if err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, "clusterip-policy", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	fixtures.Eventually(t, "kube-system still skipped after the ValidatingWebhookConfiguration was deleted", 30*time.Second, func() bool { return judged("kube-system") })
	if judged("clusterip-policy") || !judged("legacy") {
		t.Errorf("without a configuration: Lease namespace judged %v, legacy %v; want false, true", judged("clusterip-policy"), judged("legacy"))
	}
	if !strings.Contains(log.String(), `ValidatingWebhookConfiguration clusterip-policy (--validating-webhook-configuration)`) {
		t.Errorf("the absent configuration is not logged:\n%s", log.String())
	}

	// The term ends: nothing is known.
	cancel()
	<-done
	if _, err := s.Current(); !errors.Is(err, ErrNotKnown) {
		t.Errorf("after the term: %v, want ErrNotKnown", err)
	}
}

func TestScopeRefusesAConfigurationWithoutTheServiceWebhook(t *testing.T) {
	m, v := configurations(chartSelector, chartSelector)
	m.Webhooks[0].Name = "renamed.example.com"
	s := NewScope(nil, "clusterip-policy", "clusterip-policy", nil, logr.Discard())
	readOnce(t, s, fake.NewClientset(m, v), func() bool { _, err := s.Current(); return errors.Is(err, errNoServiceWebhook) })
	_, err := s.Current()
	if !errors.Is(err, ErrNotKnown) || !strings.Contains(err.Error(), "MutatingWebhookConfiguration clusterip-policy needs webhook "+names.MutatingServiceWebhook) {
		t.Errorf("a configuration without the Service webhook: %v", err)
	}
}

func TestNamesIsAlwaysKnown(t *testing.T) {
	n, err := Names("clusterip-policy").Current()
	if err != nil || n.Judged("clusterip-policy") || !n.Judged("anything") {
		t.Errorf("Names(clusterip-policy): %v; judged own %v, other %v", err, n.Judged("clusterip-policy"), n.Judged("anything"))
	}
}

// RBAC without list on the configurations: not known (the loops wait, and
// the log names the configuration and its flag), never "every namespace".
func TestScopeWithoutAccessIsNotKnown(t *testing.T) {
	m, v := configurations(chartSelector, chartSelector)
	client := fake.NewClientset(m, v)
	client.PrependReactor("list", "validatingwebhookconfigurations", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(admissionregistrationv1.Resource("validatingwebhookconfigurations"), "clusterip-policy", errors.New("RBAC says no"))
	})
	s := NewScope(nil, "clusterip-policy", "clusterip-policy", nil, logr.Discard())
	readOnce(t, s, client, func() bool { _, err := s.Current(); return apierrors.IsForbidden(err) })
	_, err := s.Current()
	if !errors.Is(err, ErrNotKnown) || !apierrors.IsForbidden(err) {
		t.Errorf("forbidden: %v, want ErrNotKnown wrapping the Forbidden", err)
	}
	// The error is what the scope's loop logs (once while it lasts).
	if !strings.Contains(err.Error(), "--validating-webhook-configuration") {
		t.Errorf("the error does not name the configuration's flag: %v", err)
	}
}
