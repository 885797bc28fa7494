package matchconditions

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"clusterip-policy/internal/names"
	"clusterip-policy/internal/readiness/readinesstest"
	"clusterip-policy/internal/sharedinformers"
	"clusterip-policy/internal/webhookconfig"
	"clusterip-policy/pkg/allocview"
	"clusterip-policy/pkg/matchconditions"
	"clusterip-policy/test/fixtures"
)

func conds(names ...string) []admissionregistrationv1.MatchCondition {
	var out []admissionregistrationv1.MatchCondition
	for _, n := range names {
		out = append(out, admissionregistrationv1.MatchCondition{Name: n, Expression: n + "-expr"})
	}
	return out
}

func conditionNames(cs []admissionregistrationv1.MatchCondition) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}

func TestSetConditionTouchesOnlyTheManagedOne(t *testing.T) {
	static := conds("not-default-kubernetes", "allocating-requests-only")
	added, changed, err := setCondition(static, "x")
	if err != nil || !changed || !slices.Equal(conditionNames(added), []string{"not-default-kubernetes", "allocating-requests-only", matchconditions.Name}) {
		t.Fatalf("add: %v %v %v", conditionNames(added), changed, err)
	}
	if conditionNames(static)[len(static)-1] != "allocating-requests-only" || len(static) != 2 {
		t.Fatal("the input list was modified")
	}
	same, changed, _ := setCondition(added, "x")
	if changed || len(same) != 3 {
		t.Fatalf("same expression reported as a change: %v", conditionNames(same))
	}
	replaced, changed, _ := setCondition(added, "y")
	if !changed || replaced[2].Expression != "y" || added[2].Expression != "x" || replaced[0] != static[0] || replaced[1] != static[1] {
		t.Fatalf("replace: %+v (input now %+v)", replaced, added)
	}
	removed, changed, _ := setCondition(replaced, "")
	if !changed || !slices.Equal(conditionNames(removed), conditionNames(static)) || len(replaced) != 3 {
		t.Fatalf("remove: %v, input %v", conditionNames(removed), conditionNames(replaced))
	}
	if _, changed, _ := setCondition(static, ""); changed {
		t.Fatal("removing an absent condition reported a change")
	}
	full := conds()
	for i := range maxMatchConditions {
		full = append(full, admissionregistrationv1.MatchCondition{Name: string(rune('a'+i%26)) + string(rune('a'+i/26)), Expression: "true"})
	}
	if _, _, err := setCondition(full, "x"); err == nil {
		t.Fatal("a 65th condition was accepted")
	}
}

func TestSetAnnotations(t *testing.T) {
	var m metav1.ObjectMeta
	if !setAnnotations(&m, map[string]string{conditionsDigestAnnotation: "a"}) || m.Annotations[conditionsDigestAnnotation] != "a" {
		t.Fatal("not set")
	}
	if setAnnotations(&m, map[string]string{conditionsDigestAnnotation: "a"}) {
		t.Fatal("unchanged reported as changed")
	}
	if !setAnnotations(&m, map[string]string{conditionsDigestAnnotation: ""}) || len(m.Annotations) != 0 {
		t.Fatal("not removed")
	}
}

func testConfigurations() (*admissionregistrationv1.MutatingWebhookConfiguration, *admissionregistrationv1.ValidatingWebhookConfiguration) {
	ca := []byte("injected-by-cert-manager")
	m := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "clusterip-policy", Annotations: map[string]string{"cert-manager.io/inject-ca-from": "x/y"}},
		Webhooks: []admissionregistrationv1.MutatingWebhook{
			{Name: names.MutatingServiceWebhook, ClientConfig: admissionregistrationv1.WebhookClientConfig{CABundle: ca}, MatchConditions: conds("not-default-kubernetes", "allocating-requests-only")},
		},
	}
	v := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "clusterip-policy"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{
			{Name: names.ValidatingServiceWebhook, ClientConfig: admissionregistrationv1.WebhookClientConfig{CABundle: ca}, MatchConditions: conds("not-default-kubernetes", "allocating-requests-only")},
			{Name: "validate-servicecidrs.clusterip-policy.io", ClientConfig: admissionregistrationv1.WebhookClientConfig{CABundle: ca}, MatchConditions: conds("not-default-servicecidr")},
		},
	}
	return m, v
}

