package periodicaudit

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"clusterip-policy/internal/judged"
	"clusterip-policy/internal/logging"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"clusterip-policy/internal/names"
	"clusterip-policy/internal/readiness/readinesstest"
	"clusterip-policy/pkg/allocview"
	"clusterip-policy/pkg/policy"
	"clusterip-policy/test/fixtures"
)

// newTestAudit is a periodic audit over readinesstest's view (10.96.0.0/16;
// 10.96.0.1 held by default/kubernetes, 10.96.0.40 by team-a/db), with a
// clock the test moves.
func newTestAudit(t *testing.T, client *fake.Clientset, synced bool) (*Audit, *time.Time, *strings.Builder) {
	t.Helper()
	r := readinesstest.New(t, readinesstest.Spec, synced, logr.Discard())
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var log strings.Builder
	a := New(client, r.Gate, judged.Names("clusterip-policy"), time.Minute, "webhook-1", logging.New(&log), NewMetrics(prometheus.NewRegistry()), nil)
	a.now = func() time.Time { return now }
	a.emitted = map[eventKey]time.Time{}
	return a, &now, &log
}

func listEvents(t *testing.T, client *fake.Clientset) map[string]int {
	t.Helper()
	l, err := client.EventsV1().Events("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, e := range l.Items {
		out[e.Regarding.Namespace+"/"+e.Regarding.Name]++
	}
	return out
}

