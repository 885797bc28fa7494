package poll

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
)

// loopRig runs a Loop on a fake clock. Each pass takes its result from
// the test (pass), and each wait the loop starts is handed to the test
// (nextWait), which fires it; so every step is an event the test waits
// for, never a pause.
type loopRig struct {
	t       *testing.T
	l       *Loop
	results chan passResult
	waits   chan rigWait
	cancel  context.CancelFunc
	done    chan struct{}

	mu   sync.Mutex
	now  time.Time
	logs []string
	errs []error // OnPass's
	// counted has a value for each OnPass call: pass waits for it, so
	// that a test which stops the loop right after a pass finds it
	// counted (a cancel before OnPass would drop it as cut).
	counted chan struct{}
}

type passResult struct {
	next time.Duration
	err  error
}

type rigWait struct {
	d    time.Duration
	fire chan time.Time
}

func newLoopRig(t *testing.T, l *Loop) *loopRig {
	r := &loopRig{t: t, l: l, results: make(chan passResult), waits: make(chan rigWait, 100), done: make(chan struct{}), now: time.Unix(1e9, 0),
		counted: make(chan struct{}, 100)}
	l.Pass = func(ctx context.Context) (time.Duration, error) {
		select {
		case res := <-r.results:
			return res.next, res.err
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	l.OnPass = func(err error) {
		r.mu.Lock()
		r.errs = append(r.errs, err)
		r.mu.Unlock()
		r.counted <- struct{}{}
	}
	l.Log = funcr.New(func(prefix, args string) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.logs = append(r.logs, args)
	}, funcr.Options{})
	l.now = func() time.Time {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.now
	}
	l.after = func(d time.Duration) <-chan time.Time {
		w := rigWait{d: d, fire: make(chan time.Time, 1)}
		r.waits <- w
		return w.fire
	}
	return r
}

func (r *loopRig) start() {
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { defer close(r.done); r.l.Run(ctx) }()
	r.t.Cleanup(r.stop)
}

// stop ends Run and waits for it to return.
func (r *loopRig) stop() {
	r.cancel()
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		r.t.Fatal("Run did not return once its context ended")
	}
}

// pass lets the pending pass run with this result, and returns once the
// loop has counted it (OnPass); it fails the test if no pass starts.
func (r *loopRig) pass(next time.Duration, err error) {
	r.t.Helper()
	select {
	case r.results <- passResult{next, err}:
	case <-time.After(10 * time.Second):
		r.t.Fatal("no pass started")
	}
	select {
	case <-r.counted:
	case <-time.After(10 * time.Second):
		r.t.Fatal("the pass was not counted")
	}
}

// nextWait returns the next wait the loop starts.
func (r *loopRig) nextWait() rigWait {
	r.t.Helper()
	select {
	case w := <-r.waits:
		return w
	case <-time.After(10 * time.Second):
		r.t.Fatal("the loop started no wait")
	}
	return rigWait{}
}

// elapse moves the clock by w's duration and ends w.
func (r *loopRig) elapse(w rigWait) {
	r.mu.Lock()
	r.now = r.now.Add(w.d)
	r.mu.Unlock()
	w.fire <- r.now
}

func (r *loopRig) passes() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.errs)
}

func TestLoopWaitsForNextOrTheResync(t *testing.T) {
	r := newLoopRig(t, &Loop{Resync: 10 * time.Second, MinGap: time.Millisecond})
	r.start()
	for _, c := range []struct{ next, want time.Duration }{
		{0, 10 * time.Second},                // nothing asked: the resync
		{3 * time.Second, 3 * time.Second},   // a certificate due sooner
		{time.Hour, 10 * time.Second},        // never later than the resync
		{time.Millisecond, time.Millisecond}, // the pass's own retry
	} {
		r.pass(c.next, nil)
		w := r.nextWait()
		if w.d != c.want {
			t.Fatalf("pass asked for %s: waited %s, want %s", c.next, w.d, c.want)
		}
		r.elapse(w)
	}
	// Overdue: at once, but never closer than MinGap.
	r.pass(-time.Second, nil)
	if w := r.nextWait(); w.d != time.Millisecond {
		t.Fatalf("a pass that asked for the next at once waited %s, want the gap 1ms", w.d)
	}
}

func TestLoopBacksOffAndResetsOnSuccess(t *testing.T) {
	r := newLoopRig(t, &Loop{Resync: time.Minute, Backoff: time.Second, MaxBackoff: 5 * time.Second})
	r.start()
	var got []time.Duration
	for _, err := range []error{errors.New("x"), errors.New("x"), errors.New("x"), errors.New("x"), nil, errors.New("x"), nil} {
		r.pass(0, err)
		w := r.nextWait()
		got = append(got, w.d)
		r.elapse(w)
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, time.Minute, time.Second, time.Minute}
	if !slices.Equal(got, want) {
		t.Fatalf("waits %v, want %v", got, want)
	}
}

// Without a backoff a failed pass is retried as a good one is: the audit
// retries at its interval.
func TestLoopWithoutBackoffRetriesAtTheResync(t *testing.T) {
	r := newLoopRig(t, &Loop{Resync: time.Minute})
	r.start()
	r.pass(0, errors.New("x"))
	if w := r.nextWait(); w.d != time.Minute {
		t.Fatalf("waited %s after a failure, want the resync 1m", w.d)
	}
}

