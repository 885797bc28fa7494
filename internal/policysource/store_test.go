package policysource

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"clusterip-policy/internal/logging"
	"clusterip-policy/test/fixtures"
)

func newTestStore(t *testing.T) (*Store, *bytes.Buffer) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(fixtures.KubeDNSPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	s := NewStore(path, logging.New(&log), NewMetrics(prometheus.NewRegistry()))
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	return s, &log
}

func TestPolicyReloadKeepsTheLastGoodPolicy(t *testing.T) {
	s, log := newTestStore(t)
	if err := os.WriteFile(s.path, []byte(fixtures.Policy(fixtures.KubeDNSSpec+"bogus: 1\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); err == nil || !strings.Contains(err.Error(), `unknown field "bogus"`) {
		t.Fatalf("reload err = %v", err)
	}
	if cur := s.Current(); cur.Generation != 1 || len(cur.Policy.Reservations) != 1 {
		t.Fatalf("policy changed after a bad reload: %+v", cur)
	}
	if got := testutil.ToFloat64(s.metrics.reloads.WithLabelValues("failure")); got != 1 {
		t.Fatalf("failed reloads = %v", got)
	}
	if !strings.Contains(log.String(), "refused the changed policy") {
		t.Fatalf("refusal not logged: %s", log)
	}
	if err := os.WriteFile(s.path, []byte(fixtures.Policy(fixtures.KubeDNSSpec+"enforcement: {default: warn}\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if cur := s.Current(); cur.Generation != 2 || cur.Policy.DefaultAction != "warn" {
		t.Fatalf("good reload not applied: generation %d action %s", cur.Generation, cur.Policy.DefaultAction)
	}
	if got := testutil.ToFloat64(s.metrics.generation); got != 2 {
		t.Fatalf("policy_generation = %v, want 2", got)
	}
}

// Watch re-reads the file: a bad file is counted and logged once while it
// stays bad, and a good one after it takes effect.
func TestWatchReportsABadFileOnceAndLoadsTheNextGoodOne(t *testing.T) {
	s, log := newTestStore(t)
	if err := os.WriteFile(s.path, []byte(fixtures.Policy(fixtures.KubeDNSSpec+"bogus: 1\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	opens := fixtures.Opens(t, s.path)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Watch(ctx, 5*time.Millisecond) }()
	defer func() { cancel(); <-done }()
	failures := func() float64 { return testutil.ToFloat64(s.metrics.reloads.WithLabelValues("failure")) }
	fixtures.Eventually(t, "the bad file refused", 30*time.Second, func() bool { return failures() > 0 })
	fixtures.Eventually(t, "20 re-reads of the bad file", 30*time.Second, func() bool { return opens() >= 20 })
	if got := failures(); got != 1 {
		t.Fatalf("failed reloads after %d re-reads of one bad file = %v, want 1", opens(), got)
	}
	if err := os.WriteFile(s.path, []byte(fixtures.Policy(fixtures.KubeDNSSpec+"enforcement: {default: warn}\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	fixtures.EventuallyNil(t, "the good file loaded", 30*time.Second, func() error {
		if s.Current().Generation != 2 {
			return fmt.Errorf("generation %d; log:\n%s", s.Current().Generation, log)
		}
		return nil
	})
}
