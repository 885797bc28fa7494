// Package periodicaudit is the leader's audit loop: every --audit-interval
// it runs policy.Audit, the check of `clusterip-policy audit`, on the
// policy in force and the view's snapshot, sets a gauge per rule, and puts
// a Warning Event on each offending Service, so `kubectl describe service`
// shows what breaks the policy. Services are not watched: each pass lists
// them, page by page.
package periodicaudit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"clusterip-policy/internal/clusterread"
	"clusterip-policy/internal/judged"
	"clusterip-policy/internal/leader"
	"clusterip-policy/internal/names"
	"clusterip-policy/internal/poll"
	"clusterip-policy/internal/readiness"
	"clusterip-policy/pkg/policy"
)

const (
	// names.AuditEventReason, auditEventAction and auditReportingController
	// are public API: alerts and `kubectl get events --field-selector` use
	// them.
	auditEventAction         = "Audit"
	auditReportingController = "clusterip-policy"
	// auditEventWindow: the same Service (by UID), rule and address get one
	// Event per window. It is the apiserver's default --event-ttl, so the
	// finding stays on `kubectl describe` while it lasts, and no more often.
	// An Event's name is derived from the finding and the clock hour, so a
	// new leader that creates it again in the same hour finds it exists.
	auditEventWindow = time.Hour
	// maxAuditEventsPerPass bounds the Events of one pass; the rest are
	// counted (events_total{result="deferred"}) and emitted on later passes.
	maxAuditEventsPerPass = 50
	// maxAuditEventFailures ends a pass's Events after that many failed
	// creates (RBAC, an apiserver down): the rest wait for the next pass.
	maxAuditEventFailures = 3
	// auditNotReadyRetry is how soon a pass skipped for an unsynced view
	// is tried again.
	auditNotReadyRetry = time.Second
	// auditPassTimeout bounds the Services list of one pass.
	auditPassTimeout = time.Minute
	// auditCallTimeout bounds each Event create.
	auditCallTimeout = 2 * time.Second
	// auditEventNoteBytes keeps a note within events.k8s.io's 1 kB limit,
	// clipping marker included.
	auditEventNoteBytes = 900
	// maxReportingInstanceBytes is events.k8s.io's limit.
	maxReportingInstanceBytes = 128
)

// Options are the periodic audit's flags.
type Options struct {
	// Interval is --audit-interval; 0 turns the audit off.
	Interval time.Duration
	// Reports is --policy-reports: write the findings as PolicyReports
	// where the apiserver serves them.
	Reports bool
}

// AddFlags declares the periodic audit's flags, checked by Validate.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&o.Interval, "audit-interval", 0, "How often the leader audits the existing Services against the policy (as the audit command does): it lists them, sets clusterip_policy_existing_violations{rule}, and puts a Warning Event (reason "+names.AuditEventReason+") on each offending Service, once per Service, rule and address an hour, at most 50 a pass. 1s-24h; 0 (the default; manifests/base sets 5m) turns it off. Needs list on services and create on events.k8s.io events (manifests/base/rbac.yaml).")
	fs.BoolVar(&o.Reports, "policy-reports", true, "With --audit-interval: also write the audit's findings as wgpolicyk8s.io/v1alpha2 PolicyReports, the format Policy Reporter and Kyverno's reports read: one report "+ReportName+" in each namespace with findings (a result per Service, rule and address, at most "+strconv.Itoa(MaxReportResults)+"), labelled "+ReportManagedByLabel+"="+ReportManagedBy+", deleted once the namespace has none. Only where the apiserver serves that API (the CRD comes with Kyverno or Policy Reporter): the leader asks discovery each pass, so a CRD installed later is used from the next pass, and without it nothing is written and nothing fails. Needs list, create, update and delete on wgpolicyk8s.io policyreports (manifests/base/rbac.yaml). false: never.")
}

// Validate checks the flags, naming the flag, the value and the fix.
func (o Options) Validate() error {
	if o.Interval != 0 && (o.Interval < time.Second || o.Interval > 24*time.Hour) {
		return fmt.Errorf("--audit-interval %s is outside 1s-24h; 0 turns the periodic audit off, the default 5m lists the Services every 5 minutes", o.Interval)
	}
	return nil
}

// Metrics are the periodic audit's.
type Metrics struct {
	violations  *prometheus.GaugeVec
	lastSuccess prometheus.Gauge
	passes      *prometheus.CounterVec
	events      *prometheus.CounterVec
}

