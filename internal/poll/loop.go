package poll

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/go-logr/logr"
)

// Loop runs a controller's pass: at once, again whenever it is kicked, at
// the latest when the pass asks, and at least every Resync; never two
// passes closer than MinGap, and a failing pass retried with a backoff.
// Every controller of the leader runs its pass under one, so that they
// share one shape and one error-log policy: a failure is logged when its
// text differs from the last one logged, and a pass that succeeds after
// logged failures logs Recovered once; never a line per retry.
//
// Set the fields, then call Run; Run may run again once it returned (the
// next leader term), never twice at once. Kick may be called from
// anywhere, at any time: a kick made while no Run runs is answered by the
// next Run's first pass.
type Loop struct {
	// Pass is one pass. next > 0 asks for the next pass within next (a
	// certificate falls due, a retry of something not yet there); 0 leaves
	// it to Resync; < 0 asks for it at once (something fell due during the
	// pass), which MinGap still spaces. A pass that returns an error is
	// retried after the backoff instead.
	Pass func(ctx context.Context) (next time.Duration, err error)
	// Resync is the longest wait between two passes; 0: none, the passes
	// follow kicks, next and retries only.
	Resync time.Duration
	// MinGap is the shortest time from the start of one pass to the start
	// of the next, whatever the kicks: a burst of them (a controller's own
	// writes coming back as events) makes one pass, not one each.
	MinGap time.Duration
	// Backoff is the wait after a failed pass, doubled after each further
	// failure up to MaxBackoff and reset by a pass that succeeds. 0: a
	// failed pass is retried as a good one would be (next, Resync).
	Backoff, MaxBackoff time.Duration

	// Log, with the messages Failing and Recovered, logs the failures.
	// Failing says what failed and what stays in force meanwhile; the
	// line carries the error, "retryIn" and the values WithValues put on
	// the error. Recovered is logged once when a pass succeeds after a
	// logged failure; "" when the pass's own log line already says so.
	Log                logr.Logger
	Failing, Recovered string
	// OnPass, if not nil, is called after each pass that the end of ctx
	// did not cut, with its error: the controller's metrics.
	OnPass func(err error)

	once sync.Once
	kick chan struct{}
	// after and now are the clock; a test replaces them.
	after func(time.Duration) <-chan time.Time
	now   func() time.Time
}

// Kick asks for a pass as soon as MinGap allows. It never blocks, and kicks
// made before the pass starts are one: the pass reads the state they
// announced.
func (l *Loop) Kick() {
	select {
	case l.kickChan() <- struct{}{}:
	default:
	}
}

// kickChan is made on first use, so that a Loop's zero value can be kicked
// before Run (informers' handlers start before the loop does).
func (l *Loop) kickChan() chan struct{} {
	l.once.Do(func() { l.kick = make(chan struct{}, 1) })
	return l.kick
}

// Run runs the passes until ctx ends.
func (l *Loop) Run(ctx context.Context) {
	after, now := l.after, l.now
	if after == nil {
		after = time.After
	}
	if now == nil {
		now = time.Now
	}
	kick := l.kickChan()
	backoff := l.Backoff
	errs := ErrorLog{Log: l.Log, Failing: l.Failing, Recovered: l.Recovered}
	var started time.Time
	for {
		if gap := l.MinGap - now().Sub(started); !started.IsZero() && gap > 0 {
			select {
			case <-ctx.Done():
				return
			case <-after(gap):
			}
		}
		// Kicks made until now are answered by this pass.
		select {
		case <-kick:
		default:
		}
		started = now()
		next, err := l.Pass(ctx)
		if ctx.Err() != nil {
			return
		}
		if l.OnPass != nil {
			l.OnPass(err)
		}
		wait := l.Resync
		if next > 0 && (wait == 0 || next < wait) {
			wait = next
		}
		switch {
		case err != nil && l.Backoff > 0:
			wait, backoff = backoff, min(2*backoff, max(l.MaxBackoff, l.Backoff))
			fallthrough
		case err != nil:
			errs.Report(err, "retryIn", wait.String())
		default:
			errs.Report(nil)
			backoff = l.Backoff
		}
		if next < 0 && err == nil {
			continue
		}
		var timer <-chan time.Time // nil: no timed pass, only kicks
		if wait > 0 {
			timer = after(wait)
		}
		select {
		case <-ctx.Done():
			return
		case <-kick:
			// Put back: the pass after MinGap answers it.
			l.Kick()
		case <-timer:
		}
	}
}

// ErrorLog is Loop's error-log policy, for a repeated step that is not a
// pass of its own (a lookup a pass makes on the side): a failure is logged
// when its text differs from the last one logged, with the values
// WithValues put on it, and a success after a logged failure logs
// Recovered once. Not safe for concurrent use: one per loop.
type ErrorLog struct {
	Log                logr.Logger
	Failing, Recovered string
	logged             string // the error last logged, "" while it succeeds
}

// Report takes the step's outcome: err, or nil for a success; the keys and
// values go on a failure's line.
func (e *ErrorLog) Report(err error, keysAndValues ...any) {
	if err == nil {
		if e.logged != "" && e.Recovered != "" {
			e.Log.Info(e.Recovered)
		}
		e.logged = ""
		return
	}
	if err.Error() != e.logged {
		e.logged = err.Error()
		e.Log.Error(err, e.Failing, append(keysAndValues, valuesOf(err)...)...)
	}
}

// WithValues puts keys and values on err for Loop's log line: what the
// line should say besides the error's text (a reason, an object's name).
// The error's text, which Loop compares, stays err's.
func WithValues(err error, keysAndValues ...any) error {
	if err == nil {
		return nil
	}
	return &valuedError{err: err, values: keysAndValues}
}

type valuedError struct {
	err    error
	values []any
}

func (e *valuedError) Error() string { return e.err.Error() }
func (e *valuedError) Unwrap() error { return e.err }

func valuesOf(err error) []any {
	var v *valuedError
	if errors.As(err, &v) {
		return v.values
	}
	return nil
}
