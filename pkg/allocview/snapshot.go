package allocview

import (
	"cmp"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
)

// DefaultServiceCIDRName is the ServiceCIDR the apiserver makes from its
// first --service-cluster-ip-range; its first CIDR sets the primary family.
const DefaultServiceCIDRName = "kubernetes"

// ServiceCIDR is what the view keeps of a networking.k8s.io/v1 ServiceCIDR.
type ServiceCIDR struct {
	Name  string
	CIDRs []netip.Prefix
	// Ready is false only when the Ready condition exists and is not True
	// (the apiserver allocates from a ServiceCIDR whose condition is missing).
	Ready bool
	// Deleting is true once the object has a deletionTimestamp.
	Deleting bool
}

// Active reports whether the apiserver would allocate from it.
func (c ServiceCIDR) Active() bool { return c.Ready && !c.Deleting }

// Snapshot is an immutable view of the cluster's Service ranges and allocated
// IPs at one moment. Safe for concurrent use; never changes once published.
type Snapshot struct {
	// Generation grows by one with every published change.
	Generation uint64
	// Synced is true once the source has delivered its initial state; a
	// snapshot that is not synced must not be used for decisions.
	Synced bool
	// TracksAllocations is false where the cluster serves no IPAddress API:
	// the view then holds no allocations, absence from it proves nothing,
	// and pkg/policy leaves already-allocated to the apiserver.
	TracksAllocations bool

	cidrs  []ServiceCIDR // sorted by name
	allocs allocations
	// ranges memoises ActiveRanges for cidrs; shared by the snapshots
	// that followed without changing cidrs.
	ranges *rangesMemo
}

// ServiceCIDRs returns the ServiceCIDR objects in the view, sorted by name.
func (s *Snapshot) ServiceCIDRs() []ServiceCIDR { return s.cidrs }

// Holder returns who holds ip, if the view knows.
func (s *Snapshot) Holder(ip netip.Addr) (Holder, bool) { return s.allocs.get(ip) }

// AllocatedCount is the number of allocated IPs in the view.
func (s *Snapshot) AllocatedCount() int { return s.allocs.count }

// View publishes Snapshots. Writers are serialised; readers load the current
// snapshot with one atomic read and never wait for a writer.
type View struct {
	mu  sync.Mutex
	cur atomic.Pointer[Snapshot]
}

// NewView returns a view whose first snapshot is empty and not synced.
func NewView() *View {
	v := &View{}
	v.cur.Store(&Snapshot{})
	return v
}

// Snapshot returns the current snapshot.
func (v *View) Snapshot() *Snapshot { return v.cur.Load() }

// Update applies the changes fn makes to a copy of the current snapshot and
// publishes it under the next generation. Only the parts fn touches are
// copied.
func (v *View) Update(fn func(*Tx)) *Snapshot {
	v.mu.Lock()
	defer v.mu.Unlock()
	old := v.cur.Load()
	next := *old
	tx := &Tx{snap: &next, token: &txToken{}}
	fn(tx)
	if tx.cidrsCopied || next.ranges == nil {
		next.ranges = &rangesMemo{}
	}
	next.Generation = old.Generation + 1
	v.cur.Store(&next)
	return &next
}

// Tx is one batch of changes to a snapshot being built.
type Tx struct {
	snap        *Snapshot
	token       *txToken
	cidrsCopied bool
}

// SetServiceCIDR adds or replaces the ServiceCIDR with c's name.
func (tx *Tx) SetServiceCIDR(c ServiceCIDR) {
	tx.copyCIDRs()
	i, found := slices.BinarySearchFunc(tx.snap.cidrs, c.Name, func(e ServiceCIDR, n string) int { return cmp.Compare(e.Name, n) })
	if found {
		tx.snap.cidrs[i] = c
		return
	}
	tx.snap.cidrs = slices.Insert(tx.snap.cidrs, i, c)
}

// DeleteServiceCIDR removes the ServiceCIDR named name, if present.
func (tx *Tx) DeleteServiceCIDR(name string) {
	tx.copyCIDRs()
	tx.snap.cidrs = slices.DeleteFunc(tx.snap.cidrs, func(e ServiceCIDR) bool { return e.Name == name })
}

func (tx *Tx) copyCIDRs() {
	if !tx.cidrsCopied {
		tx.snap.cidrs = slices.Clone(tx.snap.cidrs)
		tx.cidrsCopied = true
	}
}

// SetAllocation records that holder holds ip.
func (tx *Tx) SetAllocation(ip netip.Addr, holder Holder) { tx.snap.allocs.set(tx.token, ip, holder) }

// DeleteAllocation forgets ip.
func (tx *Tx) DeleteAllocation(ip netip.Addr) { tx.snap.allocs.delete(tx.token, ip) }

// MarkSynced records that the source has delivered its initial state, and
// whether it tracks allocations at all.
func (tx *Tx) MarkSynced(tracksAllocations bool) {
	tx.snap.Synced = true
	tx.snap.TracksAllocations = tracksAllocations
}
