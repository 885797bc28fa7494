package periodicaudit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	discoveryfake "k8s.io/client-go/discovery/fake"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"

	"clusterip-policy/pkg/policy"
)

func reportFinding(ns, name string, rule policy.RuleID, action policy.Action, ip string) policy.Finding {
	return policy.Finding{Namespace: ns, Name: name, Rule: rule, Action: action, Field: "spec.clusterIP", IP: ip, Problem: "is reserved for someone", Fix: "move it"}
}

// A namespace with more findings than MaxReportResults gets that many
// results, the first by Service name, and the summary and an annotation
// count the rest: the report stays far below etcd's object limit whatever
// the cluster holds.
func TestReportObjectIsBounded(t *testing.T) {
	n := MaxReportResults + 37
	var findings []policy.Finding
	for i := range n {
		// Reverse order: the report sorts them.
		findings = append(findings, reportFinding("big", fmt.Sprintf("svc-%05d", n-i), policy.RuleReservedForOther, policy.ActionDeny, "10.96.0.10"))
	}
	findings = append(findings, reportFinding("big", "svc-00000", policy.RuleOutsideServiceCIDRs, policy.ActionWarn, "10.97.0.1"))
	u := reportObject("big", findings, nil, time.Unix(1000, 0), nil)
	results, _, _ := unstructured.NestedSlice(u.Object, "results")
	if len(results) != MaxReportResults {
		t.Fatalf("%d results, want the cap %d", len(results), MaxReportResults)
	}
	first := results[0].(map[string]any)
	if ref := first["resources"].([]any)[0].(map[string]any); ref["name"] != "svc-00000" || first["result"] != "warn" {
		t.Errorf("first result %v, want svc-00000's warn (sorted by name)", first)
	}
	fail, _, _ := unstructured.NestedInt64(u.Object, "summary", "fail")
	warn, _, _ := unstructured.NestedInt64(u.Object, "summary", "warn")
	if fail != int64(n) || warn != 1 {
		t.Errorf("summary fail %d warn %d, want every finding counted: %d and 1", fail, warn, n)
	}
	if got := u.GetAnnotations()[ReportOmittedAnnotation]; got != fmt.Sprint(n+1-MaxReportResults) {
		t.Errorf("omitted annotation %q, want %d", got, n+1-MaxReportResults)
	}
	size := 0
	for _, r := range results {
		size += len(fmt.Sprint(r))
	}
	if size > 1<<20 {
		t.Errorf("results take %d bytes, over 1 MiB", size)
	}
}

// A finding already in the report keeps the timestamp it was first
// reported at, so a pass that finds the same writes nothing (sameReport);
// a new finding gets the pass's time, and the report differs.
func TestReportObjectKeepsFirstSeen(t *testing.T) {
	uids := map[policy.Owner]types.UID{{Namespace: "a", Name: "s"}: "uid-s", {Namespace: "a", Name: "t"}: "uid-t"}
	f := []policy.Finding{reportFinding("a", "s", policy.RuleReservedForOther, policy.ActionDeny, "10.96.0.10")}
	old := reportObject("a", f, uids, time.Unix(1000, 0), nil)
	again := reportObject("a", f, uids, time.Unix(2000, 0), old)
	if !sameReport(old, again) {
		t.Errorf("the same finding a pass later is a different report:\n%v\n%v", old.Object["results"], again.Object["results"])
	}
	more := reportObject("a", append(f, reportFinding("a", "t", policy.RuleOutsideServiceCIDRs, policy.ActionAudit, "10.97.0.1")), uids, time.Unix(2000, 0), old)
	if sameReport(old, more) {
		t.Error("a new finding did not change the report")
	}
	results, _, _ := unstructured.NestedSlice(more.Object, "results")
	for _, r := range results {
		m := r.(map[string]any)
		ref := m["resources"].([]any)[0].(map[string]any)
		want := map[string]int64{"s": 1000, "t": 2000}[ref["name"].(string)]
		if got := m["timestamp"].(map[string]any)["seconds"]; got != want {
			t.Errorf("result of %s: timestamp %v, want %d", ref["name"], got, want)
		}
		if ref["uid"] != string(uids[policy.Owner{Namespace: "a", Name: ref["name"].(string)}]) {
			t.Errorf("result of %s: uid %v", ref["name"], ref["uid"])
		}
	}
	// The same Service re-created (a new UID) is a new finding.
	uids[policy.Owner{Namespace: "a", Name: "s"}] = "uid-s2"
	if sameReport(old, reportObject("a", f, uids, time.Unix(3000, 0), old)) {
		t.Error("a re-created Service kept its predecessor's result")
	}
}

// deny at admission is a fail (high); warn, audit and the hold that
// is not in place are warn (medium); the message is the Event's note,
// clipped as it is.
func TestReportResultMapsTheAction(t *testing.T) {
	for _, c := range []struct {
		action           policy.Action
		result, severity string
	}{
		{policy.ActionDeny, "fail", "high"},
		{policy.ActionWarn, "warn", "medium"},
		{policy.ActionAudit, "warn", "medium"},
		{"", "warn", "medium"},
	} {
		f := reportFinding("a", "s", policy.RuleReservedForOther, c.action, "10.96.0.10")
		f.Problem = strings.Repeat("x", 5000)
		u := reportObject("a", []policy.Finding{f}, nil, time.Unix(1, 0), nil)
		r := u.Object["results"].([]any)[0].(map[string]any)
		if r["result"] != c.result || r["severity"] != c.severity {
			t.Errorf("action %q: result %v severity %v, want %s %s", c.action, r["result"], r["severity"], c.result, c.severity)
		}
		// An Event's note limit, 1 kB: the clipped text and its marker.
		if msg := r["message"].(string); len(msg) > 1024 || !strings.HasPrefix(msg, "10.96.0.10 xxx") {
			t.Errorf("action %q: message of %d bytes (over 1024?): %.40q", c.action, len(msg), msg)
		}
	}
}

