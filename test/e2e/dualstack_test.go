//go:build e2e

package e2e

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"clusterip-policy/test/e2e/framework"
	"clusterip-policy/test/fixtures"
)

// dualStackPolicy reserves both kube-dns addresses of a dual-stack cluster.
var dualStackPolicy = fixtures.Policy(`reservations:
- ip: 10.96.0.10
  service: kube-system/kube-dns
  note: cluster DNS
- ip: fd00:10:96::a
  service: kube-system/kube-dns
  note: cluster DNS (IPv6)
- {ip: 10.96.0.12, service: kube-system/dns-patched}
- {ip: fd00:10:96::c, service: kube-system/dns-patched}
- {ip: 10.96.0.13, service: kube-system/dns-applied}
- {ip: fd00:10:96::d, service: kube-system/dns-applied}
- {ip: 10.96.0.14, service: kube-system/dns-v4-first}
- {ip: fd00:10:96::e, service: kube-system/dns-v4-first}
- {ip: 10.96.0.15, service: kube-system/dns-v6-first}
- {ip: fd00:10:96::f, service: kube-system/dns-v6-first}
`)

// A dual-stack apiserver (--service-cluster-ip-range=10.96.0.0/16,fd00:10:96::/108):
// the default ServiceCIDR holds both CIDRs, IPv4 first.
func TestDualStack(t *testing.T) {
	c := own(t, framework.Options{
		APIServers: []framework.APIServerOptions{{ServiceClusterIPRange: "10.96.0.0/16,fd00:10:96::/108"}},
		Policy:     dualStackPolicy,
		Webhooks:   1,
	})
	ctx := testContext(t, 2*60e9)
	ns := namespace(t, c, "dual-stack")
	cs := c.Client(0)

	t.Run("kube-dns without a clusterIP and RequireDualStack gets both reserved addresses in order", func(t *testing.T) {
		got := mustCreate(t, ctx, cs, fixtures.Service("kube-system", "kube-dns", fixtures.WithIPFamilyPolicy(corev1.IPFamilyPolicyRequireDualStack)))
		if want := []string{"10.96.0.10", "fd00:10:96::a"}; !slices.Equal(got.Spec.ClusterIPs, want) {
			t.Fatalf("kube-dns got %v, want %v", got.Spec.ClusterIPs, want)
		}
	})

	// The apiserver widens ipFamilies naming one family (initIPFamilyFields),
	// so the webhook must assign both reservations.
	t.Run("ipFamilies [IPv4] with RequireDualStack gets both reserved addresses", func(t *testing.T) {
		got := mustCreate(t, ctx, cs, fixtures.Service("kube-system", "dns-v4-first", fixtures.WithIPFamilies(corev1.IPv4Protocol), fixtures.WithIPFamilyPolicy(corev1.IPFamilyPolicyRequireDualStack)))
		if want := []string{"10.96.0.14", "fd00:10:96::e"}; !slices.Equal(got.Spec.ClusterIPs, want) {
			t.Fatalf("clusterIPs %v, want %v", got.Spec.ClusterIPs, want)
		}
	})
	t.Run("ipFamilies [IPv6] with PreferDualStack gets both reserved addresses, IPv6 first", func(t *testing.T) {
		got := mustCreate(t, ctx, cs, fixtures.Service("kube-system", "dns-v6-first", fixtures.WithIPFamilies(corev1.IPv6Protocol), fixtures.WithIPFamilyPolicy(corev1.IPFamilyPolicyPreferDualStack)))
		if want := []string{"fd00:10:96::f", "10.96.0.15"}; !slices.Equal(got.Spec.ClusterIPs, want) {
			t.Fatalf("clusterIPs %v, want %v", got.Spec.ClusterIPs, want)
		}
	})

	// An owner upgraded to dual-stack by ipFamilyPolicy alone, as users do
	// it with kubectl, gets its reserved IPv6 address, not a random one.
	t.Run("a reservation owner patched to RequireDualStack gets its reserved IPv6 address", func(t *testing.T) {
		got := mustCreate(t, ctx, cs, fixtures.Service("kube-system", "dns-patched"))
		if want := []string{"10.96.0.12"}; !slices.Equal(got.Spec.ClusterIPs, want) {
			t.Fatalf("created with %v, want %v", got.Spec.ClusterIPs, want)
		}
		if _, _, err := c.Kubectl(ctx, "", "-n", "kube-system", "patch", "service", "dns-patched", "-p", `{"spec":{"ipFamilyPolicy":"RequireDualStack"}}`); err != nil {
			t.Fatal(err)
		}
		got, err := cs.CoreV1().Services("kube-system").Get(ctx, "dns-patched", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"10.96.0.12", "fd00:10:96::c"}; !slices.Equal(got.Spec.ClusterIPs, want) {
			t.Fatalf("after the patch clusterIPs %v, want %v", got.Spec.ClusterIPs, want)
		}
	})
	t.Run("a reservation owner applied with PreferDualStack gets its reserved IPv6 address", func(t *testing.T) {
		manifest := "apiVersion: v1\nkind: Service\nmetadata:\n  name: dns-applied\n  namespace: kube-system\nspec:\n  selector: {app: dns}\n  ports: [{port: 53, protocol: UDP}]\n"
		if _, _, err := c.Kubectl(ctx, manifest, "apply", "-f", "-"); err != nil {
			t.Fatal(err)
		}
		if _, _, err := c.Kubectl(ctx, manifest+"  ipFamilyPolicy: PreferDualStack\n", "apply", "-f", "-"); err != nil {
			t.Fatal(err)
		}
		got, err := cs.CoreV1().Services("kube-system").Get(ctx, "dns-applied", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"10.96.0.13", "fd00:10:96::d"}; !slices.Equal(got.Spec.ClusterIPs, want) {
			t.Fatalf("after the apply clusterIPs %v, want %v", got.Spec.ClusterIPs, want)
		}
	})

	// The mutating webhook's static conditions send it every UPDATE (so a
	// later mutating webhook's change reinvokes it), and growsToDualStack
	// (Go) decides which it acts on; the managed condition, which narrows
	// UPDATEs to those, is held equal to Go by pkg/matchconditions
	// TestManagedMutatingConditionSendsExactlyTheUpdatesMutateActsOn with
	// the apiserver's own CEL evaluator.
	t.Run("the mutating webhook is sent every update and acts on exactly those that may add an address", func(t *testing.T) {
		mustCreate(t, ctx, cs, fixtures.Service(ns, "mc-single"))
		mustCreate(t, ctx, cs, fixtures.Service(ns, "mc-dual", fixtures.WithIPFamilyPolicy(corev1.IPFamilyPolicyPreferDualStack)))
		mustCreate(t, ctx, cs, fixtures.Service(ns, "mc-grow-families"))
		mustCreate(t, ctx, cs, fixtures.Service(ns, "mc-external", fixtures.WithExternalName("example.com")))
		updates := []struct {
			name, patch string
			acts        bool
		}{
			{"mc-single", `{"metadata":{"labels":{"e2e":"label"}}}`, false},
			{"mc-dual", `{"metadata":{"labels":{"e2e":"label"}}}`, false},
			{"mc-dual", `{"spec":{"ipFamilyPolicy":"RequireDualStack"}}`, false}, // already two addresses
			{"mc-external", `{"metadata":{"labels":{"e2e":"label"}}}`, false},
			{"mc-single", `{"spec":{"ipFamilyPolicy":"PreferDualStack"}}`, true},
			{"mc-grow-families", `{"spec":{"ipFamilyPolicy":"RequireDualStack","ipFamilies":["IPv4","IPv6"]}}`, true},
			{"mc-external", `{"spec":{"type":"ClusterIP","externalName":null}}`, true},
		}
		for _, u := range updates {
			mark := c.Webhooks[0].LogSize()
			if _, _, err := c.Kubectl(ctx, "", "-n", ns, "patch", "service", u.name, "-p", u.patch); err != nil {
				t.Fatal(err)
			}
			var seen []string
			for start := time.Now(); time.Since(start) < time.Second; time.Sleep(100 * time.Millisecond) {
				seen = nil
				for _, d := range c.Webhooks[0].DecisionsFrom(mark) {
					if d.Name == u.name && d.Stage == "mutate" && d.Operation == "UPDATE" {
						seen = append(seen, d.Raw)
					}
				}
				if len(seen) > 0 {
					break
				}
			}
			switch skipped := len(seen) > 0 && !strings.Contains(seen[0], `"skipped":""`); {
			case len(seen) == 0:
				t.Errorf("patch %s of %s never reached the mutating webhook", u.patch, u.name)
			case u.acts && skipped:
				t.Errorf("patch %s of %s may add an address, but the webhook skips it: %s", u.patch, u.name, seen[0])
			case !u.acts && !skipped:
				t.Errorf("patch %s of %s cannot add an address, but the webhook did not skip it: %s", u.patch, u.name, seen[0])
			}
		}
	})

	t.Run("a static IPv6 address in the dynamic band is denied, naming the IPv6 bands", func(t *testing.T) {
		_, err := create(ctx, cs, fixtures.Service(ns, "v6-dynamic", fixtures.WithClusterIP("fd00:10:96::5000"), fixtures.WithIPFamilies(corev1.IPv6Protocol)))
		requireDenied(t, err, mutating, `"fd00:10:96::5000"`, "lies in the dynamic band fd00:10:96::101-fd00:10:96::f:ffff", "static band fd00:10:96::1-fd00:10:96::100")
	})

	t.Run("the IPv6 DNS address in a non-canonical spelling is denied to another Service", func(t *testing.T) {
		_, err := create(ctx, cs, fixtures.Service(ns, "v6-squatter", fixtures.WithClusterIP("fd00:10:96:0::a"), fixtures.WithIPFamilies(corev1.IPv6Protocol)))
		requireDenied(t, err, mutating, `"fd00:10:96:0::a"`, "is reserved for Service kube-system/kube-dns (cluster DNS (IPv6))")
	})

	t.Run("a single-stack Service that grows to dual-stack may add only a static-band IPv6 address", func(t *testing.T) {
		svc := mustCreate(t, ctx, cs, fixtures.Service(ns, "grows", fixtures.WithClusterIP("10.96.0.40")))
		grow := func(v6 string) (*corev1.Service, error) {
			u := svc.DeepCopy()
			p := corev1.IPFamilyPolicyRequireDualStack
			u.Spec.IPFamilyPolicy = &p
			u.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
			u.Spec.ClusterIPs = []string{"10.96.0.40", v6}
			return cs.CoreV1().Services(ns).Update(ctx, u, metav1.UpdateOptions{})
		}
		_, err := grow("fd00:10:96::5000")
		requireDenied(t, err, mutating, `spec.clusterIPs[1]: Invalid value: "fd00:10:96::5000": lies in the dynamic band`)
		got, err := grow("fd00:10:96::50")
		if err != nil {
			t.Fatalf("growing with a static-band IPv6 address: %v", err)
		}
		if want := []string{"10.96.0.40", "fd00:10:96::50"}; !slices.Equal(got.Spec.ClusterIPs, want) {
			t.Fatalf("clusterIPs %v, want %v", got.Spec.ClusterIPs, want)
		}
	})

	t.Run("a dynamic dual-stack Service gets an address in each dynamic band", func(t *testing.T) {
		got := mustCreate(t, ctx, cs, fixtures.Service(ns, "dynamic", fixtures.WithIPFamilyPolicy(corev1.IPFamilyPolicyRequireDualStack)))
		v6Dynamic := band{mustAddr("fd00:10:96::101"), mustAddr("fd00:10:96::f:ffff")}
		if len(got.Spec.ClusterIPs) != 2 || !dynamicBand16.contains(got.Spec.ClusterIPs[0]) || !v6Dynamic.contains(got.Spec.ClusterIPs[1]) {
			t.Fatalf("clusterIPs %v, want one in %s and one in %s", got.Spec.ClusterIPs, dynamicBand16, v6Dynamic)
		}
	})
}

