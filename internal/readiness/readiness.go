// Package readiness is the one gate between the policy source and the view
// on one side and everything that decides on them on the other: every
// review, /readyz, the managed matchConditions and the leader's loops ask
// it for the state to act on, and it hands out the policy.Env built from
// it, so no caller assembles one by hand. Whether a leader loop may act on
// a stale view is decided here, once (Gate.ForLoop).
package readiness

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"clusterip-policy/internal/policysource"
	"clusterip-policy/pkg/allocview"
	"clusterip-policy/pkg/policy"
)

// Gate is the one answer to "may a decision be made now, and on what".
type Gate struct {
	Policies *policysource.Store
	View     *allocview.View
	// StaleFor reports how long the view may have been missing changes
	// (a failed watch), and which resource; nil when nothing watches.
	StaleFor func(time.Time) (time.Duration, string)
	// MaxStaleness is how long a failed watch is tolerated (and flagged in
	// the audit log) before reviews are denied as not ready.
	MaxStaleness time.Duration
	// StaticCIDRs are --service-cidr: the ranges used when the cluster
	// serves no ServiceCIDR objects.
	StaticCIDRs []netip.Prefix
	// NamespaceLabels answers the namespaces' labels (for reserved ranges
	// chosen by namespaceSelector); nil where nothing watches them.
	NamespaceLabels policy.NamespaceLabels
}

// State is what a decision is made against, as far as the check got: Snap
// is always set; Policy and Env only once the view has synced; Stale only
// where something watches. The decision log line reports each part it has.
type State struct {
	Policy *policysource.Loaded
	Snap   *allocview.Snapshot
	Stale  time.Duration
	// Env is the policy, the snapshot and the static ranges, for pkg/policy.
	Env policy.Env
}

// NotReadyMessage is what every request gets until the view has synced:
// deciding on an empty view would allow what the policy forbids.
const NotReadyMessage = "clusterip-policy is not ready: its view of the cluster's ServiceCIDRs and IPAddresses has not synced yet (or no policy is loaded); retry in a few seconds"

// Check returns the state to decide a review against, or an error whose
// message is what the client is told: /readyz, every review and the
// managed matchConditions (which encode what a review would answer) ask
// it. The snapshot is the one the decision will use, so "synced" is asked
// of it rather than of the source that feeds it.
func (g *Gate) Check(now time.Time) (State, error) {
	s, err := g.synced()
	if err != nil {
		return s, err
	}
	if g.StaleFor != nil {
		stale, which := g.StaleFor(now)
		s.Stale = stale
		if stale > g.MaxStaleness {
			return s, errors.New(StaleMessage(which, stale))
		}
	}
	return s, nil
}

// ForLoop returns the state a leader loop (the holds, the periodic audit)
// acts on: a loaded policy and a synced view, stale or not. A stale view is
// tolerated here, unlike in Check, because pausing would stop the loops
// exactly while the view is blind, and what they write is checked by the
// apiserver rather than by the view: a hold is created only for an owner a
// live GET does not find and fails with AlreadyExists on an address
// allocated meanwhile, and the audit lists the Services live each pass
// (its findings on the view's ranges lag as the view does, and the next
// pass corrects them). A loop that needs more says so where it acts.
func (g *Gate) ForLoop(time.Time) (State, error) {
	return g.synced()
}

// synced is the part of the check every caller shares.
func (g *Gate) synced() (State, error) {
	s := State{Snap: g.View.Snapshot()}
	pol := g.Policies.Current()
	if pol == nil || !s.Snap.Synced {
		return s, errors.New(NotReadyMessage)
	}
	s.Policy = pol
	s.Env = policy.Env{Policy: pol.Policy, Snapshot: s.Snap, StaticCIDRs: g.StaticCIDRs, NamespaceLabels: g.NamespaceLabels}
	return s, nil
}

// StaleMessage is the refusal of a review on a view stale for too long.
func StaleMessage(resource string, d time.Duration) string {
	return fmt.Sprintf("clusterip-policy is not ready: its watch of %s has failed for %s, so its view of allocated addresses may be out of date; retry once it recovers", resource, d.Round(time.Second))
}
