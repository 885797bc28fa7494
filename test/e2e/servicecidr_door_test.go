//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"clusterip-policy/test/e2e/framework"
	"clusterip-policy/test/fixtures"
)

const serviceCIDRWebhook = "validate-servicecidrs.clusterip-policy.io"

func serviceCIDRYAML(name string, cidrs ...string) string {
	return fmt.Sprintf("apiVersion: networking.k8s.io/v1\nkind: ServiceCIDR\nmetadata:\n  name: %s\nspec:\n  cidrs: [%s]\n", name, strings.Join(cidrs, ", "))
}

// ServiceCIDRs are reviewed themselves: an unapproved range never exists,
// so no ordinary create lands in it and is denied. This is the webhook's
// door, so its cluster runs without the backstop: the apiserver runs the
// backstop's policies before validating webhooks and they carry the same
// two rules, so with it on they answer first (TestBackstopHoldsWhileTheWebhookCannotAnswer).
func TestServiceCIDRCheckedAtTheDoor(t *testing.T) {
	c := own(t, framework.Options{Policy: sharedPolicy, Webhooks: 1, NoBackstop: true})
	cs := c.Client(0)
	ctx := testContext(t, 3*60e9)
	ns := namespace(t, c, "cidr-door")

	t.Run("kubectl apply of a range outside allowedCIDRs is refused with the policy's message", func(t *testing.T) {
		_, stderr, err := c.Kubectl(ctx, serviceCIDRYAML("e2e-rogue", "10.200.0.0/24"), "apply", "-f", "-")
		if err == nil {
			t.Fatal("kubectl apply created the unapproved ServiceCIDR e2e-rogue")
		}
		for _, want := range []string{
			fmt.Sprintf("admission webhook %q denied the request", serviceCIDRWebhook),
			`spec.cidrs[0]: Invalid value: "10.200.0.0/24": is not inside the policy's allowedCIDRs 10.96.0.0/12`,
			"add it to allowedCIDRs first",
		} {
			if !strings.Contains(stderr, want) {
				t.Errorf("kubectl's error lacks %q:\n%s", want, stderr)
			}
		}
		t.Logf("e2e: kubectl apply of an unapproved ServiceCIDR: %s", strings.TrimSpace(stderr))
		if _, err := cs.NetworkingV1().ServiceCIDRs().Get(ctx, "e2e-rogue", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("ServiceCIDR e2e-rogue exists after the refusal (get: %v)", err)
		}
	})

	t.Run("a range whose dynamic band covers the default range's static band is refused", func(t *testing.T) {
		_, stderr, err := c.Kubectl(ctx, serviceCIDRYAML("e2e-inside", "10.96.0.0/24"), "apply", "-f", "-")
		if err == nil {
			t.Fatal("kubectl apply created e2e-inside over the static band of ServiceCIDR kubernetes")
		}
		want := `its dynamic band 10.96.0.17-10.96.0.254 covers 10.96.0.17-10.96.0.254 of the static band 10.96.0.1-10.96.1.0 of ServiceCIDR "kubernetes"`
		if !strings.Contains(stderr, want) {
			t.Errorf("kubectl's error lacks %q:\n%s", want, stderr)
		}
	})

	approved := netip.MustParsePrefix("10.98.0.0/24")
	t.Run("an approved range passes, and 50 dynamic creates afterwards see no denial", func(t *testing.T) {
		if _, _, err := c.Kubectl(ctx, serviceCIDRYAML("e2e-approved", approved.String()), "apply", "-f", "-"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			deleteServices(t, cs, ns)
			_ = cs.NetworkingV1().ServiceCIDRs().Delete(context.Background(), "e2e-approved", metav1.DeleteOptions{})
		})
		// The webhook's view learns the new range from its watch: wait until
		// a static address in it is admitted, as TestServiceCIDRCreatedAtRunTime
		// measures, so the count below is about ranges, not a race.
		created := time.Now()
		for {
			_, err := create(ctx, cs, fixtures.Service(ns, "probe", fixtures.WithClusterIP("10.98.0.5")))
			if err == nil {
				break
			}
			if time.Since(created) > 10*time.Second {
				t.Fatalf("10.98.0.5 still refused 10s after the ServiceCIDR was created: %v", err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		var denied, inApproved int
		for i := range 50 {
			got, err := create(ctx, cs, fixtures.Service(ns, fmt.Sprintf("dynamic-%03d", i)))
			if err != nil {
				denied++
				t.Errorf("dynamic create %d denied: %v", i, err)
				continue
			}
			ip := netip.MustParseAddr(got.Spec.ClusterIP)
			if approved.Contains(ip) {
				inApproved++
			} else if !dynamicBand16.contains(ip.String()) {
				t.Errorf("%s got %s, in neither the dynamic band %s nor %s", got.Name, ip, dynamicBand16, approved)
			}
		}
		t.Logf("e2e: after an unapproved ServiceCIDR was refused at the door, %d of 50 dynamic creates were denied; %d landed in the approved ServiceCIDR %s, %d in 10.96.0.0/16", denied, inApproved, approved, 50-denied-inApproved)
	})
}

// The apiserver creates its default ServiceCIDR at start (and blocks its
// readiness on it) with the webhook registered and failing; an admin's
// ServiceCIDR is refused meanwhile (failurePolicy Fail).
func TestDefaultServiceCIDRNeverBlocked(t *testing.T) {
	c := own(t, framework.Options{Policy: sharedPolicy, Webhooks: 1})
	cs := c.Client(0)
	ctx := testContext(t, 3*60e9)

	c.Webhooks[0].Stop(10 * time.Second)
	t.Run("with the webhook down, an admin cannot create a ServiceCIDR", func(t *testing.T) {
		_, stderr, err := c.Kubectl(ctx, serviceCIDRYAML("e2e-while-down", "10.97.0.0/24"), "apply", "-f", "-")
		if err == nil {
			t.Fatal("a ServiceCIDR was created while the webhook was down")
		}
		if want := fmt.Sprintf("failed calling webhook %q", serviceCIDRWebhook); !strings.Contains(stderr, want) {
			t.Errorf("kubectl's error lacks %q:\n%s", want, stderr)
		}
	})
	t.Run("the apiserver recreates the default ServiceCIDR at start with the webhook down", func(t *testing.T) {
		if err := cs.NetworkingV1().ServiceCIDRs().Delete(ctx, "kubernetes", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		mark := c.APIServers[0].LogSize()
		c.CrashAPIServer(0)
		start := time.Now()
		if err := c.RestartAPIServer(ctx, 0); err != nil {
			t.Fatalf("the apiserver did not become ready with the webhook down: %v", err)
		}
		got, err := cs.NetworkingV1().ServiceCIDRs().Get(ctx, "kubernetes", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("no default ServiceCIDR after the restart: %v", err)
		}
		if fmt.Sprint(got.Spec.CIDRs) != "[10.96.0.0/16]" {
			t.Errorf("default ServiceCIDR %v, want [10.96.0.0/16]", got.Spec.CIDRs)
		}
		log := framework.TailFile(c.APIServers[0].LogPath, mark, 100000)
		if !strings.Contains(log, "Creating default ServiceCIDR") {
			t.Errorf("the apiserver's log since the restart does not say it created the default ServiceCIDR")
		}
		if strings.Contains(log, "KubernetesDefaultServiceCIDRError") || strings.Contains(log, "can not be created") {
			t.Errorf("the apiserver reports an error creating the default ServiceCIDR")
		}
		t.Logf("e2e: with the ServiceCIDR webhook registered and down, the restarted apiserver created ServiceCIDR kubernetes %s and was ready %s after the restart", got.Spec.CIDRs, time.Since(start).Round(time.Millisecond))
	})
}