// A report of our name without our label (another tool's, or put there to
// get in the way) is left alone, is no failure, and costs no call on the
// next passes: more such namespaces than the pass's failure budget do not
// keep the other namespaces from their reports. The proof against a real
// apiserver is the e2e TestPeriodicAuditWritesPolicyReports; this one
// counts the calls, which a fake client can.
func TestReportsLeaveAReportInTheWayAlone(t *testing.T) {
	scheme := runtime.NewScheme()
	var objs []runtime.Object
	var findings []policy.Finding
	for i := range maxReportFailures + 2 {
		ns := fmt.Sprintf("squatted-%d", i)
		objs = append(objs, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReport",
			"metadata": map[string]any{"name": ReportName, "namespace": ns},
		}})
		findings = append(findings, reportFinding(ns, "s", policy.RuleReservedForOther, policy.ActionDeny, "10.96.0.10"))
	}
	findings = append(findings, reportFinding("z-real", "s", policy.RuleReservedForOther, policy.ActionDeny, "10.96.0.10"))
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme, map[schema.GroupVersionResource]string{ReportGVR: "PolicyReportList"}, objs...)
	disc := &discoveryfake.FakeDiscovery{Fake: &k8stesting.Fake{Resources: []*metav1.APIResourceList{{
		GroupVersion: ReportGVR.GroupVersion().String(),
		APIResources: []metav1.APIResource{{Name: ReportGVR.Resource, Namespaced: true, Kind: "PolicyReport"}},
	}}}}
	r := NewReports(dyn, disc, logr.Discard(), NewReportMetrics(prometheus.NewRegistry()))
	creates := func() int {
		n := 0
		for _, a := range dyn.Actions() {
			if a.GetVerb() == "create" {
				n++
			}
		}
		return n
	}
	for pass := range 2 {
		if err := r.Sync(context.Background(), findings, nil, time.Unix(int64(1000+pass), 0)); err != nil {
			t.Fatalf("pass %d: %v", pass+1, err)
		}
	}
	real, err := dyn.Resource(ReportGVR).Namespace("z-real").Get(context.Background(), ReportName, metav1.GetOptions{})
	if err != nil || real.GetLabels()[ReportManagedByLabel] != ReportManagedBy {
		t.Fatalf("z-real's report: %v %v", real, err)
	}
	for i := range maxReportFailures + 2 {
		u, err := dyn.Resource(ReportGVR).Namespace(fmt.Sprintf("squatted-%d", i)).Get(context.Background(), ReportName, metav1.GetOptions{})
		if err != nil || len(u.GetLabels()) != 0 || u.Object["results"] != nil {
			t.Errorf("the report in the way in squatted-%d was changed: %v %v", i, u, err)
		}
	}
	if n := creates(); n != maxReportFailures+3 {
		t.Errorf("%d creates over two passes, want %d: one per namespace, none again for those in the way", n, maxReportFailures+3)
	}
}

// A pass's writes stop at maxReportWritesPerPass, failures counted, and
// at maxReportFailures failures: an API that refuses every write costs a
// few calls a pass, not one per namespace. What is not written is
// deferred, and the error names the first write that failed.
func TestReportWritesAreBoundedAPass(t *testing.T) {
	failing := func() error { return errors.New("forbidden") }
	succeeding := func() error { return nil }
	for _, c := range []struct {
		name                             string
		writes                           []func() error
		wantCalls, wantWrites, wantFails int
	}{
		{"refused", slices.Repeat([]func() error{failing}, 10), maxReportFailures, 0, maxReportFailures},
		{"over the cap", slices.Repeat([]func() error{succeeding}, maxReportWritesPerPass+5), maxReportWritesPerPass, maxReportWritesPerPass, 0},
		{"failures count to the cap", append(slices.Repeat([]func() error{succeeding}, maxReportWritesPerPass-1), failing, succeeding), maxReportWritesPerPass, maxReportWritesPerPass - 1, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			failed := prometheus.NewCounter(prometheus.CounterOpts{Name: "failed"})
			w := reportWrites{failed: failed}
			calls := 0
			for i, write := range c.writes {
				w.do(fmt.Sprintf("write %d", i), func() error { calls++; return write() })
			}
			if calls != c.wantCalls || w.writes != c.wantWrites || w.failures.N != c.wantFails || w.deferred != len(c.writes)-c.wantCalls {
				t.Errorf("%d calls, %d written, %d failed, %d deferred; want %d, %d, %d, %d",
					calls, w.writes, w.failures.N, w.deferred, c.wantCalls, c.wantWrites, c.wantFails, len(c.writes)-c.wantCalls)
			}
			if got := testutil.ToFloat64(failed); got != float64(c.wantFails) {
				t.Errorf("the failed counter is %v, want %d", got, c.wantFails)
			}
			if err := w.failures.Err(); (err != nil) != (c.wantFails > 0) || err != nil && !strings.Contains(err.Error(), "write ") {
				t.Errorf("error %v: want one naming the write exactly when a write failed", err)
			}
		})
	}
}
