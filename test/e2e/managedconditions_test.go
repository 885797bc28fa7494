//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"clusterip-policy/pkg/matchconditions"
	"clusterip-policy/pkg/policy"
	"clusterip-policy/test/e2e/framework"
)

// The leader's managed matchCondition (--manage-match-conditions,
// docs/matchconditions.md) on a real apiserver: which creates still reach
// the webhook, and what stays when management is off.

const (
	conditionsPolicyAnnotation = "clusterip-policy.io/match-conditions-policy"
	managedNamespace           = "e2e-managed"
)

// managedPolicy runs on 10.96.0.0/27: static band .1-.16, dynamic band
// .17-.30. Ten of the fourteen dynamic addresses are reserved, so a dynamic
// create lands on a reservation most of the time.
func managedPolicy() string {
	var b strings.Builder
	b.WriteString("apiVersion: clusterip-policy/v1alpha1\nkind: ClusterIPPolicy\nallowedCIDRs: [10.96.0.0/12]\nreserveKubernetesService: true\nreservations:\n- {ip: 10.96.0.10, service: kube-system/kube-dns}\n")
	for i := range 10 {
		fmt.Fprintf(&b, "- {ip: 10.96.0.%d, service: %s/owner-%d}\n", 20+i, managedNamespace, i)
	}
	return b.String()
}

func policyDigest(t *testing.T, text string) string {
	t.Helper()
	p, err := policy.Parse([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return p.Digest
}

// managedConditions returns the managed condition of each Service webhook
// ("" when absent) and the policy digest the configurations are annotated
// with (when both agree).
func managedConditions(ctx context.Context, c *framework.Cluster) (mutating, validating, policyDigest string, err error) {
	cs := c.Client(0)
	m, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "clusterip-policy", metav1.GetOptions{})
	if err != nil {
		return "", "", "", err
	}
	v, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "clusterip-policy", metav1.GetOptions{})
	if err != nil {
		return "", "", "", err
	}
	find := func(conds []admissionregistrationv1.MatchCondition) string {
		for _, mc := range conds {
			if mc.Name == matchconditions.Name {
				return mc.Expression
			}
		}
		return ""
	}
	for _, w := range m.Webhooks {
		if w.Name == framework.MutatingWebhookName {
			mutating = find(w.MatchConditions)
		}
	}
	for _, w := range v.Webhooks {
		if w.Name == framework.ValidatingWebhookName {
			validating = find(w.MatchConditions)
		}
	}
	if a, b := m.Annotations[conditionsPolicyAnnotation], v.Annotations[conditionsPolicyAnnotation]; a == b {
		policyDigest = a
	}
	return mutating, validating, policyDigest, nil
}