// NewMetrics registers the metrics in reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		violations: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "clusterip_policy_existing_violations",
			Help: "Existing Services' addresses that break the policy, by rule, as the leader's last successful periodic audit found them (the findings of `clusterip-policy audit`). Only the leader exposes it.",
		}, []string{"rule"}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "clusterip_policy_audit_last_success_timestamp_seconds",
			Help: "Unix time of the leader's last successful periodic audit; 0 on replicas that are not the leader.",
		}),
		passes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "clusterip_policy_audit_passes_total",
			Help: "Periodic audit passes by result (success, failed: the Services could not be listed, skipped: policy not loaded, view not synced, or the namespaces the webhooks are called for not known yet).",
		}, []string{"result"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "clusterip_policy_audit_events_total",
			Help: "Events of the periodic audit by result (created; existing: already created this hour, by a former leader; failed; deferred: over the per-pass cap or after repeated failures, emitted on a later pass).",
		}, []string{"result"}),
	}
	reg.MustRegister(m.violations, m.lastSuccess, m.passes, m.events)
	for _, r := range []string{"success", "failed", "skipped"} {
		m.passes.WithLabelValues(r)
	}
	for _, r := range []string{"created", "existing", "failed", "deferred"} {
		m.events.WithLabelValues(r)
	}
	return m
}

// eventKey identifies what one Event reports: a re-created Service (a new
// UID) gets its own Event, as `kubectl describe` looks Events up by UID.
type eventKey struct {
	uid             types.UID
	namespace, name string
	rule            policy.RuleID
	ip              string
}

// Audit is the leader's audit loop.
type Audit struct {
	client kubernetes.Interface
	gate   *readiness.Gate
	// skip says which namespaces the webhook is never called for (its own,
	// and those the configurations' namespaceSelector leaves out): their
	// Services were never judged, so they are not audited.
	skip     judged.Source
	interval time.Duration
	instance string // the Events' reportingInstance: this replica's identity
	log      logr.Logger
	metrics  *Metrics
	now      func() time.Time
	// report, if not nil, is told each pass's outcome.
	report Reporter
	// emitted is when each finding last got an Event, pruned after
	// auditEventWindow: at most maxAuditEventsPerPass entries per pass
	// within the window. A new leader starts empty; the Events' names keep
	// it from repeating an Event of the same clock hour.
	emitted map[eventKey]time.Time
	// loop runs the passes; Soon kicks it.
	loop *poll.Loop
	// reports, if not nil, writes each pass's findings as PolicyReports.
	reports *Reports
}

// WriteReports has each pass also write its findings as PolicyReports
// (--policy-reports); call it before Work.
func (a *Audit) WriteReports(r *Reports) {
	a.reports = r
}

// Soon asks the running audit for a pass now rather than at the end of the
// interval: the leader arms the Service webhooks (internal/controllers/
// arming) and what was admitted unchecked before is named at once. It
// never blocks; an ask made while one is pending adds nothing.
func (a *Audit) Soon() { a.loop.Kick() }

// Reporter is told each pass's outcome: the ClusterIPPolicy status
// (internal/controllers/policystatus) says how many existing Services
// break the policy. Serve hands it to New.
type Reporter interface {
	AuditDone(at time.Time, policyDigest string, r policy.AuditReport)
}

// New audits the Services of every namespace skip says is judged, every
// interval, as instance (this replica's identity), and tells report (nil:
// nobody) each pass's outcome.
func New(client kubernetes.Interface, gate *readiness.Gate, skip judged.Source, interval time.Duration, instance string, log logr.Logger, m *Metrics, report Reporter) *Audit {
	a := &Audit{client: client, gate: gate, skip: skip, interval: interval, instance: instance, log: log, metrics: m, report: report, now: time.Now}
	a.loop = &poll.Loop{
		Pass: func(ctx context.Context) (time.Duration, error) {
			err := a.pass(ctx)
			if errors.Is(err, errAuditNotReady) {
				// A new leader may lead before its view is synced: try
				// again soon rather than a whole interval later.
				return min(a.interval, auditNotReadyRetry), nil
			}
			return a.interval, err
		},
		Log: log, Failing: "periodic audit failed; retrying at the next interval", Recovered: "periodic audit passes again",
	}
	return a
}

// Work audits every interval while this replica leads, the first pass at
// once; at the term's end the gauges are cleared: a replica that does not
// lead does not know.
func (a *Audit) Work() leader.Work {
	return leader.Term(a.log, "leading: auditing existing Services", []any{"interval", a.interval.String()}, a.run, func() {
		a.metrics.violations.Reset()
		a.metrics.lastSuccess.Set(0)
		if a.reports != nil {
			a.reports.stop()
		}
	})
}

// run passes at once, then every interval and whenever Soon asks, until
// ctx (the term) ends.
func (a *Audit) run(ctx context.Context) {
	a.emitted = map[eventKey]time.Time{}
	a.loop.Run(ctx)
}

var errAuditNotReady = errors.New("policy not loaded, view of ServiceCIDRs and IPAddresses not synced, or the namespaces the Service webhooks are called for not known yet")