// Kicks made before Run, or while a pass runs, or many at once, are one
// pass each time, and never two passes closer than MinGap.
func TestLoopKicksCoalesceAndKeepTheMinimumGap(t *testing.T) {
	l := &Loop{MinGap: 5 * time.Second} // no resync: kicks only
	l.Kick()                            // before Run: safe, answered by the first pass
	l.Kick()
	r := newLoopRig(t, l)
	r.start()
	r.pass(0, nil) // the first pass, at once
	// A kick while no pass runs: the gap since the first pass's start is
	// not over, so the loop waits the rest of it, whatever more kicks come.
	for range 3 {
		l.Kick()
	}
	w := r.nextWait()
	if w.d != 5*time.Second {
		t.Fatalf("waited %s after a kick 0s after a pass, want the gap 5s", w.d)
	}
	l.Kick()
	r.elapse(w)
	r.pass(0, nil) // one pass for the four kicks
	// A kick during a pass brings one more pass.
	r.mu.Lock()
	r.now = r.now.Add(2 * time.Second)
	r.mu.Unlock()
	go l.Kick()
	w = r.nextWait()
	if w.d != 3*time.Second {
		t.Fatalf("waited %s after a kick 2s after a pass, want the rest of the gap 3s", w.d)
	}
	r.elapse(w)
	r.pass(0, nil)
	r.stop()
	if n := r.passes(); n != 3 {
		t.Fatalf("%d passes, want 3 (the first, one for four kicks, one for the last kick)", n)
	}
	if len(r.waits) != 0 {
		t.Fatalf("the loop waited again with no kick pending: %v", (<-r.waits).d)
	}
}

func TestLoopKickDuringAPassBringsOneMore(t *testing.T) {
	l := &Loop{}
	r := newLoopRig(t, l)
	r.start()
	l.Kick() // the first pass has not taken its result yet: the pass runs
	r.pass(0, nil)
	l.Kick()
	r.pass(0, nil) // no gap, no wait: at once
	r.stop()
	if n := r.passes(); n != 2 {
		t.Fatalf("%d passes, want 2", n)
	}
}

// A lasting failure is one line; a new error is one more; a success after
// failures logs Recovered once; successes log nothing.
func TestLoopLogsAFailureOncePerChange(t *testing.T) {
	r := newLoopRig(t, &Loop{Resync: time.Second, Failing: "the pass failed", Recovered: "the pass works again"})
	r.start()
	a, b := errors.New("a"), WithValues(errors.New("b"), "reason", "Forbidden")
	for _, err := range []error{a, a, fmt.Errorf("%w", a), nil, nil, b, b, a, nil} {
		r.pass(0, err)
		r.elapse(r.nextWait())
	}
	r.stop()
	r.mu.Lock()
	defer r.mu.Unlock()
	want := []string{
		`"msg"="the pass failed" "error"="a" "retryIn"="1s"`,
		`"level"=0 "msg"="the pass works again"`,
		`"msg"="the pass failed" "error"="b" "retryIn"="1s" "reason"="Forbidden"`,
		`"msg"="the pass failed" "error"="a" "retryIn"="1s"`,
		`"level"=0 "msg"="the pass works again"`,
	}
	if !slices.Equal(r.logs, want) {
		t.Fatalf("logged\n%q\nwant\n%q", r.logs, want)
	}
	if len(r.errs) != 9 {
		t.Fatalf("OnPass called %d times, want 9", len(r.errs))
	}
}

// Run returns when its context ends: while it waits, and during a pass,
// whose cut result is neither counted nor logged.
func TestLoopEndsWithItsContext(t *testing.T) {
	r := newLoopRig(t, &Loop{Resync: time.Hour, Failing: "failed"})
	r.start()
	r.pass(0, nil)
	r.nextWait()
	r.stop() // while waiting

	r = newLoopRig(t, &Loop{Resync: time.Hour, Failing: "failed"})
	r.start()
	r.stop() // while the first pass waits for its result: ctx.Err()
	if n := r.passes(); n != 0 || len(r.logs) != 0 {
		t.Fatalf("a pass cut by the context's end was counted (%d) or logged (%q)", n, r.logs)
	}
}

// An ErrorLog used beside a Loop (a lookup a pass makes on the side, which
// fails on every pass while it fails) logs as the Loop does: once per
// distinct error, Recovered once after, nothing for successes.
func TestErrorLogLogsAFailureOncePerChange(t *testing.T) {
	var logs []string
	e := ErrorLog{Log: funcr.New(func(_, args string) { logs = append(logs, args) }, funcr.Options{}),
		Failing: "the lookup failed", Recovered: "the lookup works again"}
	a := errors.New("a")
	for _, err := range []error{nil, a, a, a, nil, nil, WithValues(a, "reason", "Forbidden")} {
		e.Report(err, "key", "v")
	}
	want := []string{
		`"msg"="the lookup failed" "error"="a" "key"="v"`,
		`"level"=0 "msg"="the lookup works again"`,
		`"msg"="the lookup failed" "error"="a" "key"="v" "reason"="Forbidden"`,
	}
	if !slices.Equal(logs, want) {
		t.Fatalf("logged\n%q\nwant\n%q", logs, want)
	}
}
