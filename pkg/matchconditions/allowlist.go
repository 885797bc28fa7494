package matchconditions

import (
	"cmp"
	"net/netip"
	"slices"

	"clusterip-policy/pkg/allocview"
	"clusterip-policy/pkg/policy"
)

// span is an inclusive address interval [lo, hi] of one family.
type span struct{ lo, hi netip.Addr }

// AllowList returns the addresses an allocated ClusterIP may hold without
// the validating webhook being asked: the dynamic band of every active
// range, inside the policy's allowedCIDRs (rs is already narrowed to them),
// minus every reserved address whatever its owner (explicit reservations,
// the address of default/kubernetes, and the first address of every range,
// which the apiserver may give default/kubernetes from a range it was
// started with). An address there passes every validating rule: it lies in
// an active range and can be handed out (Place gives Dynamic), and no other
// Service owns it. Static bands are left out on purpose: the apiserver
// hands them out dynamically only when a dynamic band is full, and that is
// a moment worth a webhook call.
//
// The result is sorted and merged; capped says that more than max prefixes
// were needed, and only the max widest were kept (dropping a prefix only
// sends more requests to the webhook).
func AllowList(p *policy.Policy, rs allocview.RangeSet, max int) (prefixes []netip.Prefix, capped bool) {
	var spans []span
	for _, r := range rs.Active {
		band := r.Dynamic()
		if band.IsZero() {
			continue
		}
		parts := []netip.Prefix{r.Prefix}
		if r.Allowed != nil {
			parts = r.Allowed
		}
		for _, a := range parts {
			if s, ok := intersect(span{band.First, band.Last}, spanOf(a)); ok {
				spans = append(spans, s)
			}
		}
	}
	spans = merge(spans)
	spans = subtract(spans, reservedAddresses(p, rs))
	for _, s := range spans {
		prefixes = append(prefixes, cover(s)...)
	}
	if len(prefixes) > max {
		// Keep the widest: they let the most requests skip the call.
		slices.SortStableFunc(prefixes, func(a, b netip.Prefix) int { return cmp.Compare(a.Bits(), b.Bits()) })
		prefixes, capped = prefixes[:max], true
	}
	slices.SortFunc(prefixes, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return cmp.Compare(a.Bits(), b.Bits())
	})
	return prefixes, capped
}

// reservedAddresses are the addresses the allow-list must not contain.
func reservedAddresses(p *policy.Policy, rs allocview.RangeSet) []netip.Addr {
	var out []netip.Addr
	for _, r := range p.Reservations {
		out = append(out, r.IP)
	}
	if ip, _, ok := rs.KubernetesServiceIP(); ok {
		out = append(out, ip)
	}
	for _, r := range rs.Active {
		if f := r.First(); f.IsValid() {
			out = append(out, f)
		}
	}
	return out
}

// spanOf is the whole of prefix p, network and last address included.
func spanOf(p netip.Prefix) span {
	p = p.Masked()
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	hi, _ := netip.AddrFromSlice(b)
	return span{p.Addr(), hi}
}

func intersect(a, b span) (span, bool) {
	if a.lo.BitLen() != b.lo.BitLen() {
		return span{}, false
	}
	lo, hi := a.lo, a.hi
	if b.lo.Compare(lo) > 0 {
		lo = b.lo
	}
	if b.hi.Compare(hi) < 0 {
		hi = b.hi
	}
	return span{lo, hi}, lo.Compare(hi) <= 0
}

// merge sorts spans and joins those that overlap or touch (overlapping
// ServiceCIDRs give overlapping bands).
func merge(in []span) []span {
	slices.SortFunc(in, func(a, b span) int { return a.lo.Compare(b.lo) })
	var out []span
	for _, s := range in {
		if n := len(out); n > 0 && out[n-1].lo.BitLen() == s.lo.BitLen() {
			last := &out[n-1]
			if next := last.hi.Next(); !next.IsValid() || s.lo.Compare(next) <= 0 {
				if s.hi.Compare(last.hi) > 0 {
					last.hi = s.hi
				}
				continue
			}
		}
		out = append(out, s)
	}
	return out
}

// subtract removes every address in holes from merged spans.
func subtract(spans []span, holes []netip.Addr) []span {
	holes = slices.Clone(holes)
	slices.SortFunc(holes, netip.Addr.Compare)
	holes = slices.Compact(holes)
	var out []span
	for _, s := range spans {
		cur, open := s, true
		for _, h := range holes {
			if !open || h.BitLen() != cur.lo.BitLen() || h.Compare(cur.lo) < 0 || h.Compare(cur.hi) > 0 {
				continue
			}
			if h.Compare(cur.lo) > 0 {
				out = append(out, span{cur.lo, h.Prev()})
			}
			if h == cur.hi {
				open = false
				continue
			}
			cur.lo = h.Next()
		}
		if open {
			out = append(out, cur)
		}
	}
	return out
}

// cover returns the fewest prefixes whose union is exactly s: at each step
// the widest prefix that starts at lo and ends at or before hi. For
// 10.96.1.1-10.96.255.254 that is 10.96.1.1/32, 10.96.1.2/31, ...,
// 10.96.128.0/18, ..., 10.96.255.254/32 (29 prefixes).
func cover(s span) []netip.Prefix {
	var out []netip.Prefix
	lo := s.lo
	for {
		var p netip.Prefix
		for bits := 0; bits <= lo.BitLen(); bits++ {
			c := netip.PrefixFrom(lo, bits).Masked()
			if c.Addr() == lo && spanOf(c).hi.Compare(s.hi) <= 0 {
				p = c
				break
			}
		}
		out = append(out, p)
		end := spanOf(p).hi
		if end == s.hi {
			return out
		}
		lo = end.Next()
	}
}
