package allocview

import (
	"net/netip"
	"slices"
)

// Holder is what an IPAddress object's spec.parentRef names: for Services,
// group "" and resource "services".
type Holder struct {
	Group     string
	Resource  string
	Namespace string
	Name      string
	// Ours is true for an IPAddress labelled managed-by HoldManager: a
	// hold of this project, whose parentRef names the Service it is kept
	// for. Decisions treat it as that Service's; only the capacity counts
	// (Usage) tell it apart.
	Ours bool
}

// HoldManager is the ipaddress.kubernetes.io/managed-by value of this
// project's holds (pkg/holds).
const HoldManager = "clusterip-policy.io"

// A hold kept for a reserved range names the range, not a Service: its
// spec.parentRef is group HoldManager, resource RangeHoldResource and the
// name RangeHoldName gives. The apiserver accepts any parentRef (it checks
// only that resource and name are path segments), and the name tells the
// holds of a range from those of single reservations, whose parentRef is
// their owner Service.
const RangeHoldResource = "reservedranges"

// RangeHoldName names the range first-last in a hold's parentRef: a path
// segment, as the apiserver requires (a CIDR's "/" is not), and one name
// per range, since ranges never overlap.
func RangeHoldName(b Band) string { return b.First.String() + "-" + b.Last.String() }

// RangeHolder is the holder of our hold on an address of the range b.
func RangeHolder(b Band) Holder {
	return Holder{Group: HoldManager, Resource: RangeHoldResource, Name: RangeHoldName(b), Ours: true}
}

// IsRangeHold reports whether h is our hold for the range b: labelled as
// ours and naming b.
func (h Holder) IsRangeHold(b Band) bool {
	return h.IsAnyRangeHold() && h.Name == RangeHoldName(b)
}

// IsAnyRangeHold reports whether h is our hold for some reserved range,
// whatever range its parentRef names: a hold made before the range was
// resized keeps the name it had (parentRef is immutable) and still holds
// its address for the range that covers it now.
func (h Holder) IsAnyRangeHold() bool {
	return h.Ours && h.Group == HoldManager && h.Resource == RangeHoldResource && h.Namespace == ""
}

// ServiceHolder is the holder a Service namespace/name would be.
func ServiceHolder(namespace, name string) Holder {
	return Holder{Resource: "services", Namespace: namespace, Name: name}
}

// IsService reports whether h is the Service namespace/name.
func (h Holder) IsService(namespace, name string) bool {
	return h.Group == "" && h.Resource == "services" && h.Namespace == namespace && h.Name == name
}

// String renders a Service as "namespace/name" (the form users type) and
// anything else as "resource.group namespace/name".
func (h Holder) String() string {
	ref := h.Name
	if h.Namespace != "" {
		ref = h.Namespace + "/" + h.Name
	}
	if h.Group == "" && h.Resource == "services" {
		return ref
	}
	kind := h.Resource
	if h.Group != "" {
		kind += "." + h.Group
	}
	return kind + " " + ref
}

// allocations is a persistent (copy-on-write) map from IP to holder. A
// published Snapshot never changes; a writer copies only the path it touches:
// the root, one of 64 middle nodes and one of 4096 leaves, picked by the
// address's low 12 bits. Addresses inside a Service range differ in exactly
// those bits, so a /16 with every IP allocated holds 16 entries per leaf and
// one change copies about 1 KiB of pointers plus one small leaf, however many
// IPs the cluster has.
type allocations struct {
	count int
	root  *allocRoot
}

const fanout = 64

type allocRoot struct {
	owner *txToken
	mids  [fanout]*allocMid
}

type allocMid struct {
	owner  *txToken
	leaves [fanout]*allocLeaf
}

type allocLeaf struct {
	owner   *txToken
	entries []allocEntry // sorted by addr
}

type allocEntry struct {
	addr   netip.Addr
	holder Holder
}

// txToken marks the nodes a transaction has already copied: those it may
// change in place, since no published snapshot can see them yet.
// It must not be zero-sized: Go may give every new zero-sized value the
// same address, and then every transaction would own every node.
type txToken struct{ _ byte }

func slot(a netip.Addr) (mid, leaf int) {
	b := a.As16()
	low := int(b[14])<<8 | int(b[15])
	return (low >> 6) & (fanout - 1), low & (fanout - 1)
}

func (m allocations) get(a netip.Addr) (Holder, bool) {
	if m.root == nil {
		return Holder{}, false
	}
	mi, li := slot(a)
	mid := m.root.mids[mi]
	if mid == nil {
		return Holder{}, false
	}
	leaf := mid.leaves[li]
	if leaf == nil {
		return Holder{}, false
	}
	i, found := slices.BinarySearchFunc(leaf.entries, a, func(e allocEntry, t netip.Addr) int { return e.addr.Compare(t) })
	if !found {
		return Holder{}, false
	}
	return leaf.entries[i].holder, true
}

// leafFor returns the leaf for a, copied into tx if it was not already.
func (m *allocations) leafFor(tx *txToken, a netip.Addr) *allocLeaf {
	if m.root == nil {
		m.root = &allocRoot{owner: tx}
	} else if m.root.owner != tx {
		r := *m.root
		r.owner = tx
		m.root = &r
	}
	mi, li := slot(a)
	mid := m.root.mids[mi]
	switch {
	case mid == nil:
		mid = &allocMid{owner: tx}
		m.root.mids[mi] = mid
	case mid.owner != tx:
		c := *mid
		c.owner = tx
		mid = &c
		m.root.mids[mi] = mid
	}
	leaf := mid.leaves[li]
	switch {
	case leaf == nil:
		leaf = &allocLeaf{owner: tx}
		mid.leaves[li] = leaf
	case leaf.owner != tx:
		leaf = &allocLeaf{owner: tx, entries: slices.Clone(leaf.entries)}
		mid.leaves[li] = leaf
	}
	return leaf
}

func (m *allocations) set(tx *txToken, a netip.Addr, h Holder) {
	if old, ok := m.get(a); ok && old == h {
		return // unchanged: copy nothing
	}
	leaf := m.leafFor(tx, a)
	i, found := slices.BinarySearchFunc(leaf.entries, a, func(e allocEntry, t netip.Addr) int { return e.addr.Compare(t) })
	if found {
		leaf.entries[i].holder = h
		return
	}
	leaf.entries = slices.Insert(leaf.entries, i, allocEntry{a, h})
	m.count++
}

func (m *allocations) delete(tx *txToken, a netip.Addr) {
	if _, ok := m.get(a); !ok {
		return
	}
	leaf := m.leafFor(tx, a)
	i, _ := slices.BinarySearchFunc(leaf.entries, a, func(e allocEntry, t netip.Addr) int { return e.addr.Compare(t) })
	leaf.entries = slices.Delete(leaf.entries, i, i+1)
	m.count--
}

// compact gives each leaf tx wrote exactly the room its entries take. A
// relist inserts a whole cluster one entry at a time, and what append
// leaves spare (about a third of the view at 100,000 addresses) would stay
// for as long as the view.
func (m *allocations) compact(tx *txToken) {
	if m.root == nil || m.root.owner != tx {
		return
	}
	for _, mid := range m.root.mids {
		if mid == nil || mid.owner != tx {
			continue
		}
		for _, leaf := range mid.leaves {
			if leaf != nil && leaf.owner == tx && cap(leaf.entries) > len(leaf.entries) {
				leaf.entries = slices.Clone(leaf.entries)
			}
		}
	}
}
