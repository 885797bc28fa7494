//go:build e2e

package bench

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"clusterip-policy/test/e2e/framework"
)

// TestBenchE2E is `make bench-e2e`: the whole benchmark with the knobs of
// the environment (BENCH_ROUNDS, BENCH_CREATES, BENCH_EXISTING,
// BENCH_CONFIGS, BENCH_WORKLOADS, BENCH_ARGS). It prints a table per round
// and writes the summary to .local/bench/ (summary.md, summary.json). It
// runs only with BENCH_E2E=1: it takes minutes and wants a quiet machine.
// It fails when a run did not measure what it names (the tables say why),
// after writing the summary.
func TestBenchE2E(t *testing.T) {
	if os.Getenv("BENCH_E2E") != "1" {
		t.Skip("the end-to-end benchmark runs with BENCH_E2E=1 (make bench-e2e)")
	}
	k, err := KnobsFromEnv(os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := "make bench-e2e"
	for _, v := range []string{"BENCH_ROUNDS", "BENCH_CREATES", "BENCH_EXISTING", "BENCH_CONFIGS", "BENCH_WORKLOADS", "BENCH_ARGS", "BENCH_PROFILE"} {
		if s := os.Getenv(v); s != "" {
			cmd += " " + v + "='" + s + "'"
		}
	}
	out := filepath.Join(root, ".local", "bench")
	profiles := filepath.Join(out, "profiles")
	if len(k.Profile) > 0 {
		// Only this run's profiles, so that a glob merges nothing older.
		if err := os.RemoveAll(profiles); err != nil {
			t.Fatal(err)
		}
	}
	s := run(t, k, cmd, profiles)
	writeSummary(t, s, out)
	t.Logf("bench: summary in %s (summary.md, summary.json)", out)
	for _, r := range s.Runs {
		if len(r.Problems) > 0 {
			t.Errorf("round %d, %d existing, %s, %s: %s", r.Round, r.Existing, r.Workload, r.Config, strings.Join(r.Problems, "; "))
		}
	}
}

// TestBenchSmoke runs the harness once with tiny numbers, every
// configuration once, in CI: it fails when the harness breaks (a
// configuration not in force during its run, a webhook not called where it
// must be, a failed create, a summary that cannot be written).
func TestBenchSmoke(t *testing.T) {
	k := Knobs{
		Rounds: 1, Creates: 30, Existing: []int{0, 20},
		Configs:   AllConfigs,
		Workloads: []Workload{{KindDynamic, 2}, {KindMixed, 4}},
		// As manifests/base runs it: the leader keeps the matchConditions
		// in step, so a dynamic create reaches neither webhook.
		WebhookArgs: []string{"--manage-match-conditions"},
	}
	s := run(t, k, "go test -tags e2e -run TestBenchSmoke ./test/bench/", "")
	if want := len(k.Existing) * len(k.Configs) * len(k.Workloads); len(s.Runs) != want {
		t.Fatalf("%d runs, want %d", len(s.Runs), want)
	}
	for _, r := range s.Runs {
		if len(r.Problems) > 0 {
			t.Errorf("%d existing, %s, %s: %s", r.Existing, r.Workload, r.Config, strings.Join(r.Problems, "; "))
		}
		if r.Config == ConfigOurs && r.Workload.Kind == KindDynamic && r.MutateCalls+r.ValidateCalls > 0 {
			t.Errorf("%d existing, ours, %s: %.0f mutate and %.0f validate calls for %d dynamic creates; the managed matchConditions must send none", r.Existing, r.Workload, r.MutateCalls, r.ValidateCalls, r.Creates)
		}
		if r.Config == ConfigOurs && r.Workload.Kind == KindMixed && (r.Static != 3 || r.Owners != 1) {
			t.Errorf("ours, mixed: %d static requests and %d owners, want 3 and 1", r.Static, r.Owners)
		}
	}
	for _, row := range s.Rows {
		if row.Config != ConfigNone && row.VsNone == nil {
			t.Errorf("%d existing, %s, %s: no ratio to none", row.Existing, row.Workload, row.Config)
		}
	}
	dir := t.TempDir()
	writeSummary(t, s, dir)
	var back Summary
	data, err := os.ReadFile(filepath.Join(dir, "summary.json"))
	if err == nil {
		err = json.Unmarshal(data, &back)
	}
	if err != nil || len(back.Runs) != len(s.Runs) {
		t.Errorf("summary.json does not read back: %v", err)
	}
}

// run runs the benchmark of k; profileDir gets the apiserver's CPU
// profiles of the configurations k.Profile names.
func run(t *testing.T, k Knobs, command, profileDir string) (s Summary) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Minute)
	defer cancel()
	b, err := Start(ctx, Options{Knobs: k, Command: command, Out: os.Stdout, Logf: t.Logf, ProfileDir: profileDir})
	if err != nil {
		t.Fatal(err)
	}
	keep := false
	defer func() {
		b.Stop()
		for _, r := range s.Runs {
			keep = keep || len(r.Problems) > 0 // the caller fails the test for them
		}
		if keep || t.Failed() || os.Getenv("E2E_KEEP") != "" {
			t.Logf("bench: kept the logs of every process in %s", b.Dir())
		} else {
			os.RemoveAll(b.Dir())
		}
	}()
	s, err = b.Run(ctx)
	if err != nil {
		keep = true
		if len(s.Runs) > 0 {
			WriteRoundTable(os.Stdout, s.Runs)
		}
		t.Fatal(err)
	}
	os.Stdout.WriteString("\n" + s.Markdown())
	return s
}

func writeSummary(t *testing.T, s Summary, dir string) {
	t.Helper()
	data, err := s.JSON()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string][]byte{"summary.json": data, "summary.md": []byte(s.Markdown())} {
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
