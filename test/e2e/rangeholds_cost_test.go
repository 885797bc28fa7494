//go:build e2e

package e2e

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"clusterip-policy/certs"
	"clusterip-policy/test/e2e/framework"
	"clusterip-policy/test/fixtures"
)

// slash22Policy adds a /22 in the dynamic band of 10.96.0.0/16 (static
// band 10.96.0.1-10.96.1.0) to the shared policy: 1,024 addresses, a
// quarter of the policy's bound (policy.MaxReservedRangeAddresses).
var slash22Policy = fixtures.Policy(sharedSpec + `reservedRanges:
- cidr: 10.96.64.0/22
  namespaces: [team-big]
  note: a /22
`)

// TestHoldingASlash22ReservedRange measures what holding a /22 costs
// (BENCHMARKS.md, "Holding a reserved range"): the time the leader takes
// to hold all 1,024 addresses once the range enters the policy, at the
// default --hold-write-rate of 50 a second; the IPAddress objects; the
// webhook's and the apiserver's VmRSS before and after; and, after the
// webhook restarts, how long until it is ready (its watch of the holds
// listed) and how long one list of the holds takes. It checks what must
// hold whatever the machine: every address held by exactly one IPAddress
// of ours, no faster than the write rate allows, and a restarted leader
// that creates or deletes none of them.
func TestHoldingASlash22ReservedRange(t *testing.T) {
	c := own(t, framework.Options{
		APIServers:  []framework.APIServerOptions{{ServiceClusterIPRange: "10.96.0.0/16"}},
		Policy:      sharedPolicy,
		Webhooks:    1,
		WebhookArgs: []string{"--hold-reservations"},
	})
	cs := c.Client(0)
	ctx := testContext(t, 5*time.Minute)
	waitHold(t, ctx, cs, "10.96.0.10", 30*time.Second)
	settle := func() { runtime.GC(); time.Sleep(2 * time.Second) }
	settle()
	webhookBefore, apiBefore := vmRSS(t, c.Webhooks[0].Pid()), vmRSS(t, c.APIServers[0].Pid())

	start := time.Now()
	if err := certs.WriteFileAtomic(c.PolicyFile, []byte(slash22Policy), 0o644); err != nil {
		t.Fatal(err)
	}
	fixtures.EventuallyNil(t, "all 1,024 addresses held", 2*time.Minute, func() error {
		if n := metricSum(t, ctx, c, "clusterip_policy_range_holds", `state="held"`); n != 1024 {
			return fmt.Errorf("%v held", n)
		}
		return nil
	})
	took := time.Since(start)
	// 1,023 intervals at 50 a second, burst 1: no faster than 20.46 s.
	if took < 20*time.Second {
		t.Errorf("1,024 holds in %s: faster than --hold-write-rate 50 allows", took)
	}
	l, err := cs.NetworkingV1().IPAddresses().List(ctx, metav1.ListOptions{LabelSelector: holdLabel})
	if err != nil {
		t.Fatal(err)
	}
	inRange := 0
	for _, a := range l.Items {
		if r := a.Spec.ParentRef; r != nil && r.Resource == rangeParentResource && r.Name == "10.96.64.0-10.96.67.255" {
			inRange++
		}
	}
	if inRange != 1024 || len(l.Items) != 1025 {
		t.Fatalf("%d holds, %d of them for the /22; want 1,025 (the /22 and kube-dns's)", len(l.Items), inRange)
	}
	settle()
	webhookAfter, apiAfter := vmRSS(t, c.Webhooks[0].Pid()), vmRSS(t, c.APIServers[0].Pid())
	t.Logf("e2e: range holds cost: a /22 held in %s (1,024 IPAddress objects, %d holds in all); webhook VmRSS %d -> %d KiB, apiserver VmRSS %d -> %d KiB",
		took.Round(10*time.Millisecond), len(l.Items), webhookBefore, webhookAfter, apiBefore, apiAfter)

	c.Webhooks[0].Stop(10 * time.Second)
	restarted := time.Now()
	if err := c.RestartWebhook(ctx, 0); err != nil {
		t.Fatal(err)
	}
	ready := time.Since(restarted)
	eventuallyMetric(t, ctx, c, "clusterip_policy_range_holds", `state="held"`, 1024)
	held := time.Since(restarted)
	listStart := time.Now()
	if _, err := cs.NetworkingV1().IPAddresses().List(ctx, metav1.ListOptions{LabelSelector: holdLabel}); err != nil {
		t.Fatal(err)
	}
	list := time.Since(listStart)
	leaderPasses(t, ctx, c, 3) // the restarted leader decided on the 1,024 holds it found, three times
	if n := metricSum(t, ctx, c, "clusterip_policy_hold_changes_total"); n != 0 {
		t.Fatalf("the restarted leader made %v hold changes, want 0: the 1,024 holds are its already", n)
	}
	t.Logf("e2e: range holds cost: after a webhook restart: ready (holds listed) in %s, all 1,024 counted held %s after the restart, 0 writes; one list of the 1,025 holds takes %s; webhook VmRSS %d KiB",
		ready.Round(10*time.Millisecond), held.Round(10*time.Millisecond), list.Round(time.Millisecond), vmRSS(t, c.Webhooks[0].Pid()))
}
