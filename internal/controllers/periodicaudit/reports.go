package periodicaudit

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"

	"clusterip-policy/internal/poll"
	"clusterip-policy/pkg/policy"
)

// The findings as PolicyReports (wgpolicyk8s.io/v1alpha2), the format Policy
// Reporter and Kyverno's reports read by default (docs/design.md, "Policy
// reports"). The API is optional: the leader asks discovery each pass
// whether the apiserver serves it, so a cluster without the CRD gets none
// (and no error), and one that installs it later gets reports from the next
// pass. Written through the dynamic client: the types module is not needed
// for six fields.
const (
	// ReportName is the one report of each namespace that has findings.
	ReportName = "clusterip-policy-audit"
	// ReportManagedByLabel marks the reports as ours: the leader lists,
	// rewrites and deletes only reports that carry it with ReportManagedBy.
	ReportManagedByLabel = "app.kubernetes.io/managed-by"
	ReportManagedBy      = "clusterip-policy"
	// ReportPolicy and ReportSource name the policy and the tool in each
	// result (Policy Reporter's "policy" and "source" filters).
	ReportPolicy = "clusterip-policy"
	ReportSource = "clusterip-policy"
	// ReportOmittedAnnotation counts the findings of a namespace beyond
	// MaxReportResults (its summary still counts them all).
	ReportOmittedAnnotation = "clusterip-policy.io/results-omitted"
	// MaxReportResults bounds one report: 500 results of at most about 1.3
	// kB (the message is clipped as an Event's note) keep it far below
	// etcd's 1.5 MiB object limit. The first 500 by Service name, rule and
	// address are kept.
	MaxReportResults = 500
	// maxReportWritesPerPass bounds the creates, updates and deletes of one
	// pass; the rest wait for the next (reports_total{result="deferred"}).
	maxReportWritesPerPass = 100
	// maxReportFailures ends a pass's writes after that many failures.
	maxReportFailures = 3
	// maxReportListPages bounds the list of our reports (500 a page).
	maxReportListPages = 100
	reportListPage     = 500
)

// ReportGVR is the PolicyReport resource.
var ReportGVR = schema.GroupVersionResource{Group: "wgpolicyk8s.io", Version: "v1alpha2", Resource: "policyreports"}

// ReportMetrics are the reports'.
type ReportMetrics struct {
	writes    *prometheus.CounterVec
	available prometheus.Gauge
}

// NewReportMetrics registers the metrics in reg.
func NewReportMetrics(reg prometheus.Registerer) *ReportMetrics {
	m := &ReportMetrics{
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "clusterip_policy_audit_reports_total",
			Help: "PolicyReports (wgpolicyk8s.io/v1alpha2) the periodic audit wrote, by result (created, updated, deleted: the namespace has no more findings, unchanged, failed, deferred: over the per-pass cap or after repeated failures, written on a later pass).",
		}, []string{"result"}),
		available: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "clusterip_policy_audit_reports_available",
			Help: "1 when the leader's last audit pass found the PolicyReport API (wgpolicyk8s.io/v1alpha2) served and wrote reports; 0 when not served, off, or on replicas that do not lead.",
		}),
	}
	reg.MustRegister(m.writes, m.available)
	for _, r := range []string{"created", "updated", "deleted", "unchanged", "failed", "deferred"} {
		m.writes.WithLabelValues(r)
	}
	return m
}

// Reports writes each pass's findings as one PolicyReport per namespace.
type Reports struct {
	client    dynamic.Interface
	discovery discovery.DiscoveryInterface
	log       logr.Logger
	metrics   *ReportMetrics
	// served is what the last pass found, so the log says when it changes.
	served bool
	// foreign holds the namespaces where a report of our name exists
	// without our label (another tool's, or someone's in the way), and
	// when that was found: the leader leaves it alone and does not try
	// again for foreignRetry, so such reports cost no call a pass and
	// cannot use up the pass's writes or failures that other namespaces'
	// reports need. At most one entry per namespace with findings.
	foreign map[string]time.Time
}

// foreignRetry is how long a namespace whose report name is taken is left
// alone before the leader tries to create its report again.
const foreignRetry = time.Hour