func TestPeriodicAuditSetsAGaugePerRuleAndEmitsEachEventOnce(t *testing.T) {
	client := fake.NewClientset(
		fixtures.StoredService("team-a", "squatter", "10.96.0.10"),          // reserved for kube-system/kube-dns
		fixtures.StoredService("team-a", "outside", "10.200.0.5"),           // in no active range
		fixtures.StoredService("team-a", "db", "10.96.0.40"),                // fine: its IPAddress names it
		fixtures.StoredService("team-b", "twin", "10.96.0.40"),              // the IPAddress names team-a/db
		fixtures.StoredService("kube-system", "kube-dns", "10.96.0.11"),     // the owner, not on its reservation
		fixtures.StoredService("clusterip-policy", "webhook", "10.200.0.9"), // the webhook's own namespace: never reviewed
	)
	a, now, _ := newTestAudit(t, client, true)
	if err := a.pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := map[policy.RuleID]float64{policy.RuleInvalidIP: 0, policy.RuleOutsideServiceCIDRs: 1, policy.RuleReservedForOther: 1,
		policy.RuleAlreadyAllocated: 1, policy.RuleReservationNotHeld: 1}
	for rule, w := range want {
		if v := testutil.ToFloat64(a.metrics.violations.WithLabelValues(string(rule))); v != w {
			t.Errorf("existing_violations{rule=%s} = %v, want %v", rule, v, w)
		}
	}
	if v := testutil.ToFloat64(a.metrics.lastSuccess); v != float64(now.Unix()) {
		t.Errorf("last success = %v, want %v", v, now.Unix())
	}
	wantEvents := map[string]int{"team-a/squatter": 1, "team-a/outside": 1, "team-b/twin": 1, "kube-system/kube-dns": 1}
	if got := listEvents(t, client); fmt.Sprint(got) != fmt.Sprint(wantEvents) {
		t.Fatalf("Events by Service = %v, want %v", got, wantEvents)
	}
	l, _ := client.EventsV1().Events("team-a").List(context.Background(), metav1.ListOptions{})
	for _, e := range l.Items {
		if e.Type != corev1.EventTypeWarning || e.Reason != names.AuditEventReason || e.ReportingController != auditReportingController ||
			e.ReportingInstance != "webhook-1" || e.Action != auditEventAction || e.Regarding.Kind != "Service" || e.Regarding.APIVersion != "v1" ||
			e.Regarding.UID != types.UID("uid-team-a-"+e.Regarding.Name) || e.Namespace != "team-a" || e.EventTime.IsZero() {
			t.Errorf("Event %s: %+v", e.Name, e)
		}
		if e.Regarding.Name == "squatter" && !strings.Contains(e.Note, "10.96.0.10 is reserved for Service kube-system/kube-dns (cluster DNS). Rule reserved-for-other (spec.clusterIP; deny at admission). Fix: delete team-a/squatter") {
			t.Errorf("note of squatter = %q", e.Note)
		}
	}

	// The next passes within the hour: the same findings, no new Events.
	for range 3 {
		*now = now.Add(10 * time.Minute)
		if err := a.pass(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if got := listEvents(t, client); fmt.Sprint(got) != fmt.Sprint(wantEvents) {
		t.Fatalf("after three more passes within the hour: Events = %v, want still %v", got, wantEvents)
	}
	if v := testutil.ToFloat64(a.metrics.events.WithLabelValues("created")); v != 4 {
		t.Errorf("events_total{created} = %v, want 4", v)
	}

	// A Service re-created with the same violation is a new object: its
	// own Event, at once.
	ctx := context.Background()
	if err := client.CoreV1().Services("team-a").Delete(ctx, "outside", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	again := fixtures.StoredService("team-a", "outside", "10.200.0.5")
	again.UID = "uid-recreated"
	if _, err := client.CoreV1().Services("team-a").Create(ctx, again, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	*now = now.Add(time.Minute)
	if err := a.pass(ctx); err != nil {
		t.Fatal(err)
	}
	if got := listEvents(t, client)["team-a/outside"]; got != 2 {
		t.Errorf("Events on the re-created team-a/outside = %d, want 2 (one per UID)", got)
	}

	// After the window (the apiserver's event TTL) the lasting findings
	// are reported again.
	*now = now.Add(auditEventWindow)
	if err := a.pass(ctx); err != nil {
		t.Fatal(err)
	}
	if got := listEvents(t, client); got["team-a/squatter"] != 2 || got["kube-system/kube-dns"] != 2 || got["team-a/outside"] != 3 {
		t.Errorf("Events an hour later = %v, want each finding once more", got)
	}
	if len(a.emitted) != 4 {
		t.Errorf("dedup memory holds %d entries, want 4 (older ones pruned)", len(a.emitted))
	}
}

func TestPeriodicAuditCapsTheEventsOfAPassAndDefersTheRest(t *testing.T) {
	var objs []runtime.Object
	for i := range maxAuditEventsPerPass + 12 {
		objs = append(objs, fixtures.StoredService("team-a", fmt.Sprintf("outside-%03d", i), fmt.Sprintf("10.200.0.%d", i+1)))
	}
	client := fake.NewClientset(objs...)
	a, now, _ := newTestAudit(t, client, true)
	if err := a.pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	if v := testutil.ToFloat64(a.metrics.violations.WithLabelValues(string(policy.RuleOutsideServiceCIDRs))); v != maxAuditEventsPerPass+12 {
		t.Errorf("gauge = %v, want every finding counted (%d)", v, maxAuditEventsPerPass+12)
	}
	if n := len(listEvents(t, client)); n != maxAuditEventsPerPass {
		t.Fatalf("first pass: %d Events, want the cap %d", n, maxAuditEventsPerPass)
	}
	if v := testutil.ToFloat64(a.metrics.events.WithLabelValues("deferred")); v != 12 {
		t.Errorf("events_total{deferred} = %v, want 12", v)
	}
	*now = now.Add(time.Minute)
	if err := a.pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := listEvents(t, client); len(got) != maxAuditEventsPerPass+12 {
		t.Fatalf("second pass: Events on %d Services, want all %d once", len(got), maxAuditEventsPerPass+12)
	}
}

func TestPeriodicAuditFailuresAreBoundedAndRetried(t *testing.T) {
	var objs []runtime.Object
	for i := range 10 {
		objs = append(objs, fixtures.StoredService("team-a", fmt.Sprintf("outside-%d", i), fmt.Sprintf("10.200.0.%d", i+1)))
	}
	client := fake.NewClientset(objs...)
	forbid := true
	client.PrependReactor("create", "events", func(k8stesting.Action) (bool, runtime.Object, error) {
		if forbid {
			return true, nil, apierrors.NewForbidden(corev1.Resource("events"), "", errors.New("RBAC says no"))
		}
		return false, nil, nil
	})
	a, now, _ := newTestAudit(t, client, true)
	err := a.pass(context.Background())
	if err == nil || !strings.Contains(err.Error(), "create the Event on Service team-a/outside-0") || !strings.Contains(err.Error(), "and 2 more failures this pass") || !strings.Contains(err.Error(), "create on events.k8s.io events") {
		t.Fatalf("pass error = %v, want the first failure, the count and the fix", err)
	}
	if f, d := testutil.ToFloat64(a.metrics.events.WithLabelValues("failed")), testutil.ToFloat64(a.metrics.events.WithLabelValues("deferred")); f != maxAuditEventFailures || d != 10-maxAuditEventFailures {
		t.Errorf("events failed %v, deferred %v; want %d, %d", f, d, maxAuditEventFailures, 10-maxAuditEventFailures)
	}
	if v := testutil.ToFloat64(a.metrics.violations.WithLabelValues(string(policy.RuleOutsideServiceCIDRs))); v != 10 {
		t.Errorf("gauge = %v, want 10 although the Events failed", v)
	}
	forbid = false
	*now = now.Add(time.Minute)
	if err := a.pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := len(listEvents(t, client)); n != 10 {
		t.Errorf("after the RBAC was fixed: %d Events, want 10", n)
	}

	// A Services list that fails leaves the gauges and the timestamp of
	// the last success as they were, and counts the failed pass.
	client.PrependReactor("list", "services", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(corev1.Resource("services"), "", errors.New("RBAC says no"))
	})
	last := testutil.ToFloat64(a.metrics.lastSuccess)
	*now = now.Add(time.Minute)
	if err := a.pass(context.Background()); err == nil || !strings.Contains(err.Error(), "the audit needs list on services") {
		t.Fatalf("pass error = %v, want the list failure with its fix", err)
	}
	if v := testutil.ToFloat64(a.metrics.lastSuccess); v != last {
		t.Errorf("last success moved to %v on a failed pass", v)
	}
	if v := testutil.ToFloat64(a.metrics.passes.WithLabelValues("failed")); v != 1 {
		t.Errorf("passes{failed} = %v, want 1", v)
	}
}

func TestPeriodicAuditWaitsForTheViewAndForgetsItsGaugesWhenLeadingEnds(t *testing.T) {
	client := fake.NewClientset(fixtures.StoredService("team-a", "outside", "10.200.0.5"))
	a, _, _ := newTestAudit(t, client, false)
	if err := a.pass(context.Background()); !errors.Is(err, errAuditNotReady) {
		t.Fatalf("pass on an unsynced view: %v, want errAuditNotReady (retried within a second)", err)
	}
	if v := testutil.ToFloat64(a.metrics.passes.WithLabelValues("skipped")); v != 1 || len(listEvents(t, client)) != 0 {
		t.Fatalf("an unsynced view: passes{skipped} = %v, Events %v; want 1 and none", v, listEvents(t, client))
	}
	a2, _, _ := newTestAudit(t, client, true)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a2.Work()(ctx); close(done) }()
	fixtures.Eventually(t, "a successful pass while leading", 30*time.Second, func() bool {
		return testutil.ToFloat64(a2.metrics.passes.WithLabelValues("success")) > 0
	})
	if n := testutil.CollectAndCount(a2.metrics.violations); n != len(policy.AuditRules) {
		t.Fatalf("while leading: %d violation series, want one per rule (%d)", n, len(policy.AuditRules))
	}
	cancel()
	<-done
	if n := testutil.CollectAndCount(a2.metrics.violations); n != 0 {
		t.Errorf("after leading: %d violation series, want none (a replica that does not lead does not know)", n)
	}
	if v := testutil.ToFloat64(a2.metrics.lastSuccess); v != 0 {
		t.Errorf("after leading: last success = %v, want 0", v)
	}
}

func TestAuditEventStaysWithinTheEventsAPILimits(t *testing.T) {
	long := strings.Repeat("x", 5000)
	f := policy.Finding{Namespace: "team-a", Name: strings.Repeat("n", 63), Rule: policy.RuleOutsideServiceCIDRs, Action: policy.Action("deny"),
		Field: "spec.clusterIPs[0]", IP: "10.200.0.5", Problem: policy.Clip(long, policy.MaxMessageBytes), Fix: policy.Clip(long, policy.MaxMessageBytes)}
	e := auditEvent(eventKey{"uid", f.Namespace, f.Name, f.Rule, f.IP}, f, strings.Repeat("i", 300), time.Now())
	if len(e.Note) > 1024 {
		t.Errorf("note is %d bytes, over the 1 kB limit", len(e.Note))
	}
	if !strings.Contains(e.Note, "more bytes)") {
		t.Errorf("a clipped note does not say so: %q", e.Note[len(e.Note)-40:])
	}
	if len(e.ReportingInstance) > maxReportingInstanceBytes {
		t.Errorf("reportingInstance is %d bytes, over %d", len(e.ReportingInstance), maxReportingInstanceBytes)
	}
	if len(e.Name) > 253 {
		t.Errorf("name is %d bytes", len(e.Name))
	}
}

func TestANewLeaderDoesNotRepeatTheEventsOfTheHour(t *testing.T) {
	client := fake.NewClientset(fixtures.StoredService("team-a", "outside", "10.200.0.5"), fixtures.StoredService("team-a", "squatter", "10.96.0.10"))
	first, now, _ := newTestAudit(t, client, true)
	*now = now.Truncate(time.Hour).Add(20 * time.Minute)
	if err := first.pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The leader changes: the new one remembers nothing.
	second, now2, _ := newTestAudit(t, client, true)
	*now2 = now.Add(30 * time.Minute) // the same clock hour
	if err := second.pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := listEvents(t, client); got["team-a/outside"] != 1 || got["team-a/squatter"] != 1 {
		t.Fatalf("after a leader change within the hour: Events = %v, want one each", got)
	}
	if c, e := testutil.ToFloat64(second.metrics.events.WithLabelValues("created")), testutil.ToFloat64(second.metrics.events.WithLabelValues("existing")); c != 0 || e != 2 {
		t.Errorf("new leader: events created %v, existing %v; want 0, 2", c, e)
	}
	// It remembers them now: no create at all on its next pass.
	creates := 0
	client.PrependReactor("create", "events", func(k8stesting.Action) (bool, runtime.Object, error) { creates++; return false, nil, nil })
	*now2 = now2.Add(5 * time.Minute)
	if err := second.pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	if creates != 0 {
		t.Errorf("%d creates on the new leader's next pass, want 0", creates)
	}
	// A lasting finding an hour later: a new Event.
	*now2 = now2.Add(auditEventWindow)
	if err := second.pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := listEvents(t, client); got["team-a/outside"] != 2 {
		t.Errorf("an hour later: Events = %v, want a second one on team-a/outside", got)
	}
}

func TestALeaderWhoseViewIsNotSyncedAuditsAsSoonAsItIs(t *testing.T) {
	client := fake.NewClientset(fixtures.StoredService("team-a", "outside", "10.200.0.5"))
	a, _, _ := newTestAudit(t, client, false)
	a.interval = time.Hour // the next regular pass would be an hour away
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { a.Work()(ctx); close(done) }()
	fixtures.Eventually(t, "a pass skipped on the unsynced view", 30*time.Second, func() bool {
		return testutil.ToFloat64(a.metrics.passes.WithLabelValues("skipped")) > 0
	})
	a.gate.View.Update(func(tx *allocview.Tx) {
		tx.SetServiceCIDR(allocview.ServiceCIDR{Name: "kubernetes", CIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16")}, Ready: true})
		tx.MarkSynced(true)
	})
	synced := time.Now()
	// The retry of a skipped pass is a second away, the interval an hour:
	// a pass within 30s is the retry.
	fixtures.Eventually(t, "a successful pass once the view is synced", 30*time.Second, func() bool {
		return testutil.ToFloat64(a.metrics.passes.WithLabelValues("success")) > 0
	})
	t.Logf("first pass %s after the view was synced", time.Since(synced).Round(time.Millisecond))
	cancel()
	<-done
}

// Soon (called after the leader arms the Service webhooks) makes the
// running audit pass at once instead of at the end of its interval (a
// minute here); asks made before a pass starts are answered by it.
func TestSoonRunsAPassWithoutWaitingForTheInterval(t *testing.T) {
	client := fake.NewClientset(fixtures.StoredService("team-a", "squatter", "10.96.0.10"))
	a, _, _ := newTestAudit(t, client, true)
	passes := func() float64 { return testutil.ToFloat64(a.metrics.passes.WithLabelValues("success")) }
	waitPasses := func(n float64) {
		t.Helper()
		fixtures.Eventually(t, fmt.Sprintf("%v successful passes", n), 30*time.Second, func() bool { return passes() >= n })
	}
	a.Soon()
	a.Soon() // before the loop runs: its first pass answers both
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	waitPasses(1)
	a.Soon()
	waitPasses(2)
	a.Soon()
	waitPasses(3)
}

// A Service in a namespace the webhook is not called for was never judged:
// the audit does not report it. While the scope is not known, the pass is
// skipped.
func TestPeriodicAuditSkipsNamespacesTheWebhookIsNotCalledFor(t *testing.T) {
	client := fake.NewClientset(
		fixtures.StoredService("team-a", "squatter", "10.96.0.10"),   // reserved for kube-system/kube-dns
		fixtures.StoredService("excluded", "squatter", "10.96.0.10"), // the same, where the webhook is not called
	)
	a, _, _ := newTestAudit(t, client, true)
	a.skip = judged.Names("clusterip-policy", "excluded")
	var got []string
	a.report = reportFunc(func(_ time.Time, _ string, r policy.AuditReport) {
		for _, f := range r.Findings {
			got = append(got, f.Namespace+"/"+f.Name)
		}
	})
	if err := a.pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != "team-a/squatter" {
		t.Errorf("findings %v, want team-a/squatter only", got)
	}
	if ev := listEvents(t, client); ev["excluded/squatter"] != 0 || ev["team-a/squatter"] != 1 {
		t.Errorf("Events %v, want one on team-a/squatter and none on excluded/squatter", ev)
	}

	a.skip = notKnown{}
	if err := a.pass(context.Background()); !errors.Is(err, errAuditNotReady) {
		t.Errorf("a pass with the scope not known: %v, want errAuditNotReady", err)
	}
	if v := testutil.ToFloat64(a.metrics.passes.WithLabelValues("skipped")); v != 1 {
		t.Errorf("passes{skipped} = %v, want 1", v)
	}
}

type notKnown struct{}

func (notKnown) Current() (judged.Namespaces, error) { return judged.Namespaces{}, judged.ErrNotKnown }

// reportFunc is a Reporter of one function.
type reportFunc func(at time.Time, policyDigest string, r policy.AuditReport)

func (f reportFunc) AuditDone(at time.Time, policyDigest string, r policy.AuditReport) {
	f(at, policyDigest, r)
}
