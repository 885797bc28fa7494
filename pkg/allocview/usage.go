package allocview

import (
	"cmp"
	"math"
	"net/netip"
	"slices"
)

// BandUsage is how the addresses of one band of one active ServiceCIDR's
// CIDR are used. The four counts split the band: Free + Allocated + Held +
// ReservedRange = Size.
type BandUsage struct {
	ServiceCIDR string       // the object's name
	CIDR        netip.Prefix // one of its spec.cidrs
	Band        BandKind     // Static or Dynamic
	Addresses   Band         // the band's first and last address
	Size        uint64
	// Allocated: addresses with an IPAddress that is not one of our holds
	// (a Service's, or anyone else's).
	Allocated uint64
	// Held: addresses our holds keep for a reservation, outside the
	// reserved ranges.
	Held uint64
	// ReservedRange: addresses of the reserved ranges that no one else's
	// IPAddress has: held by us, or about to be. The dynamic allocator
	// never gets them once held.
	ReservedRange uint64
	// Free: no IPAddress and no reserved range: what the dynamic allocator
	// may still pick.
	Free uint64
}

// Usage counts, for every band of every CIDR of every active ServiceCIDR
// (the ones the apiserver allocates from), how its addresses are used.
// reserved are the reserved ranges (any order, may overlap). Bands are in
// ServiceCIDR name order, then CIDR order, static before dynamic; an empty
// band is left out. A CIDR two ServiceCIDRs share is counted under each.
// The work is one pass over the allocations per call, times the number of
// bands an address falls in: bounded by the view's size.
func (s *Snapshot) Usage(reserved []Band) []BandUsage {
	reserved = mergeBands(reserved)
	var out []BandUsage
	var bands []Band
	for _, c := range s.cidrs {
		if !c.Active() {
			continue
		}
		for _, p := range c.CIDRs {
			r, err := NewRange(ServiceCIDRSource(c.Name), p)
			if err != nil {
				continue
			}
			for _, b := range []struct {
				kind BandKind
				band Band
			}{{Static, r.Static()}, {Dynamic, r.Dynamic()}} {
				if b.band.IsZero() {
					continue
				}
				out = append(out, BandUsage{ServiceCIDR: c.Name, CIDR: p, Band: b.kind, Addresses: b.band, Size: b.band.Size(),
					ReservedRange: overlapSize(b.band, reserved)})
				bands = append(bands, b.band)
			}
		}
	}
	if len(out) == 0 {
		return nil
	}
	s.allocs.each(func(a netip.Addr, h Holder) {
		inRange := slices.ContainsFunc(reserved, func(b Band) bool { return b.Contains(a) })
		for i, b := range bands {
			if !b.Contains(a) {
				continue
			}
			switch {
			case h.Ours && inRange:
				// counted in ReservedRange already
			case h.Ours:
				out[i].Held++
			case inRange:
				// someone else's address inside a reserved range: an
				// allowed namespace's Service, not the range's spare room
				out[i].ReservedRange--
				out[i].Allocated++
			default:
				out[i].Allocated++
			}
		}
	})
	for i := range out {
		u := &out[i]
		u.Free = u.Size - u.Allocated - u.Held - u.ReservedRange
	}
	return out
}

// Size is the number of addresses in the band, at most MaxUint64 (an
// IPv6 band wider than 2^64 addresses is capped).
func (b Band) Size() uint64 {
	if b.IsZero() {
		return 0
	}
	fh, fl := halves(b.First)
	lh, ll := halves(b.Last)
	dh, dl := lh-fh, ll-fl
	if ll < fl {
		dh--
	}
	if dh != 0 || dl == math.MaxUint64 {
		return math.MaxUint64
	}
	return dl + 1
}

func halves(a netip.Addr) (hi, lo uint64) {
	b := a.As16()
	for i := range 8 {
		hi = hi<<8 | uint64(b[i])
		lo = lo<<8 | uint64(b[8+i])
	}
	return hi, lo
}

// mergeBands sorts bands and joins those that overlap or touch, so that
// no address is counted twice.
func mergeBands(bands []Band) []Band {
	bs := slices.DeleteFunc(slices.Clone(bands), Band.IsZero)
	slices.SortFunc(bs, func(x, y Band) int { return cmp.Or(x.First.Compare(y.First), x.Last.Compare(y.Last)) })
	var out []Band
	for _, b := range bs {
		if n := len(out); n > 0 && out[n-1].First.Is4() == b.First.Is4() {
			last := &out[n-1]
			if next := last.Last.Next(); b.First.Compare(last.Last) <= 0 || (next.IsValid() && next == b.First) {
				if b.Last.Compare(last.Last) > 0 {
					last.Last = b.Last
				}
				continue
			}
		}
		out = append(out, b)
	}
	return out
}

// overlapSize is the number of addresses of b inside the merged bands.
func overlapSize(b Band, merged []Band) uint64 {
	var n uint64
	for _, m := range merged {
		if o, ok := b.Intersect(m); ok {
			n += o.Size()
		}
	}
	return n
}

// RangeUse is how full one reserved range is: Used counts its addresses
// that hold someone's IPAddress other than our holds (a Service of a
// namespace the range admits), Free the rest (held by us, or about to be:
// what the range's namespaces may still name).
type RangeUse struct {
	Range      Band
	Size, Used uint64
	Free       uint64
}

// RangeUsage counts, for each of ranges (reserved ranges, which never
// overlap), how many of its addresses are used, in one pass over the
// allocations: bounded by the view's size times the ranges an address
// falls in (one).
func (s *Snapshot) RangeUsage(ranges []Band) []RangeUse {
	out := make([]RangeUse, len(ranges))
	for i, r := range ranges {
		out[i] = RangeUse{Range: r, Size: r.Size()}
	}
	if len(ranges) == 0 {
		return out
	}
	s.allocs.each(func(a netip.Addr, h Holder) {
		if h.Ours {
			return
		}
		for i, r := range ranges {
			if r.Contains(a) {
				out[i].Used++
				return
			}
		}
	})
	for i := range out {
		out[i].Free = out[i].Size - min(out[i].Used, out[i].Size)
	}
	return out
}
