//go:build e2e

package e2e

import (
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	corev1 "k8s.io/api/core/v1"

	"clusterip-policy/test/fixtures"
)

// kubectl create --dry-run=server runs both webhooks (with dryRun set) and
// allocates nothing.
func TestServerSideDryRun(t *testing.T) {
	c := shared(t)
	cs := c.Client(0)
	ctx := testContext(t, 2*60e9)
	ns := namespace(t, c, "dry-run")

	ipAddresses := func() int {
		l, err := cs.NetworkingV1().IPAddresses().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return len(l.Items)
	}
	dryRun := func(t *testing.T, manifest string) *corev1.Service {
		t.Helper()
		out, _, err := c.Kubectl(ctx, manifest, "create", "--dry-run=server", "-o", "yaml", "-f", "-")
		if err != nil {
			t.Fatalf("kubectl create --dry-run=server: %v", err)
		}
		var svc corev1.Service
		if err := yaml.Unmarshal([]byte(out), &svc); err != nil {
			t.Fatalf("parse kubectl output: %v\n%s", err, out)
		}
		return &svc
	}
	requireNotCreated := func(t *testing.T, namespace, name string) {
		t.Helper()
		if _, err := cs.CoreV1().Services(namespace).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("Service %s/%s exists after a dry run (err %v)", namespace, name, err)
		}
	}

	t.Run("a dynamic Service is allowed and nothing is allocated", func(t *testing.T) {
		before := ipAddresses()
		manifest := strings.ReplaceAll(`apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: NS
spec:
  selector: {app: web}
  ports: [{port: 80}]
`, "NS", ns)
		svc := dryRun(t, manifest)
		t.Logf("dry-run clusterIP %q", svc.Spec.ClusterIP)
		requireNotCreated(t, ns, "web")
		if svc.Spec.ClusterIP != "" && svc.Spec.ClusterIP != "10.96.0.0" && ipAddressExists(t, ctx, cs, svc.Spec.ClusterIP) {
			t.Errorf("IPAddress %s exists after a dry run", svc.Spec.ClusterIP)
		}
		if after := ipAddresses(); after != before {
			t.Errorf("%d IPAddresses before the dry run, %d after", before, after)
		}
		stages := map[string]bool{}
		for _, d := range decisionsFor(c, ns, "web") {
			if !d.DryRun {
				t.Errorf("audit line without dryRun: %s", d.Raw)
			}
			if d.Decision == "denied" {
				t.Errorf("dry run denied: %s", d.Raw)
			}
			stages[d.Stage] = true
		}
		if !stages["mutate"] || !stages["validate"] {
			t.Errorf("audit lines for the dry run cover stages %v, want mutate and validate", stages)
		}
	})

	t.Run("kube-dns is allowed, shows the patched 10.96.0.10, and nothing is allocated", func(t *testing.T) {
		if _, err := cs.CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("kube-system/kube-dns must not exist before this test (err %v)", err)
		}
		before := ipAddresses()
		svc := dryRun(t, kubeDNSWithoutIP)
		if svc.Spec.ClusterIP != "10.96.0.10" || len(svc.Spec.ClusterIPs) != 1 || svc.Spec.ClusterIPs[0] != "10.96.0.10" {
			t.Errorf("dry-run kube-dns shows clusterIP %q clusterIPs %q, want 10.96.0.10", svc.Spec.ClusterIP, svc.Spec.ClusterIPs)
		}
		requireNotCreated(t, "kube-system", "kube-dns")
		if ipAddressExists(t, ctx, cs, "10.96.0.10") {
			t.Error("IPAddress 10.96.0.10 exists after a dry run")
		}
		if after := ipAddresses(); after != before {
			t.Errorf("%d IPAddresses before the dry run, %d after", before, after)
		}
		var patched bool
		for _, d := range decisionsFor(c, "kube-system", "kube-dns") {
			if d.DryRun && d.Stage == "mutate" && d.Decision == "patched" {
				patched = true
			}
		}
		if !patched {
			t.Error("no audit line with dryRun, stage mutate, decision patched for kube-system/kube-dns")
		}
	})

	t.Run("a dry run asking for the DNS IP is denied like the real request", func(t *testing.T) {
		_, err := dryRunCreate(ctx, cs, fixtures.Service(ns, "not-dns", fixtures.WithClusterIP("10.96.0.10")))
		requireDenied(t, err, mutating, "is reserved for Service kube-system/kube-dns")
	})
}
