package framework

import (
	"context"
	"fmt"
	"time"
)

// poll calls check every interval until it reports done, ctx ends, timeout
// passes or one of the watched processes exits. The last error of check is
// part of the timeout error.
func poll(ctx context.Context, what string, timeout, interval time.Duration, watch []*Process, check func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		for _, p := range watch {
			if err := p.exitedErr(); err != nil {
				return fmt.Errorf("waiting for %s: %w", what, err)
			}
		}
		done, err := check(ctx)
		if done {
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not reached within %s: last error: %v", what, timeout, last)
		case <-time.After(interval):
		}
	}
}
