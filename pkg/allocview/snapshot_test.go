package allocview

import (
	"fmt"
	"net/netip"
	"reflect"
	"testing"
)

func TestSnapshotsNeverChangeOncePublished(t *testing.T) {
	v := NewView()
	ip := netip.MustParseAddr("10.96.0.10")
	first := v.Update(func(tx *Tx) {
		tx.SetServiceCIDR(ServiceCIDR{Name: "kubernetes", CIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16")}, Ready: true})
		tx.SetAllocation(ip, ServiceHolder("kube-system", "kube-dns"))
	})
	second := v.Update(func(tx *Tx) {
		tx.SetAllocation(ip, ServiceHolder("default", "other"))
		tx.SetAllocation(netip.MustParseAddr("10.96.0.11"), ServiceHolder("default", "x"))
		tx.SetServiceCIDR(ServiceCIDR{Name: "extra", CIDRs: []netip.Prefix{netip.MustParsePrefix("10.97.0.0/24")}, Ready: true})
	})
	third := v.Update(func(tx *Tx) {
		tx.DeleteAllocation(ip)
		tx.DeleteServiceCIDR("kubernetes")
	})
	if h, _ := first.Holder(ip); !h.IsService("kube-system", "kube-dns") || first.AllocatedCount() != 1 || len(first.ServiceCIDRs()) != 1 {
		t.Fatalf("first snapshot changed: %v %d %v", h, first.AllocatedCount(), first.ServiceCIDRs())
	}
	if h, _ := second.Holder(ip); !h.IsService("default", "other") || second.AllocatedCount() != 2 || len(second.ServiceCIDRs()) != 2 {
		t.Fatalf("second snapshot: %v %d", h, second.AllocatedCount())
	}
	if _, ok := third.Holder(ip); ok || third.AllocatedCount() != 1 || len(third.ServiceCIDRs()) != 1 || third.ServiceCIDRs()[0].Name != "extra" {
		t.Fatalf("third snapshot: %d %v", third.AllocatedCount(), third.ServiceCIDRs())
	}
	if first.Generation != 1 || second.Generation != 2 || third.Generation != 3 || v.Snapshot() != third {
		t.Fatalf("generations %d %d %d", first.Generation, second.Generation, third.Generation)
	}
}

func TestAllocationsHoldManyIPsAcrossLeaves(t *testing.T) {
	v := NewView()
	const n = 70000 // more than a /16: every leaf holds several entries
	base := netip.MustParseAddr("10.96.0.0")
	s := v.Update(func(tx *Tx) {
		ip := base
		for i := 0; i < n; i++ {
			ip = ip.Next()
			tx.SetAllocation(ip, ServiceHolder("ns", fmt.Sprint(i)))
		}
	})
	if s.AllocatedCount() != n {
		t.Fatalf("count %d", s.AllocatedCount())
	}
	ip := base
	for i := 0; i < n; i++ {
		ip = ip.Next()
		if h, ok := s.Holder(ip); !ok || h.Name != fmt.Sprint(i) {
			t.Fatalf("%s: %v %v", ip, h, ok)
		}
	}
	if _, ok := s.Holder(ip.Next()); ok {
		t.Fatal("found an IP never set")
	}
	// Setting the same holder again copies nothing and keeps the count.
	again := v.Update(func(tx *Tx) { tx.SetAllocation(base.Next(), ServiceHolder("ns", "0")) })
	if again.AllocatedCount() != n {
		t.Fatalf("count after a no-op %d", again.AllocatedCount())
	}
}

func TestActiveRangesAreBuiltOncePerServiceCIDRChange(t *testing.T) {
	v := NewView()
	first := v.Update(func(tx *Tx) {
		tx.SetServiceCIDR(ServiceCIDR{Name: "kubernetes", CIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16")}, Ready: true})
	})
	allowed := []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12")}
	rs := first.ActiveRanges(allowed)
	if want := ActiveServiceCIDRs(first.ServiceCIDRs(), allowed); !reflect.DeepEqual(rs, want) {
		t.Fatalf("memoized %+v, built %+v", rs, want)
	}
	if n := testing.AllocsPerRun(100, func() { first.ActiveRanges(allowed) }); n != 0 {
		t.Errorf("ActiveRanges allocates %v times per call once built", n)
	}
	// Other allowedCIDRs: built again, not the memo of the first.
	if got := first.ActiveRanges(nil); !reflect.DeepEqual(got, ActiveServiceCIDRs(first.ServiceCIDRs(), nil)) {
		t.Fatalf("with no allowedCIDRs: %+v", got)
	}
	// An allocation leaves the ranges as they were; a ServiceCIDR changes them.
	second := v.Update(func(tx *Tx) { tx.SetAllocation(netip.MustParseAddr("10.96.0.5"), ServiceHolder("a", "b")) })
	if got := second.ActiveRanges(allowed); !reflect.DeepEqual(got, rs) {
		t.Fatalf("after an allocation: %+v", got)
	}
	third := v.Update(func(tx *Tx) {
		tx.SetServiceCIDR(ServiceCIDR{Name: "extra", CIDRs: []netip.Prefix{netip.MustParsePrefix("10.97.0.0/24")}, Ready: true})
	})
	got := third.ActiveRanges(allowed)
	if len(got.Active) != 2 || !reflect.DeepEqual(got, ActiveServiceCIDRs(third.ServiceCIDRs(), allowed)) {
		t.Fatalf("after a new ServiceCIDR: %+v", got)
	}
	if len(first.ActiveRanges(allowed).Active) != 1 {
		t.Fatal("the new ServiceCIDR leaked into the first snapshot's ranges")
	}
}
