// Package holds decides which reserved addresses the webhook keeps held in
// the apiserver with IPAddress objects of its own, so that the apiserver's
// allocator never hands them out: it skips every address that has an
// IPAddress, whoever made it (pkg/registry/core/service/ipallocator). The
// package is pure: the controller in internal/controllers/holds lists,
// creates and deletes; this file says what to do and why.
package holds

import (
	"fmt"
	"net/netip"
	"slices"
	"time"

	"clusterip-policy/pkg/allocview"
	"clusterip-policy/pkg/policy"
)

// A hold is an IPAddress named by the reserved IP, with spec.parentRef
// naming the owner Service and this label. The apiserver's repair loop
// deletes orphans only among IPAddresses labelled managed-by
// ipallocator.k8s.io (repairip.go, syncIPAddress), so a hold is no orphan
// to it; its Service pass (syncService) replaces a hold at an address an
// existing Service has as its ClusterIP with that Service's IPAddress.
const (
	ManagedByLabel = "ipaddress.kubernetes.io/managed-by"
	ManagedBy      = allocview.HoldManager
	// Selector lists the holds: kubectl get ipaddresses -l <Selector>.
	Selector = ManagedByLabel + "=" + ManagedBy
)

// Want is an address the leader should hold: a reservation's, for its
// Owner, or a free address of a reserved range (Range set, Owner zero).
type Want struct {
	IP    netip.Addr
	Owner policy.Owner
	// Range is the band of the reserved range the address belongs to; zero
	// for a reservation.
	Range allocview.Band
}

// IsRange reports whether w is an address of a reserved range.
func (w Want) IsRange() bool { return !w.Range.IsZero() }

// Holder is what the hold's parentRef names: the owner Service, or the range.
func (w Want) Holder() allocview.Holder {
	if w.IsRange() {
		return allocview.RangeHolder(w.Range)
	}
	return allocview.ServiceHolder(w.Owner.Namespace, w.Owner.Name)
}

// names reports whether a listed hold's parentRef is the one w's hold has.
// rangeNames caches each range's name: a pass checks up to 4,096 holds.
func (w Want) names(h allocview.Holder) bool {
	if w.IsRange() {
		// Any range's hold: one made before the range was resized names
		// the range as it was (parentRef is immutable), and replacing it
		// would leave the address unheld, and the team's creates refused
		// as already allocated, for a grace each.
		return h.Group == allocview.HoldManager && h.Resource == allocview.RangeHoldResource && h.Namespace == ""
	}
	return h.IsService(w.Owner.Namespace, w.Owner.Name)
}

// Hold is an IPAddress this project manages, as listed.
type Hold struct {
	IP    netip.Addr
	Owner allocview.Holder
}

// Why a reservation is not held; a state of the holds gauge.
const (
	StateHeld       = "held"        // our IPAddress holds it
	StateOwner      = "owner"       // the owner Service's own allocation holds it
	StateOther      = "other"       // an IPAddress of someone else holds it (audit reports that Service)
	StateWaiting    = "waiting"     // free, within the grace after it became free
	StateCandidate  = "candidate"   // free past the grace: the leader checks the owner and creates the hold
	StateNotApplied = "not-applied" // not held by design (see Wants)
)

// States lists every state, for a gauge that shows zeros too.
var States = []string{StateHeld, StateOwner, StateOther, StateWaiting, StateCandidate, StateNotApplied}

// The states of a reserved range's addresses (the range holds gauge):
// held, waiting and candidate as for reservations, and used: an IPAddress
// that is not our hold, normally a Service of a namespace that may use the
// range (audit reports any other).
const StateUsed = "used"

// RangeStates lists every state of a range's address.
var RangeStates = []string{StateHeld, StateUsed, StateWaiting, StateCandidate}

