package allocview

import (
	"math"
	"net/netip"
	"testing"
)

func TestUsageSplitsEachBandOfEachActiveServiceCIDR(t *testing.T) {
	ip := netip.MustParseAddr
	v := NewView()
	snap := v.Update(func(tx *Tx) {
		// 10.96.0.0/27: static .1-.16, dynamic .17-.30.
		tx.SetServiceCIDR(ServiceCIDR{Name: "kubernetes", CIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/27")}, Ready: true})
		tx.SetServiceCIDR(ServiceCIDR{Name: "going", CIDRs: []netip.Prefix{netip.MustParsePrefix("10.97.0.0/24")}, Ready: true, Deleting: true})
		tx.SetAllocation(ip("10.96.0.1"), ServiceHolder("default", "kubernetes"))
		tx.SetAllocation(ip("10.96.0.10"), Holder{Resource: "services", Namespace: "kube-system", Name: "kube-dns", Ours: true})
		tx.SetAllocation(ip("10.96.0.17"), ServiceHolder("a", "dyn1"))
		tx.SetAllocation(ip("10.96.0.18"), ServiceHolder("a", "dyn2"))
		// reserved range .24-.27: one hold of ours, one allowed Service
		tx.SetAllocation(ip("10.96.0.24"), Holder{Resource: "services", Namespace: "team", Name: "x", Ours: true})
		tx.SetAllocation(ip("10.96.0.25"), ServiceHolder("team", "web"))
		tx.SetAllocation(ip("10.97.0.20"), ServiceHolder("a", "elsewhere"))
		tx.MarkSynced(true)
	})
	// The ranges overlap and are given out of order: counted once.
	reserved := []Band{{ip("10.96.0.26"), ip("10.96.0.27")}, {ip("10.96.0.24"), ip("10.96.0.26")}}
	got := snap.Usage(reserved)
	want := []BandUsage{
		{ServiceCIDR: "kubernetes", CIDR: netip.MustParsePrefix("10.96.0.0/27"), Band: Static, Addresses: Band{ip("10.96.0.1"), ip("10.96.0.16")}, Size: 16, Allocated: 1, Held: 1, Free: 14},
		{ServiceCIDR: "kubernetes", CIDR: netip.MustParsePrefix("10.96.0.0/27"), Band: Dynamic, Addresses: Band{ip("10.96.0.17"), ip("10.96.0.30")}, Size: 14, Allocated: 3, ReservedRange: 3, Free: 8},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d bands, want %d (the deleting ServiceCIDR left out): %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("band %d:\n got %+v\nwant %+v", i, got[i], want[i])
		}
		if u := got[i]; u.Free+u.Allocated+u.Held+u.ReservedRange != u.Size {
			t.Errorf("band %d: the counts do not add up to the size: %+v", i, u)
		}
	}
}

func TestUsageOfAViewWithoutActiveRangesIsEmpty(t *testing.T) {
	if u := NewView().Snapshot().Usage(nil); u != nil {
		t.Fatalf("Usage of an empty view = %+v, want nil", u)
	}
}

func TestBandSize(t *testing.T) {
	ip := netip.MustParseAddr
	for _, c := range []struct {
		band Band
		want uint64
	}{
		{Band{}, 0},
		{Band{ip("10.96.0.1"), ip("10.96.0.1")}, 1},
		{Band{ip("10.96.1.1"), ip("10.111.255.254")}, 1<<20 - 2 - 256}, // a /12 without network, broadcast and static band
		{Band{ip("fd00::ff"), ip("fd00::100")}, 2},
		{Band{ip("fd00::101"), ip("fd00::ffff:ffff:ffff:ffff")}, math.MaxUint64 - 256},
		{Band{ip("fd00::"), ip("fd00::1:0:0:0:0")}, math.MaxUint64}, // 2^64+1 addresses: capped
	} {
		if got := c.band.Size(); got != c.want {
			t.Errorf("%s: Size() = %d, want %d", c.band, got, c.want)
		}
	}
}

func TestRangeUsageCountsOthersAddressesNotOurHolds(t *testing.T) {
	ip := netip.MustParseAddr
	snap := NewView().Update(func(tx *Tx) {
		tx.SetAllocation(ip("10.96.0.24"), Holder{Resource: "ipaddresses", Name: "hold", Ours: true})
		tx.SetAllocation(ip("10.96.0.25"), ServiceHolder("team", "web"))
		tx.SetAllocation(ip("10.96.0.26"), ServiceHolder("team", "db"))
		tx.SetAllocation(ip("10.96.0.40"), ServiceHolder("a", "outside"))
		tx.SetAllocation(ip("fd00::5"), ServiceHolder("b", "v6"))
		tx.MarkSynced(true)
	})
	got := snap.RangeUsage([]Band{{ip("10.96.0.24"), ip("10.96.0.31")}, {ip("fd00::1"), ip("fd00::4")}})
	want := []RangeUse{
		{Range: Band{ip("10.96.0.24"), ip("10.96.0.31")}, Size: 8, Used: 2, Free: 6},
		{Range: Band{ip("fd00::1"), ip("fd00::4")}, Size: 4, Used: 0, Free: 4},
	}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("RangeUsage = %+v, want %+v", got, want)
	}
	if u := snap.RangeUsage(nil); len(u) != 0 {
		t.Fatalf("no ranges: %+v", u)
	}
}
