package allocview

import (
	"net/netip"
	"slices"
	"sync/atomic"
)

// rangesMemo holds the last range set built from one snapshot's
// ServiceCIDRs. Building it (NewRange for every CIDR, the band arithmetic,
// the names) allocates; every review needs it and it changes only with the
// ServiceCIDRs or the policy's allowedCIDRs, so it is built once per change
// instead of once per review.
type rangesMemo struct {
	last atomic.Pointer[memoizedRanges]
}

type memoizedRanges struct {
	allowed []netip.Prefix
	rs      RangeSet
}

// ActiveRanges returns ActiveServiceCIDRs(s.ServiceCIDRs(), allowed),
// built on the first call for these allowed CIDRs and shared afterwards:
// the result, like the snapshot, must not be modified. A snapshot still
// never changes once published; only this memo of what it implies does.
func (s *Snapshot) ActiveRanges(allowed []netip.Prefix) RangeSet {
	if s.ranges == nil { // a snapshot not published by View.Update
		return ActiveServiceCIDRs(s.cidrs, allowed)
	}
	if m := s.ranges.last.Load(); m != nil && slices.Equal(m.allowed, allowed) {
		return m.rs
	}
	rs := ActiveServiceCIDRs(s.cidrs, allowed)
	s.ranges.last.Store(&memoizedRanges{allowed: slices.Clone(allowed), rs: rs})
	return rs
}
