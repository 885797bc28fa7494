//go:build e2e

package e2e

import (
	"encoding/json"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"clusterip-policy/certs"
	"clusterip-policy/test/e2e/framework"
	"clusterip-policy/test/fixtures"
)

// secondAddressAnnotation names the IPv6 address the test's mutator adds
// to a Service on any UPDATE that carries it (an annotation: a label value
// cannot hold a colon).
const secondAddressAnnotation = "e2e.example.com/second-address"

// startSecondAddressAdder serves a mutating webhook on loopback that, on an
// UPDATE of a single-stack Service annotated secondAddressAnnotation, makes
// it PreferDualStack with that IPv6 address as clusterIPs[1], as a
// careless policy engine or injector might on a label-only update. It
// counts the UPDATEs it changed.
func startSecondAddressAdder(t *testing.T, ca *certs.CA) (url string, changed *atomic.Int64) {
	t.Helper()
	changed = new(atomic.Int64)
	url = serveServiceMutator(t, ca, "e2e-second-address", func(op admissionv1.Operation, svc *corev1.Service) []map[string]any {
		v6 := svc.Annotations[secondAddressAnnotation]
		if op != admissionv1.Update || v6 == "" || len(svc.Spec.ClusterIPs) != 1 {
			return nil
		}
		changed.Add(1)
		return []map[string]any{
			{"op": "add", "path": "/spec/ipFamilyPolicy", "value": "PreferDualStack"},
			{"op": "add", "path": "/spec/ipFamilies", "value": []string{"IPv4", "IPv6"}},
			{"op": "add", "path": "/spec/clusterIPs", "value": []string{svc.Spec.ClusterIPs[0], v6}},
		}
	})
	return url, changed
}

// TestAnotherMutatingWebhookCannotGiveALabelOnlyUpdateASecondAddress: a
// real mutating webhook registered after ours (for Service UPDATEs only)
// turns an annotation-only UPDATE of a single-stack Service into a
// dual-stack one naming an IPv6 address. Our mutating webhook must be
// called in the first round of that UPDATE and so reinvoked after the
// other one's change, as on a create: a dynamic-band IPv6 address is
// denied (static-ip-in-dynamic-band), a free static-band one allowed. Run
// with the static conditions alone and with the managed ones.
func TestAnotherMutatingWebhookCannotGiveALabelOnlyUpdateASecondAddress(t *testing.T) {
	for _, mode := range []struct {
		name string
		args []string
	}{{"static conditions", nil}, {"managed conditions", []string{"--manage-match-conditions"}}} {
		t.Run(mode.name, func(t *testing.T) {
			c := own(t, framework.Options{
				APIServers:  []framework.APIServerOptions{{ServiceClusterIPRange: "10.96.0.0/16,fd00:10:96::/108"}},
				Policy:      dualStackPolicy, // both families allowed: only the band decides
				Webhooks:    1,
				WebhookArgs: mode.args,
			})
			ctx := testContext(t, 2*time.Minute)
			cs := c.Client(0)
			ns := namespace(t, c, "update-mutators")
			mustCreate(t, ctx, cs, fixtures.Service(ns, "grows-dynamic", fixtures.WithClusterIP("10.96.0.40")))
			mustCreate(t, ctx, cs, fixtures.Service(ns, "grows-static", fixtures.WithClusterIP("10.96.0.41")))

			url, changed := startSecondAddressAdder(t, c.WebhookCA)
			never := admissionregistrationv1.NeverReinvocationPolicy
			fail := admissionregistrationv1.Fail
			none := admissionregistrationv1.SideEffectClassNone
			timeout := int32(5)
			cfg := &admissionregistrationv1.MutatingWebhookConfiguration{
				ObjectMeta: metav1.ObjectMeta{Name: "zz-e2e-adds-second-address"},
				Webhooks: []admissionregistrationv1.MutatingWebhook{{
					Name:         "add-second-address.e2e.example.com",
					ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: c.WebhookCA.CertPEM},
					Rules: []admissionregistrationv1.RuleWithOperations{{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
						Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"services"}},
					}},
					FailurePolicy: &fail, SideEffects: &none, TimeoutSeconds: &timeout,
					AdmissionReviewVersions: []string{"v1"}, ReinvocationPolicy: &never,
				}},
			}
			if _, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, cfg, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if mode.args != nil {
				// Judged by the outcome below; this only waits for the
				// leader to see the other webhook, if it ever does.
				for start := time.Now(); time.Since(start) < 15*time.Second; time.Sleep(20 * time.Millisecond) {
					if m, _, _, err := managedConditions(ctx, c); err == nil && m == "true" {
						t.Logf("e2e: update mutators: the mutating condition sends every request %s after an UPDATE-only mutating webhook for Services was registered", time.Since(start).Round(time.Millisecond))
						break
					}
				}
			}
			annotate := func(name, v6 string) (*corev1.Service, error) {
				patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{secondAddressAnnotation: v6}}})
				return cs.CoreV1().Services(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
			}
			// The apiserver loads the new configuration from its informer:
			// until the other webhook acts, the annotation only is written.
			// Retried on a fresh Service name each time, so the first try
			// that the other webhook changes is the one judged.
			var err error
			var got *corev1.Service
			fixtures.Eventually(t, "the other mutating webhook to change an UPDATE (else the test proves nothing)", 15*time.Second, func() bool {
				before := changed.Load()
				got, err = annotate("grows-dynamic", "fd00:10:96::5000")
				if changed.Load() > before {
					return true
				}
				if err != nil {
					t.Fatalf("annotation-only update before the other webhook acted: %v", err)
				}
				// Undo, so that the next try is judged from single-stack.
				if err := cs.CoreV1().Services(ns).Delete(ctx, "grows-dynamic", metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
				mustCreate(t, ctx, cs, fixtures.Service(ns, "grows-dynamic", fixtures.WithClusterIP("10.96.0.40")))
				return false
			})
			if err == nil || !strings.Contains(err.Error(), "dynamic band") {
				t.Fatalf("a dynamic-band IPv6 address added by a later mutating webhook on an annotation-only UPDATE: err %v (admitted with %v), want the static-ip-in-dynamic-band denial", err, got.Spec.ClusterIPs)
			}
			t.Logf("e2e: update mutators (%s): a later webhook added fd00:10:96::5000 on an annotation-only update: %v", mode.name, err)
			got, err = annotate("grows-static", "fd00:10:96::50")
			if err != nil || !slices.Equal(got.Spec.ClusterIPs, []string{"10.96.0.41", "fd00:10:96::50"}) {
				t.Fatalf("a free static-band IPv6 address added by a later mutating webhook: %v (got %v); want it allowed", err, got)
			}
		})
	}
}
