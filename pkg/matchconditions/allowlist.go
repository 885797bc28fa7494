package matchconditions

import (
	"cmp"
	"math/bits"
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
// started with), and minus every reserved range whoever may use it (the
// validating stage denies an allocation there to any other namespace). An
// address there passes every validating rule: it lies in
// an active range and can be handed out (Place gives Dynamic), and no other
// Service owns it. Static bands are left out on purpose: the apiserver
// hands them out dynamically only when a dynamic band is full, and that is
// a moment worth a webhook call.
//
// The result is the fewest prefixes that cover exactly that set, sorted;
// capped says that more than max prefixes were needed, and only the max
// widest were kept (dropping a prefix only sends more requests to the
// webhook). The validating condition tests the same set written as a few
// ranges and holes (Skip); this exact form is its fallback and the
// reference the tests compare it with.
func AllowList(p *policy.Policy, rs allocview.RangeSet, max int) (prefixes []netip.Prefix, capped bool) {
	return coverAll(allowSpans(p, rs), max)
}

// allowSpans is the set AllowList describes, as sorted, merged spans.
func allowSpans(p *policy.Policy, rs allocview.RangeSet) []span {
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
	return minus(subtract(merge(spans), reservedAddresses(p, rs)), rangeSpans(p))
}

// rangeSpans are the policy's reserved ranges as spans, sorted (the loader
// sorts them and refuses overlaps).
func rangeSpans(p *policy.Policy) []span {
	out := make([]span, 0, len(p.ReservedRanges))
	for _, r := range p.ReservedRanges {
		out = append(out, span{r.Band.First, r.Band.Last})
	}
	return out
}

// coverAll writes spans as the fewest prefixes, keeping the max widest.
func coverAll(spans []span, max int) (prefixes []netip.Prefix, capped bool) {
	for _, s := range spans {
		prefixes = append(prefixes, cover(s)...)
	}
	if len(prefixes) > max {
		// Keep the widest: they let the most requests skip the call.
		slices.SortStableFunc(prefixes, func(a, b netip.Prefix) int { return cmp.Compare(a.Bits(), b.Bits()) })
		prefixes, capped = prefixes[:max], true
	}
	sortPrefixes(prefixes)
	return prefixes, capped
}

func sortPrefixes(ps []netip.Prefix) {
	slices.SortFunc(ps, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return cmp.Compare(a.Bits(), b.Bits())
	})
}

// A Term is the addresses of Include that are not in Exclude (when Exclude
// is valid): an active range, or an allowed part of one, without the
// prefix at its start that holds its network address and its static band.
type Term struct{ Include, Exclude netip.Prefix }

// Contains reports whether ip is in the term.
func (t Term) Contains(ip netip.Addr) bool {
	return t.Include.Contains(ip) && !(t.Exclude.IsValid() && t.Exclude.Contains(ip))
}

// SkipSet is the allow-list as the validating condition tests it: an
// address may skip the call when it lies in one of Terms and is not one of
// Holes. Holes are the addresses of the terms the allow-list leaves out:
// the last address of a range's static band (just past the excluded
// prefix), IPv4 broadcast addresses, reserved addresses inside dynamic
// bands, and the network and first address of ranges without a static band.
// Reserved are the prefixes that cover exactly the reserved ranges lying in
// the terms: an address in one is sent too (a range may hold thousands of
// addresses, too many for holes).
type SkipSet struct {
	Terms    []Term
	Holes    []netip.Addr
	Reserved []netip.Prefix
}

// Contains reports whether ip may skip the call: in a term, and neither a
// hole nor in a reserved range.
func (s SkipSet) Contains(ip netip.Addr) bool {
	if slices.Contains(s.Holes, ip) || slices.ContainsFunc(s.Reserved, func(p netip.Prefix) bool { return p.Contains(ip) }) {
		return false
	}
	return slices.ContainsFunc(s.Terms, func(t Term) bool { return t.Contains(ip) })
}

// MaxReservedPrefixes caps SkipSet.Reserved; past it the condition tests
// the exact prefixes of AllowList instead. A range given as first and last
// covers at most about twice its host bits of prefixes (24 for 4096
// addresses); a CIDR is one.
const MaxReservedPrefixes = 128

