package server

import (
	"testing"
	"time"
)

// /readyz and every review ask readiness.check; these are its answers.
func TestReadinessGivesOneAnswerWithItsReason(t *testing.T) {
	unsynced := newTestReviewer(t, testPolicy, false)
	if _, err := unsynced.check(time.Now()); err == nil || err.Error() != notReadyMessage {
		t.Fatalf("unsynced view: %v, want %q", err, notReadyMessage)
	}
	r := newTestReviewer(t, testPolicy, true)
	state, err := r.check(time.Now())
	if err != nil || state.policy == nil || state.policy.generation != 1 || state.snap.Generation != 1 {
		t.Fatalf("synced view: state %+v err %v", state, err)
	}
	r.maxStaleness = 30 * time.Second
	r.staleFor = func(time.Time) (time.Duration, string) { return 31 * time.Second, "servicecidrs" }
	state, err = r.check(time.Now())
	want := staleMessage("servicecidrs", 31*time.Second)
	if err == nil || err.Error() != want || state.stale != 31*time.Second || state.policy == nil {
		t.Fatalf("stale view: state %+v err %v, want %q", state, err, want)
	}
}
