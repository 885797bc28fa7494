package holds

import (
	"net/netip"
	"testing"
	"time"
)

func TestReleaseBudget(t *testing.T) {
	dns := netip.MustParseAddr("10.96.0.10")
	other := netip.MustParseAddr("10.96.0.20")
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b := &ReleaseBudget{Burst: 3, Refill: time.Minute}

	t.Run("a burst of releases is served at once, then one a Refill", func(t *testing.T) {
		for i := 0; i < 3; i++ {
			if ok, _ := b.Take(dns, t0); !ok {
				t.Fatalf("release %d of the burst refused", i+1)
			}
		}
		if ok, wait := b.Take(dns, t0.Add(time.Second)); ok || wait != 59*time.Second {
			t.Fatalf("fourth release: ok %v wait %s; want refused, 59s to wait", ok, wait)
		}
		if ok, _ := b.Take(dns, t0.Add(time.Minute)); !ok {
			t.Fatal("a release one Refill later refused")
		}
		if ok, _ := b.Take(dns, t0.Add(time.Minute+time.Second)); ok {
			t.Fatal("a second release within that Refill served")
		}
	})
	t.Run("each address has its own budget", func(t *testing.T) {
		if ok, _ := b.Take(other, t0.Add(time.Minute)); !ok {
			t.Fatal("another address's first release refused")
		}
	})
	t.Run("a refund gives back a release that freed nothing", func(t *testing.T) {
		at := t0.Add(time.Minute + 2*time.Second)
		if ok, _ := b.Take(dns, at); ok {
			t.Fatal("budget not spent")
		}
		b.Refund(dns, at)
		if ok, _ := b.Take(dns, at); !ok {
			t.Fatal("the refunded release was not served")
		}
	})
	t.Run("a hostile stream frees an address a bounded number of times", func(t *testing.T) {
		// 10,000 requests a second for ten minutes: the burst, then one a
		// minute.
		h := &ReleaseBudget{Burst: 3, Refill: time.Minute}
		served := 0
		for i := 0; i < 6_000_000; i++ {
			if ok, _ := h.Take(dns, t0.Add(time.Duration(i)*100*time.Microsecond)); ok {
				served++
			}
		}
		if served != 3+9 {
			t.Fatalf("%d releases served in ten minutes, want 12 (3 at once, then one a minute)", served)
		}
	})
	t.Run("memory follows the addresses released recently, not the requests", func(t *testing.T) {
		h := &ReleaseBudget{Burst: 3, Refill: time.Second}
		base := netip.MustParseAddr("10.96.0.0")
		ip := base
		for i := 0; i < 10_000; i++ {
			ip = ip.Next()
			// one release per address, one address a millisecond: each
			// bucket is full again 3s later
			h.Take(ip, t0.Add(time.Duration(i)*time.Millisecond))
		}
		if n := h.Len(); n > 2*3000+64 {
			t.Fatalf("%d buckets kept for addresses released once over 10s, want about the 3,000 of the last 3s", n)
		}
		b := &ReleaseBudget{Burst: 3, Refill: time.Minute}
		b.Take(dns, t0)
		b.Refund(dns, t0)
		if b.Len() != 0 {
			t.Fatalf("a full bucket is kept: %d", b.Len())
		}
	})
}