// Skip returns the allow-list of AllowList written as at most maxTerms
// terms and maxHoles holes, and whether that was possible; when it is not
// (more ranges or reserved addresses in dynamic bands than that), the
// caller falls back to the exact prefixes.
//
// A range's dynamic band is its prefix minus [network, network+offset],
// where offset (the static band's size) is a power of two: that is the
// prefix of offset addresses at the network address, plus one address.
// So 10.96.1.1-10.96.255.254 is 10.96.0.0/16 minus 10.96.0.0/24, minus
// the holes 10.96.1.0 and 10.96.255.255: two CIDR tests and one set
// lookup, where its exact cover is 29 prefixes.
//
// Whatever the ranges, the result never lets more skip than AllowList:
// the holes are computed as every address of the terms that AllowList
// leaves out, so terms minus holes is a subset of it by construction.
func Skip(p *policy.Policy, rs allocview.RangeSet, maxTerms, maxHoles int) (SkipSet, bool) {
	allow := allowSpans(p, rs)
	var terms []Term
	for _, r := range rs.Active {
		if r.Dynamic().IsZero() {
			continue
		}
		var static netip.Prefix // [network, network+offset-1]
		if off := r.Offset(); off > 0 {
			static = netip.PrefixFrom(r.Prefix.Addr(), r.Prefix.Addr().BitLen()-bits.TrailingZeros64(off))
		}
		parts := []netip.Prefix{r.Prefix}
		if r.Allowed != nil {
			parts = r.Allowed
		}
		for _, a := range parts {
			inc := r.Prefix // the narrower of the range and its allowed part
			if a.Bits() > inc.Bits() {
				inc = a
			}
			if !inc.Overlaps(r.Prefix) {
				continue
			}
			t := Term{Include: inc}
			if static.IsValid() && static.Overlaps(inc) {
				if static.Bits() <= inc.Bits() {
					continue // wholly inside the static band
				}
				t.Exclude = static
			}
			if !slices.Contains(terms, t) {
				terms = append(terms, t)
			}
		}
	}
	if len(terms) > maxTerms {
		return SkipSet{}, false
	}
	var covered []span
	for _, t := range terms {
		covered = append(covered, termSpans(t)...)
	}
	covered = merge(covered)
	var reserved []netip.Prefix
	var reservedSpans []span
	for _, r := range rangeSpans(p) {
		if len(minus([]span{r}, covered)) == 1 && minus([]span{r}, covered)[0] == r {
			continue // in no term: the allow-list never reaches it
		}
		reserved = append(reserved, cover(r)...)
		reservedSpans = append(reservedSpans, r)
	}
	if len(reserved) > MaxReservedPrefixes {
		return SkipSet{}, false
	}
	holes, ok := addresses(minus(minus(covered, reservedSpans), allow), maxHoles)
	if !ok {
		return SkipSet{}, false
	}
	slices.SortFunc(terms, func(a, b Term) int {
		if c := cmp.Compare(a.Include.Bits(), b.Include.Bits()); c != 0 {
			return c // widest first: the likeliest to hold an address
		}
		return a.Include.Addr().Compare(b.Include.Addr())
	})
	return SkipSet{Terms: terms, Holes: holes, Reserved: reserved}, true
}

// termSpans is t as spans: Include, minus Exclude when it lies inside.
func termSpans(t Term) []span {
	inc := spanOf(t.Include)
	if !t.Exclude.IsValid() {
		return []span{inc}
	}
	return minus([]span{inc}, []span{spanOf(t.Exclude)})
}

// minus returns the addresses of a that are in none of b; both sorted and
// merged.
func minus(a, b []span) []span {
	var out []span
	for _, s := range a {
		cur, open := s, true
		for _, h := range b {
			if !open || h.lo.BitLen() != cur.lo.BitLen() || h.hi.Compare(cur.lo) < 0 || h.lo.Compare(cur.hi) > 0 {
				continue
			}
			if h.lo.Compare(cur.lo) > 0 {
				out = append(out, span{cur.lo, h.lo.Prev()})
			}
			if h.hi.Compare(cur.hi) >= 0 {
				open = false
				continue
			}
			cur.lo = h.hi.Next()
		}
		if open {
			out = append(out, cur)
		}
	}
	return out
}

// addresses lists every address of spans, or ok false past max.
func addresses(spans []span, max int) (out []netip.Addr, ok bool) {
	for _, s := range spans {
		for a := s.lo; ; a = a.Next() {
			if len(out) == max {
				return nil, false
			}
			out = append(out, a)
			if a == s.hi {
				break
			}
		}
	}
	return out, true
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
