package allocview

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// ActiveRange is a range the apiserver allocates from and the policy accepts.
type ActiveRange struct {
	Range
	// Allowed, when not nil, are the only parts of the range the policy's
	// allowedCIDRs accept (an allowed CIDR smaller than the range).
	Allowed []netip.Prefix
}

// Contains reports whether ip is in the range and, if restricted, in an
// allowed part of it.
func (r ActiveRange) Contains(ip netip.Addr) bool {
	if !r.Prefix.Contains(ip) {
		return false
	}
	if r.Allowed == nil {
		return true
	}
	return slices.ContainsFunc(r.Allowed, func(p netip.Prefix) bool { return p.Contains(ip) })
}

// Excluded is a range that exists but gives no usable address, and why.
type Excluded struct {
	Range  Range
	Reason string
}

// RangeSet is the set of active ranges a decision works with.
type RangeSet struct {
	Active   []ActiveRange
	Excluded []Excluded
	// Primary is the family of a Service that names no ipFamilies.
	Primary Family
	// Configured are the CIDRs the apiserver was started with, primary
	// first: those of the default ServiceCIDR, which mirrors its
	// --service-cluster-ip-range, or the static ranges. They decide which IP
	// families the apiserver serves (see Families) and the address of
	// default/kubernetes, whatever other ServiceCIDR objects exist.
	Configured []netip.Prefix
}

// ActiveServiceCIDRs builds the range set from ServiceCIDR objects: those
// the apiserver allocates from (no deletionTimestamp, Ready missing or True;
// see "ServiceCIDR and IPAddress" in docs/apiserver-facts.md),
// narrowed to allowed when allowed is not empty. The primary family is that
// of the default ServiceCIDR's first CIDR, as the apiserver's is that of its
// first --service-cluster-ip-range.
func ActiveServiceCIDRs(cidrs []ServiceCIDR, allowed []netip.Prefix) RangeSet {
	var rs RangeSet
	for _, c := range cidrs {
		if c.Name == DefaultServiceCIDRName && len(c.CIDRs) > 0 {
			rs.Primary = FamilyOf(c.CIDRs[0].Addr())
			rs.Configured = c.CIDRs
		}
		for _, p := range c.CIDRs {
			r, err := NewRange(ServiceCIDRSource(c.Name), p)
			if err != nil {
				// The apiserver validates ServiceCIDRs; an unparsable one
				// cannot be allocated from either.
				continue
			}
			switch {
			case c.Deleting:
				rs.Excluded = append(rs.Excluded, Excluded{r, "being deleted"})
			case !c.Ready:
				rs.Excluded = append(rs.Excluded, Excluded{r, "not Ready"})
			default:
				rs.add(r, allowed)
			}
		}
	}
	if rs.Primary == "" {
		rs.Primary = rs.firstFamily()
	}
	return rs
}

// StaticRanges builds the range set from fixed CIDRs: the --service-cidr
// flag or the policy's serviceCIDRs, for clusters without ServiceCIDRs and
// offline review. The first CIDR sets the primary family.
func StaticRanges(source string, prefixes []netip.Prefix, allowed []netip.Prefix) RangeSet {
	var rs RangeSet
	for _, p := range prefixes {
		r, err := NewRange(source, p)
		if err != nil {
			continue // callers parse with ParsePrefix first
		}
		rs.add(r, allowed)
	}
	rs.Primary = IPv4
	if len(prefixes) > 0 {
		rs.Primary = FamilyOf(prefixes[0].Addr())
	}
	rs.Configured = prefixes
	return rs
}

func (rs *RangeSet) firstFamily() Family {
	if len(rs.Active) > 0 {
		return rs.Active[0].Family()
	}
	return IPv4
}

func (rs *RangeSet) add(r Range, allowed []netip.Prefix) {
	if len(allowed) == 0 {
		rs.Active = append(rs.Active, ActiveRange{Range: r})
		return
	}
	var parts []netip.Prefix
	for _, a := range allowed {
		if a.Bits() <= r.Prefix.Bits() && a.Contains(r.Prefix.Addr()) {
			rs.Active = append(rs.Active, ActiveRange{Range: r})
			return // the whole range is approved
		}
		if r.Prefix.Bits() < a.Bits() && r.Prefix.Contains(a.Addr()) {
			parts = append(parts, a)
		}
	}
	if len(parts) > 0 {
		rs.Active = append(rs.Active, ActiveRange{Range: r, Allowed: parts})
		return
	}
	rs.Excluded = append(rs.Excluded, Excluded{r, ReasonNotAllowed})
}