func TestWriteChangesOnlyTheManagedConditionAndAnnotations(t *testing.T) {
	m0, v0 := testConfigurations()
	client := fake.NewClientset(m0.DeepCopy(), v0.DeepCopy())
	k := New(client, nil, Options{Manage: true, Configurations: webhookconfig.Names{Mutating: "clusterip-policy", Validating: "clusterip-policy"}}, logr.Discard(), NewMetrics(prometheus.NewRegistry()), nil)
	ctx := context.Background()
	c := matchconditions.Conditions{Mutating: "request.operation != 'CREATE'", Validating: "true", Digest: "d1"}
	changed, err := k.write(ctx, c, "p1")
	if err != nil || !changed {
		t.Fatalf("write: %v, changed %v", err, changed)
	}
	m, _ := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "clusterip-policy", metav1.GetOptions{})
	v, _ := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "clusterip-policy", metav1.GetOptions{})
	if got := conditionNames(m.Webhooks[0].MatchConditions); !slices.Equal(got, []string{"not-default-kubernetes", "allocating-requests-only", matchconditions.Name}) || m.Webhooks[0].MatchConditions[2].Expression != c.Mutating {
		t.Fatalf("mutating conditions %v", m.Webhooks[0].MatchConditions)
	}
	if got := conditionNames(v.Webhooks[1].MatchConditions); !slices.Equal(got, []string{"not-default-servicecidr"}) {
		t.Fatalf("the ServiceCIDR webhook was touched: %v", got)
	}
	if string(m.Webhooks[0].ClientConfig.CABundle) != "injected-by-cert-manager" || string(v.Webhooks[1].ClientConfig.CABundle) != "injected-by-cert-manager" {
		t.Fatal("caBundle lost")
	}
	if m.Annotations["cert-manager.io/inject-ca-from"] != "x/y" || m.Annotations[conditionsPolicyAnnotation] != "p1" || v.Annotations[conditionsDigestAnnotation] != "d1" {
		t.Fatalf("annotations %v / %v", m.Annotations, v.Annotations)
	}
	if changed, err := k.write(ctx, c, "p1"); err != nil || changed {
		t.Fatalf("an unchanged write: %v, changed %v", err, changed)
	}
	if changed, err := k.write(ctx, c, "p2"); err != nil || !changed {
		t.Fatalf("a new policy digest alone: %v, changed %v", err, changed)
	}
	if _, err := k.removeManaged(ctx); err != nil {
		t.Fatal(err)
	}
	m, _ = client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "clusterip-policy", metav1.GetOptions{})
	v, _ = client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "clusterip-policy", metav1.GetOptions{})
	if !slices.Equal(conditionNames(m.Webhooks[0].MatchConditions), conditionNames(m0.Webhooks[0].MatchConditions)) || !slices.Equal(conditionNames(v.Webhooks[0].MatchConditions), conditionNames(v0.Webhooks[0].MatchConditions)) {
		t.Fatalf("after removal: %v / %v", conditionNames(m.Webhooks[0].MatchConditions), conditionNames(v.Webhooks[0].MatchConditions))
	}
	if _, ok := m.Annotations[conditionsPolicyAnnotation]; ok || m.Annotations["cert-manager.io/inject-ca-from"] != "x/y" {
		t.Fatalf("annotations after removal: %v", m.Annotations)
	}
}

func TestWriteRefusesAConfigurationWithoutOurWebhook(t *testing.T) {
	m0, v0 := testConfigurations()
	v0.Webhooks = v0.Webhooks[1:]
	client := fake.NewClientset(m0, v0)
	k := New(client, nil, Options{Manage: true, Configurations: webhookconfig.Names{Mutating: "clusterip-policy", Validating: "clusterip-policy"}}, logr.Discard(), NewMetrics(prometheus.NewRegistry()), nil)
	_, err := k.write(context.Background(), matchconditions.Conditions{Mutating: "true", Validating: "true", Digest: "d"}, "p")
	if err == nil || !strings.Contains(err.Error(), "has no webhook "+names.ValidatingServiceWebhook) {
		t.Fatalf("err %v", err)
	}
}

