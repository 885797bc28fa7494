package holds

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"clusterip-policy/pkg/allocview"
	"clusterip-policy/pkg/policy"
	"clusterip-policy/test/fixtures"
)

var (
	dns   = policy.Owner{Namespace: "kube-system", Name: "kube-dns"}
	ing   = policy.Owner{Namespace: "default", Name: "ingress-vip"}
	dnsIP = netip.MustParseAddr("10.96.0.10")
	ingIP = netip.MustParseAddr("10.96.0.20")
)

func TestWantsLeavesOutWhatNothingWouldRelease(t *testing.T) {
	p := fixtures.MustPolicy(t, policy.ParseDocument, `reservations:
- {ip: 10.96.0.10, service: kube-system/kube-dns}
- {ip: 10.96.0.20, service: default/ingress-vip}
- {ip: 10.96.0.30, service: clusterip-policy/own}
- {ip: 10.96.0.40, service: legacy/db}
- {ip: 10.200.0.1, service: default/outside}
exemptions:
  namespaces: [legacy]
`)
	rs := allocview.StaticRanges("test", []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16")}, nil)
	wants, notApplied := Wants(p, rs, func(ns string) bool { return ns == "clusterip-policy" })
	want := []Want{{dnsIP, dns}, {ingIP, ing}}
	if !slices.Equal(wants, want) {
		t.Errorf("wants = %v, want %v", wants, want)
	}
	// the webhook's namespace, an exempt namespace, an address outside
	// every range; the implicit default/kubernetes is not in Reservations.
	if notApplied != 3 {
		t.Errorf("notApplied = %d, want 3", notApplied)
	}
}

// The apiserver recreates default/kubernetes itself, through its loopback
// identity, which both webhooks exempt: no review of that create ever
// releases a hold, so a hold on its address, implicit or written out, would
// keep the apiserver from recreating it ("provided IP is already allocated"
// every 10 s) and cut in-cluster clients off from the apiserver.
func TestWantsNeverHoldsTheAddressOfDefaultKubernetes(t *testing.T) {
	p := fixtures.MustPolicy(t, policy.ParseDocument, `reservations:
- {ip: 10.96.0.1, service: default/kubernetes, note: written out}
- {ip: 10.96.0.10, service: kube-system/kube-dns}
`)
	rs := allocview.StaticRanges("test", []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16")}, nil)
	wants, notApplied := Wants(p, rs, nil)
	if want := []Want{{dnsIP, dns}}; !slices.Equal(wants, want) {
		t.Errorf("wants = %v, want %v: default/kubernetes is never held", wants, want)
	}
	if notApplied != 1 {
		t.Errorf("notApplied = %d, want 1 (default/kubernetes)", notApplied)
	}
}

func TestDecide(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	grace := time.Second
	wants := []Want{{dnsIP, dns}, {ingIP, ing}}
	none := func(netip.Addr) (allocview.Holder, bool) { return allocview.Holder{}, false }
	cases := []struct {
		name      string
		holds     []Hold
		allocated map[netip.Addr]allocview.Holder
		free      FreeSince
		now       time.Time
		create    []Want
		delete    []Hold
		states    map[string]int
		next      time.Time
	}{
		{name: "a free address is first only noted: an owner's create may have released it a moment ago",
			now: t0, free: FreeSince{},
			states: map[string]int{StateWaiting: 2}, next: t0.Add(grace)},
		{name: "free past the grace: a candidate, created once the owner is found absent",
			now: t0.Add(grace), free: FreeSince{dnsIP: t0, ingIP: t0.Add(500 * time.Millisecond)},
			create: []Want{{dnsIP, dns}}, states: map[string]int{StateCandidate: 1, StateWaiting: 1}, next: t0.Add(1500 * time.Millisecond)},
		{name: "held by us: nothing to do",
			now: t0, free: FreeSince{},
			holds:  []Hold{{dnsIP, allocview.ServiceHolder("kube-system", "kube-dns")}, {ingIP, allocview.ServiceHolder("default", "ingress-vip")}},
			states: map[string]int{StateHeld: 2}},
		{name: "the owner's own allocation, or someone else's IPAddress: never held, never touched",
			now: t0.Add(time.Hour), free: FreeSince{dnsIP: t0, ingIP: t0},
			allocated: map[netip.Addr]allocview.Holder{dnsIP: allocview.ServiceHolder("kube-system", "kube-dns"), ingIP: allocview.ServiceHolder("default", "early-bird")},
			states:    map[string]int{StateOwner: 1, StateOther: 1}},
		{name: "a hold whose reservation left the policy is deleted; one naming another owner too",
			now: t0, free: FreeSince{},
			holds: []Hold{{netip.MustParseAddr("10.96.0.99"), allocview.ServiceHolder("default", "gone")},
				{dnsIP, allocview.ServiceHolder("default", "previous-owner")}},
			allocated: map[netip.Addr]allocview.Holder{dnsIP: allocview.ServiceHolder("default", "previous-owner")},
			delete: []Hold{{netip.MustParseAddr("10.96.0.99"), allocview.ServiceHolder("default", "gone")},
				{dnsIP, allocview.ServiceHolder("default", "previous-owner")}},
			states: map[string]int{StateOther: 1, StateWaiting: 1}, next: t0.Add(grace)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			alloc := none
			if tc.allocated != nil {
				alloc = func(a netip.Addr) (allocview.Holder, bool) { h, ok := tc.allocated[a]; return h, ok }
			}
			p := Decide(wants, 0, tc.holds, alloc, tc.free, tc.now, grace)
			if !slices.Equal(p.Create, tc.create) {
				t.Errorf("create = %v, want %v", p.Create, tc.create)
			}
			if !slices.Equal(p.Delete, tc.delete) {
				t.Errorf("delete = %v, want %v", p.Delete, tc.delete)
			}
			for _, s := range States {
				if p.States[s] != tc.states[s] {
					t.Errorf("state %s = %d, want %d", s, p.States[s], tc.states[s])
				}
			}
			if !p.Next.Equal(tc.next) {
				t.Errorf("next = %v, want %v", p.Next, tc.next)
			}
		})
	}
}

func TestDecideForgetsAnAddressOnceItIsTaken(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	free := FreeSince{}
	wants := []Want{{dnsIP, dns}}
	none := func(netip.Addr) (allocview.Holder, bool) { return allocview.Holder{}, false }
	Decide(wants, 0, nil, none, free, t0, time.Second)
	// The owner took it (its create succeeded)...
	owner := func(netip.Addr) (allocview.Holder, bool) {
		return allocview.ServiceHolder("kube-system", "kube-dns"), true
	}
	Decide(wants, 0, nil, owner, free, t0.Add(500*time.Millisecond), time.Second)
	// ...and deleted it again: the grace starts over, it is not a candidate
	// at once.
	p := Decide(wants, 0, nil, none, free, t0.Add(2*time.Second), time.Second)
	if len(p.Create) != 0 || p.States[StateWaiting] != 1 {
		t.Fatalf("create = %v, states = %v; want the address waiting out a new grace", p.Create, p.States)
	}
	// An address that left the policy is forgotten.
	Decide(nil, 0, nil, none, free, t0.Add(3*time.Second), time.Second)
	if len(free) != 0 {
		t.Fatalf("free = %v, want empty", free)
	}
}

func TestReleasableOnlyOurHoldOfThatOwner(t *testing.T) {
	ours := map[string]string{ManagedByLabel: ManagedBy}
	cases := []struct {
		name   string
		labels map[string]string
		holder allocview.Holder
		ok     bool
	}{
		{"our hold for the owner", ours, allocview.ServiceHolder("kube-system", "kube-dns"), true},
		{"the apiserver's allocation for the owner", map[string]string{ManagedByLabel: "ipallocator.k8s.io"}, allocview.ServiceHolder("kube-system", "kube-dns"), false},
		{"an unlabelled IPAddress", nil, allocview.ServiceHolder("kube-system", "kube-dns"), false},
		{"our hold for another owner", ours, allocview.ServiceHolder("default", "web"), false},
		{"our label on a Gateway's address", ours, allocview.Holder{Group: "gateway.networking.k8s.io", Resource: "gateways", Namespace: "kube-system", Name: "kube-dns"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := Releasable(tc.labels, tc.holder, dns)
			if (err == nil) != tc.ok {
				t.Fatalf("Releasable = %v, want ok %v", err, tc.ok)
			}
		})
	}
}
