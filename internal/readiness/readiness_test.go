package readiness_test

import (
	"testing"
	"time"

	"github.com/go-logr/logr"

	"clusterip-policy/internal/readiness"
	"clusterip-policy/internal/readiness/readinesstest"
)

// /readyz, every review and the managed matchConditions ask Gate.Check;
// the leader's loops ask Gate.ForLoop. These are their answers.
func TestReadinessGivesOneAnswerWithItsReason(t *testing.T) {
	unsynced := readinesstest.New(t, readinesstest.Spec, false, logr.Discard()).Gate
	for name, check := range map[string]func(time.Time) (readiness.State, error){"Check": unsynced.Check, "ForLoop": unsynced.ForLoop} {
		if s, err := check(time.Now()); err == nil || err.Error() != readiness.NotReadyMessage || s.Env.Policy != nil || s.Snap == nil {
			t.Fatalf("%s on an unsynced view: state %+v err %v, want %q and no Env", name, s, err, readiness.NotReadyMessage)
		}
	}
	g := readinesstest.New(t, readinesstest.Spec, true, logr.Discard()).Gate
	state, err := g.Check(time.Now())
	if err != nil || state.Policy == nil || state.Policy.Generation != 1 || state.Snap.Generation != 1 {
		t.Fatalf("synced view: state %+v err %v", state, err)
	}
	if state.Env.Policy != state.Policy.Policy || state.Env.Snapshot != state.Snap {
		t.Fatalf("the Env is not the state's policy and snapshot: %+v", state.Env)
	}
	g.MaxStaleness = 30 * time.Second
	g.StaleFor = func(time.Time) (time.Duration, string) { return 31 * time.Second, "servicecidrs" }
	state, err = g.Check(time.Now())
	want := readiness.StaleMessage("servicecidrs", 31*time.Second)
	if err == nil || err.Error() != want || state.Stale != 31*time.Second || state.Policy == nil {
		t.Fatalf("stale view: state %+v err %v, want %q", state, err, want)
	}
	// The loops act on the stale view (readiness.go says why), and are
	// handed the same Env a review would have got.
	state, err = g.ForLoop(time.Now())
	if err != nil || state.Env.Policy == nil || state.Env.Snapshot != state.Snap {
		t.Fatalf("a loop on a stale view: state %+v err %v, want the Env", state, err)
	}
}
