package holds

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
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
	want := []Want{{IP: dnsIP, Owner: dns}, {IP: ingIP, Owner: ing}}
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
	if want := []Want{{IP: dnsIP, Owner: dns}}; !slices.Equal(wants, want) {
		t.Errorf("wants = %v, want %v: default/kubernetes is never held", wants, want)
	}
	if notApplied != 1 {
		t.Errorf("notApplied = %d, want 1 (default/kubernetes)", notApplied)
	}
}

func TestDecide(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	grace := time.Second
	wants := []Want{{IP: dnsIP, Owner: dns}, {IP: ingIP, Owner: ing}}
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
			create: []Want{{IP: dnsIP, Owner: dns}}, states: map[string]int{StateCandidate: 1, StateWaiting: 1}, next: t0.Add(1500 * time.Millisecond)},
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
	wants := []Want{{IP: dnsIP, Owner: dns}}
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

func TestRangeWantsHoldsEveryAllocatableAddressButReservations(t *testing.T) {
	p := fixtures.MustPolicy(t, policy.ParseDocument, `reservations:
- {ip: 10.96.0.10, service: kube-system/kube-dns}
reservedRanges:
- {cidr: 10.96.0.8/29, namespaces: [kube-system]}
- {first: 10.96.255.252, last: 10.96.255.255, namespaces: [team-a]}
- {cidr: 10.96.1.0/30, namespaces: [clusterip-policy]}
- {cidr: 10.96.2.0/30, namespaces: [clusterip-policy], namespaceSelector: {matchLabels: {team: b}}}
`)
	rs := allocview.StaticRanges("test", []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16")}, nil)
	wants, notApplied := RangeWants(p, rs, func(ns string) bool { return ns == "clusterip-policy" })
	var got []string
	for _, w := range wants {
		if !w.IsRange() || w.Owner != (policy.Owner{}) {
			t.Fatalf("%v is not a range want", w)
		}
		got = append(got, w.IP.String()+" "+allocview.RangeHoldName(w.Range))
	}
	want := []string{
		// 10.96.0.10 is kube-dns's reservation: held for it, not the range.
		"10.96.0.8 10.96.0.8-10.96.0.15", "10.96.0.9 10.96.0.8-10.96.0.15", "10.96.0.11 10.96.0.8-10.96.0.15",
		"10.96.0.12 10.96.0.8-10.96.0.15", "10.96.0.13 10.96.0.8-10.96.0.15", "10.96.0.14 10.96.0.8-10.96.0.15", "10.96.0.15 10.96.0.8-10.96.0.15",
		// the ranges naming the webhook's own namespace are not held, with
		// a selector or without: no review releases an address there.
		// the broadcast address is never allocated
		"10.96.255.252 10.96.255.252-10.96.255.255", "10.96.255.253 10.96.255.252-10.96.255.255", "10.96.255.254 10.96.255.252-10.96.255.255",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("wants\n%q\nwant\n%q", got, want)
	}
	if notApplied != 4+4+1 {
		t.Fatalf("notApplied = %d, want 9 (the skipped ranges' 4 and 4, the broadcast address)", notApplied)
	}
}

// A range that names a namespace the Service webhooks are never called for
// (kube-system, excluded by their namespaceSelector) beside one they judge
// is not held: a hold there could be released for team-db but never for
// kube-system, whose Services would be refused "already allocated" on every
// address of it (found on a real apiserver: all 8 addresses held). The
// leader says which range, which namespace and what to do.
func TestARangeNamingASkippedNamespaceIsNotHeldAndSaysWhy(t *testing.T) {
	p := fixtures.MustPolicy(t, policy.ParseDocument, `reservedRanges:
- {cidr: 10.96.0.40/29, namespaces: [team-db, kube-system], note: databases}
- {cidr: 10.96.0.48/29, namespaces: [team-db]}
`)
	rs := allocview.StaticRanges("test", []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16")}, nil)
	skipped := func(ns string) bool { return ns == "kube-system" || ns == "clusterip-policy" }
	wants, notApplied := RangeWants(p, rs, skipped)
	for _, w := range wants {
		if allocview.RangeHoldName(w.Range) != "10.96.0.48-10.96.0.55" {
			t.Errorf("%s of range %s is held; kube-system could never get it", w.IP, allocview.RangeHoldName(w.Range))
		}
	}
	if len(wants) != 8 || notApplied != 8 {
		t.Fatalf("%d wants, %d not applied; want the team-db range's 8 held and the mixed range's 8 not", len(wants), notApplied)
	}
	lines := UnheldRanges(p, skipped)
	if len(lines) != 1 {
		t.Fatalf("unheld ranges %q, want one line", lines)
	}
	for _, part := range []string{"reservedRanges[0] 10.96.0.40/29 (databases) is not held", `namespace "kube-system"`, "already allocated", "namespaceSelector"} {
		if !strings.Contains(lines[0], part) {
			t.Errorf("%q does not say %q", lines[0], part)
		}
	}
	if UnheldRanges(p, nil) != nil {
		t.Error("with no namespace skipped, every range is held")
	}
}

// The apiserver recreates default/kubernetes on the first address of its
// range through no review that could release a hold: a range covering it
// must never hold it, whether the policy reserves it or not.
func TestRangeWantsNeverHoldTheAddressOfDefaultKubernetes(t *testing.T) {
	for _, reserve := range []string{"true", "false"} {
		p := fixtures.MustPolicy(t, policy.ParseDocument, "reserveKubernetesService: "+reserve+"\nreservedRanges:\n- {cidr: 10.96.0.0/30, namespaces: [team-a]}\n")
		rs := allocview.StaticRanges("test", []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16")}, nil)
		wants, notApplied := RangeWants(p, rs, nil)
		if len(wants) != 2 || wants[0].IP != netip.MustParseAddr("10.96.0.2") || wants[1].IP != netip.MustParseAddr("10.96.0.3") || notApplied != 2 {
			t.Fatalf("reserveKubernetesService %s: wants %v, notApplied %d; want .2 and .3 (not the network address nor .1)", reserve, wants, notApplied)
		}
	}
}

func TestDecideRangeHolds(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	band := allocview.Band{First: netip.MustParseAddr("10.96.0.16"), Last: netip.MustParseAddr("10.96.0.19")}
	old := allocview.Band{First: netip.MustParseAddr("10.96.0.16"), Last: netip.MustParseAddr("10.96.0.31")}
	at := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 96, 0, byte(16 + i)}) }
	var wants []Want
	for i := range 4 {
		wants = append(wants, Want{IP: at(i), Range: band})
	}
	holdsNow := []Hold{
		{at(0), allocview.RangeHolder(band)},
		{at(1), allocview.RangeHolder(old)},                             // the range shrank: kept, naming it as it was
		{at(2), allocview.ServiceHolder("payments", "api")},             // a reservation's hold left over: replaced
		{netip.MustParseAddr("10.96.0.20"), allocview.RangeHolder(old)}, // outside the range now
	}
	used := func(a netip.Addr) (allocview.Holder, bool) {
		if a == at(3) {
			return allocview.ServiceHolder("payments", "api"), true
		}
		return allocview.Holder{}, false
	}
	free := FreeSince{at(2): t0}
	p := Decide(wants, 0, holdsNow, used, free, t0.Add(time.Second), time.Second)
	if !slices.Equal(p.Delete, holdsNow[2:]) {
		t.Fatalf("delete = %v, want %v", p.Delete, holdsNow[2:])
	}
	if want := wants[2:3]; !slices.Equal(p.Create, want) {
		t.Fatalf("create = %v, want %v", p.Create, want)
	}
	if p.RangeStates[StateHeld] != 2 || p.RangeStates[StateUsed] != 1 || p.RangeStates[StateCandidate] != 1 {
		t.Fatalf("range states %v", p.RangeStates)
	}
	for _, s := range States {
		if p.States[s] != 0 {
			t.Fatalf("reservation states %v: a range address is no reservation", p.States)
		}
	}
	if h := wants[0].Holder(); !h.IsRangeHold(band) {
		t.Fatalf("holder %v", h)
	}
}