// NewReports writes through client, asking disc whether the API is served.
func NewReports(client dynamic.Interface, disc discovery.DiscoveryInterface, log logr.Logger, m *ReportMetrics) *Reports {
	return &Reports{client: client, discovery: disc, log: log, metrics: m, foreign: map[string]time.Time{}}
}

// serves reports whether the apiserver serves policyreports in
// wgpolicyk8s.io/v1alpha2.
func (r *Reports) serves() (bool, error) {
	list, err := r.discovery.ServerResourcesForGroupVersion(ReportGVR.GroupVersion().String())
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(list.APIResources, func(a metav1.APIResource) bool { return a.Name == ReportGVR.Resource }), nil
}

// stop is the end of a term: the replica no longer writes.
func (r *Reports) stop() {
	r.metrics.available.Set(0)
	r.served = false
	r.foreign = map[string]time.Time{}
}

// Sync makes the reports say what findings say: a report for each
// namespace with findings, none for the others. uids are the audited
// Services' UIDs. Without the API it does nothing.
func (r *Reports) Sync(ctx context.Context, findings []policy.Finding, uids map[policy.Owner]types.UID, now time.Time) error {
	existing, served, err := r.servedReports(ctx)
	if err != nil || !served {
		return err
	}

	byNamespace := map[string][]policy.Finding{}
	for _, f := range findings {
		byNamespace[f.Namespace] = append(byNamespace[f.Namespace], f)
	}
	w := reportWrites{failed: r.metrics.writes.WithLabelValues("failed")}
	var unchanged int
	for ns, at := range r.foreign {
		if _, ok := byNamespace[ns]; !ok || now.Sub(at) >= foreignRetry {
			delete(r.foreign, ns)
		}
	}
	for _, ns := range slices.Sorted(maps.Keys(byNamespace)) {
		old := existing[ns]
		want := reportObject(ns, byNamespace[ns], uids, now, old)
		switch {
		case old == nil:
			if _, taken := r.foreign[ns]; taken {
				continue
			}
			w.do("create PolicyReport "+ns+"/"+ReportName, func() error { return r.createReport(ctx, ns, want, now) })
		case sameReport(old, want):
			unchanged++
			r.metrics.writes.WithLabelValues("unchanged").Inc()
		default:
			want.SetResourceVersion(old.GetResourceVersion())
			w.do("update PolicyReport "+ns+"/"+ReportName, func() error { return r.updateReport(ctx, ns, want) })
		}
	}
	for _, ns := range slices.Sorted(maps.Keys(existing)) {
		if _, ok := byNamespace[ns]; ok {
			continue
		}
		uid := existing[ns].GetUID()
		w.do("delete PolicyReport "+ns+"/"+ReportName, func() error { return r.deleteReport(ctx, ns, uid) })
	}
	r.metrics.writes.WithLabelValues("deferred").Add(float64(w.deferred))
	if w.writes > 0 || w.deferred > 0 || w.failures.N > 0 {
		r.log.Info("policy reports", "namespaces", len(byNamespace), "written", w.writes, "unchanged", unchanged, "deferred", w.deferred, "failed", w.failures.N)
	}
	if err := w.failures.Err(); err != nil {
		return fmt.Errorf("%w; the PolicyReports not written are retried next pass (the audit needs list, create, update and delete on wgpolicyk8s.io policyreports)", err)
	}
	return nil
}

// servedReports asks discovery whether the apiserver serves the API
// (served false: it does not, and the pass writes nothing) and, if it
// does, lists our reports by namespace. It keeps the available gauge, and
// logs when the answer changes.
func (r *Reports) servedReports(ctx context.Context) (existing map[string]*unstructured.Unstructured, served bool, err error) {
	served, err = r.serves()
	if err != nil {
		r.metrics.available.Set(0)
		return nil, false, fmt.Errorf("discovery of %s: %w; the PolicyReports are written when it answers", ReportGVR.GroupVersion(), err)
	}
	if served != r.served {
		if served {
			r.log.Info("the apiserver serves PolicyReports: the periodic audit writes one per namespace with findings", "api", ReportGVR.GroupVersion().String())
		} else {
			r.log.Info("the apiserver no longer serves PolicyReports: the periodic audit writes none until it does", "api", ReportGVR.GroupVersion().String())
		}
		r.served = served
	}
	if !served {
		r.metrics.available.Set(0)
		return nil, false, nil
	}
	existing, err = r.list(ctx)
	if err != nil {
		r.metrics.available.Set(0)
		return nil, false, err
	}
	r.metrics.available.Set(1)
	return existing, true, nil
}

