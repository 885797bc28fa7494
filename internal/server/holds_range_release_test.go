package server

import (
	"context"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"clusterip-policy/internal/admission/admissiontest"
	holdctl "clusterip-policy/internal/controllers/holds"
	"clusterip-policy/internal/readiness/readinesstest"
	"clusterip-policy/pkg/allocview"
	"clusterip-policy/pkg/holds"
	"clusterip-policy/test/fixtures"
)

// rangePolicy reserves 10.96.0.64/26 for namespace team-a, beside
// readinesstest's kube-dns reservation; legacy is exempt.
const rangePolicy = readinesstest.Spec + `reservedRanges:
- cidr: 10.96.0.64/26
  namespaces: [team-a]
  note: team a
exemptions:
  namespaces: [legacy]
`

var teamBand = allocview.Band{First: netip.MustParseAddr("10.96.0.64"), Last: netip.MustParseAddr("10.96.0.127")}

// rangeHold is an IPAddress at ip labelled managed by managedBy whose
// parentRef names the range band, as the leader makes them.
func rangeHold(ip, managedBy string, band allocview.Band) *networkingv1.IPAddress {
	h := allocview.RangeHolder(band)
	return &networkingv1.IPAddress{
		ObjectMeta: metav1.ObjectMeta{Name: ip, UID: types.UID("uid-" + ip), Labels: map[string]string{holds.ManagedByLabel: managedBy}},
		Spec:       networkingv1.IPAddressSpec{ParentRef: &networkingv1.ParentReference{Group: h.Group, Resource: h.Resource, Name: h.Name}},
	}
}

func staticCreate(t *testing.T, ns, name, ip string) []byte {
	return admissiontest.LoadReview(t, "mutate-003-create-wh-static.json", admissiontest.Named(ns, name), admissiontest.WithClusterIP(ip))
}

// The mutating stage releases a range's hold only for a Service the range
// admits, naming that address, and only a hold of ours naming a range (the
// one covering the address, or that range before a resize);
// whatever else a review says, nothing is deleted and no API call made.
func TestMutatingStageReleasesARangeHoldOnlyForAServiceTheRangeAdmits(t *testing.T) {
	other := allocview.Band{First: netip.MustParseAddr("10.96.0.64"), Last: netip.MustParseAddr("10.96.0.95")}
	for _, tc := range []struct {
		name    string
		review  []byte
		policy  string // rangePolicy when empty
		hold    *networkingv1.IPAddress
		extra   []runtime.Object
		allowed bool
		message string
		remains bool
		calls   int
	}{
		{name: "a Service of team-a naming a held address of its range: released",
			review: staticCreate(t, "team-a", "web", "10.96.0.70"), hold: rangeHold("10.96.0.70", holds.ManagedBy, teamBand),
			allowed: true, calls: 2},
		{name: "the same address spelled as an IPv4-mapped IPv6 address where the apiserver accepts it: denied by invalid-ip, nothing released",
			review: staticCreate(t, "team-a", "web", "::ffff:10.96.0.70"), hold: rangeHold("10.96.0.70", holds.ManagedBy, teamBand),
			message: "is an IPv4-mapped IPv6 address", remains: true},
		{name: "another namespace: denied by reserved-range-for-other, nothing released",
			review: staticCreate(t, "web", "frontend", "10.96.0.70"), hold: rangeHold("10.96.0.70", holds.ManagedBy, teamBand),
			message: "reserved range 10.96.0.64/26 (team a), which only namespace team-a may use", remains: true},
		{name: "another namespace with the range rule at warn: allowed with a warning, nothing released (the apiserver then refuses the held address)",
			review: staticCreate(t, "web", "frontend", "10.96.0.70"), hold: rangeHold("10.96.0.70", holds.ManagedBy, teamBand),
			policy: rangePolicy + "enforcement:\n  rules: {reserved-range-for-other: warn}\n", allowed: true, remains: true},
		{name: "an exempt namespace is allowed by the policy but releases nothing (the apiserver then refuses the held address)",
			review: staticCreate(t, "legacy", "db", "10.96.0.70"), hold: rangeHold("10.96.0.70", holds.ManagedBy, teamBand),
			allowed: true, remains: true},
		{name: "an IPAddress naming the range without our label is someone's allocation: already-allocated",
			review: staticCreate(t, "team-a", "web", "10.96.0.70"), hold: rangeHold("10.96.0.70", "someone-else", teamBand),
			message: "is held by IPAddress 10.96.0.70", remains: true},
		{name: "our hold naming the range as it was before a resize (kept by the leader) is released like any other",
			review: staticCreate(t, "team-a", "web", "10.96.0.70"), hold: rangeHold("10.96.0.70", holds.ManagedBy, other),
			allowed: true, calls: 2},
		{name: "a create of a Service that exists (a duplicate, or not from an apiserver) releases nothing",
			review: staticCreate(t, "team-a", "db", "10.96.0.70"), hold: rangeHold("10.96.0.70", holds.ManagedBy, teamBand),
			// readinesstest's team-a/db exists in the cluster too
			extra:   []runtime.Object{fixtures.IPAddress("10.96.0.40", "ipallocator.k8s.io", "team-a", "db")},
			allowed: true, remains: true, calls: 1},
		{name: "the owner of a single reservation is not given the range's holds",
			review: staticCreate(t, "kube-system", "kube-dns", "10.96.0.70"), hold: rangeHold("10.96.0.70", holds.ManagedBy, teamBand),
			message: "reserved range", remains: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objects := append([]runtime.Object{tc.hold}, tc.extra...)
			if tc.calls == 1 {
				objects = append(objects, fixtures.Service("team-a", "db"))
			}
			client := fake.NewClientset(objects...)
			hreg := prometheus.NewRegistry()
			rel, _ := newReleaser(t, client, holdctl.NewMetrics(hreg), time.Now)
			pol := tc.policy
			if pol == "" {
				pol = rangePolicy
			}
			w := newWiredPolicy(t, rel, pol)
			w.mirror(tc.hold)
			client.ClearActions()
			resp := admissiontest.Post(t, w.mutate, tc.review)
			calls := apiCalls(client)
			if resp.Allowed != tc.allowed || (!tc.allowed && !strings.Contains(resp.Result.Message, tc.message)) {
				t.Fatalf("allowed %v %q; want allowed %v containing %q", resp.Allowed, resp.Result.Message, tc.allowed, tc.message)
			}
			_, err := client.NetworkingV1().IPAddresses().Get(context.Background(), "10.96.0.70", metav1.GetOptions{})
			if remains := err == nil; remains != tc.remains {
				t.Errorf("10.96.0.70 remains = %v (%v), want %v", remains, err, tc.remains)
			}
			if len(calls) != tc.calls {
				t.Errorf("%d API calls, want %d: %v", len(calls), tc.calls, calls)
			}
		})
	}
}

