package policy

import (
	"net/netip"
	"testing"

	"clusterip-policy/pkg/allocview"
	"clusterip-policy/test/fixtures"
)

// already-allocated is decided from the view only where the view tracks
// allocations; elsewhere it is the apiserver's own check.
func TestAlreadyAllocatedNeedsAViewThatTracksAllocations(t *testing.T) {
	p := fixtures.MustPolicy(t, ParseDocument, dnsPolicy)
	req := Request{Operation: Create, Service: fixtures.Service("default", "web", fixtures.WithClusterIP("10.96.0.20"))}
	for _, tracks := range []bool{true, false} {
		snap := allocview.NewView().Update(func(tx *allocview.Tx) {
			tx.SetServiceCIDR(serviceCIDR("kubernetes", true, "10.96.0.0/16"))
			tx.SetAllocation(netip.MustParseAddr("10.96.0.20"), allocview.ServiceHolder("team-a", "db"))
			tx.MarkSynced(tracks)
		})
		d := Mutate(Env{Policy: p, Snapshot: snap}, req)
		if got := len(d.Rules()) == 1 && d.Rules()[0] == RuleAlreadyAllocated; got != tracks {
			t.Errorf("TracksAllocations %v: rules %v (%s)", tracks, d.Rules(), d.Message)
		}
	}
}