// Wants returns the reservations to hold, in policy order, and how many
// are not held by design: the address of default/kubernetes, implicit or
// written out (the apiserver recreates that Service itself, through its
// loopback identity, which both webhooks exempt: no mutating review would
// release the hold, the apiserver would fail "provided IP is already
// allocated" every 10 s and in-cluster clients would lose their route to
// it), reservations whose owner lives in a namespace the webhook is never
// called for (skipped: its own, and those the webhook configurations'
// namespaceSelector leaves out, as internal/judged says), or one the policy
// exempts (no release either), and
// addresses outside the active ranges (the apiserver could not allocate
// them anyway). The policy bounds reservations (policy.MaxReservations), so
// the holds are bounded too: one small IPAddress each.
func Wants(p *policy.Policy, rs allocview.RangeSet, skipped func(namespace string) bool) (wants []Want, notApplied int) {
	for _, r := range p.Reservations {
		if r.Implicit || r.Owner == policy.KubernetesService || (skipped != nil && skipped(r.Owner.Namespace)) || slices.Contains(p.ExemptNamespaces, r.Owner.Namespace) {
			notApplied++
			continue
		}
		if k := rs.Place(r.IP).Kind; k == allocview.Outside || k == allocview.Unusable {
			notApplied++
			continue
		}
		wants = append(wants, Want{IP: r.IP, Owner: r.Owner})
	}
	return wants, notApplied
}

// RangeWants returns every address of the reserved ranges to hold, in
// address order: all of each range but the addresses the apiserver never
// allocates (outside the active ranges, network and broadcast), the first
// address of each active range (default/kubernetes's) and those
// reserved for a single Service (held for that owner, if at all, by
// Wants). A range that names a namespace the webhook is never called for
// (skipped) is not held at all (UnheldRanges says which and why): no
// review would release its addresses for that namespace, whose Services
// would get "already allocated" forever. The policy bounds the ranges to
// policy.MaxReservedRangeAddresses addresses in all, so the wants, the
// IPAddress objects and this work are bounded too.
func RangeWants(p *policy.Policy, rs allocview.RangeSet, skipped func(namespace string) bool) (wants []Want, notApplied int) {
	if len(p.ReservedRanges) == 0 {
		return nil, 0
	}
	for _, r := range p.ReservedRanges {
		if _, ok := skippedNamespace(r, skipped); ok {
			notApplied += r.Size
			continue
		}
		// r.Size bounds the walk: Next never wraps before Last.
		for ip, n := r.Band.First, 0; n < r.Size; ip, n = ip.Next(), n+1 {
			pl := rs.Place(ip)
			if k := pl.Kind; k == allocview.Outside || k == allocview.Unusable || ip == pl.Range.Prefix.Addr().Next() {
				// The first address of every active range is where an
				// apiserver started with that range puts default/kubernetes,
				// whether the policy reserves it or not: a hold there
				// would keep the apiserver from recreating that Service
				// (see Wants).
				notApplied++
				continue
			}
			// Explicit reservations are a map lookup each (no RangeSet:
			// the implicit one is the first address, skipped above).
			if _, reserved := p.ReservedOwner(ip, allocview.RangeSet{}); reserved {
				continue // the reservation decides; counted there
			}
			wants = append(wants, Want{IP: ip, Range: r.Band})
		}
	}
	return wants, notApplied
}

// skippedNamespace returns the first namespace r names that the webhook is
// never called for. A namespaceSelector's matches are not looked at: they
// change with labels, and a range of labels is held as its names allow.
func skippedNamespace(r policy.ReservedRange, skipped func(namespace string) bool) (string, bool) {
	if skipped == nil {
		return "", false
	}
	for _, ns := range r.Namespaces {
		if skipped(ns) {
			return ns, true
		}
	}
	return "", false
}

// UnheldRanges says, one line per range, which reserved ranges RangeWants
// leaves unheld because they name a namespace the webhook is never called
// for, and what to do about it. The policy bounds the ranges to 64, so the
// lines are bounded too.
func UnheldRanges(p *policy.Policy, skipped func(namespace string) bool) []string {
	var out []string
	for _, r := range p.ReservedRanges {
		if ns, ok := skippedNamespace(r, skipped); ok {
			out = append(out, fmt.Sprintf("reservedRanges[%d] %s is not held: it names namespace %q, which the Service webhooks are never called for, so no review could release its addresses there (its Services would be refused as already allocated); the webhook still judges every other namespace's use of it. Move that namespace's Services to a range of their own, drop it from this range, or let the webhooks judge it (their namespaceSelector)", r.Index, r.String(), ns))
		}
	}
	return out
}