func TestRangeReleasableOnlyOurHoldOfThatRange(t *testing.T) {
	ours := map[string]string{ManagedByLabel: ManagedBy}
	band := allocview.Band{First: netip.MustParseAddr("10.96.0.16"), Last: netip.MustParseAddr("10.96.0.31")}
	other := allocview.Band{First: netip.MustParseAddr("10.96.0.16"), Last: netip.MustParseAddr("10.96.0.23")}
	namespaced := allocview.RangeHolder(band)
	namespaced.Namespace = "payments"
	for _, tc := range []struct {
		name   string
		labels map[string]string
		holder allocview.Holder
		ok     bool
	}{
		{"our hold for the range", ours, allocview.RangeHolder(band), true},
		{"the same parentRef without our label", map[string]string{ManagedByLabel: "ipallocator.k8s.io"}, allocview.RangeHolder(band), false},
		{"our hold naming the range before a resize", ours, allocview.RangeHolder(other), true},
		{"our hold for a reservation's owner", ours, allocview.ServiceHolder("payments", "api"), false},
		{"a parentRef with a namespace", ours, namespaced, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := RangeReleasable(tc.labels, tc.holder, band); (err == nil) != tc.ok {
				t.Fatalf("RangeReleasable = %v, want ok %v", err, tc.ok)
			}
		})
	}
}

// BenchmarkRangePass is the leader's pure work each pass (up to four a
// second) at the policy's bound: 4,096 range addresses, all held.
func BenchmarkRangePass(b *testing.B) {
	var spec strings.Builder
	spec.WriteString("reservedRanges:\n")
	for i := range 4 {
		fmt.Fprintf(&spec, "- {cidr: 10.96.%d.0/22, namespaces: [team-%d]}\n", 64+4*i, i)
	}
	p := fixtures.MustPolicy(b, policy.ParseDocument, spec.String())
	rs := allocview.StaticRanges("test", []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16")}, nil)
	wants, _ := RangeWants(p, rs, nil)
	if len(wants) != 4096 {
		b.Fatalf("%d wants", len(wants))
	}
	held := make([]Hold, len(wants))
	for i, w := range wants {
		held[i] = Hold{IP: w.IP, Owner: w.Holder()}
	}
	none := func(netip.Addr) (allocview.Holder, bool) { return allocview.Holder{}, false }
	free := FreeSince{}
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		w, _ := RangeWants(p, rs, nil)
		if plan := Decide(w, 0, held, none, free, now, time.Second); plan.RangeStates[StateHeld] != 4096 {
			b.Fatalf("%v", plan.RangeStates)
		}
	}
}
