package holds

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"clusterip-policy/internal/judged"
	"clusterip-policy/internal/logging"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"clusterip-policy/internal/readiness/readinesstest"
	"clusterip-policy/pkg/holds"
	"clusterip-policy/pkg/policy"
	"clusterip-policy/test/fixtures"
)

func TestLeaderPassHoldsOnlyForAbsentOwnersAndNeverTouchesOthers(t *testing.T) {
	const pol = readinesstest.Spec + `- ip: 10.96.0.20
  service: default/ingress-vip
- ip: 10.96.0.30
  service: default/worker
`
	r := readinesstest.New(t, pol, true, logr.Discard())
	client := fake.NewClientset(
		// The owner of 10.96.0.20 exists (holding another address).
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "ingress-vip"}},
		// Someone else's IPAddress with our label's key but not its value.
		fixtures.IPAddress("10.96.0.40", "someone-else", "default", "x"),
		// Our hold for a reservation that left the policy.
		fixtures.IPAddress("10.96.0.50", holds.ManagedBy, "default", "gone"),
	)
	hm := NewMetrics(prometheus.NewRegistry())
	k := NewKeeper(client, nil, r.Gate, judged.Names(), time.Second, DefaultWriteRate, logging.New(&strings.Builder{}), hm)
	k.holds = func() ([]*networkingv1.IPAddress, error) {
		// What the leader's informer holds: the list by label.
		l, err := client.NetworkingV1().IPAddresses().List(context.Background(), metav1.ListOptions{LabelSelector: holds.Selector})
		if err != nil {
			return nil, err
		}
		var out []*networkingv1.IPAddress
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
		return out, nil
	}
	long := time.Now().Add(-time.Minute)
	free := holds.FreeSince{netip.MustParseAddr("10.96.0.10"): long, netip.MustParseAddr("10.96.0.20"): long}
	if _, err := k.pass(context.Background(), free); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	l, err := client.NetworkingV1().IPAddresses().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range l.Items {
		got[a.Name] = a.Labels[holds.ManagedByLabel] + " " + a.Spec.ParentRef.Namespace + "/" + a.Spec.ParentRef.Name
	}
	want := map[string]string{
		"10.96.0.10": holds.ManagedBy + " kube-system/kube-dns", // free past the grace, owner absent
		"10.96.0.40": "someone-else default/x",                  // not ours
		// 10.96.0.20: its owner exists; 10.96.0.30: first seen free now,
		// within the grace; 10.96.0.50: its reservation is gone.
	}
	if len(got) != len(want) {
		t.Fatalf("IPAddresses = %v, want %v", got, want)
	}
	for ip, w := range want {
		if got[ip] != w {
			t.Errorf("%s = %q, want %q", ip, got[ip], w)
		}
	}
	if v := testutil.ToFloat64(hm.states.WithLabelValues(holds.StateWaiting)); v != 1 {
		t.Errorf("holds{waiting} = %v, want 1 (10.96.0.30)", v)
	}
	if c, d := testutil.ToFloat64(hm.changes.WithLabelValues("created")), testutil.ToFloat64(hm.changes.WithLabelValues("deleted")); c != 1 || d != 1 {
		t.Errorf("changes: %v created, %v deleted; want 1, 1", c, d)
	}
}

func TestALastingFailureIsOneErrorAPassCountedPerReservation(t *testing.T) {
	const pol = readinesstest.Spec + `- ip: 10.96.0.20
  service: default/ingress-vip
- ip: 10.96.0.30
  service: default/worker
`
	r := readinesstest.New(t, pol, true, logr.Discard())
	client := fake.NewClientset()
	client.PrependReactor("get", "services", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(corev1.Resource("services"), "kube-dns", errors.New("RBAC says no"))
	})
	hm := NewMetrics(prometheus.NewRegistry())
	k := NewKeeper(client, nil, r.Gate, judged.Names(), time.Second, DefaultWriteRate, logging.New(&strings.Builder{}), hm)
	k.holds = func() ([]*networkingv1.IPAddress, error) { return nil, nil }
	long := time.Now().Add(-time.Minute)
	free := holds.FreeSince{}
	for _, ip := range []string{"10.96.0.10", "10.96.0.20", "10.96.0.30"} {
		free[netip.MustParseAddr(ip)] = long
	}
	_, err := k.pass(context.Background(), free)
	if err == nil || !strings.Contains(err.Error(), "get the owner kube-system/kube-dns of the reservation 10.96.0.10") || !strings.Contains(err.Error(), "and 2 more failures this pass") {
		t.Fatalf("pass error = %v, want the first failure and the count of the others", err)
	}
	if v := testutil.ToFloat64(hm.changes.WithLabelValues("failed")); v != 3 {
		t.Errorf("changes{failed} = %v, want 3", v)
	}
	if l, _ := client.NetworkingV1().IPAddresses().List(context.Background(), metav1.ListOptions{}); len(l.Items) != 0 {
		t.Errorf("holds created without knowing whether the owner exists: %v", l.Items)
	}
}