// Plan is one pass of the leader.
type Plan struct {
	// Create are reservations free past the grace; the leader creates a
	// hold for each only after it finds the owner Service absent.
	Create []Want
	// Delete are holds to remove: their reservation left the policy, or
	// names another owner now (parentRef is immutable, so a changed owner
	// is a delete now and a create on a later pass).
	Delete []Hold
	// States counts the reservations' wants (and not-applied
	// reservations) by state; RangeStates the ranges' addresses.
	States      map[string]int
	RangeStates map[string]int
	// Next is when the first waiting address ends its grace (zero when
	// none waits): the leader's next pass is due then at the latest.
	Next time.Time
}

// FreeSince remembers when each wanted address was first seen free, so an
// address is re-held only after it has stayed free for the grace: an
// owner's create released it a moment ago and the apiserver is about to
// allocate it (docs/operations.md, the holds).
type FreeSince map[netip.Addr]time.Time

// Decide computes a pass. allocated is the view of every IPAddress (any
// manager); holds are ours as listed by label. It updates free and drops
// entries of addresses that are no longer wanted or no longer free.
func Decide(wants []Want, notApplied int, holds []Hold, allocated func(netip.Addr) (allocview.Holder, bool), free FreeSince, now time.Time, grace time.Duration) Plan {
	plan := Plan{States: map[string]int{}, RangeStates: map[string]int{}}
	for _, s := range States {
		plan.States[s] = 0
	}
	for _, s := range RangeStates {
		plan.RangeStates[s] = 0
	}
	plan.States[StateNotApplied] = notApplied
	wanted := make(map[netip.Addr]Want, len(wants))
	for _, w := range wants {
		wanted[w.IP] = w
	}
	ours := make(map[netip.Addr]bool, len(holds))
	for _, h := range holds {
		w, ok := wanted[h.IP]
		if !ok || !w.names(h.Owner) {
			plan.Delete = append(plan.Delete, h)
			continue
		}
		ours[h.IP] = true
	}
	for ip := range free {
		if _, ok := wanted[ip]; !ok {
			delete(free, ip)
		}
	}
	for _, w := range wants {
		states := plan.States
		if w.IsRange() {
			states = plan.RangeStates
		}
		if ours[w.IP] {
			states[StateHeld]++
			delete(free, w.IP)
			continue
		}
		if h, ok := allocated(w.IP); ok {
			// The view may lag our own list by a moment; either way the
			// address is not free. Whose it is decides the state only.
			switch {
			case w.IsRange():
				states[StateUsed]++
			case h.IsService(w.Owner.Namespace, w.Owner.Name):
				states[StateOwner]++
			default:
				states[StateOther]++
			}
			delete(free, w.IP)
			continue
		}
		since, seen := free[w.IP]
		if !seen {
			free[w.IP] = now
			since = now
		}
		if now.Sub(since) < grace {
			states[StateWaiting]++
			if end := since.Add(grace); plan.Next.IsZero() || end.Before(plan.Next) {
				plan.Next = end
			}
			continue
		}
		states[StateCandidate]++
		plan.Create = append(plan.Create, w)
	}
	return plan
}

// Releasable reports whether the IPAddress (its labels and parentRef) is a
// hold of ours for owner: the only kind a release may delete.
func Releasable(labels map[string]string, holder allocview.Holder, owner policy.Owner) error {
	if labels[ManagedByLabel] != ManagedBy {
		return fmt.Errorf("the IPAddress is managed by %q, not %s", labels[ManagedByLabel], ManagedBy)
	}
	if !holder.IsService(owner.Namespace, owner.Name) {
		return fmt.Errorf("the hold names %s, not %s", holder, owner)
	}
	return nil
}

// RangeReleasable reports whether the IPAddress (its labels and parentRef)
// is a hold of ours for the reserved range band: the only kind a release
// for a Service that may use the range may delete.
func RangeReleasable(labels map[string]string, holder allocview.Holder, band allocview.Band) error {
	if labels[ManagedByLabel] != ManagedBy {
		return fmt.Errorf("the IPAddress is managed by %q, not %s", labels[ManagedByLabel], ManagedBy)
	}
	holder.Ours = true // the label, checked above, is what makes it ours
	if !holder.IsAnyRangeHold() {
		// A hold naming the range as it was before a resize is one: the
		// address is in band, which admits this Service.
		return fmt.Errorf("the hold names %s, not a reserved range (%s)", holder, allocview.RangeHoldName(band))
	}
	return nil
}
