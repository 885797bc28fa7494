//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"clusterip-policy/test/e2e/framework"
	"clusterip-policy/test/fixtures"
)

var policyReportGVR = schema.GroupVersionResource{Group: "wgpolicyk8s.io", Version: "v1alpha2", Resource: "policyreports"}

// policyReportResult is what the test reads of one result.
type policyReportResult struct {
	policy, rule, result, severity, source, message string
	kind, namespace, name, uid                      string
	ip                                              string
	seconds                                         int64
}

// ourPolicyReports reads the reports named clusterip-policy-audit, by
// namespace.
func ourPolicyReports(t *testing.T, ctx context.Context, dyn dynamic.Interface) map[string]*unstructured.Unstructured {
	t.Helper()
	l, err := dyn.Resource(policyReportGVR).Namespace("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list PolicyReports: %v", err)
	}
	out := map[string]*unstructured.Unstructured{}
	for i := range l.Items {
		if l.Items[i].GetName() == "clusterip-policy-audit" {
			out[l.Items[i].GetNamespace()] = &l.Items[i]
		}
	}
	return out
}

func reportResults(t *testing.T, u *unstructured.Unstructured) []policyReportResult {
	t.Helper()
	raw, _, err := unstructured.NestedSlice(u.Object, "results")
	if err != nil {
		t.Fatalf("report %s/%s results: %v", u.GetNamespace(), u.GetName(), err)
	}
	var out []policyReportResult
	for _, r := range raw {
		m := r.(map[string]any)
		var res policyReportResult
		res.policy, _, _ = unstructured.NestedString(m, "policy")
		res.rule, _, _ = unstructured.NestedString(m, "rule")
		res.result, _, _ = unstructured.NestedString(m, "result")
		res.severity, _, _ = unstructured.NestedString(m, "severity")
		res.source, _, _ = unstructured.NestedString(m, "source")
		res.message, _, _ = unstructured.NestedString(m, "message")
		res.ip, _, _ = unstructured.NestedString(m, "properties", "ip")
		res.seconds, _, _ = unstructured.NestedInt64(m, "timestamp", "seconds")
		if refs, _, _ := unstructured.NestedSlice(m, "resources"); len(refs) == 1 {
			ref := refs[0].(map[string]any)
			res.kind, _ = ref["kind"].(string)
			res.namespace, _ = ref["namespace"].(string)
			res.name, _ = ref["name"].(string)
			res.uid, _ = ref["uid"].(string)
		}
		out = append(out, res)
	}
	return out
}

