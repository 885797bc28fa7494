//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"clusterip-policy/certs"
	"clusterip-policy/pkg/allocview"
	"clusterip-policy/pkg/matchconditions"
	"clusterip-policy/pkg/policy"
	"clusterip-policy/test/e2e/framework"
	"clusterip-policy/test/fixtures"
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
	b.WriteString("allowedCIDRs: [10.96.0.0/12]\nreserveKubernetesService: true\nreservations:\n- {ip: 10.96.0.10, service: kube-system/kube-dns}\n")
	for i := range 10 {
		fmt.Fprintf(&b, "- {ip: 10.96.0.%d, service: %s/owner-%d}\n", 20+i, managedNamespace, i)
	}
	return fixtures.Policy(b.String())
}

func policyDigest(t *testing.T, text string) string {
	t.Helper()
	p, err := policy.ParseDocument([]byte(text))
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
	var m, v, d string
	var err error
	if fixtures.Wait(timeout, func() bool {
		m, v, d, err = managedConditions(ctx, c)
		return err == nil && m != "" && v != "" && d == want
	}) != nil {
		t.Fatalf("after %s the configurations do not carry the managed condition for policy %s: mutating %t, validating %t, annotated policy %q, err %v",
			timeout, want, m != "", v != "", d, err)
	}
	return time.Since(start)
}