// reportWrites bounds and counts the writes of one pass: at most
// maxReportWritesPerPass, and none after maxReportFailures failures (the
// API refusing them all must not cost a call per namespace); the rest are
// deferred to the next pass.
type reportWrites struct {
	writes, deferred int
	failures         poll.Failures
	failed           prometheus.Counter
}

// do makes one write, what naming it in the error, unless the pass's
// bound is reached.
func (w *reportWrites) do(what string, write func() error) {
	if w.writes+w.failures.N == maxReportWritesPerPass || w.failures.N == maxReportFailures {
		w.deferred++
		return
	}
	if err := write(); err != nil {
		w.failures.Add(fmt.Errorf("%s: %w", what, err))
		w.failed.Inc()
		return
	}
	w.writes++
}

// createReport creates the report of ns. A report of our name in the way
// is not ours (the list found none with our label): it is left alone, not
// a failure that would stop the pass, and ns is not tried again for
// foreignRetry.
func (r *Reports) createReport(ctx context.Context, ns string, want *unstructured.Unstructured, now time.Time) error {
	cctx, cancel := context.WithTimeout(ctx, auditCallTimeout)
	defer cancel()
	_, err := r.client.Resource(ReportGVR).Namespace(ns).Create(cctx, want, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		r.foreign[ns] = now
		r.log.Info("a PolicyReport of our name without our label is in the way; it is left alone, and this namespace gets no report (tried again in an hour)", "namespace", ns, "name", ReportName, "label", ReportManagedByLabel+"="+ReportManagedBy)
		return nil
	}
	if err == nil {
		r.metrics.writes.WithLabelValues("created").Inc()
	}
	return err
}

// updateReport replaces the report of ns with want, which carries the
// resourceVersion listed: a report changed meanwhile is a conflict, for
// the next pass.
func (r *Reports) updateReport(ctx context.Context, ns string, want *unstructured.Unstructured) error {
	cctx, cancel := context.WithTimeout(ctx, auditCallTimeout)
	defer cancel()
	_, err := r.client.Resource(ReportGVR).Namespace(ns).Update(cctx, want, metav1.UpdateOptions{})
	if err == nil {
		r.metrics.writes.WithLabelValues("updated").Inc()
	}
	return err
}

// deleteReport deletes the report of ns, whose namespace has no more
// findings, by UID: a report someone re-created meanwhile is the next
// pass's to judge. One already gone is no failure.
func (r *Reports) deleteReport(ctx context.Context, ns string, uid types.UID) error {
	cctx, cancel := context.WithTimeout(ctx, auditCallTimeout)
	defer cancel()
	err := r.client.Resource(ReportGVR).Namespace(ns).Delete(cctx, ReportName, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if apierrors.IsNotFound(err) {
		err = nil
	}
	if err == nil {
		r.metrics.writes.WithLabelValues("deleted").Inc()
	}
	return err
}

// list returns our reports by namespace: those named ReportName with our
// label. Another report of that name without the label is not ours: the
// create of ours there fails and says so, and it is left alone.
func (r *Reports) list(ctx context.Context) (map[string]*unstructured.Unstructured, error) {
	out := map[string]*unstructured.Unstructured{}
	opts := metav1.ListOptions{LabelSelector: ReportManagedByLabel + "=" + ReportManagedBy, Limit: reportListPage}
	for range maxReportListPages {
		cctx, cancel := context.WithTimeout(ctx, auditPassTimeout)
		page, err := r.client.Resource(ReportGVR).Namespace(metav1.NamespaceAll).List(cctx, opts)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("list PolicyReports labelled %s: %w (the audit needs list on wgpolicyk8s.io policyreports)", opts.LabelSelector, err)
		}
		for i := range page.Items {
			if it := &page.Items[i]; it.GetName() == ReportName {
				out[it.GetNamespace()] = it
			}
		}
		if opts.Continue = page.GetContinue(); opts.Continue == "" {
			return out, nil
		}
	}
	return nil, fmt.Errorf("more than %d PolicyReports labelled %s: not written this pass", maxReportListPages*reportListPage, opts.LabelSelector)
}