// TestAnOwnerNamingItsAddressGetsItsReservedSecondFamilyOnCreate: kube-dns
// as kubeadm and the coredns chart create it, clusterIP 10.96.0.10 and
// ipFamilyPolicy PreferDualStack (or RequireDualStack), on a dual-stack
// apiserver with holds on. Both reserved addresses are held until then; the
// create must end with both (not a random IPv6 address while the IPv6 hold
// stays), each now the apiserver's own allocation.
func TestAnOwnerNamingItsAddressGetsItsReservedSecondFamilyOnCreate(t *testing.T) {
	c := own(t, framework.Options{
		APIServers:  []framework.APIServerOptions{{ServiceClusterIPRange: "10.96.0.0/16,fd00:10:96::/108"}},
		Policy:      dualStackPolicy,
		Webhooks:    1,
		WebhookArgs: []string{"--hold-reservations"},
	})
	ctx := testContext(t, 2*time.Minute)
	cs := c.Client(0)
	for _, tc := range []struct {
		name, v4, v6 string
		policy       corev1.IPFamilyPolicy
	}{
		{"kube-dns", "10.96.0.10", "fd00:10:96::a", corev1.IPFamilyPolicyPreferDualStack},
		{"dns-patched", "10.96.0.12", "fd00:10:96::c", corev1.IPFamilyPolicyRequireDualStack},
	} {
		t.Run(string(tc.policy), func(t *testing.T) {
			waitHold(t, ctx, cs, tc.v4, 30*time.Second)
			waitHold(t, ctx, cs, tc.v6, 30*time.Second)
			got := mustCreate(t, ctx, cs, fixtures.Service("kube-system", tc.name, fixtures.WithClusterIP(tc.v4), fixtures.WithIPFamilyPolicy(tc.policy)))
			if want := []string{tc.v4, tc.v6}; !slices.Equal(got.Spec.ClusterIPs, want) {
				t.Fatalf("%s created with clusterIP %s and %s got %v, want %v", tc.name, tc.v4, tc.policy, got.Spec.ClusterIPs, want)
			}
			for _, ip := range []string{tc.v4, tc.v6} {
				a, err := cs.NetworkingV1().IPAddresses().Get(ctx, ip, metav1.GetOptions{})
				if err != nil || a.Labels["ipaddress.kubernetes.io/managed-by"] != "ipallocator.k8s.io" || a.Spec.ParentRef == nil || a.Spec.ParentRef.Name != tc.name {
					t.Fatalf("IPAddress %s = %+v (%v), want the apiserver's allocation for %s", ip, a, err, tc.name)
				}
			}
			t.Logf("e2e: dual-stack: %s created with clusterIP %s and %s got %v, both holds released", tc.name, tc.v4, tc.policy, got.Spec.ClusterIPs)
		})
	}
}
