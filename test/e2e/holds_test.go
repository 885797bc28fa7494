//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"clusterip-policy/certs"
	"clusterip-policy/test/e2e/framework"
	"clusterip-policy/test/fixtures"
)

// holdLabel selects the reservation holds (pkg/holds.Selector).
const holdLabel = "ipaddress.kubernetes.io/managed-by=clusterip-policy.io"

// TestReservationHolds runs two replicas with --hold-reservations on the
// small range of TestSmallRangeNeverSpillsOntoTheReservedIP (10.96.0.0/27:
// static band .1-.16, dynamic .17-.30), where without holds a full band
// makes the apiserver hand out 10.96.0.10 and the validating stage deny
// the create.
func TestReservationHolds(t *testing.T) {
	c := own(t, framework.Options{
		APIServers:  []framework.APIServerOptions{{ServiceClusterIPRange: "10.96.0.0/27"}},
		Policy:      sharedPolicy,
		Webhooks:    2,
		WebhookArgs: []string{"--hold-reservations"},
	})
	cs := c.Client(0)
	ctx := testContext(t, 4*60e9)
	ns := namespace(t, c, "holds")

	t.Run("one replica leads and holds 10.96.0.10 for kube-system/kube-dns", func(t *testing.T) {
		start := time.Now()
		a := waitHold(t, ctx, cs, "10.96.0.10", 30*time.Second)
		t.Logf("e2e: holds: the hold on 10.96.0.10 appeared %s after the replicas were ready", time.Since(start).Round(10*time.Millisecond))
		if r := a.Spec.ParentRef; r == nil || r.Group != "" || r.Resource != "services" || r.Namespace != "kube-system" || r.Name != "kube-dns" {
			t.Fatalf("hold parentRef = %+v, want services kube-system/kube-dns", a.Spec.ParentRef)
		}
		out, _, err := c.Kubectl(ctx, "", "get", "ipaddresses", "-l", holdLabel, "-o", "custom-columns=IP:.metadata.name,NAMESPACE:.spec.parentRef.namespace,OWNER:.spec.parentRef.name", "--no-headers")
		if err != nil || strings.Join(strings.Fields(out), " ") != "10.96.0.10 kube-system kube-dns" {
			t.Fatalf("kubectl get ipaddresses -l %s = %q (%v), want the one hold with its owner", holdLabel, out, err)
		}
		if n := leaders(t, ctx, c); n != 1 {
			t.Fatalf("%d replicas lead, want 1", n)
		}
		eventuallyMetric(t, ctx, c, "clusterip_policy_holds", `state="held"`, 1)
	})

	t.Run("the small range fills with dynamic Services and no create fails because of a reservation", func(t *testing.T) {
		// 30 usable addresses: .1 is default/kubernetes, .10 is held.
		const free = 28
		created, denied, full := 0, 0, 0
		for i := 0; i < free+5 && full == 0; i++ {
			got, err := create(ctx, cs, fixtures.Service(ns, fmt.Sprintf("dynamic-%03d", i+1)))
			switch {
			case err == nil:
				if got.Spec.ClusterIP == "10.96.0.10" {
					t.Fatalf("%s got the held 10.96.0.10", got.Name)
				}
				created++
			case deniedBy(err, validating) || deniedBy(err, mutating):
				t.Errorf("create %d denied: %v", i+1, err)
				denied++
			case strings.Contains(err.Error(), "range is full"):
				full++
			default:
				t.Fatalf("create %d: %v", i+1, err)
			}
		}
		t.Logf("e2e: holds: small range: %d dynamic Services created, %d denied because of a reservation, then range is full", created, denied)
		if created != free || denied != 0 || full != 1 {
			t.Fatalf("created %d, denied %d, range-is-full %d; want %d, 0, 1", created, denied, full, free)
		}
	})

	t.Run("a dry run of the owner leaves the hold in place", func(t *testing.T) {
		if _, _, err := c.Kubectl(ctx, kubeDNSWithoutIP, "create", "--dry-run=server", "-f", "-"); err != nil {
			t.Fatalf("dry-run kube-dns: %v", err)
		}
		waitHold(t, ctx, cs, "10.96.0.10", time.Second)
	})

	t.Run("a failed owner create gets its hold back", func(t *testing.T) {
		// Allowed by the mutating stage, which releases the hold; then the
		// apiserver's own validation, after the allocation, refuses the
		// invalid port name.
		bad := strings.Replace(kubeDNSWithoutIP, "- name: dns-tcp\n", "- name: DNS_TCP\n", 1)
		if bad == kubeDNSWithoutIP {
			t.Fatal("the kube-dns manifest changed; update this test's invalid port")
		}
		before := metricSum(t, ctx, c, "clusterip_policy_hold_releases_total", `result="released"`)
		_, stderr, err := c.Kubectl(ctx, bad, "create", "-f", "-")
		failedAt := time.Now()
		if err == nil || !strings.Contains(stderr, "DNS_TCP") {
			t.Fatalf("kube-dns with an invalid port name: err %v, stderr %q; want the apiserver's validation error", err, stderr)
		}
		if got := metricSum(t, ctx, c, "clusterip_policy_hold_releases_total", `result="released"`); got != before+1 {
			t.Fatalf("hold releases %v -> %v, want one more: the mutating stage must have released the hold", before, got)
		}
		waitHold(t, ctx, cs, "10.96.0.10", 5*time.Second)
		back := time.Since(failedAt)
		t.Logf("e2e: holds: the hold came back %s after the owner's create failed", back.Round(10*time.Millisecond))
		if back > 2*time.Second {
			t.Errorf("the hold came back after %s, want within 2s (the 1s grace, then the pass it schedules)", back)
		}
	})

	t.Run("kube-dns still gets 10.96.0.10, in a full range", func(t *testing.T) {
		out, _, err := c.Kubectl(ctx, kubeDNSWithoutIP, "create", "-f", "-", "-o", "jsonpath={.spec.clusterIP}")
		if err != nil {
			t.Fatalf("kubectl create kube-dns: %v", err)
		}
		if out != "10.96.0.10" {
			t.Fatalf("kube-dns got %s, want 10.96.0.10", out)
		}
		a, err := cs.NetworkingV1().IPAddresses().Get(ctx, "10.96.0.10", metav1.GetOptions{})
		if err != nil || a.Labels[networkingv1.LabelManagedBy] != "ipallocator.k8s.io" {
			t.Fatalf("IPAddress 10.96.0.10 = %+v (%v), want the apiserver's own allocation", a, err)
		}
		eventuallyMetric(t, ctx, c, "clusterip_policy_holds", `state="owner"`, 1)
	})

	t.Run("deleting the owner brings the hold back", func(t *testing.T) {
		if err := cs.CoreV1().Services("kube-system").Delete(ctx, "kube-dns", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		deleted := time.Now()
		waitHold(t, ctx, cs, "10.96.0.10", 10*time.Second)
		t.Logf("e2e: holds: the hold came back %s after the owner was deleted", time.Since(deleted).Round(10*time.Millisecond))
	})

	t.Run("two replicas never fight over a hold", func(t *testing.T) {
		// Three holds were created (at start, after the failed create,
		// after the delete) and none deleted, by one leader. The leader
		// counts a create after the apiserver answers it, so the third
		// may be counted a moment after the hold was seen.
		var created float64
		fixtures.Eventually(t, "the third hold counted", 10*time.Second, func() bool {
			created = metricSum(t, ctx, c, "clusterip_policy_hold_changes_total", `action="created"`)
			return created >= 3
		})
		deletedN := metricSum(t, ctx, c, "clusterip_policy_hold_changes_total", `action="deleted"`)
		failed := metricSum(t, ctx, c, "clusterip_policy_hold_changes_total", `action="failed"`)
		t.Logf("e2e: holds: hold changes over both replicas: %v created, %v deleted, %v failed", created, deletedN, failed)
		if created != 3 || deletedN != 0 || failed != 0 {
			t.Fatalf("hold changes: %v created, %v deleted, %v failed; want 3, 0, 0", created, deletedN, failed)
		}
		if n := leaders(t, ctx, c); n != 1 {
			t.Fatalf("%d replicas lead, want 1", n)
		}
	})

	t.Run("the leader's replica stops and the other takes over without touching the hold", func(t *testing.T) {
		a := waitHold(t, ctx, cs, "10.96.0.10", time.Second)
		lead := -1
		for i := range c.Webhooks {
			if v, err := c.WebhookMetric(ctx, i, "clusterip_policy_leader"); err == nil && v == 1 {
				lead = i
			}
		}
		if lead < 0 {
			t.Fatal("no leader")
		}
		c.Webhooks[lead].Stop(10 * time.Second) // SIGTERM: the Lease is released on the way out
		stopped := time.Now()
		other := 1 - lead
		fixtures.Eventually(t, "the remaining replica to take the lead", 30*time.Second, func() bool {
			v, err := c.WebhookMetric(ctx, other, "clusterip_policy_leader")
			return err == nil && v == 1
		})
		t.Logf("e2e: holds: replica %d took the lead %s after replica %d stopped", other+1, time.Since(stopped).Round(10*time.Millisecond), lead+1)
		leaderPasses(t, ctx, c, 3) // the new leader decided on the hold it found, three times
		b := waitHold(t, ctx, cs, "10.96.0.10", time.Second)
		if b.UID != a.UID {
			t.Fatalf("the new leader replaced the hold (uid %s -> %s)", a.UID, b.UID)
		}
		if v, _ := c.WebhookMetric(ctx, other, "clusterip_policy_hold_changes_total"); v != 0 {
			t.Fatalf("the new leader made %v hold changes, want 0", v)
		}
	})

	t.Run("a held address is refused by the apiserver itself with the webhook configurations removed", func(t *testing.T) {
		if err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
		// The apiserver drops the configurations from its admission chain
		// within a moment; until then the webhook would deny first.
		fixtures.EventuallyNil(t, "the apiserver's own refusal", 10*time.Second, func() error {
			_, err := create(ctx, cs, fixtures.Service(ns, "squatter", fixtures.WithClusterIP("10.96.0.10")))
			if err == nil {
				t.Fatal("squatter got the held 10.96.0.10")
			}
			if !strings.Contains(err.Error(), "provided IP is already allocated") || deniedBy(err, mutating) {
				return err
			}
			return nil
		})
	})

	t.Run("a reservation that moves loses its hold, and an address someone else holds is never touched", func(t *testing.T) {
		// kube-dns's reservation moves to the address of dynamic-001, which
		// the apiserver's own IPAddress holds.
		taken, err := cs.CoreV1().Services(ns).Get(ctx, "dynamic-001", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ip := taken.Spec.ClusterIP
		before, err := cs.NetworkingV1().IPAddresses().Get(ctx, ip, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p := fixtures.Policy(strings.Replace(sharedSpec, "- ip: 10.96.0.10\n", "- ip: "+ip+"\n", 1))
		if p == sharedPolicy {
			t.Fatal("the shared policy changed; update this test")
		}
		if err := certs.WriteFileAtomic(c.PolicyFile, []byte(p), 0o644); err != nil {
			t.Fatal(err)
		}
		fixtures.Eventually(t, "the hold on 10.96.0.10 to go with its reservation", 15*time.Second, func() bool {
			return !ipAddressExists(t, ctx, cs, "10.96.0.10")
		})
		eventuallyMetric(t, ctx, c, "clusterip_policy_holds", `state="other"`, 1)
		leaderPasses(t, ctx, c, 3) // the leader decided, three times, on the address someone else holds
		after, err := cs.NetworkingV1().IPAddresses().Get(ctx, ip, metav1.GetOptions{})
		if err != nil || after.UID != before.UID || after.Labels[networkingv1.LabelManagedBy] != "ipallocator.k8s.io" {
			t.Fatalf("the apiserver's IPAddress %s was touched: before %+v, after %+v (%v)", ip, before.ObjectMeta, after, err)
		}
		created := metricSum(t, ctx, c, "clusterip_policy_hold_changes_total", `action="created"`)
		deleted := metricSum(t, ctx, c, "clusterip_policy_hold_changes_total", `action="deleted"`)
		if created != 0 || deleted != 1 {
			t.Fatalf("the leader (the replica left) made %v creates and %v deletes, want 0 and 1", created, deleted)
		}
		t.Logf("e2e: holds: the reservation moved to %s, held by %s: the hold on 10.96.0.10 was deleted, %s left alone", ip, taken.Name, ip)
	})
}

// waitHold waits until ip is held by an IPAddress of ours and returns it.
func waitHold(t *testing.T, ctx context.Context, cs kubernetes.Interface, ip string, within time.Duration) *networkingv1.IPAddress {
	t.Helper()
	var a *networkingv1.IPAddress
	var err error
	held := func() bool {
		a, err = cs.NetworkingV1().IPAddresses().Get(ctx, ip, metav1.GetOptions{})
		return err == nil && a.Labels["ipaddress.kubernetes.io/managed-by"] == "clusterip-policy.io"
	}
	if fixtures.Wait(within, func() bool { return held() || err != nil && !apierrors.IsNotFound(err) }) != nil {
		t.Fatalf("no hold on %s within %s (last: %v, %v)", ip, within, a, err)
	}
	if err != nil {
		t.Fatalf("get IPAddress %s: %v", ip, err)
	}
	return a
}

// leaders counts the running replicas that report leading.
func leaders(t *testing.T, ctx context.Context, c *framework.Cluster) int {
	t.Helper()
	n := 0
	for i, w := range c.Webhooks {
		if exited, _ := w.Exited(); exited {
			continue
		}
		v, err := c.WebhookMetric(ctx, i, "clusterip_policy_leader")
		if err != nil {
			t.Fatalf("metrics of replica %d: %v", i+1, err)
		}
		n += int(v)
	}
	return n
}

// metricSum sums a metric over the running replicas.
func metricSum(t *testing.T, ctx context.Context, c *framework.Cluster, name string, match ...string) float64 {
	t.Helper()
	var sum float64
	for i, w := range c.Webhooks {
		if exited, _ := w.Exited(); exited {
			continue
		}
		v, err := c.WebhookMetric(ctx, i, name, match...)
		if err != nil {
			t.Fatalf("metrics of replica %d: %v", i+1, err)
		}
		sum += v
	}
	return sum
}

// leaderPasses waits until the leader has carried out n more passes over
// the holds than when called (clusterip_policy_hold_passes_total{result=
// "done"}, summed over the running replicas): a pass decides on the whole
// of what it sees, so a check that nothing changed after them is a check
// that the leader chose not to, rather than that it had no time to.
func leaderPasses(t *testing.T, ctx context.Context, c *framework.Cluster, n int) {
	t.Helper()
	from := metricSum(t, ctx, c, "clusterip_policy_hold_passes_total", `result="done"`)
	fixtures.EventuallyNil(t, fmt.Sprintf("%d more passes of the leader over the holds", n), 15*time.Second, func() error {
		if got := metricSum(t, ctx, c, "clusterip_policy_hold_passes_total", `result="done"`) - from; got < float64(n) {
			return fmt.Errorf("%v so far", got)
		}
		return nil
	})
}

// eventuallyMetricAtLeast waits up to within for the sum of a metric to
// reach want.
func eventuallyMetricAtLeast(t *testing.T, ctx context.Context, c *framework.Cluster, name, match string, want float64, within time.Duration) {
	t.Helper()
	fixtures.EventuallyNil(t, fmt.Sprintf("%s{%s} to reach %v", name, match, want), within, func() error {
		if got := metricSum(t, ctx, c, name, match); got < want {
			return fmt.Errorf("it is %v", got)
		}
		return nil
	})
}

// eventuallyMetric waits up to 5s for the sum of a metric to be want.
func eventuallyMetric(t *testing.T, ctx context.Context, c *framework.Cluster, name, match string, want float64) {
	t.Helper()
	fixtures.EventuallyNil(t, fmt.Sprintf("%s{%s} to be %v", name, match, want), 5*time.Second, func() error {
		if got := metricSum(t, ctx, c, name, match); got != want {
			return fmt.Errorf("it is %v", got)
		}
		return nil
	})
}

// TestDefaultKubernetesComesBackWithHoldsOn writes the reservation of
// default/kubernetes out (the loader accepts it) and turns holds on. The
// apiserver recreates that Service through its loopback identity, which
// both webhooks exempt, so no mutating review ever releases a hold on its
// address: were 10.96.0.1 held, the apiserver would fail "provided IP is
// already allocated" every 10 s and never recreate it. It must come back on
// its address, and no hold of ours may ever name it.
func TestDefaultKubernetesComesBackWithHoldsOn(t *testing.T) {
	pol := fixtures.Policy(`allowedCIDRs: [10.96.0.0/12]
reserveKubernetesService: false
reservations:
- ip: 10.96.0.1
  service: default/kubernetes
  note: written out
- ip: 10.96.0.10
  service: kube-system/kube-dns
  note: cluster DNS
`)
	c := own(t, framework.Options{Policy: pol, Webhooks: 1, WebhookArgs: []string{"--hold-reservations"}})
	cs := c.Client(0)
	ctx := testContext(t, 2*time.Minute)
	waitHold(t, ctx, cs, "10.96.0.10", 30*time.Second) // the leader is at work

	if err := cs.CoreV1().Services("default").Delete(ctx, "kubernetes", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	// The apiserver reconciles default/kubernetes every 10 s.
	fixtures.Eventually(t, "default/kubernetes to be recreated, with holds on and its reservation written out", 45*time.Second, func() bool {
		if a, err := cs.NetworkingV1().IPAddresses().Get(ctx, "10.96.0.1", metav1.GetOptions{}); err == nil && a.Labels["ipaddress.kubernetes.io/managed-by"] == "clusterip-policy.io" {
			t.Fatalf("the webhook holds 10.96.0.1 for %s/%s while default/kubernetes is absent: the apiserver cannot recreate it", a.Spec.ParentRef.Namespace, a.Spec.ParentRef.Name)
		}
		svc, err := cs.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		if err == nil && svc.Spec.ClusterIP != "10.96.0.1" {
			t.Fatalf("default/kubernetes came back on %s, want 10.96.0.1", svc.Spec.ClusterIP)
		}
		return err == nil
	})
	t.Logf("e2e: holds: default/kubernetes came back on 10.96.0.1 %s after its deletion, with holds on and its reservation written out", time.Since(deleted).Round(10*time.Millisecond))
	// Not held by design, as the gauge says.
	eventuallyMetric(t, ctx, c, "clusterip_policy_holds", `state="not-applied"`, 1)
}
