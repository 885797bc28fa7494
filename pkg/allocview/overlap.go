package allocview

import "net/netip"

// ReasonNotAllowed is why a range outside the policy's allowedCIDRs gives
// no usable address (Excluded.Reason).
const ReasonNotAllowed = "not inside the policy's allowedCIDRs"

// withoutOtherDynamicBands is r's static band minus every address another
// active range of its family has in its dynamic band. Example: with
// 10.96.0.0/24 (static band .1-.16) and 10.96.0.0/28 (no static band,
// dynamic band .1-.14), the static band that is static everywhere is
// 10.96.0.15-10.96.0.16.
func (rs RangeSet) withoutOtherDynamicBands(r ActiveRange) []Band {
	parts := []Band{r.Static()}
	for _, o := range rs.Active {
		if o.Prefix == r.Prefix || o.Family() != r.Family() || o.Dynamic().IsZero() {
			continue
		}
		var next []Band
		for _, b := range parts {
			next = append(next, subtract(b, o.Dynamic())...)
		}
		parts = next
	}
	return parts
}

// outermost renders the bands in order, once each, leaving out any band
// inside another (a narrower range's static band within a wider one's).
func outermost(bands []Band) []string {
	var out []string
	for i, b := range bands {
		inside := false
		for j, o := range bands {
			if i != j && o.Contains(b.First) && o.Contains(b.Last) && (o != b || j < i) {
				inside = true
				break
			}
		}
		if !inside {
			out = append(out, b.String())
		}
	}
	return out
}

// subtract returns the parts of b outside cut (none, one or two bands).
func subtract(b, cut Band) []Band {
	if cut.Last.Less(b.First) || b.Last.Less(cut.First) {
		return []Band{b}
	}
	var out []Band
	if b.First.Less(cut.First) {
		out = append(out, Band{b.First, cut.First.Prev()})
	}
	if cut.Last.Less(b.Last) {
		out = append(out, Band{cut.Last.Next(), b.Last})
	}
	return out
}

// Families are the IP families the apiserver serves, primary first: those
// of the CIDRs it was started with (Configured). The apiserver decides
// dual-stack from its flags, not from ServiceCIDR objects: with an IPv6
// ServiceCIDR object on an IPv4-only apiserver, a PreferDualStack Service
// stays IPv4-only and an IPv6 address is refused ("IPv6 is not configured
// on this cluster"). Without configured CIDRs (no default ServiceCIDR),
// the families of the active ranges stand in.
func (rs RangeSet) Families() []Family {
	var out []Family
	add := func(p netip.Prefix) {
		if f := FamilyOf(p.Addr()); len(out) < 2 && (len(out) == 0 || out[0] != f) {
			out = append(out, f)
		}
	}
	for _, p := range rs.Configured {
		add(p)
	}
	if len(out) == 0 {
		for _, r := range rs.Active {
			add(r.Prefix)
		}
	}
	return out
}

// Serves reports whether the apiserver serves family f (see Families).
func (rs RangeSet) Serves(f Family) bool {
	for _, g := range rs.Families() {
		if g == f {
			return true
		}
	}
	return false
}

// KubernetesServiceIP is the address the apiserver gives default/kubernetes,
// and the name of its range for messages: the first usable address of the
// primary configured range only (that Service is single-stack). The first
// address of any other range, such as a second small ServiceCIDR, is an
// ordinary address. Without configured CIDRs, the first active range of
// the primary family stands in.
func (rs RangeSet) KubernetesServiceIP() (netip.Addr, string, bool) {
	var p netip.Prefix
	if len(rs.Configured) > 0 {
		p = rs.Configured[0]
	} else {
		for _, r := range rs.Active {
			if r.Family() == rs.Primary {
				p = r.Prefix
				break
			}
		}
	}
	// network+1, as NewRange computes it, without building the bands: this
	// runs for every IP checked. IPv4 /31 and /32, IPv6 /128 have none.
	if !p.IsValid() || p.Bits() > p.Addr().BitLen()-1 || (p.Addr().Is4() && p.Bits() > 30) {
		return netip.Addr{}, "", false
	}
	for _, a := range rs.Active {
		if a.Prefix == p {
			return p.Addr().Next(), a.Name(), true
		}
	}
	return p.Addr().Next(), p.String(), true
}
