//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"clusterip-policy/certs"
	"clusterip-policy/test/e2e/framework"
	"clusterip-policy/test/fixtures"
)

// Another mutating admission that sets spec.clusterIP after ours must not
// route around the managed conditions: the apiserver reinvokes only the
// webhooks it called in the first round, so while one exists the leader's
// mutating condition sends every create (docs/matchconditions.md).

// setClusterIPLabel names the address the test's mutators put into
// spec.clusterIP of a Service created with it.
const setClusterIPLabel = "e2e-set-cluster-ip"

// startClusterIPSetter serves a mutating webhook on loopback that sets
// spec.clusterIP of a Service create to the value of its
// setClusterIPLabel label (and leaves every other request unchanged), as a
// Kyverno mutate rule or an injector might. It counts its calls.
func startClusterIPSetter(t *testing.T, ca *certs.CA) (url string, calls *atomic.Int64) {
	t.Helper()
	calls = new(atomic.Int64)
	url = serveServiceMutator(t, ca, "e2e-setter", func(_ admissionv1.Operation, svc *corev1.Service) []map[string]any {
		calls.Add(1)
		if ip := svc.Labels[setClusterIPLabel]; ip != "" && svc.Spec.ClusterIP == "" {
			return []map[string]any{{"op": "add", "path": "/spec/clusterIP", "value": ip}}
		}
		return nil
	})
	return url, calls
}

// serveServiceMutator serves a mutating webhook on loopback, with a
// certificate ca signs for 127.0.0.1: each review's Service goes to mutate,
// whose JSON patch operations (none: unchanged) are the answer.
func serveServiceMutator(t *testing.T, ca *certs.CA, commonName string, mutate func(admissionv1.Operation, *corev1.Service) []map[string]any) (url string) {
	t.Helper()
	kp, err := ca.Sign(certs.Options{CommonName: commonName, IPs: []net.IP{net.ParseIP("127.0.0.1")}, Validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&review); err != nil || review.Request == nil {
			http.Error(w, "bad review", http.StatusBadRequest)
			return
		}
		resp := &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
		var svc corev1.Service
		if json.Unmarshal(review.Request.Object.Raw, &svc) == nil {
			if ops := mutate(review.Request.Operation, &svc); len(ops) > 0 {
				patch, _ := json.Marshal(ops)
				pt := admissionv1.PatchTypeJSONPatch
				resp.Patch, resp.PatchType = patch, &pt
			}
		}
		review.Response, review.Request = resp, nil
		_ = json.NewEncoder(w).Encode(&review)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.URL
}

// setterConfiguration registers the setter after ours (configurations run
// in name order), for Service creates only, never reinvoked itself.
func setterConfiguration(url string, caPEM []byte) *admissionregistrationv1.MutatingWebhookConfiguration {
	never := admissionregistrationv1.NeverReinvocationPolicy
	fail := admissionregistrationv1.Fail
	none := admissionregistrationv1.SideEffectClassNone
	timeout := int32(5)
	return &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "zz-e2e-sets-cluster-ips"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    "set-cluster-ip.e2e.example.com",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: caPEM},
			Rules:                   []admissionregistrationv1.RuleWithOperations{serviceCreateRule()},
			ObjectSelector:          &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: setClusterIPLabel, Operator: metav1.LabelSelectorOpExists}}},
			FailurePolicy:           &fail,
			SideEffects:             &none,
			TimeoutSeconds:          &timeout,
			AdmissionReviewVersions: []string{"v1"},
			ReinvocationPolicy:      &never,
		}},
	}
}

func serviceCreateRule() admissionregistrationv1.RuleWithOperations {
	return admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"services"}},
	}
}

// waitMutatingCondition waits until our mutating webhook's managed
// condition is (sendsEvery) or is not (!sendsEvery) the one that sends
// every create, and returns how long that took.
func waitMutatingCondition(t *testing.T, ctx context.Context, c *framework.Cluster, sendsEvery bool, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	var m string
	var err error
	if fixtures.Wait(timeout, func() bool {
		m, _, _, err = managedConditions(ctx, c)
		return err == nil && m != "" && (m == "true") == sendsEvery
	}) != nil {
		t.Fatalf("after %s the mutating managed condition is %.60q (err %v); want one that sends every create: %v", timeout, m, err, sendsEvery)
	}
	return time.Since(start)
}

