package allocview

import (
	"fmt"
	"net/netip"
	"testing"
)

func TestReplaceAllocationsForgetsWhatTheRelistLacks(t *testing.T) {
	v := NewView()
	a, b, c := netip.MustParseAddr("10.96.0.10"), netip.MustParseAddr("10.96.0.11"), netip.MustParseAddr("fd00::b")
	before := v.Update(func(tx *Tx) {
		tx.SetAllocation(a, ServiceHolder("kube-system", "kube-dns"))
		tx.SetAllocation(b, ServiceHolder("default", "deleted-while-disconnected"))
	})
	after := v.Update(func(tx *Tx) {
		tx.ReplaceAllocations(map[netip.Addr]Holder{
			a: ServiceHolder("kube-system", "kube-dns"),
			c: ServiceHolder("default", "created-while-disconnected"),
		})
	})
	if h, ok := after.Holder(a); !ok || !h.IsService("kube-system", "kube-dns") {
		t.Errorf("%s: got %v %v, want kube-system/kube-dns", a, h, ok)
	}
	if h, ok := after.Holder(b); ok {
		t.Errorf("%s: still held by %v after a relist without it", b, h)
	}
	if h, ok := after.Holder(c); !ok || !h.IsService("default", "created-while-disconnected") {
		t.Errorf("%s: got %v %v", c, h, ok)
	}
	if after.AllocatedCount() != 2 {
		t.Errorf("count %d, want 2", after.AllocatedCount())
	}
	if _, ok := before.Holder(b); !ok || before.AllocatedCount() != 2 {
		t.Errorf("the earlier snapshot changed: count %d", before.AllocatedCount())
	}
}

func TestReplaceAllocationsWithEverythingEmptiesTheView(t *testing.T) {
	v := NewView()
	v.Update(func(tx *Tx) {
		for ip := netip.MustParseAddr("10.96.0.1"); ip.Compare(netip.MustParseAddr("10.96.20.0")) < 0; ip = ip.Next() {
			tx.SetAllocation(ip, ServiceHolder("ns", "x"))
		}
	})
	s := v.Update(func(tx *Tx) { tx.ReplaceAllocations(nil) })
	if s.AllocatedCount() != 0 {
		t.Fatalf("count %d after replacing with nothing", s.AllocatedCount())
	}
	n := 0
	s.allocs.each(func(netip.Addr, Holder) { n++ })
	if n != 0 {
		t.Fatalf("%d entries left", n)
	}
}

func TestReplaceServiceCIDRsKeepsExactlyTheListed(t *testing.T) {
	v := NewView()
	p := netip.MustParsePrefix
	before := v.Update(func(tx *Tx) {
		tx.SetServiceCIDR(ServiceCIDR{Name: "kubernetes", CIDRs: []netip.Prefix{p("10.96.0.0/16")}, Ready: true})
		tx.SetServiceCIDR(ServiceCIDR{Name: "removed", CIDRs: []netip.Prefix{p("10.97.0.0/24")}, Ready: true})
	})
	after := v.Update(func(tx *Tx) {
		tx.ReplaceServiceCIDRs([]ServiceCIDR{
			{Name: "zeta", CIDRs: []netip.Prefix{p("10.98.0.0/24")}, Ready: true},
			{Name: "kubernetes", CIDRs: []netip.Prefix{p("10.96.0.0/16")}, Ready: false},
		})
	})
	got := after.ServiceCIDRs()
	if len(got) != 2 || got[0].Name != "kubernetes" || got[0].Ready || got[1].Name != "zeta" {
		t.Fatalf("after replace: %+v", got)
	}
	if b := before.ServiceCIDRs(); len(b) != 2 || b[1].Name != "removed" || !b[0].Ready {
		t.Fatalf("the earlier snapshot changed: %+v", b)
	}
}

// A relist leaves no spare room in the leaves it wrote (the view's memory
// at 100,000 addresses), and changes nothing an older snapshot sees.
func TestReplaceAllocationsLeavesNoSpareRoom(t *testing.T) {
	v := NewView()
	before := v.Update(func(tx *Tx) {
		tx.SetAllocation(netip.MustParseAddr("10.96.0.1"), ServiceHolder("default", "kubernetes"))
	})
	want := map[netip.Addr]Holder{}
	ip := netip.MustParseAddr("10.100.0.0")
	for i := 0; i < 20_000; i++ {
		ip = ip.Next()
		want[ip] = ServiceHolder("ns", fmt.Sprint("svc-", i))
	}
	after := v.Update(func(tx *Tx) { tx.ReplaceAllocations(want) })
	if after.AllocatedCount() != len(want) {
		t.Fatalf("%d allocations, want %d", after.AllocatedCount(), len(want))
	}
	for a, h := range want {
		if got, ok := after.Holder(a); !ok || got != h {
			t.Fatalf("%s: %v %v, want %v", a, got, ok, h)
		}
	}
	for _, mid := range after.allocs.root.mids {
		for _, leaf := range mid.leaves {
			if leaf != nil && cap(leaf.entries) != len(leaf.entries) {
				t.Fatalf("a leaf of %d entries has room for %d", len(leaf.entries), cap(leaf.entries))
			}
		}
	}
	if h, ok := before.Holder(netip.MustParseAddr("10.96.0.1")); !ok || h != ServiceHolder("default", "kubernetes") || before.AllocatedCount() != 1 {
		t.Fatalf("the older snapshot changed: %v %v, %d allocations", h, ok, before.AllocatedCount())
	}
}
