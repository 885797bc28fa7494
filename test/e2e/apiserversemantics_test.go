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

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"clusterip-policy/test/e2e/framework"
	"clusterip-policy/test/fixtures"
)

// A single-stack apiserver on a tiny range (--service-cluster-ip-range=
// 10.96.0.0/28: no static band, 14 usable addresses), where the webhook must
// decide what this apiserver will do rather than what the ServiceCIDR
// objects alone suggest, and where default/kubernetes is exempt only for the
// apiserver itself.
func TestSmallSingleStackClusterFollowsTheApiserver(t *testing.T) {
	c := own(t, framework.Options{
		APIServers: []framework.APIServerOptions{{ServiceClusterIPRange: "10.96.0.0/28"}},
		Policy:     dualStackPolicy, // kube-dns: 10.96.0.10 and fd00:10:96::a
		Webhooks:   1,
	})
	cs := c.Client(0)
	ctx := testContext(t, 3*60e9)
	ns := namespace(t, c, "small-single-stack")
	user := userClient(t, ctx, c, "e2e-user")

	t.Run("a user cannot create default/kubernetes on the DNS address while it is absent", func(t *testing.T) {
		// The apiserver recreates default/kubernetes within its reconcile
		// interval (10s): delete it and create it at once, again if the
		// apiserver was quicker.
		var err error
		for attempt := 0; attempt < 5; attempt++ {
			if err := cs.CoreV1().Services("default").Delete(ctx, "kubernetes", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
			squatter := fixtures.Service("default", "kubernetes", fixtures.WithClusterIP("10.96.0.10"))
			squatter.Spec.Selector = nil
			squatter.Spec.Ports = []corev1.ServicePort{{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP}}
			var got *corev1.Service
			got, err = user.CoreV1().Services("default").Create(ctx, squatter, metav1.CreateOptions{})
			if err == nil {
				// Remove the squatter so the apiserver restores the real one
				// and the next scenarios start from a sound cluster.
				t.Errorf("e2e-user created default/kubernetes with %v: anyone can squat the DNS address while default/kubernetes is absent", got.Spec.ClusterIPs)
				_ = cs.CoreV1().Services("default").Delete(ctx, "kubernetes", metav1.DeleteOptions{})
				break
			}
			if !apierrors.IsAlreadyExists(err) {
				requireDenied(t, err, mutating, `"10.96.0.10"`, "is reserved for Service kube-system/kube-dns")
				break
			}
		}
		// The apiserver's own re-creation still passes, on the primary
		// range's first address.
		requireKubernetesServiceBack(t, ctx, cs, "10.96.0.1", 30*time.Second)
	})

	t.Run("kube-dns with PreferDualStack gets only its IPv4 reservation from an IPv4-only apiserver with an IPv6 ServiceCIDR object", func(t *testing.T) {
		// An IPv6 ServiceCIDR object, as created ahead of a dual-stack
		// migration; the apiserver's flags still make it IPv4-only.
		createClusterServiceCIDR(t, ctx, cs, "v6-ahead", "fd00:10:96::/108")
		// Wait until the webhook's view has it: a static IPv6 request is
		// then no longer denied as outside every range by the webhook (the
		// apiserver still refuses it itself).
		v6 := fixtures.Service(ns, "v6-probe", fixtures.WithClusterIP("fd00:10:96::5"), fixtures.WithIPFamilies(corev1.IPv6Protocol))
		fixtures.EventuallyNil(t, "the webhook to see ServiceCIDR v6-ahead", 10*time.Second, func() error {
			_, err := dryRunCreate(ctx, cs, v6)
			if err == nil {
				return errors.New("a static IPv6 dry-run was admitted; want the IPv4-only apiserver's own refusal")
			}
			if deniedBy(err, mutating) {
				return fmt.Errorf("a static IPv6 dry-run: %w", err)
			}
			return nil
		})
		manifest := strings.Replace(kubeDNSWithoutIP, "spec:\n", "spec:\n  ipFamilyPolicy: PreferDualStack\n", 1)
		if _, _, err := c.Kubectl(ctx, manifest, "apply", "-f", "-"); err != nil {
			t.Fatalf("cluster DNS cannot be created: %v", err)
		}
		got, err := cs.CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"10.96.0.10"}; !slices.Equal(got.Spec.ClusterIPs, want) {
			t.Fatalf("kube-dns got %v, want %v", got.Spec.ClusterIPs, want)
		}
	})

	t.Run("the first address of a second ServiceCIDR is handed out like any other dynamic address", func(t *testing.T) {
		createClusterServiceCIDR(t, ctx, cs, "small", "10.96.1.0/28")
		// Fill every address but 10.96.1.1 (10.96.0.1 and 10.96.0.10 are
		// taken), so a dynamic create can only get 10.96.1.1.
		var fill []string
		for i := 2; i <= 14; i++ {
			fill = append(fill, fmt.Sprintf("10.96.1.%d", i))
			if i != 10 {
				fill = append(fill, fmt.Sprintf("10.96.0.%d", i))
			}
		}
		for _, ip := range fill {
			_, err := cs.NetworkingV1().IPAddresses().Create(ctx, &networkingv1.IPAddress{
				ObjectMeta: metav1.ObjectMeta{Name: ip, Labels: map[string]string{"ipaddress.kubernetes.io/managed-by": "e2e.clusterip-policy.io"}},
				Spec:       networkingv1.IPAddressSpec{ParentRef: &networkingv1.ParentReference{Resource: "services", Namespace: ns, Name: "e2e-filler"}},
			}, metav1.CreateOptions{})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatalf("create IPAddress %s: %v", ip, err)
			}
		}
		// The apiserver's allocator and the webhook's view pick up the new
		// ServiceCIDR and IPAddresses within moments; until then the
		// allocator may find no free address.
		var got *corev1.Service
		var err error
		for start := time.Now(); time.Since(start) < 15*time.Second; time.Sleep(200 * time.Millisecond) {
			if got, err = create(ctx, cs, fixtures.Service(ns, "dynamic")); err == nil || deniedBy(err, validating) {
				break
			}
		}
		if err != nil {
			t.Fatalf("a dynamic create that can only get 10.96.1.1 failed: %v", err)
		}
		if got.Spec.ClusterIP != "10.96.1.1" {
			t.Fatalf("got %s, want 10.96.1.1 (the only free address)", got.Spec.ClusterIP)
		}
	})

	t.Run("while the webhook is down the apiserver still recreates default/kubernetes", func(t *testing.T) {
		c.Webhooks[0].Stop(15 * time.Second)
		_, err := create(ctx, cs, fixtures.Service(ns, "while-down"))
		if err == nil || !strings.Contains(err.Error(), "failed calling webhook") {
			t.Fatalf("with the webhook stopped, a create should fail calling it: %v", err)
		}
		if err := cs.CoreV1().Services("default").Delete(ctx, "kubernetes", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		requireKubernetesServiceBack(t, ctx, cs, "10.96.0.1", 30*time.Second)
	})
}

