// Package poll holds the small loops the server's parts share: the Loop
// every controller's pass runs under (kicks, resync, minimum gap, backoff,
// one error line per change), a sleep that ends with its context, the
// re-read of a file that may change under a mounted volume, and the count
// of a pass's failures. It imports nothing of the application.
package poll

import (
	"context"
	"fmt"
	"time"
)

// Sleep waits d or until ctx ends; it reports whether ctx is still live.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Reread calls read every interval until ctx ends, and hands its error to
// report: nil after every good read, an error only when its text differs
// from the last one, so a file that stays bad (a policy, a CA bundle) is
// reported once, not at every interval. A mounted ConfigMap or Secret
// changes by an atomic symlink swap, which re-reading sees as reliably as
// any file event.
func Reread(ctx context.Context, interval time.Duration, read func() error, report func(error)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	lastErr := ""
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := read()
		switch {
		case err == nil:
			lastErr = ""
		case err.Error() == lastErr:
			continue
		default:
			lastErr = err.Error()
		}
		report(err)
	}
}

// Failures keeps the first error of a pass and counts the rest, so a
// lasting failure (RBAC, an apiserver down) logs one line a pass, not one
// per object the pass touched.
type Failures struct {
	N     int
	first error
}

// Add counts err; nil is not a failure.
func (f *Failures) Add(err error) {
	if err == nil {
		return
	}
	if f.N == 0 {
		f.first = err
	}
	f.N++
}

// Err is the first failure with the number of the others, or nil.
func (f *Failures) Err() error {
	switch f.N {
	case 0:
		return nil
	case 1:
		return f.first
	}
	return fmt.Errorf("%w (and %d more failures this pass)", f.first, f.N-1)
}