func TestAHoldIsNamedByTheCanonicalAddressAndLabelledWithItsFamily(t *testing.T) {
	for _, tc := range []struct{ ip, name, family string }{
		{"10.96.0.10", "10.96.0.10", "IPv4"},
		{"fd00:10:96:0:0::a", "fd00:10:96::a", "IPv6"},
	} {
		a := holdObject(holds.Want{IP: netip.MustParseAddr(tc.ip), Owner: policy.Owner{Namespace: "kube-system", Name: "kube-dns"}})
		if a.Name != tc.name || a.Labels[networkingv1.LabelIPAddressFamily] != tc.family || a.Labels[holds.ManagedByLabel] != holds.ManagedBy {
			t.Errorf("%s: name %s labels %v; want name %s, family %s, managed-by %s", tc.ip, a.Name, a.Labels, tc.name, tc.family, holds.ManagedBy)
		}
		if r := a.Spec.ParentRef; r == nil || r.Group != "" || r.Resource != "services" || r.Namespace != "kube-system" || r.Name != "kube-dns" {
			t.Errorf("%s: parentRef %+v, want services kube-system/kube-dns", tc.ip, a.Spec.ParentRef)
		}
	}
}

// unknownScope is a judged.Source that does not know yet (the leader has
// not read the webhook configurations).
type unknownScope struct{}

func (unknownScope) Current() (judged.Namespaces, error) {
	return judged.Namespaces{}, judged.ErrNotKnown
}

// A reservation whose owner lives where the webhook is not called has no
// review to release its hold: it is not held, and a hold left from when
// the namespace was judged is deleted. While the scope is not known,
// nothing is created or deleted.
func TestNoHoldWhereTheWebhookIsNotCalled(t *testing.T) {
	const pol = readinesstest.Spec + `- ip: 10.96.0.20
  service: excluded/ingress-vip
`
	r := readinesstest.New(t, pol, true, logr.Discard())
	client := fake.NewClientset(fixtures.IPAddress("10.96.0.20", holds.ManagedBy, "excluded", "ingress-vip"))
	hm := NewMetrics(prometheus.NewRegistry())
	list := func() ([]*networkingv1.IPAddress, error) {
		l, err := client.NetworkingV1().IPAddresses().List(context.Background(), metav1.ListOptions{LabelSelector: holds.Selector})
		if err != nil {
			return nil, err
		}
		var out []*networkingv1.IPAddress
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
		return out, nil
	}
	held := func() map[string]string {
		l, _ := list()
		got := map[string]string{}
		for _, a := range l {
			got[a.Name] = a.Spec.ParentRef.Namespace + "/" + a.Spec.ParentRef.Name
		}
		return got
	}
	long := time.Now().Add(-time.Minute)
	free := func() holds.FreeSince {
		return holds.FreeSince{netip.MustParseAddr("10.96.0.10"): long, netip.MustParseAddr("10.96.0.20"): long}
	}

	k := NewKeeper(client, nil, r.Gate, unknownScope{}, time.Second, DefaultWriteRate, logging.New(&strings.Builder{}), hm)
	k.holds = list
	if _, err := k.pass(context.Background(), free()); err != nil {
		t.Fatal(err)
	}
	if got := held(); len(got) != 1 || got["10.96.0.20"] != "excluded/ingress-vip" {
		t.Fatalf("scope not known: holds %v, want the one there was, untouched", got)
	}

	k = NewKeeper(client, nil, r.Gate, judged.Names("clusterip-policy", "excluded"), time.Second, DefaultWriteRate, logging.New(&strings.Builder{}), hm)
	k.holds = list
	if _, err := k.pass(context.Background(), free()); err != nil {
		t.Fatal(err)
	}
	if got := held(); len(got) != 1 || got["10.96.0.10"] != "kube-system/kube-dns" {
		t.Errorf("namespace excluded skipped: holds %v, want only 10.96.0.10 for kube-system/kube-dns", got)
	}
	if v := testutil.ToFloat64(hm.states.WithLabelValues(holds.StateNotApplied)); v != 1 {
		t.Errorf("holds{not-applied} = %v, want 1 (excluded/ingress-vip)", v)
	}
}

