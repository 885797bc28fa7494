package backstop

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"clusterip-policy/internal/poll"
	"clusterip-policy/internal/sharedinformers"
	"clusterip-policy/internal/webhookconfig"
	"clusterip-policy/pkg/allocview"
	"clusterip-policy/pkg/backstop"
	"clusterip-policy/pkg/policy"
	"clusterip-policy/test/fixtures"
)

// The apiserver's own handling of the objects (server-side apply creating
// one, RBAC by name, the policies refusing requests) is proved by
// test/e2e/backstop_test.go; here, with a fake clientset, what the keeper
// writes and deletes in each state of the configurations and bindings.

func compiled(t *testing.T, spec string) backstop.Set {
	t.Helper()
	p := fixtures.MustPolicy(t, policy.ParseDocument, spec)
	rs := allocview.StaticRanges("--service-cidr", []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16")}, p.AllowedCIDRs)
	s, err := backstop.Compile(backstop.Input{Policy: p, Ranges: rs, Mutating: true})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func bindingsOf(t *testing.T, cs kubernetes.Interface) []string {
	t.Helper()
	l, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, b := range l.Items {
		out = append(out, b.Name)
	}
	slices.Sort(out)
	return out
}

// versions is what a read finds of the bindings: name -> resourceVersion.
func versions(t *testing.T, cs kubernetes.Interface) map[string]string {
	t.Helper()
	l, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, b := range l.Items {
		out[b.Name] = b.ResourceVersion
	}
	return out
}

func policiesOf(t *testing.T, cs kubernetes.Interface) []string {
	t.Helper()
	l, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range l.Items {
		out = append(out, p.Name)
	}
	slices.Sort(out)
	return out
}

// registeredKeeper is a keeper on a fake cluster where both Service
// webhook configurations exist, in a term whose watch of them runs until
// the test ends.
func registeredKeeper(t *testing.T) (*fake.Clientset, *Keeper) {
	t.Helper()
	cs := fake.NewClientset(
		&admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "clusterip-policy"}},
		&admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "clusterip-policy"}})
	k := &Keeper{client: cs, o: Options{Configurations: webhookconfig.Names{Mutating: "clusterip-policy", Validating: "clusterip-policy"}}}
	ctx, cancel := context.WithCancel(context.Background())
	f := sharedinformers.New(cs, sharedinformers.Configurations{Mutating: "clusterip-policy", Validating: "clusterip-policy"})
	t.Cleanup(func() { cancel(); f.Shutdown() })
	if err := k.watch(sharedinformers.NewContext(ctx, f)); err != nil {
		t.Fatal(err)
	}
	return cs, k
}

// readWatched is k.read once the term's watch has seen what the fake
// cluster holds, as the leader's does milliseconds after a change.
func readWatched(t *testing.T, ctx context.Context, cs *fake.Clientset, k *Keeper) (state, error) {
	t.Helper()
	fixtures.Eventually(t, "the configurations watched", 10*time.Second, func() bool {
		registered, vwc, err := k.configurations(ctx)
		wregistered, wvwc, werr := k.watched()
		return err == nil && werr == nil && registered == wregistered && (vwc == nil) == (wvwc == nil)
	})
	return k.read(ctx)
}

const (
	denyAll  = "allowedCIDRs: [10.96.0.0/16]\nreservations:\n- {ip: 10.96.0.10, service: kube-system/kube-dns}\n"
	warnSome = denyAll + "enforcement:\n  rules:\n    reserved-for-other: warn\n"
)

