//go:build e2e

package e2e

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"clusterip-policy/test/fixtures"
)

// The policy reserves 10.96.0.10 for kube-system/kube-dns.
func TestKubeDNSReservation(t *testing.T) {
	c := shared(t)
	cs := c.Client(0)
	ctx := testContext(t, 2*60e9)
	ns := namespace(t, c, "reservation")
	t.Cleanup(func() { deleteServices(t, cs, "kube-system") })

	t.Run("the kube-dns Service from the Kubernetes docs is accepted with clusterIP 10.96.0.10", func(t *testing.T) {
		out, _, err := c.Kubectl(ctx, kubeDNS, "apply", "-f", "-")
		if err != nil {
			t.Fatalf("kubectl apply kube-dns: %v", err)
		}
		t.Logf("kubectl: %s", out)
		got, err := cs.CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Spec.ClusterIP != "10.96.0.10" {
			t.Fatalf("kube-dns has clusterIP %s, want 10.96.0.10", got.Spec.ClusterIP)
		}
		if !ipAddressExists(t, ctx, cs, "10.96.0.10") {
			t.Fatal("no IPAddress 10.96.0.10 after kube-dns was created")
		}
	})

	t.Run("any other Service asking for 10.96.0.10 is denied with a message naming kube-system/kube-dns", func(t *testing.T) {
		for _, svc := range []struct{ ns, name string }{{ns, "kube-dns"}, {"kube-system", "coredns"}, {ns, "grabs-dns-ip"}} {
			_, err := create(ctx, cs, fixtures.Service(svc.ns, svc.name, fixtures.WithClusterIP("10.96.0.10")))
			requireDenied(t, err, mutating, `spec.clusterIP: Invalid value: "10.96.0.10"`, "is reserved for Service kube-system/kube-dns", "cluster DNS")
		}
	})

	t.Run("kube-dns created without a clusterIP gets 10.96.0.10", func(t *testing.T) {
		if err := cs.CoreV1().Services("kube-system").Delete(ctx, "kube-dns", metav1.DeleteOptions{}); err != nil {
			t.Fatalf("delete kube-dns: %v", err)
		}
		out, _, err := c.Kubectl(ctx, kubeDNSWithoutIP, "create", "-f", "-", "-o", "jsonpath={.spec.clusterIP} {.spec.clusterIPs}")
		if err != nil {
			t.Fatalf("kubectl create kube-dns without clusterIP: %v", err)
		}
		if out != `10.96.0.10 ["10.96.0.10"]` {
			t.Fatalf("kube-dns got %s, want 10.96.0.10 [\"10.96.0.10\"]", out)
		}
		var patched bool
		for _, d := range decisionsFor(c, "kube-system", "kube-dns") {
			if d.Stage == "mutate" && d.Decision == "patched" && !d.DryRun {
				patched = true
			}
		}
		if !patched {
			t.Errorf("no audit line with stage mutate, decision patched for kube-system/kube-dns")
		}
	})
}
