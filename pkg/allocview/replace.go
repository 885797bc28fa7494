package allocview

import "net/netip"

// ReplaceAllocations makes the allocations exactly want: an IP the view
// holds but want lacks is forgotten, every other IP is set. A source calls
// it after a full relist, when it cannot know which deletes it missed (its
// watch resumed too late, 410 Gone). Only leaves that change are copied,
// so a relist that finds the view already right publishes almost nothing
// new.
func (tx *Tx) ReplaceAllocations(want map[netip.Addr]Holder) {
	var gone []netip.Addr
	tx.snap.allocs.each(func(a netip.Addr, _ Holder) {
		if _, ok := want[a]; !ok {
			gone = append(gone, a)
		}
	})
	for _, a := range gone {
		tx.snap.allocs.delete(tx.token, a)
	}
	for a, h := range want {
		tx.snap.allocs.set(tx.token, a, h)
	}
	tx.snap.allocs.compact(tx.token)
}

// ReplaceServiceCIDRs makes the ServiceCIDRs exactly cidrs (any order; a
// name given twice keeps the last).
func (tx *Tx) ReplaceServiceCIDRs(cidrs []ServiceCIDR) {
	tx.copyCIDRs()
	tx.snap.cidrs = tx.snap.cidrs[:0]
	for _, c := range cidrs {
		tx.SetServiceCIDR(c)
	}
}

// each calls fn for every allocation, in no particular order.
func (m allocations) each(fn func(netip.Addr, Holder)) {
	if m.root == nil {
		return
	}
	for _, mid := range m.root.mids {
		if mid == nil {
			continue
		}
		for _, leaf := range mid.leaves {
			if leaf == nil {
				continue
			}
			for _, e := range leaf.entries {
				fn(e.addr, e.holder)
			}
		}
	}
}
