package allocview

import (
	"fmt"
	"net/netip"
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
