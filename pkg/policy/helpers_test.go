package policy

import (
	"net/netip"

	"clusterip-policy/pkg/allocview"
)

// makeSnapshot builds a synced view with ServiceCIDRs and allocations
// ("ip=namespace/name").
func makeSnapshot(cidrs []allocview.ServiceCIDR, allocated ...string) *allocview.Snapshot {
	v := allocview.NewView()
	return v.Update(func(tx *allocview.Tx) {
		for _, c := range cidrs {
			tx.SetServiceCIDR(c)
		}
		for _, a := range allocated {
			ip, ref, _ := cutEq(a)
			o, err := parseOwner(ref)
			if err != nil {
				panic(err)
			}
			tx.SetAllocation(netip.MustParseAddr(ip), allocview.ServiceHolder(o.Namespace, o.Name))
		}
		tx.MarkSynced(true)
	})
}

func cutEq(s string) (string, string, bool) {
	for i := range s {
		if s[i] == '=' {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

func serviceCIDR(name string, ready bool, cidrs ...string) allocview.ServiceCIDR {
	c := allocview.ServiceCIDR{Name: name, Ready: ready}
	for _, s := range cidrs {
		c.CIDRs = append(c.CIDRs, netip.MustParsePrefix(s))
	}
	return c
}

func mustPrefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}
