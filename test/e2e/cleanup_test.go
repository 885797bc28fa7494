//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"clusterip-policy/test/e2e/framework"
	"clusterip-policy/test/fixtures"
)

// TestCleanupLeavesNothingOfTheWebhooks runs `clusterip-policy cleanup`
// (the chart's post-delete hook) against a real apiserver after two
// replicas held kube-dns's address and a /22 reserved range and made their
// Lease and certificate Secrets: it deletes exactly those, never the
// apiserver's IPAddresses nor a Secret someone else made under one of the
// names, and a kube-dns created naming its address afterwards gets it.
func TestCleanupLeavesNothingOfTheWebhooks(t *testing.T) {
	c := own(t, framework.Options{
		APIServers:   []framework.APIServerOptions{{ServiceClusterIPRange: "10.96.0.0/16"}},
		Policy:       slash22Policy,
		Webhooks:     2,
		ManagedCerts: true,
		WebhookArgs:  []string{"--hold-reservations", "--hold-write-rate=500"},
	})
	cs := c.Client(0)
	ctx := testContext(t, 3*time.Minute)
	ns := framework.ManagedCertsNamespace
	waitHold(t, ctx, cs, "10.96.0.10", 30*time.Second)
	fixtures.EventuallyNil(t, "all 1,024 addresses of the range held", time.Minute, func() error {
		if n := metricSum(t, ctx, c, "clusterip_policy_range_holds", `state="held"`); n != 1024 {
			return fmt.Errorf("%v held", n)
		}
		return nil
	})
	for _, name := range []string{managedTLSSecret, managedCASecret} {
		if _, err := cs.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Fatalf("the leader's Secret %s: %v", name, err)
		}
	}
	for _, lease := range []string{"clusterip-policy-leader", "clusterip-policy-holds"} {
		if _, err := cs.CoordinationV1().Leases(ns).Get(ctx, lease, metav1.GetOptions{}); err != nil {
			t.Fatalf("the leader's Lease %s: %v", lease, err)
		}
	}
	// A Service of the apiserver's own allocation, and a Secret someone
	// else keeps under a name cleanup is told to delete.
	svc, err := create(ctx, cs, fixtures.Service(namespace(t, c, "cleanup"), "dynamic"))
	if err != nil {
		t.Fatal(err)
	}
	foreign := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "kept-by-someone", Namespace: ns, Labels: map[string]string{"app.kubernetes.io/name": "clusterip-policy-webhook"}}}
	if _, err := cs.CoreV1().Secrets(ns).Create(ctx, foreign, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	before, err := cs.NetworkingV1().IPAddresses().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// A careless run while the webhook is installed (here with a
	// namespace that has no pods to wait for) is refused, and takes
	// nothing away.
	env := []string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH")}
	if code, out, stderr := runForExit(t, env, c.Bin.Webhook, "cleanup", "--kubeconfig", c.AdminKubeconfig, "-n", "default"); code != 3 ||
		!strings.Contains(stderr, "the MutatingWebhookConfiguration clusterip-policy exists: the webhook is still installed") {
		t.Errorf("cleanup -n default while the webhook is registered: exit %d\n%s%s; want 3, naming the configuration", code, out, stderr)
	}
	waitHold(t, ctx, cs, "10.96.0.10", time.Second)
	// What helm uninstall does: the pre-delete hook unregisters, then the
	// webhook's pods go, then the post-delete hook cleans up.
	if code, out, stderr := runForExit(t, env, c.Bin.Webhook, "unregister", "--kubeconfig", c.AdminKubeconfig, "--settle=1s"); code != 0 {
		t.Fatalf("unregister: exit %d\n%s%s", code, out, stderr)
	}
	for _, w := range c.Webhooks {
		w.Stop(20 * time.Second)
	}
	start := time.Now()
	code, out, stderr := runForExit(t, env, c.Bin.Webhook, "cleanup", "--kubeconfig", c.AdminKubeconfig, "-n", ns,
		"--secret", managedTLSSecret, "--secret", managedCASecret, "--secret", foreign.Name)
	took := time.Since(start)
	if code != 0 {
		t.Fatalf("cleanup: exit %d\n%s%s", code, out, stderr)
	}
	t.Logf("e2e: cleanup: %d lines in %s:\n%s", strings.Count(out, "\n"), took.Round(time.Millisecond), out)
	for _, want := range []string{
		"Lease " + ns + "/clusterip-policy-leader: deleted",
		"Lease " + ns + "/clusterip-policy-holds: deleted",
		"Secret " + ns + "/" + managedTLSSecret + ": deleted",
		"Secret " + ns + "/" + managedCASecret + ": deleted",
		"Secret " + ns + "/kept-by-someone: kept: not made by the webhook",
		"IPAddress holds (" + holdLabel + "): 1025 deleted, 0 already gone",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("cleanup's output lacks %q", want)
		}
	}
	after, err := cs.NetworkingV1().IPAddresses().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kept := map[string]bool{}
	for _, a := range after.Items {
		if a.Labels["ipaddress.kubernetes.io/managed-by"] == "clusterip-policy.io" {
			t.Errorf("hold %s left after cleanup", a.Name)
		}
		kept[a.Name] = true
	}
	for _, a := range before.Items {
		if a.Labels["ipaddress.kubernetes.io/managed-by"] != "clusterip-policy.io" && !kept[a.Name] {
			t.Errorf("the apiserver's IPAddress %s (%s) was deleted", a.Name, a.Labels["ipaddress.kubernetes.io/managed-by"])
		}
	}
	if !kept[svc.Spec.ClusterIP] {
		t.Errorf("the IPAddress of the Service %s (%s) is gone", svc.Name, svc.Spec.ClusterIP)
	}
	for _, lease := range []string{"clusterip-policy-leader", "clusterip-policy-holds"} {
		if _, err := cs.CoordinationV1().Leases(ns).Get(ctx, lease, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the Lease %s after cleanup: %v, want not found", lease, err)
		}
	}
	if _, err := cs.CoreV1().Secrets(ns).Get(ctx, foreign.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("the Secret someone else made: %v, want kept", err)
	}
	// The point of it all: the reserved owner gets its address.
	if _, _, err := c.Kubectl(ctx, kubeDNS, "create", "-f", "-"); err != nil {
		t.Fatalf("kube-dns naming 10.96.0.10 after cleanup: %v", err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().Services("kube-system").Delete(ctx, "kube-dns", metav1.DeleteOptions{}) })
	if a, err := cs.NetworkingV1().IPAddresses().Get(ctx, "10.96.0.10", metav1.GetOptions{}); err != nil || a.Spec.ParentRef == nil || a.Spec.ParentRef.Name != "kube-dns" {
		t.Errorf("10.96.0.10 after kube-dns's create: %v %+v", err, a)
	}

	// Run again: nothing to do, and it says so.
	code, out, stderr = runForExit(t, env, c.Bin.Webhook, "cleanup", "--kubeconfig", c.AdminKubeconfig, "-n", ns)
	if code != 0 || !strings.Contains(out, "0 deleted, 0 already gone") || !strings.Contains(out, "Lease "+ns+"/clusterip-policy-leader: already gone") || !strings.Contains(out, "Lease "+ns+"/clusterip-policy-holds: already gone") {
		t.Errorf("cleanup again: exit %d\n%s%s", code, out, stderr)
	}
}