// The leader's periodic audit writes its findings as PolicyReports where
// the apiserver serves wgpolicyk8s.io/v1alpha2, and only there: without the
// CRD its passes succeed and write nothing; the CRD installed later (a
// schema as strict as the API's: a misspelt field is pruned) gets one
// report per namespace with findings from the next passes, with the
// content dashboards read; a pass with nothing new rewrites nothing; a
// fixed Service's result goes, and with it its namespace's report; a
// report not labelled ours is left alone; the CRD removed again, the
// passes go on.
func TestPeriodicAuditWritesPolicyReports(t *testing.T) {
	c := own(t, framework.Options{Policy: auditPolicy, Webhooks: 0})
	cs := c.Client(0)
	dyn := dynamic.NewForConfigOrDie(c.RESTConfig(0))
	ctx := testContext(t, 4*time.Minute)
	// No webhook is registered: the apiserver takes both.
	early := mustCreate(t, ctx, cs, fixtures.Service("default", "early-bird", fixtures.WithClusterIP("10.96.0.10"))) // reserved-for-other (deny)
	dns := mustCreate(t, ctx, cs, fixtures.Service("kube-system", "kube-dns", fixtures.WithClusterIP("10.96.0.11"))) // reservation-not-held (no admission action)
	mustCreate(t, ctx, cs, fixtures.Service("default", "fine"))

	if _, err := c.StartWebhookWithArgs(ctx, "", "--audit-interval=1s"); err != nil {
		t.Fatalf("start a webhook: %v", err)
	}
	passes := func() float64 {
		return metricSum(t, ctx, c, "clusterip_policy_audit_passes_total", `result="success"`)
	}
	morePasses := func(what string, n float64) {
		t.Helper()
		before := passes()
		fixtures.Eventually(t, fmt.Sprintf("%v more successful passes (%s)", n, what), 30*time.Second, func() bool { return passes() >= before+n })
	}

	t.Run("without the CRD the passes succeed and write nothing", func(t *testing.T) {
		morePasses("no CRD", 3)
		if v := metricSum(t, ctx, c, "clusterip_policy_audit_reports_available"); v != 0 {
			t.Errorf("reports_available %v without the CRD, want 0", v)
		}
		if n := metricSum(t, ctx, c, "clusterip_policy_audit_passes_total", `result="failed"`); n != 0 {
			t.Errorf("%v failed passes without the CRD", n)
		}
		if exited, err := c.Webhooks[0].Exited(); exited {
			t.Fatalf("the webhook exited without the CRD: %v", err)
		}
		t.Logf("e2e: policy reports: no CRD: %v successful passes, reports_available 0", passes())
	})

	crd := filepath.Join(c.Root, "test", "e2e", "testdata", "wgpolicyk8s.io_policyreports.yaml")
	installed := time.Now()
	if out, errOut, err := c.Kubectl(ctx, "", "apply", "-f", crd); err != nil {
		t.Fatalf("kubectl apply %s: %v\n%s%s", crd, err, out, errOut)
	}
	if out, errOut, err := c.Kubectl(ctx, "", "wait", "--for=condition=Established", "--timeout=30s", "crd/policyreports.wgpolicyk8s.io"); err != nil {
		t.Fatalf("the CRD is not established: %v\n%s%s", err, out, errOut)
	}
	// A report of someone else's in the same namespace: never touched.
	foreign := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReport",
		"metadata": map[string]any{"name": "someone-elses", "namespace": "default"},
		"results":  []any{map[string]any{"policy": "other", "result": "pass"}},
	}}
	if err := retryUntil(ctx, 15*time.Second, func() error {
		_, err := dyn.Resource(policyReportGVR).Namespace("default").Create(ctx, foreign, metav1.CreateOptions{})
		return err
	}); err != nil {
		t.Fatalf("create a foreign PolicyReport: %v", err)
	}

	var first map[string]*unstructured.Unstructured
	t.Run("the CRD installed later: one report per namespace with findings", func(t *testing.T) {
		fixtures.EventuallyNil(t, "reports in default and kube-system", 30*time.Second, func() error {
			first = ourPolicyReports(t, ctx, dyn)
			if got := slices.Sorted(maps.Keys(first)); !slices.Equal(got, []string{"default", "kube-system"}) {
				return fmt.Errorf("reports in %v", got)
			}
			return nil
		})
		t.Logf("e2e: policy reports: written %s after the CRD was applied", time.Since(installed).Round(10*time.Millisecond))
		for ns, r := range first {
			if r.GetLabels()["app.kubernetes.io/managed-by"] != "clusterip-policy" {
				t.Errorf("report %s: labels %v, want app.kubernetes.io/managed-by=clusterip-policy", ns, r.GetLabels())
			}
		}
		want := map[string]struct {
			svc                          *corev1.Service
			rule, result, severity, text string
		}{
			"default":     {early, "reserved-for-other", "fail", "high", "10.96.0.10 is reserved for Service kube-system/kube-dns (cluster DNS). Rule reserved-for-other (spec.clusterIP; deny at admission). Fix: delete default/early-bird"},
			"kube-system": {dns, "reservation-not-held", "warn", "medium", "Rule reservation-not-held (spec.clusterIP)"},
		}
		for ns, w := range want {
			res := reportResults(t, first[ns])
			if len(res) != 1 {
				t.Fatalf("report %s: %d results %+v, want 1", ns, len(res), res)
			}
			r := res[0]
			if r.policy != "clusterip-policy" || r.source != "clusterip-policy" || r.rule != w.rule || r.result != w.result || r.severity != w.severity ||
				r.kind != "Service" || r.namespace != ns || r.name != w.svc.Name || r.uid != string(w.svc.UID) || r.ip != w.svc.Spec.ClusterIP ||
				!strings.Contains(r.message, w.text) || r.seconds < installed.Add(-time.Minute).Unix() {
				t.Errorf("report %s result %+v; want rule %s result %s severity %s on Service %s (uid %s) at %s, message with %q, a timestamp", ns, r, w.rule, w.result, w.severity, w.svc.Name, w.svc.UID, w.svc.Spec.ClusterIP, w.text)
			}
			fail, _, _ := unstructured.NestedInt64(first[ns].Object, "summary", "fail")
			warn, _, _ := unstructured.NestedInt64(first[ns].Object, "summary", "warn")
			if (w.result == "fail") != (fail == 1 && warn == 0) || (w.result == "warn") != (warn == 1 && fail == 0) {
				t.Errorf("report %s summary fail %d warn %d, want one %s", ns, fail, warn, w.result)
			}
		}
		out, _, err := c.Kubectl(ctx, "", "get", "policyreports", "-A")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("e2e: policy reports: kubectl get policyreports -A:\n%s", out)
	})

	t.Run("passes with nothing new rewrite nothing", func(t *testing.T) {
		morePasses("unchanged findings", 3)
		now := ourPolicyReports(t, ctx, dyn)
		for ns, r := range first {
			if now[ns] == nil || now[ns].GetResourceVersion() != r.GetResourceVersion() {
				t.Errorf("report %s rewritten by passes that found the same: resourceVersion %s, then %v", ns, r.GetResourceVersion(), now[ns])
			}
		}
		if n := metricSum(t, ctx, c, "clusterip_policy_audit_reports_total", `result="updated"`); n != 0 {
			t.Errorf("reports_total{updated} = %v after passes with the same findings, want 0", n)
		}
		if v := metricSum(t, ctx, c, "clusterip_policy_audit_reports_available"); v != 1 {
			t.Errorf("reports_available %v with the CRD, want 1", v)
		}
	})

	t.Run("a fixed Service's result goes, and its namespace's report with it", func(t *testing.T) {
		fixed := time.Now()
		if err := cs.CoreV1().Services("default").Delete(ctx, early.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		fixtures.EventuallyNil(t, "the report of default deleted", 30*time.Second, func() error {
			if r := ourPolicyReports(t, ctx, dyn)["default"]; r != nil {
				return fmt.Errorf("report default still has %+v", reportResults(t, r))
			}
			return nil
		})
		t.Logf("e2e: policy reports: the report of default deleted %s after its one offending Service was", time.Since(fixed).Round(10*time.Millisecond))
		if r := ourPolicyReports(t, ctx, dyn)["kube-system"]; r == nil || len(reportResults(t, r)) != 1 {
			t.Errorf("the report of kube-system (kube-dns still on the wrong address) is gone or changed: %v", r)
		}
		if _, err := dyn.Resource(policyReportGVR).Namespace("default").Get(ctx, "someone-elses", metav1.GetOptions{}); err != nil {
			t.Errorf("the foreign report in default: %v, want it left alone", err)
		}
	})

	t.Run("the CRD removed, the passes go on", func(t *testing.T) {
		if out, errOut, err := c.Kubectl(ctx, "", "delete", "-f", crd, "--wait=true", "--timeout=60s"); err != nil {
			t.Fatalf("kubectl delete %s: %v\n%s%s", crd, err, out, errOut)
		}
		fixtures.Eventually(t, "reports_available back to 0", 30*time.Second, func() bool {
			return metricSum(t, ctx, c, "clusterip_policy_audit_reports_available") == 0
		})
		morePasses("CRD removed", 3)
		if exited, err := c.Webhooks[0].Exited(); exited {
			t.Fatalf("the webhook exited once the CRD was removed: %v", err)
		}
		if _, err := dyn.Resource(policyReportGVR).Namespace("kube-system").List(ctx, metav1.ListOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("list PolicyReports after the CRD's removal: %v, want NotFound", err)
		}
	})
}
