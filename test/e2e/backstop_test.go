//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	admv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"clusterip-policy/test/e2e/framework"
	"clusterip-policy/test/fixtures"
)

// backstopPolicy approves 10.96.0.0/16 only, reserves kube-dns's address
// and a range for one namespace.
const backstopPolicy = `apiVersion: clusterip-policy.io/v1alpha1
kind: ClusterIPPolicy
metadata:
  name: default
spec:
  allowedCIDRs: [10.96.0.0/16]
  reservations:
  - {ip: 10.96.0.10, service: kube-system/kube-dns, note: cluster DNS}
  reservedRanges:
  - {cidr: 10.96.0.32/28, namespaces: [team-db], note: databases}
  enforcement:
    default: deny
`

// backstopCondition is the ClusterIPPolicy's BackstopInForce condition as
// "status reason: message".
func backstopCondition(ctx context.Context, c *framework.Cluster) string {
	out, _, _ := c.Kubectl(ctx, "", "get", "clusterippolicy", "default", "-o", `jsonpath={.status.conditions[?(@.type=="BackstopInForce")].status} {.status.conditions[?(@.type=="BackstopInForce")].reason}: {.status.conditions[?(@.type=="BackstopInForce")].message}`)
	return out
}

// refusedByBackstop fails the test unless err is the backstop's refusal
// (a ValidatingAdmissionPolicy of ours) for rule, naming every part.
func refusedByBackstop(t *testing.T, err error, rule string, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("admitted, want the backstop's refusal by rule %s", rule)
	}
	msg := err.Error()
	if !strings.Contains(msg, "ValidatingAdmissionPolicy 'clusterip-policy-backstop-") || !strings.Contains(msg, "(clusterip-policy backstop, rule "+rule+")") {
		t.Fatalf("want the backstop's refusal by rule %s, got: %v", rule, err)
	}
	for _, p := range parts {
		if !strings.Contains(msg, p) {
			t.Errorf("refusal lacks %q:\n%v", p, err)
		}
	}
}

// servesMutatingPolicies says whether the apiserver under test serves
// admissionregistration.k8s.io/v1 MutatingAdmissionPolicy (1.36 and newer).
func servesMutatingPolicies(t *testing.T, cs kubernetes.Interface) bool {
	t.Helper()
	res, err := cs.Discovery().ServerResourcesForGroupVersion("admissionregistration.k8s.io/v1")
	if err != nil {
		t.Fatal(err)
	}
	return slices.ContainsFunc(res.APIResources, func(r metav1.APIResource) bool { return r.Name == "mutatingadmissionpolicies" })
}