// TestAnotherMutatingWebhookAfterOursCannotRouteAroundTheManagedConditions:
// a mutating webhook registered after ours sets a dynamic-band address on
// a plain create. The leader sees it and sends every create to our
// mutating webhook, which the apiserver then reinvokes after the other
// one's change: denied. With the other webhook gone, plain creates skip
// ours again.
func TestAnotherMutatingWebhookAfterOursCannotRouteAroundTheManagedConditions(t *testing.T) {
	c, ctx, _ := managedCluster(t, "10.96.0.0/16")
	cs := c.Client(0)
	waitMutatingCondition(t, ctx, c, false, 10*time.Second)
	ns := namespace(t, c, "other-mutators")

	url, calls := startClusterIPSetter(t, c.WebhookCA)
	if _, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, setterConfiguration(url, c.WebhookCA.CertPEM), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Wait for the leader to switch, but judge by the outcome: on a build
	// that never switches, the create below is admitted and the test says so.
	registered := time.Now()
	for time.Since(registered) < 15*time.Second {
		if m, _, _, err := managedConditions(ctx, c); err == nil && m == "true" {
			t.Logf("e2e: other mutators: the mutating condition sends every create %s after another mutating webhook for Services was registered", time.Since(registered).Round(time.Millisecond))
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The apiserver loads the changed configurations from its informer, a
	// moment after the write: a dry run of the same create (the other
	// webhook has no side effects, so it is called for dry runs too) is the
	// probe, denied once the apiserver sends every create to ours.
	probes := 0
	fixtures.EventuallyNil(t, "a dry run of a create given a dynamic-band address by the later webhook to be denied", 15*time.Second, func() error {
		probes++
		name := fmt.Sprintf("probe-dynamic-%d", probes)
		got, err := cs.CoreV1().Services(ns).Create(ctx, fixtures.Service(ns, name, fixtures.WithLabel(setClusterIPLabel, "10.96.200.71")), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil && strings.Contains(err.Error(), "dynamic band") {
			return nil
		}
		if err != nil {
			return fmt.Errorf("dry run of %s: %w", name, err)
		}
		return fmt.Errorf("dry run of %s admitted with %v", name, got.Spec.ClusterIPs)
	})

	setterCalls := calls.Load()
	admitted, err := cs.CoreV1().Services(ns).Create(ctx, fixtures.Service(ns, "set-dynamic", fixtures.WithLabel(setClusterIPLabel, "10.96.200.71")), metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "dynamic band") {
		t.Fatalf("a dynamic-band address set by a later mutating webhook: err %v (admitted with %v), want the static-ip-in-dynamic-band denial", err, admitted.Spec.ClusterIPs)
	}
	if calls.Load() == setterCalls {
		t.Fatal("the other mutating webhook was never called; the test proves nothing")
	}
	mutates := 0
	for _, d := range decisionsFor(c, ns, "set-dynamic") {
		if d.Stage == "mutate" {
			mutates++
		}
	}
	if mutates < 2 {
		t.Fatalf("our mutating webhook decided %d times on set-dynamic; want 2 (round 1, then reinvoked after the other webhook's change): %+v", mutates, decisionsFor(c, ns, "set-dynamic"))
	}
	t.Logf("e2e: other mutators: a later webhook set 10.96.200.71 on a plain create: denied on reinvocation: %v", err)
	got, err := cs.CoreV1().Services(ns).Create(ctx, fixtures.Service(ns, "set-static", fixtures.WithLabel(setClusterIPLabel, "10.96.0.77")), metav1.CreateOptions{})
	if err != nil || got.Spec.ClusterIP != "10.96.0.77" {
		t.Fatalf("a free static-band address set by a later mutating webhook: %v (got %v); want it allowed", err, got)
	}
	plainCalls := func() float64 {
		n, err := c.APIServerMetric(ctx, 0, "apiserver_admission_webhook_request_total", `name="`+framework.MutatingWebhookName+`"`, `operation="CREATE"`)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := plainCalls()
	if _, err := cs.CoreV1().Services(ns).Create(ctx, fixtures.Service(ns, "plain-while-other"), metav1.CreateOptions{}); err != nil && !strings.Contains(err.Error(), "reserved for") {
		t.Fatal(err)
	}
	if plainCalls() == before {
		t.Fatal("with another mutating webhook for Services registered, a plain create skipped our mutating webhook")
	}

	if err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, "zz-e2e-sets-cluster-ips", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	took := waitMutatingCondition(t, ctx, c, false, 15*time.Second)
	t.Logf("e2e: other mutators: the selective mutating condition was back %s after the other webhook was deleted", took.Round(time.Millisecond))
}

// TestAMutatingAdmissionPolicyForServicesMakesEveryCreateReachOurs: a
// MutatingAdmissionPolicy that can act on Service creates counts as another
// mutator too (the apiserver runs them before the webhooks, and reinvokes
// them after): the mutating condition sends every create, and a
// dynamic-band address it sets is denied.
func TestAMutatingAdmissionPolicyForServicesMakesEveryCreateReachOurs(t *testing.T) {
	c, ctx, _ := managedCluster(t, "10.96.0.0/16")
	cs := c.Client(0)
	waitMutatingCondition(t, ctx, c, false, 10*time.Second)
	ns := namespace(t, c, "map")

	fail := admissionregistrationv1.Fail
	never := admissionregistrationv1.NeverReinvocationPolicy
	rule := serviceCreateRule()
	p := &admissionregistrationv1.MutatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-set-cluster-ip"},
		Spec: admissionregistrationv1.MutatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: rule}}},
			MatchConditions: []admissionregistrationv1.MatchCondition{{Name: "labelled",
				Expression: fmt.Sprintf("has(object.metadata.labels) && '%s' in object.metadata.labels", setClusterIPLabel)}},
			FailurePolicy:      &fail,
			ReinvocationPolicy: never,
			Mutations: []admissionregistrationv1.Mutation{{
				PatchType: admissionregistrationv1.PatchTypeApplyConfiguration,
				ApplyConfiguration: &admissionregistrationv1.ApplyConfiguration{
					Expression: fmt.Sprintf("Object{spec: Object.spec{clusterIP: object.metadata.labels['%s']}}", setClusterIPLabel),
				},
			}},
		},
	}
	if _, err := cs.AdmissionregistrationV1().MutatingAdmissionPolicies().Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create the MutatingAdmissionPolicy (served as v1 since Kubernetes 1.36): %v", err)
	}
	b := &admissionregistrationv1.MutatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-set-cluster-ip"},
		Spec:       admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{PolicyName: p.Name},
	}
	if _, err := cs.AdmissionregistrationV1().MutatingAdmissionPolicyBindings().Create(ctx, b, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	took := waitMutatingCondition(t, ctx, c, true, 15*time.Second)
	t.Logf("e2e: other mutators: the mutating condition sends every create %s after a MutatingAdmissionPolicy for Services was created", took.Round(time.Millisecond))

	// The policy is compiled by the apiserver's own informer: retry a
	// moment until it acts, then its address must be denied.
	tries := 0
	fixtures.EventuallyNil(t, "the MutatingAdmissionPolicy to act", 15*time.Second, func() error {
		tries++
		name := fmt.Sprintf("map-dynamic-%d", tries)
		svc, err := cs.CoreV1().Services(ns).Create(ctx, fixtures.Service(ns, name, fixtures.WithLabel(setClusterIPLabel, "10.96.200.72")), metav1.CreateOptions{})
		if err != nil && strings.Contains(err.Error(), "dynamic band") {
			t.Logf("e2e: other mutators: a MutatingAdmissionPolicy set 10.96.200.72 on a plain create: denied: %v", err)
			return nil
		}
		if err == nil && svc.Spec.ClusterIP == "10.96.200.72" {
			t.Fatalf("a MutatingAdmissionPolicy put the dynamic-band address %s on %s and it was admitted", svc.Spec.ClusterIP, name)
		}
		if err != nil {
			return err
		}
		return fmt.Errorf("%s created with %s", name, svc.Spec.ClusterIP)
	})
	if err := cs.AdmissionregistrationV1().MutatingAdmissionPolicies().Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitMutatingCondition(t, ctx, c, false, 15*time.Second)
}
