package policy

import (
	"fmt"
	"net/netip"

	"clusterip-policy/pkg/allocview"
)

// FitDefaultServiceCIDR checks a policy's allowedCIDRs against the
// apiserver's default ServiceCIDR (named kubernetes) among cidrs, before the
// policy is stored. That range cannot be taken away: the apiserver allocates
// from it and creates it again from its --service-cluster-ip-range if it is
// deleted. So allowedCIDRs that leave its primary CIDR (the first) with no
// usable address would make every Service created without a clusterIP of
// the primary family fail at the validating stage, for as long as the
// policy stands: that is refused, with an error naming the CIDR and the fix.
// Example: allowedCIDRs [10.69.0.0/16] on a cluster whose default
// ServiceCIDR is 10.96.0.0/16.
//
// Warnings, not refusals: allowedCIDRs that keep only part of a default
// CIDR (dynamic creates that land outside that part are refused at random),
// and ones that leave nothing of its second CIDR (dual-stack Services fail;
// a cluster may mean to forbid that family). With no default ServiceCIDR
// among cidrs (a cluster without the ServiceCIDR API) there is nothing to
// check.
func FitDefaultServiceCIDR(p *Policy, cidrs []allocview.ServiceCIDR) (warnings []string, err error) {
	if len(p.AllowedCIDRs) == 0 {
		return nil, nil
	}
	for _, c := range cidrs {
		if c.Name != allocview.DefaultServiceCIDRName {
			continue
		}
		for i, prefix := range c.CIDRs {
			r, rerr := allocview.NewRange(allocview.ServiceCIDRSource(c.Name), prefix)
			if rerr != nil {
				continue // the apiserver validated it; nothing allocates from it either way
			}
			whole, parts := allowedParts(r, p.AllowedCIDRs)
			switch {
			case whole:
			case len(parts) == 0 && i == 0:
				return nil, fmt.Errorf("allowedCIDRs %s leave no usable address of %s, the primary range of %s, the apiserver's default ServiceCIDR: every Service created without a clusterIP would be refused, and that ServiceCIDR cannot be removed (the apiserver makes it again from its --service-cluster-ip-range); add %s (or the part of it Services may use) to allowedCIDRs",
					joinPrefixList(p.AllowedCIDRs), prefix, r.Name(), prefix)
			case len(parts) == 0:
				warnings = append(warnings, fmt.Sprintf("allowedCIDRs %s leave no usable address of %s, the second range of %s, the apiserver's default ServiceCIDR: every %s address the apiserver allocates (a dual-stack Service, a Service of that family) will be refused; add %s to allowedCIDRs unless that family is meant to be refused",
					joinPrefixList(p.AllowedCIDRs), prefix, r.Name(), r.Family(), prefix))
			default:
				warnings = append(warnings, fmt.Sprintf("allowedCIDRs keep only %s of %s (%s, the apiserver's default ServiceCIDR): the apiserver allocates from the whole range, so a Service created without a clusterIP that gets an address outside that part is refused; add %s to allowedCIDRs, or expect such creates to fail at random",
					joinPrefixList(parts), prefix, r.Name(), prefix))
			}
		}
	}
	return warnings, nil
}

// allowedParts says whether allowed covers r whole, and otherwise which
// allowed CIDRs inside r hold at least one of its usable addresses (a /32
// on its network or broadcast address holds none).
func allowedParts(r allocview.Range, allowed []netip.Prefix) (whole bool, parts []netip.Prefix) {
	usable := r.Usable()
	for _, a := range allowed {
		if a.Addr().BitLen() != r.Prefix.Addr().BitLen() {
			continue
		}
		if a.Bits() <= r.Prefix.Bits() && a.Contains(r.Prefix.Addr()) {
			return true, nil
		}
		if a.Bits() <= r.Prefix.Bits() || !r.Prefix.Contains(a.Addr()) {
			continue
		}
		// a lies inside r: its first address is usable unless it is r's
		// network or broadcast address, and then its second one is, if a
		// has two.
		first := a.Masked().Addr()
		if usable.Contains(first) || (a.Bits() < first.BitLen() && usable.Contains(first.Next())) {
			parts = append(parts, a)
		}
	}
	return false, parts
}

func joinPrefixList(ps []netip.Prefix) string {
	ss := make([]string, len(ps))
	for i, p := range ps {
		ss[i] = p.String()
	}
	return "[" + JoinListed(ss, ", ") + "]"
}