// TestBackstopHoldsWhileTheWebhookCannotAnswer installs as the manifests
// do (the policy object, --arm-failure-policy, --backstop, the shipped
// RBAC and configurations) on a real kube-apiserver, then stops the
// webhook and sets the configurations to Ignore, as the break-glass's
// gentle form does, and later deletes them, as a GitOps prune does. Every
// request of the table is refused, by the apiserver's own
// allocator or by the backstop with our message; what the policy allows
// still goes through. Then the documented break-glass command lifts the
// backstop, and putting the configurations back restores it.
func TestBackstopHoldsWhileTheWebhookCannotAnswer(t *testing.T) {
	c := own(t, framework.Options{Webhooks: 0, ArmByLeader: true, NoRegister: true,
		WebhookArgs: []string{"--policy-source=crd", "--arm-failure-policy", "--audit-interval=10m"}})
	cs := c.Client(0)
	ctx := testContext(t, 6*time.Minute)
	installPolicyObject(t, ctx, c, backstopPolicy)
	// A ServiceCIDR nobody approved, from before the install.
	if _, err := cs.NetworkingV1().ServiceCIDRs().Create(ctx, fixtures.ServiceCIDR("drift", "10.250.0.0/24"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.StartWebhooks(ctx, 1); err != nil {
		t.Fatal(err)
	}
	registerAsShipped(t, ctx, c, c.Webhooks[0].Addr())
	mapServed := servesMutatingPolicies(t, cs)

	start := time.Now()
	fixtures.EventuallyNil(t, "BackstopInForce True", 60*time.Second, func() error {
		if got := backstopCondition(ctx, c); !strings.HasPrefix(got, "True InForce: ") {
			return fmt.Errorf("BackstopInForce %q", got)
		}
		return nil
	})
	rules, _, _ := c.Kubectl(ctx, "", "get", "clusterippolicy", "default", "-o", "jsonpath={.status.backstop.rules} {.status.backstop.generation}")
	left, _, _ := c.Kubectl(ctx, "", "get", "clusterippolicy", "default", "-o", "jsonpath={.status.backstop.left}")
	t.Logf("e2e: backstop in force %s after registration; rules %s; left %s; MutatingAdmissionPolicy served: %v", time.Since(start).Round(100*time.Millisecond), rules, left, mapServed)
	for _, want := range []string{"services/outside-service-cidrs=deny", "services/reserved-for-other=deny", "services/reserved-range-for-other=deny", "servicecidrs/outside-service-cidrs=deny", "servicecidrs/static-ip-in-dynamic-band=deny"} {
		if !strings.Contains(rules, want) {
			t.Errorf("status.backstop.rules %s lacks %s", rules, want)
		}
	}
	if strings.Contains(rules, "services/static-ip-in-dynamic-band") != mapServed {
		t.Errorf("status.backstop.rules %s: services/static-ip-in-dynamic-band carried %v, MutatingAdmissionPolicy served %v", rules, !mapServed, mapServed)
	}

	ns := namespace(t, c, "backstop")
	for _, n := range []string{"team-db", "kube-system"} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}

	// The webhook stops; the configurations are set to Ignore.
	c.Webhooks[0].Stop(20 * time.Second)
	setFailurePolicy(t, ctx, cs, admv1.Ignore)

	// The table: each row refused.
	checkRows := func(when string) {
		t.Helper()
		_, err := create(ctx, cs, fixtures.Service(ns, "squat-dns", fixtures.WithClusterIP("10.96.0.10")))
		refusedByBackstop(t, err, "reserved-for-other", `"10.96.0.10"`, "reserved for Service kube-system/kube-dns", "choose a free address in the static band 10.96.0.1-10.96.1.0")
		_, err = create(ctx, cs, fixtures.Service(ns, "outside", fixtures.WithClusterIP("10.200.0.1")))
		if err == nil {
			t.Errorf("%s: a Service naming 10.200.0.1, outside every ServiceCIDR, was admitted", when)
		}
		_, err = create(ctx, cs, fixtures.Service(ns, "dynamic", fixtures.WithClusterIP("10.96.200.5")))
		if mapServed {
			refusedByBackstop(t, err, "static-ip-in-dynamic-band", `"10.96.200.5"`, "static band 10.96.0.1-10.96.1.0")
			// A dry run is judged too. The apiserver's dry-run allocator
			// is that of a range picked at random among the ServiceCIDRs
			// (kube-apiserver's MetaAllocator.DryRun), and that of
			// "drift" refuses 10.96.200.5 itself: try until the draw is
			// the default range's.
			for i := 0; ; i++ {
				_, err = cs.CoreV1().Services(ns).Create(ctx, fixtures.Service(ns, "dynamic-dry", fixtures.WithClusterIP("10.96.200.5")), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
				if err == nil || !strings.Contains(err.Error(), "is not in the valid range") || i == 30 {
					break
				}
			}
			refusedByBackstop(t, err, "static-ip-in-dynamic-band", `"10.96.200.5"`)
		} else if err != nil {
			t.Errorf("%s: without MutatingAdmissionPolicy the backstop does not carry the dynamic band, yet: %v", when, err)
		} else {
			_ = cs.CoreV1().Services(ns).Delete(ctx, "dynamic", metav1.DeleteOptions{})
		}
		_, err = cs.NetworkingV1().ServiceCIDRs().Create(ctx, fixtures.ServiceCIDR("unapproved", "10.251.0.0/24"), metav1.CreateOptions{})
		refusedByBackstop(t, err, "outside-service-cidrs", `"10.251.0.0/24"`, "allowedCIDRs 10.96.0.0/16")
		_, err = cs.NetworkingV1().ServiceCIDRs().Create(ctx, fixtures.ServiceCIDR("overlap", "10.96.0.0/24"), metav1.CreateOptions{})
		refusedByBackstop(t, err, "static-ip-in-dynamic-band", `"10.96.0.0/24"`)
		_, err = create(ctx, cs, fixtures.Service(ns, "drift", fixtures.WithClusterIP("10.250.0.5")))
		refusedByBackstop(t, err, "outside-service-cidrs", `"10.250.0.5"`, "allowedCIDRs 10.96.0.0/16")
		_, err = create(ctx, cs, fixtures.Service(ns, "range", fixtures.WithClusterIP("10.96.0.40")))
		refusedByBackstop(t, err, "reserved-range-for-other", `"10.96.0.40"`, "10.96.0.32/28 (databases)")

		// A Service naming no address: without the webhook the apiserver
		// picks a ServiceCIDR at random (kube-apiserver's MetaAllocator
		// ranges over a map), "drift" included. The backstop refuses
		// that pick, saying the apiserver made it and to create again;
		// a create again lands in the approved range at last.
		for i := 0; ; i++ {
			_, err := create(ctx, cs, fixtures.Service(ns, "plain"))
			if err == nil {
				_ = cs.CoreV1().Services(ns).Delete(ctx, "plain", metav1.DeleteOptions{})
				t.Logf("e2e: %s: a create naming no address admitted after %d refused (the apiserver picked from \"drift\")", when, i)
				break
			}
			if i == 0 {
				t.Logf("e2e: %s: refused: %v", when, err)
			}
			if mapServed {
				refusedByBackstop(t, err, "outside-service-cidrs", `allocated ClusterIP "10.250.0.`, "the apiserver picked it (the request named none)", "create the Service again")
			} else {
				refusedByBackstop(t, err, "outside-service-cidrs", `ClusterIP "10.250.0.`)
			}
			if i == 20 {
				t.Fatalf("%s: 20 creates naming no address, each refused: %v", when, err)
			}
		}

		// What the policy allows goes through.
		for _, s := range []*corev1.Service{
			fixtures.Service(ns, "static", fixtures.WithClusterIP("10.96.0.200")),
			fixtures.Service("team-db", "db", fixtures.WithClusterIP("10.96.0.41")),
			fixtures.Service("kube-system", "kube-dns", fixtures.WithClusterIP("10.96.0.10")),
		} {
			if _, err := create(ctx, cs, s); err != nil {
				t.Errorf("%s: %s/%s is allowed by the policy, yet: %v", when, s.Namespace, s.Name, err)
			}
			_ = cs.CoreV1().Services(s.Namespace).Delete(ctx, s.Name, metav1.DeleteOptions{})
		}
	}
	checkRows("configurations at Ignore, webhook stopped")
	// default/kubernetes is never refused: the apiserver writes it again.
	if err := cs.CoreV1().Services("default").Delete(ctx, "kubernetes", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	fixtures.EventuallyNil(t, "the apiserver to create default/kubernetes again", 90*time.Second, func() error {
		_, err := cs.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
		return err
	})

	// A GitOps prune deletes the configurations first: still refused.
	if err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, "clusterip-policy", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, "clusterip-policy", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	checkRows("configurations deleted, webhook stopped")

	// The webhook comes back: with the configurations gone it keeps the
	// bindings it finds in force.
	if err := c.RestartWebhook(ctx, 0); err != nil {
		t.Fatal(err)
	}
	// The restarted leader's first pass has written the backstop (its
	// counter starts at 0 with the process): what it chose to keep is in
	// place.
	eventuallyMetricAtLeast(t, ctx, c, "clusterip_policy_backstop_writes_total", `result="written"`, 1, 30*time.Second)
	_, err := create(ctx, cs, fixtures.Service(ns, "squat-dns-2", fixtures.WithClusterIP("10.96.0.10")))
	refusedByBackstop(t, err, "reserved-for-other", "reserved for Service kube-system/kube-dns")

	// The break-glass command lifts it: the bindings with the
	// configurations (already gone here), and the leader deletes the rest.
	out, errOut, err := c.Kubectl(ctx, "", emergencyArgs(t, c.Root)...)
	if err != nil {
		t.Fatalf("the emergency command failed: %v\n%s%s", err, out, errOut)
	}
	lifted := time.Now()
	// The bindings are gone: the apiserver stops enforcing at once.
	fixtures.EventuallyNil(t, "a create the backstop refused, admitted after the emergency command", 30*time.Second, func() error {
		_, err := create(ctx, cs, fixtures.Service(ns, "squat-lifted", fixtures.WithClusterIP("10.96.0.10")))
		return err
	})
	t.Logf("e2e: lifted by the emergency command: a refused create admitted %s after it", time.Since(lifted).Round(100*time.Millisecond))
	// The leader sees it at its next verification (30 s) and deletes the
	// rest.
	fixtures.EventuallyNil(t, "BackstopInForce False Lifted", 60*time.Second, func() error {
		if got := backstopCondition(ctx, c); !strings.HasPrefix(got, "False Lifted: ") {
			return fmt.Errorf("BackstopInForce %q", got)
		}
		return nil
	})
	fixtures.EventuallyNil(t, "the backstop's policies deleted", 30*time.Second, func() error {
		pols, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().List(ctx, metav1.ListOptions{LabelSelector: "clusterip-policy.io/backstop"})
		if err != nil {
			return fmt.Errorf("list the backstop's policies: %w", err)
		}
		if len(pols.Items) > 0 {
			return fmt.Errorf("%d left", len(pols.Items))
		}
		return nil
	})
	t.Logf("e2e: the status said Lifted and the policies were deleted %s after the emergency command", time.Since(lifted).Round(100*time.Millisecond))
	if err := cs.CoreV1().Services(ns).Delete(ctx, "squat-lifted", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	// The configurations come back: so does the backstop.
	registerAsShipped(t, ctx, c, c.Webhooks[0].Addr())
	fixtures.EventuallyNil(t, "BackstopInForce True again", 60*time.Second, func() error {
		if got := backstopCondition(ctx, c); !strings.HasPrefix(got, "True InForce: ") {
			return fmt.Errorf("BackstopInForce %q", got)
		}
		return nil
	})
	c.Webhooks[0].Stop(20 * time.Second)
	setFailurePolicy(t, ctx, cs, admv1.Ignore)
	_, err = create(ctx, cs, fixtures.Service(ns, "squat-again", fixtures.WithClusterIP("10.96.0.10")))
	refusedByBackstop(t, err, "reserved-for-other", "reserved for Service kube-system/kube-dns")
}

// waitBackstopPolicy waits until the backstop's policies encode the policy
// of digest (the leader writes them within a tenth of a second of loading
// it), then for the apiserver to take them up: it reloads admission
// policies once a second (k8s.io/apiserver, admission/plugin/policy/generic
// policy_source.go, policyRefreshInterval). An empty digest is the one the
// ClusterIPPolicy status names as in force.
func waitBackstopPolicy(t *testing.T, ctx context.Context, c *framework.Cluster, digest string) {
	t.Helper()
	fixtures.EventuallyNil(t, "the backstop to encode the policy in force", 30*time.Second, func() error {
		want := digest
		if want == "" {
			out, _, err := c.Kubectl(ctx, "", "get", "clusterippolicy", "default", "-o", "jsonpath={.status.policyDigest}")
			if err != nil {
				return fmt.Errorf("read status.policyDigest: %w", err)
			}
			if out == "" {
				return errors.New("status.policyDigest is empty")
			}
			want = out
		}
		pols, err := c.Client(0).AdmissionregistrationV1().ValidatingAdmissionPolicies().List(ctx, metav1.ListOptions{LabelSelector: "clusterip-policy.io/backstop"})
		if err != nil {
			return err
		}
		if len(pols.Items) == 0 {
			return fmt.Errorf("no policy of the backstop")
		}
		for _, p := range pols.Items {
			if got := p.Annotations["clusterip-policy.io/policy-digest"]; got != want {
				return fmt.Errorf("%s encodes policy %s, want %s", p.Name, got, want)
			}
		}
		return nil
	})
	time.Sleep(1500 * time.Millisecond) // the apiserver's policy refresh (1 s), with a margin
}

// setFailurePolicy sets the failurePolicy of every webhook of both
// configurations, as the break-glass's gentle form does.
func setFailurePolicy(t *testing.T, ctx context.Context, cs kubernetes.Interface, fp admv1.FailurePolicyType) {
	t.Helper()
	fixtures.EventuallyNil(t, "the configurations set to "+string(fp), 30*time.Second, func() error {
		m, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "clusterip-policy", metav1.GetOptions{})
		if err != nil {
			return err
		}
		for i := range m.Webhooks {
			m.Webhooks[i].FailurePolicy = &fp
		}
		if _, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(ctx, m, metav1.UpdateOptions{}); err != nil {
			return err
		}
		v, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "clusterip-policy", metav1.GetOptions{})
		if err != nil {
			return err
		}
		for i := range v.Webhooks {
			v.Webhooks[i].FailurePolicy = &fp
		}
		_, err = cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(ctx, v, metav1.UpdateOptions{})
		return err
	})
	time.Sleep(2 * time.Second) // the apiserver loads changed configurations from its informer
}