// Forged creates naming one address of a range after another, each with
// a fresh name: every address has its own budget, so only the range's
// budget stops them freeing the whole range. After RangeReleaseBurst
// releases the rest are refused with 503 and no API call, until the
// range's budget refills.
func TestForgedCreatesFreeOnlyTheRangesBudgetOfItsAddresses(t *testing.T) {
	var objects []runtime.Object
	for i := range 40 {
		objects = append(objects, rangeHold(netip.AddrFrom4([4]byte{10, 96, 0, byte(64 + i)}).String(), holds.ManagedBy, teamBand))
	}
	client := fake.NewClientset(objects...)
	hreg := prometheus.NewRegistry()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	rel, _ := newReleaser(t, client, holdctl.NewMetrics(hreg), func() time.Time { return now })
	w := newWiredPolicy(t, rel, rangePolicy)
	w.mirror(objects...)
	freed := 0
	for i := range 40 {
		client.ClearActions()
		ip := netip.AddrFrom4([4]byte{10, 96, 0, byte(64 + i)}).String()
		resp := admissiontest.Post(t, w.mutate, staticCreate(t, "team-a", "forged-"+ip, ip))
		switch {
		case resp.Allowed:
			freed++
		case len(apiCalls(client)) != 0:
			t.Fatalf("create %d, refused, made API calls: %v", i, apiCalls(client))
		case resp.Result.Code != http.StatusServiceUnavailable || !strings.Contains(resp.Result.Message, "reserved range 10.96.0.64/26 (team a)") || !strings.Contains(resp.Result.Message, "too often"):
			t.Fatalf("create %d: %d %q", i, resp.Result.Code, resp.Result.Message)
		}
	}
	if freed != holdctl.RangeReleaseBurst {
		t.Fatalf("40 forged creates freed %d addresses of the range, want %d", freed, holdctl.RangeReleaseBurst)
	}
	l, err := client.NetworkingV1().IPAddresses().List(context.Background(), metav1.ListOptions{})
	if err != nil || len(l.Items) != 40-holdctl.RangeReleaseBurst {
		t.Fatalf("%d holds left (%v), want %d", len(l.Items), err, 40-holdctl.RangeReleaseBurst)
	}
	// One refill later, one more.
	now = now.Add(holdctl.RangeReleaseRefill)
	if resp := admissiontest.Post(t, w.mutate, staticCreate(t, "team-a", "later", "10.96.0.103")); !resp.Allowed {
		t.Fatalf("one refill later: %+v", resp.Result)
	}
	if _, err := client.NetworkingV1().IPAddresses().Get(context.Background(), "10.96.0.103", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("10.96.0.103 was not released one refill later: %v", err)
	}
}