// A reserved range's free addresses are held with a parentRef naming the
// range, without looking up any Service, at no more than the write rate:
// 15 creates at 40 a second take at least 14/40 s (the bucket holds one).
func TestLeaderHoldsARangesFreeAddressesAtTheWriteRate(t *testing.T) {
	const pol = readinesstest.Spec + `reservedRanges:
- cidr: 10.96.0.32/28
  namespaces: [team-a]
`
	r := readinesstest.New(t, pol, true, logr.Discard())
	client := fake.NewClientset()
	var gets int
	client.PrependReactor("get", "services", func(k8stesting.Action) (bool, runtime.Object, error) {
		gets++
		return false, nil, nil
	})
	hm := NewMetrics(prometheus.NewRegistry())
	k := NewKeeper(client, nil, r.Gate, judged.Names(), time.Second, 40, logging.New(&strings.Builder{}), hm)
	k.holds = func() ([]*networkingv1.IPAddress, error) { return nil, nil }
	long := time.Now().Add(-time.Minute)
	free := holds.FreeSince{}
	for i := range 16 {
		free[netip.AddrFrom4([4]byte{10, 96, 0, byte(32 + i)})] = long
	}
	start := time.Now()
	if _, err := k.pass(context.Background(), free); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 14*time.Second/40 {
		t.Errorf("15 creates took %s: faster than --hold-write-rate 40", took)
	}
	l, err := client.NetworkingV1().IPAddresses().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// 10.96.0.40 is team-a/db's allocation: used, not held.
	if len(l.Items) != 15 {
		t.Fatalf("%d holds, want 15", len(l.Items))
	}
	for _, a := range l.Items {
		ref := a.Spec.ParentRef
		if a.Labels[holds.ManagedByLabel] != holds.ManagedBy || ref.Group != "clusterip-policy.io" || ref.Resource != "reservedranges" || ref.Namespace != "" || ref.Name != "10.96.0.32-10.96.0.47" {
			t.Fatalf("hold %s: labels %v parentRef %+v", a.Name, a.Labels, ref)
		}
	}
	if gets != 0 {
		t.Errorf("%d Service GETs; want none: a range address has no owner to look up (kube-dns's reservation is within its grace)", gets)
	}
	if v := testutil.ToFloat64(hm.rangeStates.WithLabelValues(holds.StateCandidate)); v != 15 {
		t.Errorf("range_holds{candidate} = %v, want 15", v)
	}
	if v := testutil.ToFloat64(hm.rangeStates.WithLabelValues(holds.StateUsed)); v != 1 {
		t.Errorf("range_holds{used} = %v, want 1", v)
	}
}

func TestWriteRateFlag(t *testing.T) {
	for _, tc := range []struct {
		rate float64
		ok   bool
	}{{DefaultWriteRate, true}, {1, true}, {1000, true}, {0.5, false}, {0, false}, {-3, false}, {1001, false}} {
		o := Options{Enabled: true, Grace: time.Second, WriteRate: tc.rate}
		if err := o.Validate(); (err == nil) != tc.ok {
			t.Errorf("--hold-write-rate %g: %v", tc.rate, err)
		}
	}
}

// A range that changed leaves up to thousands of holds naming the old
// band: one pass deletes at most maxHoldDeletesPerPass of them, so it
// stays about two seconds long at the default write rate.
func TestAPassDeletesABoundedNumberOfStaleHolds(t *testing.T) {
	r := readinesstest.New(t, readinesstest.Spec, true, logr.Discard())
	var objs []runtime.Object
	for i := range 150 {
		a := fixtures.IPAddress(netip.AddrFrom4([4]byte{10, 96, 2, byte(i)}).String(), holds.ManagedBy, "", "")
		a.Spec.ParentRef = &networkingv1.ParentReference{Group: "clusterip-policy.io", Resource: "reservedranges", Name: "10.96.2.0-10.96.2.255"}
		objs = append(objs, a)
	}
	client := fake.NewClientset(objs...)
	k := NewKeeper(client, nil, r.Gate, judged.Names(), time.Second, 1000, logging.New(&strings.Builder{}), NewMetrics(prometheus.NewRegistry()))
	k.holds = func() ([]*networkingv1.IPAddress, error) {
		l, err := client.NetworkingV1().IPAddresses().List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		var out []*networkingv1.IPAddress
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
		return out, nil
	}
	for pass, left := range []int{50, 0} {
		if _, err := k.pass(context.Background(), holds.FreeSince{}); err != nil {
			t.Fatal(err)
		}
		l, _ := client.NetworkingV1().IPAddresses().List(context.Background(), metav1.ListOptions{})
		if len(l.Items) != left {
			t.Fatalf("after pass %d: %d stale holds left, want %d", pass+1, len(l.Items), left)
		}
	}
}