// userClient is a client for an ordinary user who may write Services in
// namespace default (and nothing else).
func userClient(t *testing.T, ctx context.Context, c *framework.Cluster, name string) kubernetes.Interface {
	t.Helper()
	cs := c.Client(0)
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name + "-services"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"get", "list", "create", "update", "patch", "delete"}}},
	}
	if _, err := cs.RbacV1().Roles("default").Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name + "-services"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: name}},
	}
	if _, err := cs.RbacV1().RoleBindings("default").Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cert, err := c.PKI.ClientCert(name)
	if err != nil {
		t.Fatal(err)
	}
	id := &framework.Identity{User: name, Cert: cert}
	uc, err := kubernetes.NewForConfig(id.RESTConfig(c.APIServers[0].URL, c.PKI.CA.CertPEM))
	if err != nil {
		t.Fatal(err)
	}
	return uc
}

// createClusterServiceCIDR creates a ServiceCIDR for a cluster of this test
// alone (stopped with it, so nothing to clean up).
func createClusterServiceCIDR(t *testing.T, ctx context.Context, cs kubernetes.Interface, name, cidr string) {
	t.Helper()
	_, err := cs.NetworkingV1().ServiceCIDRs().Create(ctx, fixtures.ServiceCIDR(name, cidr), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create ServiceCIDR %s (%s): %v", name, cidr, err)
	}
}

// requireKubernetesServiceBack waits until the apiserver has recreated
// default/kubernetes with ip.
func requireKubernetesServiceBack(t *testing.T, ctx context.Context, cs kubernetes.Interface, ip string, within time.Duration) {
	t.Helper()
	start := time.Now()
	var got *corev1.Service
	fixtures.EventuallyNil(t, "default/kubernetes to be recreated", within, func() (err error) {
		got, err = cs.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
		return err
	})
	if got.Spec.ClusterIP != ip {
		t.Fatalf("default/kubernetes came back with %s, want %s", got.Spec.ClusterIP, ip)
	}
	t.Logf("e2e: default/kubernetes is back on %s, %s after the check began (managed by %v)", ip, time.Since(start).Round(time.Millisecond), managers(got))
}

func managers(s *corev1.Service) []string {
	var out []string
	for _, m := range s.ManagedFields {
		out = append(out, m.Manager)
	}
	return out
}
