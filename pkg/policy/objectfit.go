package policy

import (
	"fmt"
	"math/big"
	"net/netip"
	"slices"

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
// The allocator gives a Service created without a clusterIP an address of
// the dynamic band (the static band only once that is full), so it is the
// dynamic band that counts: allowedCIDRs that keep only static addresses of
// the primary CIDR (10.96.0.0/24 of 10.96.0.0/16) refuse every such create,
// and are refused too.
//
// Warnings, not refusals: allowedCIDRs that keep only part of a default
// CIDR's dynamic band (that share of dynamic creates is refused, at
// random), and ones that leave nothing of its second CIDR's (dual-stack
// Services fail; a cluster may mean to forbid that family). With no default ServiceCIDR
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
			if whole {
				continue
			}
			dynamic := r.Dynamic()
			kept := keptShare(dynamic, parts)
			switch {
			case len(parts) == 0 && i == 0:
				return nil, fmt.Errorf("allowedCIDRs %s leave no usable address of %s, the primary range of %s, the apiserver's default ServiceCIDR: every Service created without a clusterIP would be refused, and that ServiceCIDR cannot be removed (the apiserver makes it again from its --service-cluster-ip-range); add %s (or the part of it Services may use) to allowedCIDRs",
					joinPrefixList(p.AllowedCIDRs), prefix, r.Name(), prefix)
			case kept == 0 && i == 0:
				return nil, fmt.Errorf("allowedCIDRs %s keep none of the dynamic band %s of %s, the primary range of %s, the apiserver's default ServiceCIDR: the apiserver gives a Service created without a clusterIP an address of that band (of the static band only when the dynamic one is full), so every such create would be refused, and that ServiceCIDR cannot be removed (the apiserver makes it again from its --service-cluster-ip-range); add %s (or at least its dynamic band) to allowedCIDRs",
					joinPrefixList(p.AllowedCIDRs), dynamic, prefix, r.Name(), prefix)
			case len(parts) == 0:
				warnings = append(warnings, fmt.Sprintf("allowedCIDRs %s leave no usable address of %s, the second range of %s, the apiserver's default ServiceCIDR: every %s address the apiserver allocates (a dual-stack Service, a Service of that family) will be refused; add %s to allowedCIDRs unless that family is meant to be refused",
					joinPrefixList(p.AllowedCIDRs), prefix, r.Name(), r.Family(), prefix))
			case kept == 0:
				warnings = append(warnings, fmt.Sprintf("allowedCIDRs %s keep none of the dynamic band %s of %s, the second range of %s, the apiserver's default ServiceCIDR: every %s address the apiserver allocates (a dual-stack Service, a Service of that family) will be refused; add %s to allowedCIDRs unless that family is meant to be refused",
					joinPrefixList(p.AllowedCIDRs), dynamic, prefix, r.Name(), r.Family(), prefix))
			default:
				warnings = append(warnings, fmt.Sprintf("allowedCIDRs keep only %s of %s (%s, the apiserver's default ServiceCIDR): %s of its dynamic band %s, from which the apiserver picks the address of a Service created without a clusterIP at random, so about %s of such creates get an address outside that part and are refused; add %s to allowedCIDRs",
					joinPrefixList(parts), prefix, r.Name(), percent(kept), dynamic, percent(1-kept), prefix))
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

// keptShare is the share of band's addresses that parts (prefixes inside
// the band's range, from allowedParts) hold, from 0 to 1. Two prefixes are
// either disjoint or nested, so a part inside another counts once.
func keptShare(band allocview.Band, parts []netip.Prefix) float64 {
	if band.IsZero() {
		return 0
	}
	lo, hi := addrInt(band.First), addrInt(band.Last)
	total := new(big.Int).Sub(hi, lo)
	total.Add(total, big.NewInt(1))
	sorted := slices.Clone(parts)
	slices.SortFunc(sorted, func(a, b netip.Prefix) int { return a.Bits() - b.Bits() })
	kept := new(big.Int)
	var counted []netip.Prefix
	for _, p := range sorted {
		if slices.ContainsFunc(counted, func(c netip.Prefix) bool { return c.Contains(p.Addr()) }) {
			continue // inside a wider part, counted with it
		}
		counted = append(counted, p)
		first, last := addrInt(p.Masked().Addr()), addrInt(lastAddr(p))
		if first.Cmp(lo) < 0 {
			first = lo
		}
		if last.Cmp(hi) > 0 {
			last = hi
		}
		if n := new(big.Int).Sub(last, first); n.Sign() >= 0 {
			kept.Add(kept, n.Add(n, big.NewInt(1)))
		}
	}
	share, _ := new(big.Rat).SetFrac(kept, total).Float64()
	return share
}

func addrInt(a netip.Addr) *big.Int {
	b := a.As16()
	return new(big.Int).SetBytes(b[:])
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().As16()
	host := 128 - p.Bits()
	if p.Addr().Is4() {
		host = 32 - p.Bits()
	}
	for i := 15; i >= 0 && host > 0; i-- {
		n := min(host, 8)
		b[i] |= byte(1<<n - 1)
		host -= n
	}
	a := netip.AddrFrom16(b)
	if p.Addr().Is4() {
		a = a.Unmap()
	}
	return a
}

// percent renders a share as users read it: "50%", "0.78%".
func percent(share float64) string {
	pct := share * 100
	if pct > 0 && pct < 1 {
		return fmt.Sprintf("%.2g%%", pct)
	}
	return fmt.Sprintf("%.0f%%", pct)
}

func joinPrefixList(ps []netip.Prefix) string {
	ss := make([]string, len(ps))
	for i, p := range ps {
		ss[i] = p.String()
	}
	return "[" + JoinListed(ss, ", ") + "]"
}