// resultKey identifies one result across passes, so a finding keeps the
// timestamp it was first reported at.
func resultKey(ns, name string, uid types.UID, rule policy.RuleID, ip string) string {
	return ns + "\x00" + name + "\x00" + string(uid) + "\x00" + string(rule) + "\x00" + ip
}

// reportObject is the report of one namespace's findings. A finding that
// old reports already keeps its timestamp; a new one gets now.
func reportObject(ns string, findings []policy.Finding, uids map[policy.Owner]types.UID, now time.Time, old *unstructured.Unstructured) *unstructured.Unstructured {
	since := map[string]any{}
	if old != nil {
		oldResults, _, _ := unstructured.NestedSlice(old.Object, "results")
		for _, res := range oldResults {
			m, ok := res.(map[string]any)
			if !ok {
				continue
			}
			refs, _, _ := unstructured.NestedSlice(m, "resources")
			if len(refs) != 1 {
				continue
			}
			ref, _ := refs[0].(map[string]any)
			props, _, _ := unstructured.NestedStringMap(m, "properties")
			name, _ := ref["name"].(string)
			uid, _ := ref["uid"].(string)
			rule, _ := m["rule"].(string)
			if ts, ok := m["timestamp"]; ok {
				since[resultKey(ns, name, types.UID(uid), policy.RuleID(rule), props["ip"])] = ts
			}
		}
	}
	findings = slices.Clone(findings)
	slices.SortFunc(findings, func(a, b policy.Finding) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.Rule, b.Rule), cmp.Compare(a.IP, b.IP))
	})
	var fail, warn int64
	results := make([]any, 0, min(len(findings), MaxReportResults))
	for i, f := range findings {
		result, severity := "warn", "medium"
		if f.Action == policy.ActionDeny {
			// Denied at admission today: the Service could not be created
			// as it is.
			result, severity = "fail", "high"
		}
		if result == "fail" {
			fail++
		} else {
			warn++
		}
		if i >= MaxReportResults {
			continue
		}
		uid := uids[policy.Owner{Namespace: f.Namespace, Name: f.Name}]
		ts, ok := since[resultKey(ns, f.Name, uid, f.Rule, f.IP)]
		if !ok {
			ts = map[string]any{"seconds": now.Unix(), "nanos": int64(0)}
		}
		props := map[string]any{"ip": f.IP, "field": f.Field}
		if f.Action != "" {
			props["action"] = string(f.Action)
		}
		if f.Reserved != "" {
			props["reservedIP"] = f.Reserved
		}
		ref := map[string]any{"apiVersion": "v1", "kind": "Service", "namespace": f.Namespace, "name": f.Name}
		if uid != "" {
			ref["uid"] = string(uid)
		}
		results = append(results, map[string]any{
			"policy":     ReportPolicy,
			"rule":       string(f.Rule),
			"result":     result,
			"severity":   severity,
			"scored":     true,
			"source":     ReportSource,
			"category":   "Service ClusterIP",
			"message":    policy.Clip(auditNote(f), auditEventNoteBytes),
			"timestamp":  ts,
			"resources":  []any{ref},
			"properties": props,
		})
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": ReportGVR.GroupVersion().String(),
		"kind":       "PolicyReport",
		"metadata": map[string]any{
			"name":      ReportName,
			"namespace": ns,
			"labels":    map[string]any{ReportManagedByLabel: ReportManagedBy},
		},
		"summary": map[string]any{"pass": int64(0), "fail": fail, "warn": warn, "error": int64(0), "skip": int64(0)},
		"results": results,
	}}
	if omitted := len(findings) - len(results); omitted > 0 {
		u.SetAnnotations(map[string]string{ReportOmittedAnnotation: strconv.Itoa(omitted)})
	}
	return u
}

// sameReport tells whether old already says what want says: the results
// (timestamps included: want carries old's for the findings it kept), the
// summary, and the omitted count. Compared as JSON, as the apiserver
// returns numbers as int64 and we build them so too.
func sameReport(old, want *unstructured.Unstructured) bool {
	norm := func(u *unstructured.Unstructured) string {
		b, _ := json.Marshal([]any{u.Object["results"], u.Object["summary"], u.GetAnnotations()[ReportOmittedAnnotation], u.GetLabels()[ReportManagedByLabel]})
		return string(b)
	}
	return norm(old) == norm(want)
}
