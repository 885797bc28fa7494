package policy

import (
	"net/netip"
	"testing"

	"clusterip-policy/pkg/allocview"
	"clusterip-policy/test/fixtures"
)

// Most reviews are allowed dynamic creates; deciding them must not
// allocate (the webhook's cost per review, issue 9). A change that makes
// the allow path allocate again fails here, not only in a benchmark.
func TestAllowedDynamicCreateDoesNotAllocate(t *testing.T) {
	v := allocview.NewView()
	snap := v.Update(func(tx *allocview.Tx) {
		tx.SetServiceCIDR(serviceCIDR("kubernetes", true, "10.96.0.0/12", "fd00:10:96::/108"))
		tx.SetAllocation(netip.MustParseAddr("10.96.0.1"), allocview.ServiceHolder("default", "kubernetes"))
		tx.SetAllocation(netip.MustParseAddr("10.100.0.1"), allocview.ServiceHolder("bench", "svc"))
		tx.MarkSynced(true)
	})
	env := Env{Policy: fixtures.MustPolicy(t, ParseDocument, dnsPolicy), Snapshot: snap}
	mutate, validate := dynamicCreate()
	for _, tt := range []struct {
		stage  string
		decide func() Decision
	}{
		{"mutate", func() Decision { return Mutate(env, mutate) }},
		{"validate", func() Decision { return Validate(env, validate) }},
	} {
		if d := tt.decide(); d.Outcome != Allowed {
			t.Fatalf("%s: %s: %s", tt.stage, d.Outcome, d.Message)
		}
		if n := testing.AllocsPerRun(200, func() { tt.decide() }); n != 0 {
			t.Errorf("%s of an allowed dynamic create allocates %v times", tt.stage, n)
		}
	}
}
