package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// Profiling the apiserver (BENCH_PROFILE): where its time goes while a
// configuration is in force. The apiserver's admission counters say how
// much each plugin costs per create; a CPU profile says what inside it
// (conversion of the object, the request built for CEL, each expression's
// steps, metrics), which is what changing the managed conditions needs to
// know. `go tool pprof -top -focus=admission profiles/*-ours-*.pprof`
// merges a configuration's profiles.

// profileSlice is the length of one CPU profile taken from the apiserver's
// /debug/pprof/profile: whole seconds (the handler's unit), short, so that
// the last one overlaps the end of a run by at most this much.
const profileSlice = 1 * time.Second

// maxProfileSlices bounds the profiles of one run whatever its length.
var maxProfileSlices = int(runTimeout / profileSlice)

// profiling reports whether the run of the configuration in force takes
// the apiserver's CPU profile.
func (b *Bench) profiling() bool {
	return b.o.ProfileDir != "" && slices.Contains(b.o.Knobs.Profile, b.current)
}

// profile takes consecutive CPU profiles of the apiserver until ctx ends
// (the run's creates are done), writing each to the profile directory as
// r<round>-e<existing>-<workload>-<config>-<n>.pprof, and returns how many
// it wrote. A profile that fails to arrive ends the loop with its error:
// a run that was meant to be profiled and was not must say so.
func (b *Bench) profile(ctx context.Context, round int, w Workload) (int, error) {
	if err := os.MkdirAll(b.o.ProfileDir, 0o755); err != nil {
		return 0, err
	}
	prefix := fmt.Sprintf("r%d-e%d-%s-%d-%s", round, b.existing, w.Kind, w.Clients, b.current)
	// The request outlives ctx by one slice at most: the handler answers
	// only once its seconds are over.
	req := context.WithoutCancel(ctx)
	n := 0
	for ; n < maxProfileSlices && ctx.Err() == nil; n++ {
		rctx, cancel := context.WithTimeout(req, profileSlice+30*time.Second)
		data, err := b.cs.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").
			Param("seconds", fmt.Sprint(int(profileSlice/time.Second))).DoRaw(rctx)
		cancel()
		if err != nil {
			return n, fmt.Errorf("CPU profile %d of the apiserver (is it running with --profiling?): %w", n+1, err)
		}
		if err := os.WriteFile(filepath.Join(b.o.ProfileDir, fmt.Sprintf("%s-%02d.pprof", prefix, n)), data, 0o644); err != nil {
			return n, err
		}
	}
	return n, nil
}