// waitManaged waits until both configurations carry the managed condition
// for the policy with digest want, and returns how long that took.
func waitManaged(t *testing.T, ctx context.Context, c *framework.Cluster, want string, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		m, v, d, err := managedConditions(ctx, c)
		if err == nil && m != "" && v != "" && d == want {
			return time.Since(start)
		}
		if time.Since(start) > timeout {
			t.Fatalf("after %s the configurations do not carry the managed condition for policy %s: mutating %t, validating %t, annotated policy %q, err %v",
				timeout, want, m != "", v != "", d, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func createNamespace(t *testing.T, c *framework.Cluster, name string) {
	t.Helper()
	ctx := testContext(t, 30*time.Second)
	if _, err := c.Client(0).CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	t.Cleanup(func() { deleteServices(t, c.Client(0), name) })
}

func plainService(ns, name string) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": name}, Ports: []corev1.ServicePort{{Port: 80}}}}
}

// reached reports whether the webhook logged a decision for ns/name at
// stage ("" for any stage). Decisions are logged before the response, so
// one that is absent once the create returned was never made.
func reached(c *framework.Cluster, ns, name, stage string) bool {
	return slices.ContainsFunc(decisionsFor(c, ns, name), func(d framework.Decision) bool { return stage == "" || d.Stage == stage })
}

// TestManagedConditionsSendOnlyWhatTheWebhookMayChange: with the managed
// condition in place, a dynamic create that lands on a free dynamic address
// reaches neither webhook, while a static create, a reservation owner's
// create and a dynamic create that lands on another Service's reservation
// still do, and are decided as before.
func TestManagedConditionsSendOnlyWhatTheWebhookMayChange(t *testing.T) {
	pol := managedPolicy()
	c := own(t, framework.Options{
		APIServers:  []framework.APIServerOptions{{ServiceClusterIPRange: "10.96.0.0/27"}},
		Policy:      pol,
		Webhooks:    1,
		WebhookArgs: []string{"--manage-match-conditions"},
	})
	cs := c.Client(0)
	ctx := testContext(t, 3*time.Minute)
	took := waitManaged(t, ctx, c, policyDigest(t, pol), 30*time.Second)
	t.Logf("e2e: managed conditions: in both configurations %s after the webhook was ready and registered", took.Round(time.Millisecond))
	createNamespace(t, c, managedNamespace)
	webhookCalls := func() float64 {
		n, err := c.APIServerMetric(ctx, 0, "apiserver_admission_webhook_request_total", `name="`+framework.ValidatingWebhookName+`"`, `operation="CREATE"`)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	callsBefore := webhookCalls()

	free := map[string]bool{"10.96.0.17": true, "10.96.0.18": true, "10.96.0.19": true, "10.96.0.30": true}
	skipped, deniedOnReservation, attempts := 0, 0, 0
	for ; attempts < 40 && (skipped < 2 || deniedOnReservation < 1); attempts++ {
		name := fmt.Sprintf("dynamic-%d", attempts)
		svc, err := cs.CoreV1().Services(managedNamespace).Create(ctx, plainService(managedNamespace, name), metav1.CreateOptions{})
		switch {
		case err != nil:
			if !strings.Contains(err.Error(), "is reserved for Service "+managedNamespace+"/owner-") {
				t.Fatalf("create %s: %v", name, err)
			}
			if !reached(c, managedNamespace, name, "validate") {
				t.Fatalf("create %s was denied for a reservation but the validating webhook logged no decision: %v", name, err)
			}
			deniedOnReservation++
		case free[svc.Spec.ClusterIP]:
			if reached(c, managedNamespace, name, "") {
				t.Fatalf("create %s got the free dynamic address %s, yet the webhook was called: %+v", name, svc.Spec.ClusterIP, decisionsFor(c, managedNamespace, name))
			}
			skipped++
		default:
			// The free dynamic addresses are used up: the apiserver now
			// hands out static-band addresses, which are always sent.
			if !reached(c, managedNamespace, name, "validate") {
				t.Fatalf("create %s got %s, outside the allow-list, without a webhook call", name, svc.Spec.ClusterIP)
			}
		}
	}
	if skipped < 2 || deniedOnReservation < 1 {
		t.Fatalf("after %d creates: %d skipped the webhook, %d were denied on a reservation; want at least 2 and 1", attempts, skipped, deniedOnReservation)
	}
	t.Logf("e2e: managed conditions: %d dynamic creates: %d on a free dynamic address skipped both webhooks, %d landed on a reservation and were denied by the validating webhook; the apiserver called the validating webhook %v times for them",
		attempts, skipped, deniedOnReservation, webhookCalls()-callsBefore)

	static := plainService(managedNamespace, "static")
	static.Spec.ClusterIP = "10.96.0.5"
	if _, err := cs.CoreV1().Services(managedNamespace).Create(ctx, static, metav1.CreateOptions{}); err != nil {
		t.Fatalf("static create: %v", err)
	}
	if !reached(c, managedNamespace, "static", "mutate") || !reached(c, managedNamespace, "static", "validate") {
		t.Fatalf("the static create did not reach both webhooks: %+v", decisionsFor(c, managedNamespace, "static"))
	}
	wrong := plainService(managedNamespace, "static-in-dynamic")
	wrong.Spec.ClusterIP = "10.96.0.18"
	if _, err := cs.CoreV1().Services(managedNamespace).Create(ctx, wrong, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "dynamic band") {
		t.Fatalf("a static address in the dynamic band: err %v, want the static-ip-in-dynamic-band denial", err)
	}
	owner := plainService(managedNamespace, "owner-9")
	got, err := cs.CoreV1().Services(managedNamespace).Create(ctx, owner, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("owner's create: %v", err)
	}
	if got.Spec.ClusterIP != "10.96.0.29" || !reached(c, managedNamespace, "owner-9", "mutate") {
		t.Fatalf("owner-9 got %s (want its reservation 10.96.0.29 assigned by the mutating webhook); decisions %+v", got.Spec.ClusterIP, decisionsFor(c, managedNamespace, "owner-9"))
	}
}

// TestUnmanagedConditionsStayStatic: without --manage-match-conditions the
// configurations keep only their static conditions (every create reaches
// the webhook), and a managed condition left from when it was on is
// removed by the next leader.
func TestUnmanagedConditionsStayStatic(t *testing.T) {
	c := own(t, framework.Options{
		APIServers:  []framework.APIServerOptions{{ServiceClusterIPRange: "10.96.0.0/27"}},
		Policy:      managedPolicy(),
		Webhooks:    1,
		WebhookArgs: []string{"--hold-reservations"}, // a leader, as manifests/base runs it
	})
	cs := c.Client(0)
	ctx := testContext(t, 3*time.Minute)
	ns := namespace(t, c, "unmanaged")
	time.Sleep(2 * time.Second) // let the leader run a term: it must not add anything
	if m, v, _, err := managedConditions(ctx, c); err != nil || m != "" || v != "" {
		t.Fatalf("management off, yet the configurations hold a managed condition (mutating %q, validating %q, %v)", m, v, err)
	}
	if _, err := cs.CoreV1().Services(ns).Create(ctx, plainService(ns, "dynamic"), metav1.CreateOptions{}); err != nil && !strings.Contains(err.Error(), "reserved for") {
		t.Fatal(err)
	}
	if !reached(c, ns, "dynamic", "mutate") {
		t.Fatal("with static conditions only, a dynamic create did not reach the mutating webhook")
	}

	// A condition left behind by an earlier leader, with an allow-list
	// nobody keeps: the next leader removes it.
	v, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "clusterip-policy", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range v.Webhooks {
		if v.Webhooks[i].Name == framework.ValidatingWebhookName {
			v.Webhooks[i].MatchConditions = append(v.Webhooks[i].MatchConditions, admissionregistrationv1.MatchCondition{Name: matchconditions.Name, Expression: "request.operation != 'CREATE'"})
		}
	}
	if _, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(ctx, v, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.Webhooks[0].Stop(15 * time.Second) // SIGTERM: the Lease is released, the restarted replica leads at once
	if err := c.RestartWebhook(ctx, 0); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for {
		_, v, _, err := managedConditions(ctx, c)
		if err == nil && v == "" {
			break
		}
		if time.Since(start) > 45*time.Second {
			t.Fatalf("the leftover managed condition is still there %s after the restart", time.Since(start).Round(time.Second))
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("e2e: unmanaged: the leftover managed condition was removed %s after the restarted replica was ready", time.Since(start).Round(10*time.Millisecond))
	v, err = cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "clusterip-policy", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range v.Webhooks {
		if w.Name == framework.ValidatingWebhookName && len(w.MatchConditions) != 2 {
			t.Fatalf("the static conditions changed: %+v", w.MatchConditions)
		}
	}
}