// managedExprs returns the managed condition of our two Service webhooks
// ("" when absent) and the policy annotation of the validating one.
func managedExprs(t *testing.T, client *fake.Clientset) (mutating, validating, pol string) {
	t.Helper()
	ctx := context.Background()
	m, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "clusterip-policy", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	v, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "clusterip-policy", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range m.Webhooks[0].MatchConditions {
		if c.Name == matchconditions.Name {
			mutating = c.Expression
		}
	}
	for _, c := range v.Webhooks[0].MatchConditions {
		if c.Name == matchconditions.Name {
			validating = c.Expression
		}
	}
	return mutating, validating, v.Annotations[conditionsPolicyAnnotation]
}

// termContext carries a leader term's informer factory over client, as
// leader.Run hands it to the Works: every MutatingWebhookConfiguration, as
// with the conditions managed.
func termContext(client *fake.Clientset) context.Context {
	return sharedinformers.NewContext(context.Background(), sharedinformers.New(client, sharedinformers.Configurations{Mutating: "clusterip-policy", Validating: "clusterip-policy", EveryMutating: true}))
}

// The leader follows its own readiness and the other mutating admission:
// not ready, it writes conditions that send every create (fail-safe);
// ready, the selective ones; while another mutating webhook selects
// Service creates, a mutating condition that sends every create, so ours
// is called in the first round and so reinvoked after the other one.
func TestLeaderSendsEveryCreateWhenNotReadyOrWhenAnotherMutatorActsOnServices(t *testing.T) {
	r := readinesstest.New(t, readinesstest.Spec, false, logr.Discard())
	m0, v0 := testConfigurations()
	client := fake.NewClientset(m0, v0)
	k := New(client, r.Gate, Options{Manage: true, Configurations: webhookconfig.Names{Mutating: "clusterip-policy", Validating: "clusterip-policy"}}, logr.Discard(), NewMetrics(prometheus.NewRegistry()), nil)
	ctx, cancel := context.WithCancel(termContext(client))
	done := make(chan struct{})
	go func() { defer close(done); k.Work()(ctx) }()
	defer func() { cancel(); <-done }()

	failSafe := matchconditions.Compute(nil, allocview.RangeSet{})
	fixtures.Eventually(t, "fail-safe conditions written while not ready", 30*time.Second, func() bool {
		m, v, p := managedExprs(t, client)
		return m == "true" && v == failSafe.Validating && p == ""
	})
	if got := testutil.ToFloat64(k.metrics.synced); got != 0 {
		t.Fatalf("synced = %v while fail-safe", got)
	}

	r.View.Update(func(tx *allocview.Tx) {
		tx.SetServiceCIDR(allocview.ServiceCIDR{Name: "kubernetes", CIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16")}, Ready: true})
		tx.MarkSynced(true)
	})
	digest := r.Store.Current().Policy.Digest
	fixtures.Eventually(t, "selective conditions written once ready", 30*time.Second, func() bool {
		m, v, p := managedExprs(t, client)
		return m != "true" && m != "" && v != failSafe.Validating && p == digest
	})
	if got := testutil.ToFloat64(k.metrics.otherMutators); got != 0 {
		t.Fatalf("other mutators = %v, want 0", got)
	}
	_, selective, _ := managedExprs(t, client)

	other := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "zz-sets-cluster-ips"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{Name: "set.example.com", Rules: []admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
			Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"services"}},
		}}}},
	}
	if _, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	fixtures.Eventually(t, "a mutating condition that sends every create while another webhook mutates Services", 30*time.Second, func() bool {
		m, v, p := managedExprs(t, client)
		return m == "true" && v == selective && p == digest
	})
	if got := testutil.ToFloat64(k.metrics.otherMutators); got != 1 {
		t.Fatalf("other mutators = %v, want 1", got)
	}
	if err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, other.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	fixtures.Eventually(t, "the selective mutating condition back once the other webhook is gone", 30*time.Second, func() bool {
		m, _, _ := managedExprs(t, client)
		return m != "true" && m != ""
	})
}

