//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"clusterip-policy/test/e2e/framework"
	"clusterip-policy/test/fixtures"
)

// createServiceCIDR creates a ServiceCIDR and, when the test ends, deletes
// the Services of ns and then the ServiceCIDR: without a
// kube-controller-manager it has no finalizer and would vanish under them.
func createServiceCIDR(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns, name, cidr string) {
	t.Helper()
	_, err := cs.NetworkingV1().ServiceCIDRs().Create(ctx, fixtures.ServiceCIDR(name, cidr), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create ServiceCIDR %s: %v", name, err)
	}
	t.Cleanup(func() {
		deleteServices(t, cs, ns)
		_ = cs.NetworkingV1().ServiceCIDRs().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// A ServiceCIDR inside allowedCIDRs, created while the webhook runs.
func TestServiceCIDRCreatedAtRunTime(t *testing.T) {
	c := shared(t)
	cs := c.Client(0)
	ctx := testContext(t, 2*60e9)
	ns := namespace(t, c, "runtime-cidr")

	createServiceCIDR(t, ctx, cs, ns, "e2e-runtime", "10.97.0.0/24")
	created := time.Now()

	// How soon is a figure (the e2e: line), not an assertion: a loaded
	// 2-core machine stretches it; 30 s catches a range never honoured.
	t.Run("a ServiceCIDR created at run time is honoured, the time it took logged", func(t *testing.T) {
		for attempt := 1; ; attempt++ {
			got, err := create(ctx, cs, fixtures.Service(ns, "in-new-cidr", fixtures.WithClusterIP("10.97.0.5")))
			if err == nil {
				took := time.Since(created)
				t.Logf("e2e: a static IP of the new ServiceCIDR 10.97.0.0/24 was admitted %s after the ServiceCIDR was created (attempt %d)", took.Round(time.Millisecond), attempt)
				if got.Spec.ClusterIP != "10.97.0.5" {
					t.Fatalf("clusterIP %s, want 10.97.0.5", got.Spec.ClusterIP)
				}
				break
			}
			if time.Since(created) > 30*time.Second {
				t.Fatalf("10.97.0.5 still refused 30s after the ServiceCIDR was created: %v", err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	})

	t.Run("its dynamic band is enforced like the default one's", func(t *testing.T) {
		_, err := create(ctx, cs, fixtures.Service(ns, "in-new-dynamic-band", fixtures.WithClusterIP("10.97.0.100")))
		requireDenied(t, err, mutating, `"10.97.0.100": lies in the dynamic band 10.97.0.17-10.97.0.254 of ServiceCIDR "e2e-runtime"`, "10.97.0.1-10.97.0.16")
	})

	t.Run("after it is deleted, new IPs in it are denied", func(t *testing.T) {
		// Without a kube-controller-manager a ServiceCIDR has no finalizer and
		// would vanish under its Services: remove them first, as an operator
		// would.
		if err := cs.CoreV1().Services(ns).Delete(ctx, "in-new-cidr", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := cs.NetworkingV1().ServiceCIDRs().Delete(ctx, "e2e-runtime", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		deleted := time.Now()
		var err error
		for time.Since(deleted) < 10*time.Second {
			_, err = create(ctx, cs, fixtures.Service(ns, "after-delete", fixtures.WithClusterIP("10.97.0.6")))
			if err == nil {
				t.Fatalf("10.97.0.6 admitted %s after its ServiceCIDR was deleted", time.Since(deleted))
			}
			if deniedBy(err, mutating) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Logf("e2e: the webhook denied an IP of the deleted ServiceCIDR %s after the deletion", time.Since(deleted).Round(time.Millisecond))
		requireDenied(t, err, mutating, `spec.clusterIP: Invalid value: "10.97.0.6"`, "is outside every active Service CIDR")
	})
}

// A ServiceCIDR outside the policy's allowedCIDRs (10.96.0.0/12) is
// unapproved: the webhook hands out nothing from it, though the apiserver
// does allocate from it. The ServiceCIDR webhook refuses such a range at the
// door (servicecidr_door_test.go), so this one is created before the webhook
// configurations are registered, as in a cluster that had it before the
// webhook was installed: the Service stages must still catch it. Without
// the backstop: once in force it refuses those allocations before the
// validating webhook is called (backstop_test.go), and this test is about
// the webhook's own message, which tells an allocation from a request.
func TestServiceCIDROutsideAllowedCIDRs(t *testing.T) {
	c := own(t, framework.Options{Policy: sharedPolicy, Webhooks: 1, NoRegister: true, NoBackstop: true})
	cs := c.Client(0)
	ctx := testContext(t, 3*60e9)
	ns := namespace(t, c, "unapproved-cidr")
	unapproved := netip.MustParsePrefix("10.200.0.0/24")
	createServiceCIDR(t, ctx, cs, ns, "e2e-unapproved", unapproved.String())
	if err := c.RegisterWebhooks(ctx); err != nil {
		t.Fatal(err)
	}

	t.Run("an update that keeps its ranges (a label, as a finalizer would be) still goes through", func(t *testing.T) {
		mark := c.Webhooks[0].LogSize()
		if _, _, err := c.Kubectl(ctx, "", "label", "servicecidr", "e2e-unapproved", "e2e=kept"); err != nil {
			t.Fatalf("labelling the unapproved ServiceCIDR was refused: %v", err)
		}
		for _, d := range c.Webhooks[0].DecisionsFrom(mark) {
			if d.Stage == "servicecidr" {
				t.Errorf("the ServiceCIDR webhook was called for a label-only update (range-changes-only should not send it): %s", d.Raw)
			}
		}
	})

	t.Run("a static request in it is denied", func(t *testing.T) {
		// Until the webhook's view has the new ServiceCIDR it denies the
		// address as outside every range; then it says why the range
		// does not count.
		var err error
		for start := time.Now(); time.Since(start) < 10*time.Second; time.Sleep(50 * time.Millisecond) {
			_, err = create(ctx, cs, fixtures.Service(ns, "static-unapproved", fixtures.WithClusterIP("10.200.0.5")))
			if err == nil || strings.Contains(err.Error(), unapproved.String()) {
				break
			}
		}
		requireDenied(t, err, mutating, `spec.clusterIP: Invalid value: "10.200.0.5"`, "is outside every active Service CIDR", unapproved.String())
	})

	t.Run("dynamic allocations that land in it are denied by the validating stage", func(t *testing.T) {
		// The apiserver tries the ServiceCIDRs in random order, so some
		// dynamic allocations land in the unapproved one.
		var denied, admitted int
		attempt := func(i int) {
			got, err := create(ctx, cs, fixtures.Service(ns, fmt.Sprintf("dynamic-%03d", i)))
			if err != nil {
				// The user left clusterIP empty: the denial says the
				// apiserver picked the address, and never tells them to
				// leave clusterIP empty.
				requireDenied(t, err, validating, `allocated ClusterIP "10.200.0.`, `comes from 10.200.0.0/24 (ServiceCIDR "e2e-unapproved"), which is not inside the policy's allowedCIDRs`, "create the Service again")
				if strings.Contains(err.Error(), "leave clusterIP empty") {
					t.Fatalf("a dynamic create is told to leave clusterIP empty: %v", err)
				}
				denied++
				return
			}
			ip := netip.MustParseAddr(got.Spec.ClusterIP)
			if !dynamicBand16.contains(ip.String()) {
				t.Fatalf("%s got %s, want the dynamic band %s", got.Name, ip, dynamicBand16)
			}
			admitted++
		}
		for i := range 50 {
			attempt(i)
		}
		t.Logf("e2e: %d of 50 dynamic creates landed in the unapproved ServiceCIDR %s and were denied by the validating webhook; %d were admitted in the dynamic band of 10.96.0.0/16", denied, unapproved, admitted)
		// A run where none of the 50 landed there (about 1 in 800 runs)
		// proves nothing yet: continue until one does.
		for i := 50; denied == 0 && i < 250; i++ {
			attempt(i)
		}
		if denied == 0 {
			t.Fatalf("none of %d dynamic creates landed in %s; the apiserver did not use it", admitted, unapproved)
		}
		l, err := cs.NetworkingV1().IPAddresses().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range l.Items {
			if unapproved.Contains(netip.MustParseAddr(a.Name)) {
				t.Errorf("IPAddress %s (for %s/%s) left in the unapproved range after the denials", a.Name, a.Spec.ParentRef.Namespace, a.Spec.ParentRef.Name)
			}
		}
		svcs, err := cs.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range svcs.Items {
			if s.Spec.Type == corev1.ServiceTypeClusterIP && unapproved.Contains(netip.MustParseAddr(s.Spec.ClusterIP)) {
				t.Errorf("Service %s has %s in the unapproved range", s.Name, s.Spec.ClusterIP)
			}
		}
	})
}
