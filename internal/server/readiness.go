package server

import (
	"errors"
	"fmt"
	"time"

	"clusterip-policy/pkg/allocview"
)

// readiness is the one answer to "may a review be decided now, and if not,
// why": /readyz asks it (so load balancers and apiservers stop sending) and
// every review asks it (so a request that arrives anyway is refused with
// the same reason rather than decided on a view that may be wrong).
type readiness struct {
	policies *policyStore
	view     *allocview.View
	// staleFor reports how long the view may have been missing changes
	// (a failed watch), and which resource; nil when nothing watches.
	staleFor func(time.Time) (time.Duration, string)
	// maxStaleness is how long a failed watch is tolerated (and flagged in
	// the audit log) before reviews are denied as not ready.
	maxStaleness time.Duration
}

// readyState is what a review is decided against, as far as check got:
// snap is always set; policy only once the view has synced; stale only
// where something watches. The audit line reports each part it has.
type readyState struct {
	policy *loadedPolicy
	snap   *allocview.Snapshot
	stale  time.Duration
}

// notReadyMessage is what every request gets until the view has synced:
// deciding on an empty view would allow what the policy forbids.
const notReadyMessage = "clusterip-policy is not ready: its view of the cluster's ServiceCIDRs and IPAddresses has not synced yet (or no policy is loaded); retry in a few seconds"

// check returns the state to decide against, or an error whose message is
// what the client is told. The snapshot is the one the decision will use,
// so "synced" is asked of it rather than of the source that feeds it.
func (r readiness) check(now time.Time) (readyState, error) {
	s := readyState{snap: r.view.Snapshot()}
	pol := r.policies.Current()
	if pol == nil || !s.snap.Synced {
		return s, errors.New(notReadyMessage)
	}
	s.policy = pol
	if r.staleFor != nil {
		stale, which := r.staleFor(now)
		s.stale = stale
		if stale > r.maxStaleness {
			return s, errors.New(staleMessage(which, stale))
		}
	}
	return s, nil
}

func staleMessage(resource string, d time.Duration) string {
	return fmt.Sprintf("clusterip-policy is not ready: its watch of %s has failed for %s, so its view of allocated addresses may be out of date; retry once it recovers", resource, d.Round(time.Second))
}