func TestTheKeeperWritesWhileRegisteredKeepsWhatExistsAndLiftsWithBoth(t *testing.T) {
	ctx := context.Background()
	cs, k := registeredKeeper(t)
	set := compiled(t, denyAll)

	// Registered: every policy and binding is written.
	lifted, err := k.write(ctx, set, state{registered: true, bindings: map[string]string{}})
	if err != nil || lifted {
		t.Fatalf("write: lifted %v, %v", lifted, err)
	}
	want := []string{"clusterip-policy-backstop-servicecidrs-deny", "clusterip-policy-backstop-services-deny"}
	if got := bindingsOf(t, cs); !slices.Equal(got, want) {
		t.Fatalf("bindings %v, want %v", got, want)
	}
	if got := policiesOf(t, cs); !slices.Equal(got, want) {
		t.Fatalf("policies %v, want %v", got, want)
	}
	if _, err := cs.AdmissionregistrationV1().MutatingAdmissionPolicyBindings().Get(ctx, backstop.RecordName, metav1.GetOptions{}); err != nil {
		t.Fatalf("the record's binding: %v", err)
	}

	// The policy changes one rule to warn: its policy and binding come,
	// and the deny ones stay with the rest.
	set2 := compiled(t, warnSome)
	if _, err := k.write(ctx, set2, state{registered: true, bindings: versions(t, cs)}); err != nil {
		t.Fatal(err)
	}
	want2 := []string{"clusterip-policy-backstop-servicecidrs-deny", "clusterip-policy-backstop-services-deny", "clusterip-policy-backstop-services-warn"}
	if got := bindingsOf(t, cs); !slices.Equal(got, want2) {
		t.Fatalf("after the change, bindings %v, want %v", got, want2)
	}

	// The configurations deleted alone (a GitOps prune): the bindings
	// that exist are kept; none is created.
	if err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(ctx, want2[2], metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	lifted, err = k.write(ctx, set2, state{registered: false, bindings: versions(t, cs)})
	if err != nil || lifted {
		t.Fatalf("configurations gone, bindings there: lifted %v, %v", lifted, err)
	}
	if got := bindingsOf(t, cs); !slices.Equal(got, want) {
		t.Fatalf("configurations gone: bindings %v, want %v (none created)", got, want)
	}

	// Both gone (the break-glass): lifted, and everything of ours deleted.
	for _, n := range want {
		if err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(ctx, n, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	lifted, err = k.write(ctx, set2, state{registered: false, bindings: map[string]string{}})
	if err != nil || !lifted {
		t.Fatalf("both gone: lifted %v, %v", lifted, err)
	}
	if got := policiesOf(t, cs); len(got) != 0 {
		t.Fatalf("lifted, policies left: %v", got)
	}
	if _, err := cs.AdmissionregistrationV1().MutatingAdmissionPolicies().Get(ctx, backstop.RecordName, metav1.GetOptions{}); err == nil {
		t.Fatal("lifted, the record's policy is left")
	}

	// A policy of someone else's is never touched.
	other := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "someone-elses"}}
	if _, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := k.write(ctx, set, state{registered: true, bindings: map[string]string{}}); err != nil {
		t.Fatal(err)
	}
	if got := policiesOf(t, cs); !slices.Contains(got, "someone-elses") {
		t.Fatalf("someone else's policy deleted: %v", got)
	}
}

// The break-glass deletes the configurations and then the bindings at any
// moment, also between a pass's read and its writes (it happened in CI: a
// slow leader put the bindings back right after the documented command,
// and the policy stayed enforced). A write after such a read never brings
// a binding back.
func TestTheKeeperNeverUndoesABreakGlassBetweenItsReadAndItsWrite(t *testing.T) {
	ctx := context.Background()
	ar := func(cs kubernetes.Interface) interface {
		Delete(context.Context, string, metav1.DeleteOptions) error
	} {
		return cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings()
	}
	set := compiled(t, denyAll)
	breakGlass := func(t *testing.T, cs kubernetes.Interface) {
		t.Helper()
		if err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, "clusterip-policy", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		if err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, "clusterip-policy", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		for _, n := range bindingsOf(t, cs) {
			if err := ar(cs).Delete(ctx, n, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}

	for _, tc := range []struct {
		name string
		// before: what exists when the pass reads
		before func(t *testing.T, cs *fake.Clientset, k *Keeper)
	}{
		{"registered, bindings there", func(t *testing.T, cs *fake.Clientset, k *Keeper) {
			if _, err := k.write(ctx, set, state{registered: true, bindings: map[string]string{}}); err != nil {
				t.Fatal(err)
			}
		}},
		{"registered, no binding yet (a fresh install)", func(t *testing.T, cs *fake.Clientset, k *Keeper) {}},
		{"configurations pruned, bindings kept", func(t *testing.T, cs *fake.Clientset, k *Keeper) {
			if _, err := k.write(ctx, set, state{registered: true, bindings: map[string]string{}}); err != nil {
				t.Fatal(err)
			}
			if err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, "clusterip-policy", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs, k := registeredKeeper(t)
			tc.before(t, cs, k)
			read, err := readWatched(t, ctx, cs, k)
			if err != nil {
				t.Fatal(err)
			}
			breakGlass(t, cs)
			if _, err := k.write(ctx, set, read); err != nil {
				t.Fatalf("write after the break-glass: %v", err)
			}
			if got := bindingsOf(t, cs); len(got) != 0 {
				t.Fatalf("the break-glass deleted the bindings after the read (registered %v, bindings %v); the write brought back %v", read.registered, read.bindings, got)
			}
			// The next pass sees the lift.
			read, err = readWatched(t, ctx, cs, k)
			if err != nil {
				t.Fatal(err)
			}
			if lifted, err := k.write(ctx, set, read); err != nil || !lifted {
				t.Fatalf("the next pass: lifted %v, %v", lifted, err)
			}
		})
	}

	// A binding edited by hand is put back as compiled by the next pass
	// (the update at the version read; that a stale version is refused is
	// the apiserver's optimistic concurrency, which the fake does not
	// model).
	cs, k := registeredKeeper(t)
	if _, err := k.write(ctx, set, state{registered: true, bindings: map[string]string{}}); err != nil {
		t.Fatal(err)
	}
	name := bindingsOf(t, cs)[0]
	b, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b.Spec.ValidationActions = []admissionregistrationv1.ValidationAction{admissionregistrationv1.Audit}
	if _, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Update(ctx, b, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	read, err := readWatched(t, ctx, cs, k)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.write(ctx, set, read); err != nil {
		t.Fatal(err)
	}
	b, err = cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Get(ctx, name, metav1.GetOptions{})
	if err != nil || !slices.Equal(b.Spec.ValidationActions, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}) {
		t.Fatalf("the hand edit is not undone: %v, %v", b.Spec.ValidationActions, err)
	}
}

// While the apiserver cannot say whether it serves MutatingAdmissionPolicy,
// the question is asked again every discoveryRetry, not on every pass (a
// pass runs every pollInterval), the last answer stands, and the failure
// is one log line; once it answers, one "answers again" line, and the next
// question is a discoveryInterval later.
func TestDiscoveryFailingIsRetriedSparinglyAndLoggedOnce(t *testing.T) {
	var logs []string
	asks, failing := 0, true
	d := &discovery{
		ask: func(context.Context) (bool, error) {
			asks++
			if failing {
				return false, errors.New("the server is currently unable to handle the request")
			}
			return true, nil
		},
		errs: poll.ErrorLog{Log: funcr.New(func(_, args string) { logs = append(logs, args) }, funcr.Options{}),
			Failing: "cannot tell", Recovered: "answers again"},
	}
	ctx, now := context.Background(), time.Unix(1e9, 0)
	passes := func(d *discovery, span time.Duration) (served bool) {
		for end := now.Add(span); now.Before(end); now = now.Add(pollInterval) {
			served = d.served(ctx, now)
		}
		return served
	}
	if passes(d, 10*time.Second) {
		t.Fatal("served before any answer")
	}
	if want := int(10*time.Second/discoveryRetry) + 1; asks > want {
		t.Fatalf("asked %d times in 10 s of failures, want at most %d (every %s)", asks, want, discoveryRetry)
	}
	failing, asks = false, 0
	if !passes(d, discoveryRetry) {
		t.Fatal("not served once discovery answered")
	}
	asks = 0
	if passes(d, discoveryInterval-discoveryRetry); asks != 0 {
		t.Fatalf("asked %d times within discoveryInterval of an answer", asks)
	}
	if len(logs) != 2 || !strings.Contains(logs[0], `"msg"="cannot tell"`) || !strings.Contains(logs[1], `"msg"="answers again"`) {
		t.Fatalf("logged %q, want one failure line and one recovery line", logs)
	}
}