// With management off, the removal of a condition left behind is retried
// until it succeeds (here after a transient 500), and it needs no Lease.
func TestManagementOffRemovesALeftoverConditionDespiteATransientError(t *testing.T) {
	m0, v0 := testConfigurations()
	v0.Webhooks[0].MatchConditions = append(v0.Webhooks[0].MatchConditions, admissionregistrationv1.MatchCondition{Name: matchconditions.Name, Expression: "false"})
	m0.Webhooks[0].MatchConditions = append(m0.Webhooks[0].MatchConditions, admissionregistrationv1.MatchCondition{Name: matchconditions.Name, Expression: "false"})
	client := fake.NewClientset(m0, v0)
	var failures atomic.Int32
	client.PrependReactor("update", "validatingwebhookconfigurations", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failures.CompareAndSwap(0, 1) {
			return true, nil, apierrors.NewInternalError(errors.New("etcdserver: leader changed"))
		}
		return false, nil, nil
	})
	k := New(client, nil, Options{Configurations: webhookconfig.Names{Mutating: "clusterip-policy", Validating: "clusterip-policy"}}, logr.Discard(), NewMetrics(prometheus.NewRegistry()), nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); k.KeepRemoved(ctx) }()
	defer func() { cancel(); <-done }()
	fixtures.Eventually(t, "the leftover condition removed from both configurations", 30*time.Second, func() bool {
		m, v, _ := managedExprs(t, client)
		return m == "" && v == "" && testutil.ToFloat64(k.metrics.leftBehind) == 0
	})
	if n := failures.Load(); n != 1 {
		t.Fatalf("the reactor failed %d updates, want 1", n)
	}
}

// A write of new selective conditions that the apiserver refuses (an
// expression it cannot compile, a configuration grown too large) must not
// leave the previous selective ones in place: they encode the policy
// before, and skip requests the policy now in force may deny. The leader
// falls back to the fail-safe conditions, which send every create.
func TestARefusedWriteOfNewConditionsFallsBackToTheFailSafeOnes(t *testing.T) {
	r := readinesstest.New(t, readinesstest.Spec, true, logr.Discard())
	m0, v0 := testConfigurations()
	client := fake.NewClientset(m0, v0)
	k := New(client, r.Gate, Options{Manage: true, Configurations: webhookconfig.Names{Mutating: "clusterip-policy", Validating: "clusterip-policy"}}, logr.Discard(), NewMetrics(prometheus.NewRegistry()), nil)
	ctx, cancel := context.WithCancel(termContext(client))
	done := make(chan struct{})
	go func() { defer close(done); k.Work()(ctx) }()
	defer func() { cancel(); <-done }()

	failSafe := matchconditions.Compute(nil, allocview.RangeSet{})
	first := r.Store.Current().Policy.Digest
	fixtures.Eventually(t, "selective conditions written", 30*time.Second, func() bool {
		m, v, p := managedExprs(t, client)
		return m != "" && v != failSafe.Validating && p == first
	})
	_, before, _ := managedExprs(t, client)

	// From now on the apiserver refuses every condition but the fail-safe
	// ones, as it refuses an expression it cannot compile.
	var refused atomic.Int32
	client.PrependReactor("update", "validatingwebhookconfigurations", func(a k8stesting.Action) (bool, runtime.Object, error) {
		v := a.(k8stesting.UpdateAction).GetObject().(*admissionregistrationv1.ValidatingWebhookConfiguration)
		for _, c := range v.Webhooks[0].MatchConditions {
			if c.Name == matchconditions.Name && c.Expression != failSafe.Validating {
				refused.Add(1)
				return true, nil, apierrors.NewInvalid(schema.GroupKind{Group: "admissionregistration.k8s.io", Kind: "ValidatingWebhookConfiguration"}, v.Name, nil)
			}
		}
		return false, nil, nil
	})
	// A new policy: its conditions differ from the ones in place.
	if err := os.WriteFile(r.Path, []byte(fixtures.Policy(readinesstest.Spec+"- ip: 10.96.0.20\n  service: default/ingress-vip\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := r.Store.Reload(); err != nil {
		t.Fatal(err)
	}
	fixtures.Eventually(t, "the fail-safe conditions in place once the new ones were refused", 30*time.Second, func() bool {
		m, v, p := managedExprs(t, client)
		return refused.Load() > 0 && m == "true" && v == failSafe.Validating && p == ""
	})
	if before == failSafe.Validating {
		t.Fatal("the test's first conditions were the fail-safe ones already")
	}
	if got := testutil.ToFloat64(k.metrics.synced); got != 0 {
		t.Fatalf("synced = %v with the fail-safe conditions in place", got)
	}
}
