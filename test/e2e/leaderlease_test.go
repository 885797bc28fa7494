//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"clusterip-policy/test/e2e/framework"
	"clusterip-policy/test/fixtures"
)

// The Lease's timings for this test (every replica): short, so that "the
// new replica had a whole lease duration to take over" takes seconds.
const (
	renameLeaseDuration = 6 * time.Second
	renameRetryPeriod   = time.Second
)

// TestLeaseRenameKeepsOneLeader is the rolling upgrade over the Lease's
// rename (docs/operations.md "Upgrading from a build before v0.1.0"): a
// replica run as a build before v0.1.0 (--leader-election-lease
// clusterip-policy-holds alone) leads; a new replica started beside it
// (the defaults: clusterip-policy-leader, and clusterip-policy-holds as the
// previous Lease) does not lead while the old one renews, though it had
// more than a lease duration to; when the old one stops the new one takes
// both Leases. Then the other way (a rollback): an old replica started
// beside the new leader does not lead either. At every reading at most one
// replica leads. It also reads controller-runtime's
// leader_election_master_status on the live replicas: exported, named for
// the new Lease, and in step with ours.
func TestLeaseRenameKeepsOneLeader(t *testing.T) {
	c := own(t, framework.Options{Webhooks: 0, NoRegister: true, Policy: sharedPolicy})
	cs := c.Client(0)
	ctx := testContext(t, 3*time.Minute)
	// Every replica: the periodic audit (leader work), the short timings.
	shared := []string{"--audit-interval=10m",
		"--leader-election-lease-duration=" + renameLeaseDuration.String(),
		"--leader-election-renew-deadline=4s",
		"--leader-election-retry-period=" + renameRetryPeriod.String()}
	start := func(args ...string) (*framework.Webhook, int) {
		t.Helper()
		w, err := c.StartWebhookWithArgs(ctx, "", append(append([]string{}, shared...), args...)...)
		if err != nil {
			t.Fatal(err)
		}
		return w, len(c.Webhooks) - 1
	}
	const ns = "clusterip-policy"
	oldOnly := []string{"--leader-election-lease=clusterip-policy-holds", "--leader-election-previous-lease="}

	old, oldIdx := start(append(oldOnly, "--leader-election-identity=old-1")...)
	fixtures.Eventually(t, "the old replica to lead", 30*time.Second, func() bool { return leading(ctx, c, oldIdx) })
	if _, err := cs.CoordinationV1().Leases(ns).Get(ctx, "clusterip-policy-leader", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the old replica touched the new Lease: %v", err)
	}

	_, newIdx := start("--leader-election-identity=new-1")
	// The new replica's first try creates clusterip-policy-leader; nobody
	// renews it after. Had the new replica ignored the old leader it
	// would take the pair a lease duration after that. Wait for the old
	// leader's renewal of clusterip-policy-holds two lease durations
	// later: the new replica had its chance, and the old one still leads.
	var created time.Time
	fixtures.EventuallyNil(t, "the new replica to create clusterip-policy-leader", 30*time.Second, func() error {
		l, err := cs.CoordinationV1().Leases(ns).Get(ctx, "clusterip-policy-leader", metav1.GetOptions{})
		if err != nil {
			return err
		}
		created = l.CreationTimestamp.Time
		return nil
	})
	fixtures.EventuallyNil(t, "the old leader's renewal two lease durations after the new Lease", 4*renameLeaseDuration, func() error {
		checkOneLeader(t, ctx, c)
		if l := lease(t, ctx, cs, ns, "clusterip-policy-holds"); renewed(l).Before(created.Add(2 * renameLeaseDuration)) {
			return fmt.Errorf("last renewed %s, the new Lease created %s", renewed(l).Format(time.RFC3339Nano), created.Format(time.RFC3339Nano))
		}
		return nil
	})
	if !leading(ctx, c, oldIdx) || leading(ctx, c, newIdx) {
		t.Fatalf("after two lease durations beside the old leader: old leads %v, new leads %v; want only the old", leading(ctx, c, oldIdx), leading(ctx, c, newIdx))
	}
	if h := holder(lease(t, ctx, cs, ns, "clusterip-policy-holds")); h != "old-1" {
		t.Fatalf("clusterip-policy-holds held by %q, want the old replica", h)
	}
	if v, err := c.WebhookMetric(ctx, newIdx, "leader_election_master_status", `name="clusterip-policy-leader"`); err != nil || v != 0 {
		t.Fatalf("controller-runtime's leader_election_master_status on the waiting new replica: %v (%v), want 0", v, err)
	}

	old.Stop(10 * time.Second) // SIGTERM: the old replica releases its Lease on the way out
	stopped := time.Now()
	fixtures.Eventually(t, "the new replica to lead", 4*renameLeaseDuration, func() bool {
		checkOneLeader(t, ctx, c)
		return leading(ctx, c, newIdx)
	})
	t.Logf("e2e: lease rename: the new replica led %s after the old one stopped (lease duration %s, retry %s)", time.Since(stopped).Round(10*time.Millisecond), renameLeaseDuration, renameRetryPeriod)
	for _, name := range []string{"clusterip-policy-leader", "clusterip-policy-holds"} {
		if h := holder(lease(t, ctx, cs, ns, name)); h != "new-1" {
			t.Errorf("%s held by %q after the take-over, want new-1 (the leader holds both)", name, h)
		}
	}
	if v, err := c.WebhookMetric(ctx, newIdx, "leader_election_master_status", `name="clusterip-policy-leader"`); err != nil || v != 1 {
		t.Errorf("controller-runtime's leader_election_master_status on the new leader: %v (%v), want 1", v, err)
	}

	// A rollback: an old replica beside the new leader, which renews
	// clusterip-policy-holds, waits. Its chance: the new leader's renewal
	// two lease durations after the old replica was ready.
	_, old2Idx := start(append(oldOnly, "--leader-election-identity=old-2")...)
	ready := time.Now()
	fixtures.EventuallyNil(t, "the new leader's renewal two lease durations after the old replica started", 4*renameLeaseDuration, func() error {
		checkOneLeader(t, ctx, c)
		if l := lease(t, ctx, cs, ns, "clusterip-policy-holds"); renewed(l).Before(ready.Add(2 * renameLeaseDuration)) {
			return fmt.Errorf("last renewed %s", renewed(l).Format(time.RFC3339Nano))
		}
		return nil
	})
	if leading(ctx, c, old2Idx) || !leading(ctx, c, newIdx) {
		t.Fatalf("an old replica beside the new leader: old leads %v, new leads %v; want only the new", leading(ctx, c, old2Idx), leading(ctx, c, newIdx))
	}
}

// leading reads clusterip_policy_leader of replica i (false on an error:
// a stopped replica does not lead).
func leading(ctx context.Context, c *framework.Cluster, i int) bool {
	v, err := c.WebhookMetric(ctx, i, "clusterip_policy_leader")
	return err == nil && v == 1
}

// checkOneLeader fails the test when two running replicas lead at once.
func checkOneLeader(t *testing.T, ctx context.Context, c *framework.Cluster) {
	t.Helper()
	var who []int
	for i, w := range c.Webhooks {
		if exited, _ := w.Exited(); !exited && leading(ctx, c, i) {
			who = append(who, i+1)
		}
	}
	if len(who) > 1 {
		t.Fatalf("replicas %v lead at once", who)
	}
}

func lease(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns, name string) *coordinationv1.Lease {
	t.Helper()
	l, err := cs.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("Lease %s/%s: %v", ns, name, err)
	}
	return l
}

func holder(l *coordinationv1.Lease) string {
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

func renewed(l *coordinationv1.Lease) time.Time {
	if l.Spec.RenewTime == nil {
		return time.Time{}
	}
	return l.Spec.RenewTime.Time
}
