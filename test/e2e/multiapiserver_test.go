//go:build e2e

package e2e

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"clusterip-policy/test/e2e/framework"
	"clusterip-policy/test/fixtures"
)

// Two kube-apiservers on one etcd whose --service-cluster-ip-range flags
// disagree, as during a botched range migration. The first one made the
// default ServiceCIDR (10.96.0.0/16); the second one's flag range is not a
// ServiceCIDR. Two webhook replicas sit behind a round-robin, each watching
// the cluster through a different apiserver.
func TestTwoAPIServersWithDifferentRanges(t *testing.T) {
	c := own(t, framework.Options{
		APIServers: []framework.APIServerOptions{
			{ServiceClusterIPRange: "10.96.0.0/16"},
			{ServiceClusterIPRange: "192.168.0.0/24"},
		},
		Policy:   sharedPolicy,
		Webhooks: 2,
	})
	ctx := testContext(t, 3*60e9)
	ns := namespace(t, c, "two-apiservers")
	clients := []kubernetes.Interface{c.Client(0), c.Client(1)}

	t.Run("the same request gets the same decision through either apiserver", func(t *testing.T) {
		requests := []struct {
			name   string
			svc    *corev1.Service
			denied bool
			wantIP string // for admitted requests; "" for a dynamic one
		}{
			{"static IP in the dynamic band", fixtures.Service(ns, "dyn-band", fixtures.WithClusterIP("10.96.200.5")), true, ""},
			{"DNS IP for another Service", fixtures.Service(ns, "not-dns", fixtures.WithClusterIP("10.96.0.10")), true, ""},
			{"static IP outside every range", fixtures.Service(ns, "outside", fixtures.WithClusterIP("10.200.0.1")), true, ""},
			{"static IP of the second apiserver's flag range", fixtures.Service(ns, "second-flag", fixtures.WithClusterIP("192.168.0.5")), true, ""},
			{"static IP in the static band", fixtures.Service(ns, "static", fixtures.WithClusterIP("10.96.0.20")), false, "10.96.0.20"},
			{"kube-dns without a clusterIP", fixtures.Service("kube-system", "kube-dns"), false, "10.96.0.10"},
			{"dynamic Service", fixtures.Service(ns, "dynamic"), false, ""},
		}
		for _, r := range requests {
			var results [2]string
			for i, cs := range clients {
				// Dry runs, so that the identical request can go through both.
				got, err := dryRunCreate(ctx, cs, r.svc.DeepCopy())
				switch {
				case r.denied:
					requireDenied(t, err, mutating)
					results[i] = "denied: " + err.Error()
				case err != nil:
					t.Fatalf("%s through %s: %v", r.name, c.APIServers[i].Name, err)
				default:
					if r.wantIP != "" && got.Spec.ClusterIP != r.wantIP {
						t.Errorf("%s through %s: clusterIP %s, want %s", r.name, c.APIServers[i].Name, got.Spec.ClusterIP, r.wantIP)
					}
					results[i] = "admitted with " + got.Spec.ClusterIP
				}
			}
			if results[0] != results[1] {
				t.Errorf("%s: decisions differ:\n  %s: %s\n  %s: %s", r.name, c.APIServers[0].Name, results[0], c.APIServers[1].Name, results[1])
			}
			t.Logf("%s: %s", r.name, results[0])
		}
	})

	t.Run("a static IP from the second apiserver's flag range is denied with the webhook's message", func(t *testing.T) {
		_, err := create(ctx, clients[1], fixtures.Service(ns, "flag-range", fixtures.WithClusterIP("192.168.0.5")))
		requireDenied(t, err, mutating, `spec.clusterIP: Invalid value: "192.168.0.5"`, "is outside every active Service CIDR", "10.96.0.0/16")
	})

	t.Run("dynamic Services through the second apiserver get addresses of the ServiceCIDR, not of its flag", func(t *testing.T) {
		for i := range 10 {
			got := mustCreate(t, ctx, clients[1], fixtures.Service(ns, fmt.Sprintf("dynamic-%02d", i)))
			if !dynamicBand16.contains(got.Spec.ClusterIP) {
				t.Errorf("%s got %s, want the dynamic band %s", got.Name, got.Spec.ClusterIP, dynamicBand16)
			}
		}
	})

	t.Run("real creates through either apiserver are judged alike", func(t *testing.T) {
		mustCreate(t, ctx, clients[0], fixtures.Service(ns, "static-a", fixtures.WithClusterIP("10.96.0.21")))
		mustCreate(t, ctx, clients[1], fixtures.Service(ns, "static-b", fixtures.WithClusterIP("10.96.0.22")))
		for i, cs := range clients {
			// Each holder is visible to both webhooks whichever apiserver
			// they watch through.
			for _, ip := range []string{"10.96.0.21", "10.96.0.22"} {
				eventuallyDenied(t, mutating, func() error {
					_, err := create(ctx, cs, fixtures.Service(ns, fmt.Sprintf("steal-%d", i), fixtures.WithClusterIP(ip)))
					return err
				}, fmt.Sprintf("%q", ip), "is held by IPAddress "+ip+" for Service "+ns+"/static-")
			}
		}
		got, err := clients[1].CoreV1().Services(ns).Get(ctx, "static-a", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Spec.ClusterIP != "10.96.0.21" {
			t.Fatalf("static-a through the second apiserver has %s, want 10.96.0.21", got.Spec.ClusterIP)
		}
	})

	var counts []string
	for _, w := range c.Webhooks {
		counts = append(counts, fmt.Sprintf("%s %d", w.Name, len(w.Decisions())))
	}
	t.Logf("e2e: two apiservers: audit lines per webhook replica: %v", counts)
}
