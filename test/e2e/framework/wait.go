package framework

import (
	"context"
	"fmt"
	"io"
	"net/http"
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
			return fmt.Errorf("%s not reached within %s: last error: %v", what, timeout, last) //nolint:errorlint // last may be nil, which %v prints as <nil>
		case <-time.After(interval):
		}
	}
}

// getOK is a poll check that GETs url and is done on 200; any other answer
// is the error that poll reports if time runs out.
func getOK(hc *http.Client, url string) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return false, fmt.Errorf("%s %s: %s", url, resp.Status, body)
		}
		return true, nil
	}
}