// pass audits the Services once, sets the gauges and emits the Events due.
func (a *Audit) pass(ctx context.Context) error {
	st, err := a.gate.ForLoop(a.now())
	if err != nil {
		a.metrics.passes.WithLabelValues("skipped").Inc()
		return errAuditNotReady
	}
	scope, err := a.skip.Current()
	if err != nil {
		a.metrics.passes.WithLabelValues("skipped").Inc()
		return errAuditNotReady // not known yet (the scope logs why): audit nothing on a guess
	}
	lctx, cancel := context.WithTimeout(ctx, auditPassTimeout)
	all, err := clusterread.Services(lctx, a.client)
	cancel()
	if err != nil {
		a.metrics.passes.WithLabelValues("failed").Inc()
		return err
	}
	services := slices.DeleteFunc(all, func(s *corev1.Service) bool { return scope.Skipped(s.Namespace) })
	report := policy.Audit(st.Env, services)
	counts := report.CountByRule()
	for _, id := range policy.AuditRules {
		a.metrics.violations.WithLabelValues(string(id)).Set(float64(counts[id]))
	}
	now := a.now()
	a.metrics.lastSuccess.Set(float64(now.Unix()))
	a.metrics.passes.WithLabelValues("success").Inc()
	if a.report != nil {
		a.report.AuditDone(now, st.Env.Policy.Digest, report)
	}

	uids := make(map[policy.Owner]types.UID, len(services))
	for _, s := range services {
		uids[policy.Owner{Namespace: s.Namespace, Name: s.Name}] = s.UID
	}
	for k, t := range a.emitted {
		if now.Sub(t) >= auditEventWindow {
			delete(a.emitted, k)
		}
	}
	var created, existing, deferred int
	var failures poll.Failures
	for _, f := range report.Findings {
		k := eventKey{uids[policy.Owner{Namespace: f.Namespace, Name: f.Name}], f.Namespace, f.Name, f.Rule, f.IP}
		if _, done := a.emitted[k]; done {
			continue
		}
		if created+existing+failures.N == maxAuditEventsPerPass || failures.N == maxAuditEventFailures {
			deferred++
			continue
		}
		switch err := a.emit(ctx, k, f, now); {
		case apierrors.IsAlreadyExists(err):
			existing++
		case err != nil:
			failures.Add(fmt.Errorf("create the Event on Service %s/%s: %w", f.Namespace, f.Name, err))
			continue
		default:
			created++
		}
		a.emitted[k] = now
	}
	a.metrics.events.WithLabelValues("created").Add(float64(created))
	a.metrics.events.WithLabelValues("existing").Add(float64(existing))
	a.metrics.events.WithLabelValues("failed").Add(float64(failures.N))
	a.metrics.events.WithLabelValues("deferred").Add(float64(deferred))
	if created > 0 || deferred > 0 || failures.N > 0 {
		a.log.Info("periodic audit", "findings", len(report.Findings), "counts", counts, "eventsCreated", created, "eventsDeferred", deferred, "eventsFailed", failures.N)
	}
	var errs []error
	if err := failures.Err(); err != nil {
		errs = append(errs, fmt.Errorf("%w; the Events not created are retried next pass (the audit needs create on events.k8s.io events)", err))
	}
	if a.reports != nil {
		// After the Events: a report the apiserver refuses or cannot take
		// keeps neither the Events nor the gauges from being current.
		if err := a.reports.Sync(ctx, report.Findings, uids, now); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// emit creates one Warning Event on the Service of f.
func (a *Audit) emit(ctx context.Context, k eventKey, f policy.Finding, now time.Time) error {
	cctx, cancel := context.WithTimeout(ctx, auditCallTimeout)
	defer cancel()
	_, err := a.client.EventsV1().Events(f.Namespace).Create(cctx, auditEvent(k, f, a.instance, now), metav1.CreateOptions{})
	return err
}

// auditEventName is the Service's name and a digest of the finding and the
// clock hour: the same finding gets the same name within the hour, from
// whichever replica leads.
func auditEventName(k eventKey, now time.Time) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%s\x00%s\x00%s\x00%s\x00%s\x00%d", k.uid, k.namespace, k.name, k.rule, k.ip, now.Truncate(auditEventWindow).Unix()))
	return k.name + "." + hex.EncodeToString(sum[:8])
}

// auditEvent is the Event of one finding: type Warning on the Service, its
// note the finding's rule, address, problem and fix.
func auditEvent(k eventKey, f policy.Finding, instance string, now time.Time) *eventsv1.Event {
	uid := k.uid
	return &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Namespace: f.Namespace, Name: auditEventName(k, now)},
		EventTime:           metav1.NewMicroTime(now),
		ReportingController: auditReportingController,
		ReportingInstance:   policy.Clip(instance, maxReportingInstanceBytes-64),
		Action:              auditEventAction,
		Reason:              names.AuditEventReason,
		Type:                corev1.EventTypeWarning,
		Regarding:           corev1.ObjectReference{Kind: "Service", APIVersion: "v1", Namespace: f.Namespace, Name: f.Name, UID: uid},
		Note:                policy.Clip(auditNote(f), auditEventNoteBytes),
	}
}

func auditNote(f policy.Finding) string {
	what := f.IP + " " + f.Problem // the problem of an address starts with its verb: "is reserved for ..."
	if f.Rule == policy.RuleReservationNotHeld {
		what = f.Problem // names the Service and both addresses
	}
	action := ""
	if f.Action != "" {
		action = "; " + string(f.Action) + " at admission"
	}
	return fmt.Sprintf("%s. Rule %s (%s%s). Fix: %s", strings.TrimSuffix(what, "."), f.Rule, f.Field, action, f.Fix)
}
