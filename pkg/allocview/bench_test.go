package allocview

import (
	"net/netip"
	"testing"
)

// bigView holds n allocated IPs in 10.96.0.0/12, as a large cluster would.
func bigView(b *testing.B, n int) *View {
	b.Helper()
	v := NewView()
	v.Update(func(tx *Tx) {
		tx.SetServiceCIDR(ServiceCIDR{Name: "kubernetes", CIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12")}, Ready: true})
		ip := netip.MustParseAddr("10.96.0.0")
		for i := 0; i < n; i++ {
			ip = ip.Next()
			tx.SetAllocation(ip, ServiceHolder("bench", "svc"))
		}
		tx.MarkSynced(true)
	})
	return v
}

// BenchmarkApplyOneIPAddressChange is the cost of one IPAddress event on a
// view of 100,000 allocated IPs: one Update that adds (or removes) one IP
// and publishes a new snapshot.
func BenchmarkApplyOneIPAddressChange(b *testing.B) {
	v := bigView(b, 100_000)
	ip := netip.MustParseAddr("10.100.0.1")
	h := ServiceHolder("bench", "new")
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%2 == 0 {
			v.Update(func(tx *Tx) { tx.SetAllocation(ip, h) })
		} else {
			v.Update(func(tx *Tx) { tx.DeleteAllocation(ip) })
		}
	}
}

func BenchmarkHolderLookup(b *testing.B) {
	s := bigView(b, 100_000).Snapshot()
	ip := netip.MustParseAddr("10.96.100.1")
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, ok := s.Holder(ip); !ok {
			b.Fatal("missing")
		}
	}
}

// BenchmarkUsage is one scrape of clusterip_policy_band_addresses on a view
// of 100,000 allocated IPs in one /12, with one reserved range.
func BenchmarkUsage(b *testing.B) {
	s := bigView(b, 100_000).Snapshot()
	reserved := []Band{{netip.MustParseAddr("10.100.0.0"), netip.MustParseAddr("10.100.3.255")}}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if u := s.Usage(reserved); len(u) != 2 {
			b.Fatalf("%d bands", len(u))
		}
	}
}
