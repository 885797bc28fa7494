package holds

import (
	"net/netip"
	"sync"
	"time"
)

// ReleaseBudget bounds how often the holds of one address may be released
// in the mutating stage. A release is asked for by an AdmissionReview of
// the owner's create, and anything that reaches the webhook port can send
// one: without client certificates (impossible on managed control planes)
// a forged review is indistinguishable from the apiserver's. Each release
// frees the address until the leader holds it again, about --hold-grace
// later, and in that window the allocator may hand it to another Service.
// So each address gets a bucket of Burst releases, refilled by one every
// Refill: a real owner whose create fails and is retried a couple of times
// is served at once, while a stream of forged reviews frees the address
// for about Burst graces and then for one grace per Refill, whatever the
// number of requests.
//
// Memory is one small entry per address released in the last
// Burst*Refill, and an address is only released if the policy reserves
// it, so the entries never outnumber the reservations (policy
// MaxReservations). An entry whose bucket is full again is dropped.
type ReleaseBudget struct {
	Burst  int
	Refill time.Duration

	mu      sync.Mutex
	buckets map[netip.Addr]bucket
	pruneAt int
}

type bucket struct {
	tokens float64
	at     time.Time // when tokens was computed
}

// Take spends one release of ip at now if there is one left; otherwise it
// reports how long until there is.
func (b *ReleaseBudget) Take(ip netip.Addr, now time.Time) (ok bool, wait time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.buckets == nil {
		b.buckets = map[netip.Addr]bucket{}
	}
	k := b.refilled(ip, now)
	if k.tokens < 1 {
		return false, time.Duration((1 - k.tokens) * float64(b.Refill))
	}
	k.tokens--
	b.prune(now)
	b.buckets[ip] = k
	return true, 0
}

// Refund gives back a release taken for ip that freed nothing (no hold of
// ours was there, or the delete failed).
func (b *ReleaseBudget) Refund(ip netip.Addr, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := b.refilled(ip, now)
	k.tokens = min(k.tokens+1, float64(b.Burst))
	if k.tokens >= float64(b.Burst) {
		delete(b.buckets, ip)
		return
	}
	b.buckets[ip] = k
}

// Len is the number of addresses with a bucket that is not full.
func (b *ReleaseBudget) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.buckets)
}

// refilled returns ip's bucket as of now (a full one if it has none).
func (b *ReleaseBudget) refilled(ip netip.Addr, now time.Time) bucket {
	k, ok := b.buckets[ip]
	if !ok {
		return bucket{tokens: float64(b.Burst), at: now}
	}
	return b.fill(k, now)
}

// prune drops the buckets that are full again once the map has doubled
// since the last prune, so the map holds about the addresses released in
// the last Burst*Refill and the work stays constant per release on
// average.
func (b *ReleaseBudget) prune(now time.Time) {
	if len(b.buckets) < b.pruneAt {
		return
	}
	for a, k := range b.buckets {
		if b.fill(k, now).tokens >= float64(b.Burst) {
			delete(b.buckets, a)
		}
	}
	b.pruneAt = max(64, 2*len(b.buckets))
}

func (b *ReleaseBudget) fill(k bucket, now time.Time) bucket {
	if d := now.Sub(k.at); d > 0 && b.Refill > 0 {
		k.tokens = min(float64(b.Burst), k.tokens+float64(d)/float64(b.Refill))
		k.at = now
	}
	return k
}