func createNamespace(t *testing.T, c *framework.Cluster, name string) {
	t.Helper()
	ctx := testContext(t, 30*time.Second)
	if _, err := c.Client(0).CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	t.Cleanup(func() { deleteServices(t, c.Client(0), name) })
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
//
// Without the backstop: it would refuse the create that lands on a
// reservation before the validating webhook is called (the apiserver runs
// admission policies first), and this test is about what the conditions
// send to the webhook.
func TestManagedConditionsSendOnlyWhatTheWebhookMayChange(t *testing.T) {
	pol := managedPolicy()
	c := own(t, framework.Options{
		APIServers:  []framework.APIServerOptions{{ServiceClusterIPRange: "10.96.0.0/27"}},
		Policy:      pol,
		Webhooks:    1,
		WebhookArgs: []string{"--manage-match-conditions"},
		NoBackstop:  true,
	})
	cs := c.Client(0)
	ctx := testContext(t, 3*time.Minute)
	took := waitManaged(t, ctx, c, policyDigest(t, pol), 30*time.Second)
	t.Logf("e2e: managed conditions: in both configurations %s after the webhook was ready and registered", took.Round(time.Millisecond))
	// The check docs/operations.md gives operators.
	out, _, err := c.Kubectl(ctx, "", "get", "validatingwebhookconfiguration", "clusterip-policy", "-o", `jsonpath={.metadata.annotations.clusterip-policy\.io/match-conditions-policy}`)
	if err != nil || out != policyDigest(t, pol) {
		t.Fatalf("kubectl jsonpath of the policy annotation = %q (%v), want %s", out, err, policyDigest(t, pol))
	}
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
		svc, err := cs.CoreV1().Services(managedNamespace).Create(ctx, fixtures.Service(managedNamespace, name), metav1.CreateOptions{})
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

	static := fixtures.Service(managedNamespace, "static")
	static.Spec.ClusterIP = "10.96.0.5"
	if _, err := cs.CoreV1().Services(managedNamespace).Create(ctx, static, metav1.CreateOptions{}); err != nil {
		t.Fatalf("static create: %v", err)
	}
	if !reached(c, managedNamespace, "static", "mutate") || !reached(c, managedNamespace, "static", "validate") {
		t.Fatalf("the static create did not reach both webhooks: %+v", decisionsFor(c, managedNamespace, "static"))
	}
	wrong := fixtures.Service(managedNamespace, "static-in-dynamic")
	wrong.Spec.ClusterIP = "10.96.0.18"
	if _, err := cs.CoreV1().Services(managedNamespace).Create(ctx, wrong, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "dynamic band") {
		t.Fatalf("a static address in the dynamic band: err %v, want the static-ip-in-dynamic-band denial", err)
	}
	// Re-applying the manifests' configuration with kubectl apply
	// --server-side leaves the managed condition in place: matchConditions
	// is a map list keyed by name, and the entry is the leader's.
	vc := c.Configs.Validating.DeepCopy()
	vc.TypeMeta = metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingWebhookConfiguration"}
	vc.ResourceVersion, vc.ManagedFields = "", nil
	doc, err := yaml.Marshal(vc)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Kubectl(ctx, string(doc), "apply", "--server-side", "--force-conflicts", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	if _, v, _, err := managedConditions(ctx, c); err != nil || v == "" {
		t.Fatalf("after kubectl apply --server-side of the manifests' configuration the managed condition is gone (%v)", err)
	}
	// Someone writes a condition that skips everything (a careless edit, an
	// old backup restored): the leader's periodic re-read puts its own back.
	want, _, _, err := managedConditions(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	m, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "clusterip-policy", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range m.Webhooks[0].MatchConditions {
		if m.Webhooks[0].MatchConditions[i].Name == matchconditions.Name {
			m.Webhooks[0].MatchConditions[i].Expression = "false"
		}
	}
	if _, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(ctx, m, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	tampered := time.Now()
	for {
		got, _, _, err := managedConditions(ctx, c)
		if err == nil && got == want {
			break
		}
		if time.Since(tampered) > 15*time.Second {
			t.Fatalf("the tampered managed condition is still %.80q after %s", got, time.Since(tampered).Round(time.Second))
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("e2e: managed conditions: a tampered condition was restored %s later", time.Since(tampered).Round(10*time.Millisecond))
	owner := fixtures.Service(managedNamespace, "owner-9")
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
	// The replica leads and has run its term's passes: it must not have
	// added anything.
	fixtures.Eventually(t, "the replica to lead", 30*time.Second, func() bool { return leading(ctx, c, 0) })
	leaderPasses(t, ctx, c, 2)
	if m, v, _, err := managedConditions(ctx, c); err != nil || m != "" || v != "" {
		t.Fatalf("management off, yet the configurations hold a managed condition (mutating %q, validating %q, %v)", m, v, err)
	}
	if _, err := cs.CoreV1().Services(ns).Create(ctx, fixtures.Service(ns, "dynamic"), metav1.CreateOptions{}); err != nil && !strings.Contains(err.Error(), "reserved for") {
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
	fixtures.Eventually(t, "the leftover managed condition to be removed after the restart", 45*time.Second, func() bool {
		_, v, _, err := managedConditions(ctx, c)
		return err == nil && v == ""
	})
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

// The policies of TestManagedConditionsKeepUpUnderLoad. The narrowed one
// drops 10.98.0.0/24 from allowedCIDRs and reserves twelve of the fourteen
// addresses of the small ServiceCIDR 10.97.0.0/28 (no static band: all
// dynamic), where the load's dynamic creates keep landing as its Services
// are deleted and created again.
const (
	loadSpecWide = `allowedCIDRs: [10.96.0.0/12]
reserveKubernetesService: true
reservations:
- {ip: 10.96.0.10, service: kube-system/kube-dns}
`
	loadOwnersNamespace = "e2e-owners"
)

var loadPolicyWide = fixtures.Policy(loadSpecWide)

func loadPolicyNarrow() string {
	var b strings.Builder
	b.WriteString(strings.Replace(loadSpecWide, "allowedCIDRs: [10.96.0.0/12]", "allowedCIDRs: [10.96.0.0/16, 10.97.0.0/28]", 1))
	for i := range 12 {
		fmt.Fprintf(&b, "- {ip: 10.97.0.%d, service: %s/owner-%d}\n", 2+i, loadOwnersNamespace, i)
	}
	return fixtures.Policy(b.String())
}

// loadVerdict judges one address under a policy version, apart from
// pkg/policy on purpose (the product must not be its own judge): allowed
// is the union of the approved active ranges, reserved maps an address to
// its owner.
type loadVerdict struct {
	allowed  []netip.Prefix
	reserved map[string]string
}

func (v loadVerdict) breaks(key, ipStr string) string {
	ip, err := netip.ParseAddr(ipStr)
	if err != nil {
		return "not an IP"
	}
	in := false
	for _, p := range v.allowed {
		in = in || (p.Contains(ip) && ip != p.Addr())
	}
	if !in {
		return fmt.Sprintf("outside the approved active ranges %v", v.allowed)
	}
	if owner, ok := v.reserved[ipStr]; ok && owner != key {
		return "reserved for " + owner
	}
	return ""
}

// TestManagedConditionsKeepUpUnderLoad changes the ServiceCIDRs and then
// the policy under load (8 clients through the load balancer), and checks
// the cluster afterwards, independently of the webhook: every Service
// admitted while a policy was in force (the policy digest the webhook
// configurations were annotated with, plus a settle period for the
// apiserver to load them) obeys that policy. It reports how long the
// conditions took to follow each change.
func TestManagedConditionsKeepUpUnderLoad(t *testing.T) {
	c := own(t, framework.Options{
		APIServers:   []framework.APIServerOptions{{ServiceClusterIPRange: "10.96.0.0/16"}},
		LoadBalancer: true,
		Policy:       loadPolicyWide,
		Webhooks:     1,
		WebhookArgs:  []string{"--manage-match-conditions", "--policy-reload-interval=100ms"},
	})
	cs := c.Client(0)
	ctx := testContext(t, 4*time.Minute)
	waitManaged(t, ctx, c, policyDigest(t, loadPolicyWide), 30*time.Second)
	t.Run("every kind of request evaluates under the managed conditions", func(t *testing.T) {
		sendEveryRequestKind(t, c, false)
	})
	ns := namespace(t, c, "managed-load")
	createNamespace(t, c, loadOwnersNamespace)

	serviceCIDR := func(name, cidr string) {
		t.Helper()
		sc := fixtures.ServiceCIDR(name, cidr)
		if _, err := cs.NetworkingV1().ServiceCIDRs().Create(ctx, sc, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create ServiceCIDR %s %s: %v", name, cidr, err)
		}
		t.Cleanup(func() {
			_ = cs.NetworkingV1().ServiceCIDRs().Delete(context.Background(), name, metav1.DeleteOptions{})
		})
	}
	// Before the load: the small range the narrowed policy reserves in,
	// and a wide one it drops. Both inside allowedCIDRs of the wide policy.
	serviceCIDR("e2e-small", "10.97.0.0/28")
	serviceCIDR("e2e-wide", "10.98.0.0/24")
	// waitManagedDigestChange reports a timeout with Errorf, not Fatalf:
	// it runs while the load's goroutine still uses t.
	waitManagedDigestChange := func(from string) {
		t.Helper()
		if fixtures.Wait(10*time.Second, func() bool { d := conditionsDigest(ctx, c); return d != "" && d != from }) != nil {
			t.Errorf("the managed conditions' digest is still %q 10s after the change", conditionsDigest(ctx, c))
		}
	}
	waitManagedDigestChange("")

	note := func(what string) { t.Logf("e2e: managed load: %s", what) }
	// The validating stage's denials: the webhook's, or the backstop's,
	// which the apiserver runs first and which follows a policy change as
	// the webhook does (both within about a second).
	accept := func(err error) bool {
		s := err.Error()
		return (deniedBy(err, validating) && (strings.Contains(s, "is reserved for Service") || strings.Contains(s, "comes from") || strings.Contains(s, "outside every active"))) ||
			(deniedByBackstop(err) && (strings.Contains(s, "is reserved for Service") || strings.Contains(s, "is outside the policy's allowedCIDRs")))
	}
	pools := func(i int) []string {
		var out []string
		for j := range 8 {
			out = append(out, fmt.Sprintf("10.96.0.%d", 100+i*10+j))
		}
		return out
	}
	validatingCalls := func() float64 {
		n, _ := c.APIServerMetric(ctx, 0, "apiserver_admission_webhook_request_total", `name="`+validating+`"`, `operation="CREATE"`)
		return n
	}
	callsBefore := validatingCalls()
	done := make(chan *loadResult, 1)
	loadStart := time.Now()
	go func() {
		done <- runLoad(ctx, t, c, loadOptions{Namespace: ns, Clients: 8, Duration: 24 * time.Second, MaxOps: 1500, StaticPool: pools, AcceptDenial: accept})
	}()

	var edited, synced, inForce, lateDeleted time.Time
	var editToSync, settle time.Duration
	func() {
		// The sleeps here pace the steps: the load runs a while under each
		// state (creates to judge under it), they wait for nothing.
		time.Sleep(3 * time.Second)
		before := conditionsDigest(ctx, c)
		serviceCIDR("e2e-late", "10.99.0.0/24") // a new range under load: sent to the webhook until listed
		note("ServiceCIDR e2e-late 10.99.0.0/24 created")
		waitManagedDigestChange(before)
		note("the configurations list 10.99.0.0/24")
		time.Sleep(3 * time.Second)
		before = conditionsDigest(ctx, c)
		if err := cs.NetworkingV1().ServiceCIDRs().Delete(ctx, "e2e-late", metav1.DeleteOptions{}); err != nil {
			t.Errorf("delete ServiceCIDR e2e-late: %v", err)
		}
		lateDeleted = time.Now()
		note("ServiceCIDR e2e-late deleted (no controller-manager: gone at once, its Services orphaned)")
		waitManagedDigestChange(before)
		note("the configurations no longer list 10.99.0.0/24")
		time.Sleep(2 * time.Second)

		narrow := loadPolicyNarrow()
		edit := time.Now()
		edited = edit
		if err := certs.WriteFileAtomic(c.PolicyFile, []byte(narrow), 0o644); err != nil {
			t.Fatal(err)
		}
		note("policy narrowed: allowedCIDRs without 10.98.0.0/24, 12 reservations in 10.97.0.0/28")
		waitManaged(t, ctx, c, policyDigest(t, narrow), 10*time.Second)
		synced = time.Now()
		editToSync = synced.Sub(edit)
		note(fmt.Sprintf("the configurations carry the narrowed policy %s after the edit", editToSync.Round(time.Millisecond)))
		// Settle: how soon the apiserver filters with what was written. A
		// new owner's dry-run create is skipped under the old conditions;
		// under the new ones the mutating webhook assigns its reservation
		// (or denies it, when a load Service holds the address).
		for {
			got, err := cs.CoreV1().Services(loadOwnersNamespace).Create(ctx, fixtures.Service(loadOwnersNamespace, "owner-0"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if (err == nil && got.Spec.ClusterIP == "10.97.0.2") || (err != nil && deniedBy(err, mutating)) {
				settle = time.Since(synced)
				break
			}
			if time.Since(synced) > 10*time.Second {
				t.Fatalf("the apiserver still skips the new owner's create %s after the conditions were written (err %v)", time.Since(synced).Round(time.Millisecond), err)
			}
			time.Sleep(5 * time.Millisecond)
		}
		note(fmt.Sprintf("the apiserver sends a new owner's create %s after the write", settle.Round(time.Millisecond)))
		for {
			if v, err := c.WebhookMetric(ctx, 0, "clusterip_policy_match_conditions_synced"); err == nil && v == 1 {
				inForce = time.Now()
				break
			}
			if time.Since(synced) > 10*time.Second {
				t.Fatalf("clusterip_policy_match_conditions_synced is not 1 %s after the write", time.Since(synced).Round(time.Millisecond))
			}
			time.Sleep(20 * time.Millisecond)
		}
		note(fmt.Sprintf("the leader reports the narrowed policy in force %s after the write", inForce.Sub(synced).Round(time.Millisecond)))
		if settle >= inForce.Sub(synced) {
			t.Errorf("the apiserver took %s to filter with the new conditions, longer than the leader waits before it reports them in force (%s)", settle, inForce.Sub(synced))
		}
	}()
	res := <-done
	tl := res.tally()
	t.Logf("e2e: managed load: %d requests in %s (%d succeeded, %d expected denials, %d real errors, %d retried attempts)",
		tl.Sent, time.Since(loadStart).Round(time.Millisecond), tl.Succeeded, tl.ExpectedDenials, tl.RealErrors, tl.RetriedAttempts)
	creates := 0
	for _, op := range res.Ops {
		if strings.HasPrefix(op.Kind, "create") {
			creates += op.Attempts
		}
	}
	t.Logf("e2e: managed load: the apiserver called the validating webhook %v times for %d create attempts (forbidden, static and dynamic, plus the settle probes)", validatingCalls()-callsBefore, creates)
	if len(res.AdmittedOutside) > 0 {
		t.Errorf("forbidden creates admitted: %v", res.AdmittedOutside)
	}
	if tl.RealErrors > 0 {
		t.Errorf("%d real errors: %v", tl.RealErrors, res.realErrors(5))
	}

	// The independent check of every Service in the namespace.
	wide := loadVerdict{allowed: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16"), netip.MustParsePrefix("10.97.0.0/28"), netip.MustParsePrefix("10.98.0.0/24")},
		reserved: map[string]string{"10.96.0.10": "kube-system/kube-dns", "10.96.0.1": "default/kubernetes"}}
	narrowV := loadVerdict{allowed: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16"), netip.MustParsePrefix("10.97.0.0/28")}, reserved: map[string]string{}}
	for ip, o := range wide.reserved {
		narrowV.reserved[ip] = o
	}
	for i := range 12 {
		narrowV.reserved[fmt.Sprintf("10.97.0.%d", 2+i)] = fmt.Sprintf("%s/owner-%d", loadOwnersNamespace, i)
	}
	const settlePeriod = time.Second // for the deleted ServiceCIDR: the webhook's and the apiserver's informers
	// judge says why a Service with ip, whose create started at when,
	// breaks the policy in force then, or "" when it does not; narrowed
	// says the narrowed policy was in force.
	judge := func(key, ip string, when time.Time, known bool) (why string, narrowed bool) {
		why = wide.breaks(key, ip)
		if late := netip.MustParsePrefix("10.99.0.0/24"); why != "" && late.Contains(netip.MustParseAddr(ip)) && ip != "10.99.0.0" {
			// Admitted while e2e-late was active: orphaned by its deletion,
			// not admitted outside the policy.
			if known && when.Before(lateDeleted.Add(settlePeriod)) {
				why = ""
			} else {
				why = "in the deleted ServiceCIDR e2e-late, admitted after its deletion"
			}
		}
		if why == "" && (!known || !when.Before(inForce)) {
			return narrowV.breaks(key, ip), true
		}
		return why, false
	}
	// Every create the clients were told succeeded, deleted since or not.
	started := map[string]time.Time{}
	var admitted, underNarrow, inWindow, bad int
	for _, op := range res.Ops {
		if !strings.HasPrefix(op.Kind, "create") || op.Class != classOK {
			continue
		}
		started[op.Name] = op.Start
		admitted++
		why, narrowed := judge(ns+"/"+op.Name, op.IP, op.Start, true)
		if narrowed {
			underNarrow++
		} else if !op.Start.Before(edited) && narrowV.breaks(ns+"/"+op.Name, op.IP) != "" {
			inWindow++ // the old policy was still in force for it
		}
		if why != "" {
			bad++
			t.Errorf("create of %s/%s started at %s got %s (the narrowed policy in force since %s): %s", ns, op.Name, op.Start.Format(time.StampMilli), op.IP, inForce.Format(time.StampMilli), why)
		}
	}
	// And every Service there now (a create whose answer was lost included).
	svcs, err := cs.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var inSmall, inWide, inLate int
	for _, s := range svcs.Items {
		key, ip := ns+"/"+s.Name, s.Spec.ClusterIP
		when, known := started[s.Name]
		if why, _ := judge(key, ip, when, known); why != "" {
			bad++
			t.Errorf("Service %s has %s, admitted at %s (the narrowed policy in force since %s): %s", key, ip, when.Format(time.StampMilli), inForce.Format(time.StampMilli), why)
		}
		switch {
		case strings.HasPrefix(ip, "10.97.0."):
			inSmall++
		case strings.HasPrefix(ip, "10.98.0."):
			inWide++
		case strings.HasPrefix(ip, "10.99.0."):
			inLate++
		}
	}
	deniedOnReservation, deniedFromWide := 0, 0
	examples := map[string]string{}
	for _, op := range res.Ops {
		switch {
		case op.Class != classExpectedDenial || op.Err == "":
		case strings.Contains(op.Err, "is reserved for Service "+loadOwnersNamespace):
			deniedOnReservation++
			examples["new reservation"] = op.Err
		case strings.Contains(op.Err, `allocated ClusterIP "10.98.0.`):
			deniedFromWide++
			examples["dropped range"] = op.Err
		default:
			examples["other"] = op.Err
		}
	}
	for what, msg := range examples {
		t.Logf("e2e: managed load: a denial (%s): %.400s", what, msg)
	}
	t.Logf("e2e: managed load: %d admitted creates checked (%d under the narrowed policy; %d started between the edit and the report were admitted under the wide policy though the narrowed one forbids them), %d Services there at the end (%d in 10.97.0.0/28, %d in 10.98.0.0/24, %d in 10.99.0.0/24, orphaned); %d creates denied on a new reservation, %d from the dropped range; %d outside the policy in force",
		admitted, underNarrow, inWindow, len(svcs.Items), inSmall, inWide, inLate, deniedOnReservation, deniedFromWide, bad)
	t.Logf("e2e: managed load: lag figures: policy edit to conditions written %s (file reload interval 100ms), written to the apiserver filtering with them %s, written to reported in force %s",
		editToSync.Round(time.Millisecond), settle.Round(time.Millisecond), inForce.Sub(synced).Round(time.Millisecond))
	if deniedOnReservation+deniedFromWide == 0 {
		t.Errorf("no create was denied by the narrowed policy: the run did not exercise the window")
	}
}

// conditionsDigest is the conditions digest the validating configuration
// is annotated with.
func conditionsDigest(ctx context.Context, c *framework.Cluster) string {
	v, err := c.Client(0).AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "clusterip-policy", metav1.GetOptions{})
	if err != nil {
		return ""
	}
	return v.Annotations["clusterip-policy.io/match-conditions-digest"]
}

// largestManagedPolicy is the policy that makes the longest managed
// conditions (pkg/matchconditions TestLargestConditionsStayWithinTheApiserversLimits
// builds the same): 511 owners with the longest names plus
// default/kubernetes, each address a hole in a dynamic band of one family
// or the other, so the allow-list is capped.
func largestManagedPolicy() string {
	var b strings.Builder
	b.WriteString("allowedCIDRs: [10.96.0.0/16, 'fd00:10:96::/108']\nreservations:\n")
	for i := range matchconditions.MaxOwners - 1 {
		ip := fmt.Sprintf("10.96.%d.%d", 2+i%250, 7+i/250)
		if i%2 == 1 {
			ip = fmt.Sprintf("fd00:10:96::%x:%x", 1+i%14, 0x101+i)
		}
		fmt.Fprintf(&b, "- {ip: '%s', service: ns%061d/svc%060d}\n", ip, i, i)
	}
	return fixtures.Policy(b.String())
}

// TestLargestManagedConditionsOnARealApiserver: the longest conditions the
// leader can write are accepted by a dual-stack v1.37 apiserver, evaluate
// on every request, and leave the hostile request of 50,000 clusterIPs
// its one short denial.
func TestLargestManagedConditionsOnARealApiserver(t *testing.T) {
	pol := largestManagedPolicy()
	c := own(t, framework.Options{
		APIServers:  []framework.APIServerOptions{{ServiceClusterIPRange: "10.96.0.0/16,fd00:10:96::/108"}},
		Policy:      pol,
		Webhooks:    1,
		WebhookArgs: []string{"--manage-match-conditions"},
	})
	cs := c.Client(0)
	ctx := testContext(t, 3*time.Minute)
	waitManaged(t, ctx, c, policyDigest(t, pol), 30*time.Second)
	m, v, _, err := managedConditions(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("e2e: largest managed conditions accepted: mutating %d bytes, validating %d bytes", len(m), len(v))
	if len(m) < 60_000 {
		t.Fatalf("the mutating condition has %d bytes: not the largest case (owners capped?)", len(m))
	}
	ns := namespace(t, c, "largest")

	ips := make([]string, 50000)
	for i := range ips {
		ips[i] = "10.96.200.5"
	}
	flood := fixtures.Service(ns, "flood", func(s *corev1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = ips[0], ips })
	_, err = cs.CoreV1().Services(ns).Create(ctx, flood, metav1.CreateOptions{})
	want := `admission webhook "` + mutating + `" denied the request: spec.clusterIPs: Too many: 50000: must have at most 2 items (one per IP family)`
	if err == nil || !strings.HasPrefix(err.Error(), want) || len(err.Error()) > 1024 {
		t.Fatalf("50,000 clusterIPs: %d-byte error %.300q, want one starting %q", len(fmt.Sprint(err)), fmt.Sprint(err), want)
	}

	dual := corev1.IPFamilyPolicyRequireDualStack
	for i, tweak := range []func(*corev1.Service){
		func(*corev1.Service) {},
		func(s *corev1.Service) { s.Spec.IPFamilyPolicy = &dual },
		func(s *corev1.Service) {
			s.Spec.IPFamilyPolicy, s.Spec.IPFamilies = &dual, []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol}
		},
	} {
		name := fmt.Sprintf("dynamic-%d", i)
		if _, err := cs.CoreV1().Services(ns).Create(ctx, fixtures.Service(ns, name, tweak), metav1.CreateOptions{}); err != nil {
			t.Fatalf("dynamic create %s: %v", name, err)
		}
	}
	ownerNS := fmt.Sprintf("ns%061d", 0)
	createNamespace(t, c, ownerNS)
	got, err := cs.CoreV1().Services(ownerNS).Create(ctx, fixtures.Service(ownerNS, fmt.Sprintf("svc%060d", 0)), metav1.CreateOptions{})
	if err != nil || got.Spec.ClusterIP != "10.96.2.7" {
		t.Fatalf("the first owner's create: %v, clusterIP %q, want its reservation 10.96.2.7", err, got.Spec.ClusterIP)
	}
	for _, webhook := range []string{mutating, validating} {
		n, err := c.APIServerMetric(ctx, 0, "apiserver_admission_match_condition_evaluation_errors_total", `name="`+webhook+`"`)
		if err != nil || n != 0 {
			t.Errorf("%s: %v matchCondition evaluation errors (%v)", webhook, n, err)
		}
	}
}

// TestManagedConditionsCutTheCostOfACreate measures what the managed
// conditions are for: 600 dynamic Service creates at 8 clients with the
// static conditions only, with the managed conditions (computed by
// pkg/matchconditions for this cluster and written by hand under a name of
// the test's own, so nothing rewrites them between phases: the leader,
// with --manage-match-conditions off, removes a condition of the managed
// name within a minute, which landed in the middle of a slow run), and with
// no webhook at all. It asserts
// the call counts (every create reaches the validating webhook under the
// static conditions, almost none under the managed ones) and logs the
// rates.
func TestManagedConditionsCutTheCostOfACreate(t *testing.T) {
	c := own(t, framework.Options{Policy: sharedPolicy, Webhooks: 1})
	cs := c.Client(0)
	ctx := testContext(t, 4*time.Minute)
	p, err := policy.ParseDocument([]byte(sharedPolicy))
	if err != nil {
		t.Fatal(err)
	}
	rs := allocview.StaticRanges("test", []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16")}, p.AllowedCIDRs)
	conds := matchconditions.Compute(p, rs)
	const condName = "cost-test-" + matchconditions.Name

	cfg := c.RESTConfig(0)
	cfg.QPS, cfg.Burst = 1000, 2000
	const clients, perClient = 8, 75
	calls := func() float64 {
		n, err := c.APIServerMetric(ctx, 0, "apiserver_admission_webhook_request_total", `name="`+validating+`"`, `operation="CREATE"`)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	// Each phase starts from an empty cluster (the apiserver's cost per
	// create grows with the Services that exist).
	type cost struct{ rate, calls, apiserverMs, webhookMs float64 }
	phase := func(name string) cost {
		ns := namespace(t, c, "cost-"+name)
		defer deleteServices(t, cs, ns)
		before := calls()
		apiBefore, whBefore := cpuSeconds(t, c.APIServers[0].Pid()), cpuSeconds(t, c.Webhooks[0].Pid())
		start := time.Now()
		errs := make(chan error, clients)
		for i := range clients {
			go func() {
				cl := kubernetes.NewForConfigOrDie(cfg)
				for j := range perClient {
					if _, err := cl.CoreV1().Services(ns).Create(ctx, fixtures.Service(ns, fmt.Sprintf("s%d-%d", i, j)), metav1.CreateOptions{}); err != nil {
						errs <- err
						return
					}
				}
				errs <- nil
			}()
		}
		for range clients {
			if err := <-errs; err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}
		took := time.Since(start)
		n := float64(clients * perClient)
		return cost{rate: n / took.Seconds(), calls: calls() - before,
			apiserverMs: 1000 * (cpuSeconds(t, c.APIServers[0].Pid()) - apiBefore) / n,
			webhookMs:   1000 * (cpuSeconds(t, c.Webhooks[0].Pid()) - whBefore) / n}
	}

	_ = phase("warm-up")
	static := phase("static")
	for _, kind := range []string{"mutating", "validating"} {
		var err error
		if kind == "mutating" {
			var m *admissionregistrationv1.MutatingWebhookConfiguration
			if m, err = cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "clusterip-policy", metav1.GetOptions{}); err == nil {
				m.Webhooks[0].MatchConditions = append(m.Webhooks[0].MatchConditions, admissionregistrationv1.MatchCondition{Name: condName, Expression: conds.Mutating})
				_, err = cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(ctx, m, metav1.UpdateOptions{})
			}
		} else {
			var v *admissionregistrationv1.ValidatingWebhookConfiguration
			if v, err = cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "clusterip-policy", metav1.GetOptions{}); err == nil {
				v.Webhooks[0].MatchConditions = append(v.Webhooks[0].MatchConditions, admissionregistrationv1.MatchCondition{Name: condName, Expression: conds.Validating})
				_, err = cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(ctx, v, metav1.UpdateOptions{})
			}
		}
		if err != nil {
			t.Fatalf("add the managed condition to the %s configuration: %v", kind, err)
		}
	}
	// The apiserver loads changed configurations from its informer, a
	// moment after the write: each phase starts once a probe create is
	// answered the new way. A create's webhook calls are counted before it
	// returns, so a probe that left the counts unchanged reached neither
	// webhook.
	probeNS := namespace(t, c, "cost-probe")
	probes := 0
	untouchedBy := func(what string, probe func(name string) error) {
		t.Helper()
		fixtures.EventuallyNil(t, what, 30*time.Second, func() error {
			probes++
			name := fmt.Sprintf("probe-%d", probes)
			m0, v0 := serviceWebhookCalls(t, ctx, c)
			if err := probe(name); err != nil {
				return fmt.Errorf("probe create %s: %w", name, err)
			}
			if m, v := serviceWebhookCalls(t, ctx, c); m != m0 || v != v0 {
				return fmt.Errorf("probe create %s still reached the webhooks: mutating +%v, validating +%v", name, m-m0, v-v0)
			}
			return nil
		})
	}
	untouchedBy("the apiserver to filter creates with the added conditions (a dynamic create reaches neither webhook)", func(name string) error {
		_, err := cs.CoreV1().Services(probeNS).Create(ctx, fixtures.Service(probeNS, name), metav1.CreateOptions{})
		return err
	})
	deleteServices(t, cs, probeNS)
	managed := phase("managed")
	if err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, "clusterip-policy", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, "clusterip-policy", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// A static-band create: both configurations send it, whatever their
	// conditions, until the apiserver has dropped them.
	untouchedBy("the apiserver to drop the deleted configurations (a static create reaches neither webhook)", func(name string) error {
		s := fixtures.Service(probeNS, name)
		s.Spec.ClusterIP = "10.96.0.50"
		_, err := cs.CoreV1().Services(probeNS).Create(ctx, s, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	})
	none := phase("none")
	t.Logf("e2e: cost: %d dynamic creates at %d clients, CPU per create of the apiserver / the webhook process: static conditions %.0f/s, %v validating calls, %.2f / %.2f ms; managed conditions %.0f/s, %v calls, %.2f / %.2f ms; no webhook %.0f/s, %.2f ms",
		clients*perClient, clients, static.rate, static.calls, static.apiserverMs, static.webhookMs,
		managed.rate, managed.calls, managed.apiserverMs, managed.webhookMs, none.rate, none.apiserverMs)
	staticCalls, managedCalls := static.calls, managed.calls
	if staticCalls < clients*perClient {
		t.Errorf("static conditions: %v validating calls for %d creates, want one each", staticCalls, clients*perClient)
	}
	if managedCalls > clients*perClient/20 {
		t.Errorf("managed conditions: %v validating calls for %d dynamic creates, want almost none (only those landing on the static band or a reservation)", managedCalls, clients*perClient)
	}
}

// serviceWebhookCalls is how many CREATEs the apiserver has sent to the
// mutating and to the validating Service webhook.
func serviceWebhookCalls(t *testing.T, ctx context.Context, c *framework.Cluster) (mutatingCalls, validatingCalls float64) {
	t.Helper()
	for _, x := range []struct {
		name string
		n    *float64
	}{{mutating, &mutatingCalls}, {validating, &validatingCalls}} {
		n, err := c.APIServerMetric(ctx, 0, "apiserver_admission_webhook_request_total", `name="`+x.name+`"`, `operation="CREATE"`)
		if err != nil {
			t.Fatal(err)
		}
		*x.n = n
	}
	return mutatingCalls, validatingCalls
}

// cpuSeconds is the user and system CPU time process pid has used
// (/proc/PID/stat, in clock ticks of 1/100 s, Linux's USER_HZ).
func cpuSeconds(t *testing.T, pid int) float64 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(data), ") ")
	f := strings.Fields(rest)
	if !ok || len(f) < 13 {
		t.Fatalf("/proc/%d/stat: %q", pid, data)
	}
	utime, err1 := strconv.ParseFloat(f[11], 64)
	stime, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("/proc/%d/stat: %q", pid, data)
	}
	return (utime + stime) / 100
}
