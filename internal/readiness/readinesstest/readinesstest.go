// Package readinesstest builds a readiness gate for the tests of the
// packages that read one (admission, the controllers, the server): a policy
// file, a view of 10.96.0.0/16 and the gate over both. Imported by tests
// only.
package readinesstest

import (
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"clusterip-policy/internal/policysource"
	"clusterip-policy/internal/readiness"
	"clusterip-policy/pkg/allocview"
	"clusterip-policy/test/fixtures"
)

// Spec reserves 10.96.0.10 for kube-system/kube-dns: the spec of the
// ClusterIPPolicy object New writes, which a test extends by appending
// spec lines (a reservation after the last, another field).
const Spec = fixtures.KubeDNSSpec

// Fixture is a gate with its parts, for a test to change.
type Fixture struct {
	Gate *readiness.Gate
	// Store holds the policy loaded from Path.
	Store   *policysource.Store
	Path    string
	View    *allocview.View
	Metrics *policysource.Metrics
	// Registry holds Metrics.
	Registry *prometheus.Registry
}

// New is a gate over the ClusterIPPolicy object with spec and, when synced, a synced view of
// 10.96.0.0/16 with 10.96.0.1 held by default/kubernetes and the
// static-band 10.96.0.40 by team-a/db. The store logs to log.
func New(t testing.TB, spec string, synced bool, log logr.Logger) Fixture {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(fixtures.Policy(spec)), 0o644); err != nil {
		t.Fatal(err)
	}
	view := allocview.NewView()
	if synced {
		view.Update(func(tx *allocview.Tx) {
			tx.SetServiceCIDR(allocview.ServiceCIDR{Name: "kubernetes", CIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16")}, Ready: true})
			tx.SetAllocation(netip.MustParseAddr("10.96.0.1"), allocview.ServiceHolder("default", "kubernetes"))
			tx.SetAllocation(netip.MustParseAddr("10.96.0.40"), allocview.ServiceHolder("team-a", "db"))
			tx.MarkSynced(true)
		})
	}
	reg := prometheus.NewRegistry()
	m := policysource.NewMetrics(reg)
	store := policysource.NewStore(path, log, m)
	if err := store.Reload(); err != nil {
		t.Fatal(err)
	}
	return Fixture{Gate: &readiness.Gate{Policies: store, View: view}, Store: store, Path: path, View: view, Metrics: m, Registry: reg}
}
