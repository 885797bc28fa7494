//go:build e2e

package e2e

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"clusterip-policy/test/fixtures"
)

// Changing a Service from ExternalName to ClusterIP allocates an address on
// UPDATE; the webhook judges the address asked for as on CREATE.
func TestUpdates(t *testing.T) {
	c := shared(t)
	cs := c.Client(0)
	ctx := testContext(t, 2*60e9)
	ns := namespace(t, c, "updates")
	mustCreate(t, ctx, cs, fixtures.Service(ns, "legacy-db", fixtures.WithExternalName("db.example.com")))

	// toClusterIP turns the ExternalName Service into a ClusterIP one asking
	// for ip, as `kubectl edit` would.
	toClusterIP := func(name, ip string) (*corev1.Service, error) {
		s, err := cs.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s.Spec.Type = corev1.ServiceTypeClusterIP
		s.Spec.ExternalName = ""
		s.Spec.ClusterIP = ip
		s.Spec.Selector = map[string]string{"app": name}
		s.Spec.Ports = []corev1.ServicePort{{Name: "pg", Port: 5432, Protocol: corev1.ProtocolTCP}}
		return cs.CoreV1().Services(ns).Update(ctx, s, metav1.UpdateOptions{})
	}
	relabel := func(t *testing.T, name string) *corev1.Service {
		t.Helper()
		s, err := cs.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if s.Labels == nil {
			s.Labels = map[string]string{}
		}
		s.Labels["team"] = "storage-" + s.ResourceVersion
		got, err := cs.CoreV1().Services(ns).Update(ctx, s, metav1.UpdateOptions{})
		if err != nil {
			t.Fatalf("label-only update of %s: %v", name, err)
		}
		return got
	}

	t.Run("a label-only update of an ExternalName Service passes", func(t *testing.T) {
		relabel(t, "legacy-db")
	})

	t.Run("an ExternalName Service changed to ClusterIP with a static IP in the dynamic band is denied", func(t *testing.T) {
		_, err := toClusterIP("legacy-db", "10.96.200.5")
		requireDenied(t, err, mutating, `spec.clusterIP: Invalid value: "10.96.200.5": lies in the dynamic band 10.96.1.1-10.96.255.254`)
		s, err := cs.CoreV1().Services(ns).Get(ctx, "legacy-db", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if s.Spec.Type != corev1.ServiceTypeExternalName {
			t.Fatalf("Service is now %s, want it left ExternalName", s.Spec.Type)
		}
	})

	t.Run("an ExternalName Service changed to ClusterIP asking for the DNS IP is denied", func(t *testing.T) {
		_, err := toClusterIP("legacy-db", "10.96.0.10")
		requireDenied(t, err, mutating, "is reserved for Service kube-system/kube-dns")
	})

	t.Run("an ExternalName Service changed to ClusterIP with a static IP in the static band is accepted", func(t *testing.T) {
		got, err := toClusterIP("legacy-db", "10.96.0.54")
		if err != nil {
			t.Fatal(err)
		}
		if got.Spec.ClusterIP != "10.96.0.54" {
			t.Fatalf("clusterIP %s, want 10.96.0.54", got.Spec.ClusterIP)
		}
	})

	t.Run("kube-dns changed from ExternalName to ClusterIP without a clusterIP gets 10.96.0.10", func(t *testing.T) {
		dns := mustCreate(t, ctx, cs, fixtures.Service("kube-system", "kube-dns", fixtures.WithExternalName("dns.example.com")))
		t.Cleanup(func() {
			_ = cs.CoreV1().Services("kube-system").Delete(context.Background(), "kube-dns", metav1.DeleteOptions{})
		})
		dns.Spec.Type = corev1.ServiceTypeClusterIP
		dns.Spec.ExternalName = ""
		dns.Spec.Selector = map[string]string{"k8s-app": "kube-dns"}
		dns.Spec.Ports = []corev1.ServicePort{{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP}}
		got, err := cs.CoreV1().Services("kube-system").Update(ctx, dns, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Spec.ClusterIP != "10.96.0.10" {
			t.Fatalf("kube-dns got %s, want its reserved 10.96.0.10", got.Spec.ClusterIP)
		}
	})

	t.Run("a label-only update of a ClusterIP Service passes and keeps its IP", func(t *testing.T) {
		got := relabel(t, "legacy-db")
		if got.Spec.ClusterIP != "10.96.0.54" {
			t.Fatalf("clusterIP %s after a label update, want 10.96.0.54", got.Spec.ClusterIP)
		}
		dyn := mustCreate(t, ctx, cs, fixtures.Service(ns, "dynamic"))
		if got := relabel(t, "dynamic"); got.Spec.ClusterIP != dyn.Spec.ClusterIP {
			t.Fatalf("clusterIP %s after a label update, want %s", got.Spec.ClusterIP, dyn.Spec.ClusterIP)
		}
	})
}