// Placement says where an IP falls among the active ranges.
type Placement struct {
	// Kind is Outside when no active range contains the IP.
	Kind BandKind
	// Range is the most specific active range containing the IP.
	Range ActiveRange
	// DynamicIn is the range whose dynamic band holds the IP, when Kind is
	// Dynamic (it may be a wider range than Range: see Place).
	DynamicIn ActiveRange
}

// Place finds ip among the active ranges. ServiceCIDRs may overlap, and
// each hands out addresses from its own dynamic band, so an IP counts as
// dynamic when any range containing it has it in its dynamic band. It is
// unusable only when no range containing it can hand it out: the network
// address of 10.96.8.0/24 is a usable address of 10.96.0.0/16 around it.
func (rs RangeSet) Place(ip netip.Addr) Placement {
	var p Placement
	found, usable := false, false
	for _, r := range rs.Active {
		if !r.Contains(ip) {
			continue
		}
		band := r.Band(ip)
		// Range is the most specific range that can hand ip out, or, when
		// none can, the most specific one containing it.
		switch {
		case band != Unusable && (!usable || r.Prefix.Bits() > p.Range.Prefix.Bits()):
			p.Range = r
			usable = true
		case !usable && (!found || r.Prefix.Bits() > p.Range.Prefix.Bits()):
			p.Range = r
		}
		found = true
		if band == Dynamic && p.DynamicIn.Source == "" {
			p.DynamicIn = r
		}
	}
	switch {
	case !found:
		p.Kind = Outside
	case !usable:
		p.Kind = Unusable
	case p.DynamicIn.Source != "":
		p.Kind = Dynamic
	default:
		p.Kind = Static
	}
	return p
}

// IsNetworkAddress reports whether ip is the network address of any known
// range, active or excluded: the placeholder a dry-run create shows
// validating webhooks (the apiserver picks it from its own ranges, which
// know nothing of the policy's allowedCIDRs).
func (rs RangeSet) IsNetworkAddress(ip netip.Addr) bool {
	return slices.ContainsFunc(rs.Active, func(r ActiveRange) bool { return r.Prefix.Addr() == ip }) ||
		slices.ContainsFunc(rs.Excluded, func(e Excluded) bool { return e.Range.Prefix.Addr() == ip })
}

// Describe lists the active ranges for a message:
// `10.96.0.0/16 (ServiceCIDR "kubernetes"), fd00::/108 (ServiceCIDR "kubernetes")`.
func (rs RangeSet) Describe() string {
	if len(rs.Active) == 0 {
		return "none"
	}
	// A message lists a few ranges, not all: a cluster may hold any number
	// of ServiceCIDRs, and the message must stay short.
	parts := make([]string, 0, min(len(rs.Active), maxDescribed))
	for _, r := range rs.Active[:min(len(rs.Active), maxDescribed)] {
		s := r.String()
		if r.Allowed != nil {
			s = fmt.Sprintf("%s, only %s", s, joinPrefixes(r.Allowed))
		}
		parts = append(parts, s)
	}
	if more := len(rs.Active) - len(parts); more > 0 {
		parts = append(parts, fmt.Sprintf("and %d more", more))
	}
	return strings.Join(parts, ", ")
}

// maxDescribed bounds the ranges (and allowed parts of one range) that
// Describe lists.
const maxDescribed = 4

// StaticBands lists the static bands of the active ranges of family f, for
// the "choose instead" part of a message, without the addresses another
// (overlapping) range has in its dynamic band: those are refused as dynamic
// (see Place), so advice must not name them.
func (rs RangeSet) StaticBands(f Family) []string {
	var bands []Band
	for _, r := range rs.Active {
		if r.Family() == f && !r.Static().IsZero() {
			bands = append(bands, rs.withoutOtherDynamicBands(r)...)
		}
	}
	return outermost(bands)
}

// ExcludedContaining returns the excluded range holding ip, to explain why an
// address that looks in range is refused.
func (rs RangeSet) ExcludedContaining(ip netip.Addr) (Excluded, bool) {
	for _, e := range rs.Excluded {
		if e.Range.Prefix.Contains(ip) {
			return e, true
		}
	}
	return Excluded{}, false
}

func joinPrefixes(ps []netip.Prefix) string {
	s := make([]string, 0, min(len(ps), maxDescribed)+1)
	for _, p := range ps[:min(len(ps), maxDescribed)] {
		s = append(s, p.String())
	}
	if more := len(ps) - len(s); more > 0 {
		s = append(s, fmt.Sprintf("and %d more", more))
	}
	return strings.Join(s, ", ")
}
