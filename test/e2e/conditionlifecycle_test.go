//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"clusterip-policy/pkg/allocview"
	"clusterip-policy/pkg/matchconditions"
	"clusterip-policy/test/e2e/framework"
	"clusterip-policy/test/fixtures"
)

// The managed conditions never outlive the policy they encode: turned off,
// they are removed whatever else is on; a leader that is alive but not
// ready writes conditions that send every create.

// restartWith stops webhook replica i, rewrites its arguments with edit and
// starts it again on the same ports, without waiting for it to get ready.
func restartWith(t *testing.T, c *framework.Cluster, i int, edit func([]string) []string) {
	t.Helper()
	w := c.Webhooks[i]
	w.Stop(15 * time.Second) // SIGTERM: the Lease is released
	w.Args = edit(slices.Clone(w.Args))
	if err := w.Restart(); err != nil {
		t.Fatal(err)
	}
}

// managedCluster starts a cluster of its own with one webhook replica
// running --manage-match-conditions on the policy managedPolicy, and waits
// until the leader has written the managed conditions; it returns the
// policy's digest.
func managedCluster(t *testing.T, serviceRange string) (*framework.Cluster, context.Context, string) {
	t.Helper()
	pol := managedPolicy()
	c := own(t, framework.Options{
		APIServers:  []framework.APIServerOptions{{ServiceClusterIPRange: serviceRange}},
		Policy:      pol,
		Webhooks:    1,
		WebhookArgs: []string{"--manage-match-conditions"},
	})
	ctx := testContext(t, 3*time.Minute)
	digest := policyDigest(t, pol)
	waitManaged(t, ctx, c, digest, 30*time.Second)
	return c, ctx, digest
}

func without(flag string) func([]string) []string {
	return func(args []string) []string {
		return slices.DeleteFunc(args, func(a string) bool { return a == flag || strings.HasPrefix(a, flag+"=") })
	}
}

// TestManagementTurnedOffRemovesTheConditionWithNothingElseOn: with holds
// and the periodic audit off (the binary's defaults) no leader runs, yet a
// replica restarted without --manage-match-conditions removes the managed
// condition from both configurations.
func TestManagementTurnedOffRemovesTheConditionWithNothingElseOn(t *testing.T) {
	c, ctx, _ := managedCluster(t, "10.96.0.0/27")
	restartWith(t, c, 0, without("--manage-match-conditions"))
	start := time.Now()
	fixtures.EventuallyNil(t, "the managed condition to go after a restart with management off", 30*time.Second, func() error {
		m, v, d, err := managedConditions(ctx, c)
		if err != nil {
			return fmt.Errorf("read the managed conditions: %w", err)
		}
		if m != "" || v != "" || d != "" {
			return fmt.Errorf("mutating %t, validating %t, policy annotation %q", m != "", v != "", d)
		}
		return nil
	})
	t.Logf("e2e: management off, no holds, no audit: the managed condition was removed from both configurations %s after the restart", time.Since(start).Round(10*time.Millisecond))
	if err := c.Webhooks[0].WaitReady(ctx, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	if left, err := c.WebhookMetric(ctx, 0, "clusterip_policy_match_conditions_left_behind"); err != nil || left != 0 {
		t.Fatalf("clusterip_policy_match_conditions_left_behind = %v (%v), want 0 once removed", left, err)
	}
}

// TestAnUnreadyLeaderSendsEveryCreate: the leader is restarted so that it
// can never get ready (its policy source holds no policy) while it still
// takes the Lease: it replaces the selective conditions by ones that send
// every create, so the policy in force elsewhere is not bypassed by stale
// conditions; ready again, it writes the selective ones back.
func TestAnUnreadyLeaderSendsEveryCreate(t *testing.T) {
	c, ctx, digest := managedCluster(t, "10.96.0.0/27")
	selectiveM, selectiveV, _, err := managedConditions(ctx, c)
	if err != nil || selectiveM == "true" {
		t.Fatalf("before: mutating %.40q (%v)", selectiveM, err)
	}

	var policyArg string
	restartWith(t, c, 0, func(args []string) []string {
		i := slices.IndexFunc(args, func(a string) bool { return strings.HasPrefix(a, "--policy=") })
		policyArg = args[i]
		// No ClusterIPPolicy object exists (nor its CRD): never ready.
		args[i] = "--policy-source=crd"
		return args
	})
	failSafe := matchconditions.Compute(nil, allocview.RangeSet{})
	start := time.Now()
	fixtures.EventuallyNil(t, "the unready leader to write the fail-safe conditions", 45*time.Second, func() error {
		if exited, _ := c.Webhooks[0].Exited(); exited {
			t.Fatalf("the unready replica exited: %s", c.Webhooks[0].Tail(20))
		}
		m, v, d, err := managedConditions(ctx, c)
		if err != nil {
			return fmt.Errorf("read the managed conditions: %w", err)
		}
		if m != "true" || v != failSafe.Validating || d != "" {
			return fmt.Errorf("still selective: mutating %.40q, validating is fail-safe %t, policy annotation %q", m, v == failSafe.Validating, d)
		}
		return nil
	})
	t.Logf("e2e: an unready leader wrote the fail-safe conditions (every create sent) %s after its restart", time.Since(start).Round(10*time.Millisecond))
	if synced, err := c.WebhookMetric(ctx, 0, "clusterip_policy_match_conditions_synced"); err != nil || synced != 0 {
		t.Fatalf("clusterip_policy_match_conditions_synced = %v (%v) on an unready leader, want 0", synced, err)
	}

	restartWith(t, c, 0, func(args []string) []string {
		i := slices.Index(args, "--policy-source=crd")
		args[i] = policyArg
		return args
	})
	if err := c.Webhooks[0].WaitReady(ctx, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	took := waitManaged(t, ctx, c, digest, 30*time.Second)
	if m, v, _, _ := managedConditions(ctx, c); m != selectiveM || v != selectiveV {
		t.Fatal("ready again, the leader wrote other conditions than before")
	}
	t.Logf("e2e: ready again, the leader wrote the selective conditions back %s after it was ready", took.Round(10*time.Millisecond))
}
