// Package policystatus is the ClusterIPPolicy status writer: a leader loop
// (as Kyverno's policystatus controller) that collects what the status
// reports from the policy object watcher (internal/policysource, through
// its Observer), the periodic audit, the managed matchConditions and the
// reachability probe (each through the sink its constructor is handed) and,
// on the leader, writes it.
package policystatus

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"clusterip-policy/internal/leader"
	"clusterip-policy/internal/names"
	"clusterip-policy/internal/policysource"
	"clusterip-policy/internal/poll"
	"clusterip-policy/pkg/apis/clusterippolicy/v1alpha1"
	"clusterip-policy/pkg/policy"
)

// The ClusterIPPolicy status has one writer: the replica holding the leader
// Lease. Every replica loads the object and enforces what it loaded, but
// replicas can disagree for a while about what is in force (a rollout that
// changes the loader, a replica whose watch relisted past a generation);
// when each wrote its own view, every write was an update event that made
// the others write theirs back, forever. The leader also runs the periodic
// audit and writes the managed matchConditions, the two other things the
// status reports, so its view is the one worth showing. In CRD mode the
// webhook therefore always takes part in the election (the role
// policy-status, internal/server/features.go), even when no other leader work
// is on.

const (
	// statusRetryInterval bounds how soon a failed status write is tried
	// again when nothing else changes meanwhile.
	statusRetryInterval = 5 * time.Second
	// maxDigestGenerations bounds the digest -> generation memory used to
	// name the generation the audit and the matchConditions worked on.
	maxDigestGenerations = 16
)

// Options say which of the other leader loops run at all, so the status
// does not carry a condition nothing will ever update.
type Options struct {
	// Audit and Conditions: the periodic audit (--audit-interval) and the
	// managed matchConditions (--manage-match-conditions) run.
	Audit, Conditions bool
	// Probe: the leader probes that the apiservers reach the webhook
	// (--arm-failure-policy), so the status carries WebhookReachable.
	Probe bool
	// Backstop: the leader writes the backstop's admission policies
	// (--backstop), so the status carries BackstopInForce.
	Backstop bool
}

// Writer collects what the status reports and, on the leader, writes
// it. Its inputs come from the policy object watcher (Observed), the
// periodic audit (AuditDone), the matchConditions keeper
// (ConditionsInForce, ConditionsWriteFailed) and the arming loop
// (WebhookProbed); each may arrive on any goroutine. It implements
// policysource.Observer, periodicaudit.Reporter, matchconditions.Reporter
// and arming.Reporter, which serve hands their constructors.
type Writer struct {
	client dynamic.Interface
	o      Options
	log    logr.Logger
	now    func() time.Time

	mu        sync.Mutex
	obj       *unstructured.Unstructured // the object last observed
	loadErr   error                      // the loader's answer for obj's generation
	inForce   int64                      // generation in force here; 0: none loaded
	digest    string                     // digest of the policy in force here
	digestGen map[string]int64           // digest -> generation it was loaded at
	audit     *v1alpha1.AuditStatus      // the last audit pass, nil before one
	auditDig  string                     // digest of the policy the audit checked
	condDig   string                     // digest the matchConditions encode, "" while unknown
	condErr   string                     // why the last write of the matchConditions failed, "" if it did not
	probe     *metav1.Condition          // the last reachability probe's condition, nil before one
	backstop  backstopReport             // what the backstop's keeper last reported

	// loop writes on the leader: at once, on every change (kicked), and
	// again after a failed write.
	loop poll.Loop
	// passesStarted and passesDone count the loop's passes, so a test can
	// wait for a pass that saw a change and check what it did.
	passesStarted, passesDone atomic.Int64
}

var _ policysource.Observer = (*Writer)(nil)

// backstopReport is the backstop keeper's last report.
type backstopReport struct {
	// state is "" before any report, else the condition's reason:
	// InForce, Lifted, WriteFailed or CompileFailed.
	state, message string
	digest         string // the policy digest written, for InForce and Lifted
	rules, left    []string
}

// New writes the status of the object client serves, with the conditions
// o turns on.
func New(client dynamic.Interface, o Options, log logr.Logger) *Writer {
	s := &Writer{client: client, o: o, log: log, now: time.Now, digestGen: map[string]int64{}}
	s.loop = poll.Loop{
		Pass: s.pass, Backoff: statusRetryInterval, MaxBackoff: statusRetryInterval,
		Log: log, Failing: "cannot write the ClusterIPPolicy status; the policy itself is in force regardless",
		OnPass: func(error) { s.passesDone.Add(1) },
	}
	return s
}

func (s *Writer) changed() { s.loop.Kick() }

// Observed records the object as last seen and what the loader made of its
// generation (policysource.Observer). inForce and digest describe the
// policy this replica enforces.
func (s *Writer) Observed(u *unstructured.Unstructured, loadErr error, inForce int64, digest string) {
	s.mu.Lock()
	s.obj, s.loadErr, s.inForce = u, loadErr, inForce
	if digest != "" {
		s.digest = digest
		if _, ok := s.digestGen[digest]; !ok && len(s.digestGen) >= maxDigestGenerations {
			clear(s.digestGen) // the old entries name generations long gone
		}
		s.digestGen[digest] = inForce
	}
	s.mu.Unlock()
	s.changed()
}

// AuditDone records a periodic audit pass (periodicaudit.Reporter).
func (s *Writer) AuditDone(at time.Time, policyDigest string, report policy.AuditReport) {
	services := map[policy.Owner]bool{}
	for _, f := range report.Findings {
		if f.Rule != policy.RuleReservationNotHeld { // a missing owner is not a Service breaking the policy
			services[policy.Owner{Namespace: f.Namespace, Name: f.Name}] = true
		}
	}
	findings := map[string]int64{}
	for id, n := range report.CountByRule() {
		findings[string(id)] = int64(n)
	}
	s.mu.Lock()
	s.audit = &v1alpha1.AuditStatus{Time: metav1.NewTime(at.UTC().Truncate(time.Second)), ViolatingServices: int64(len(services)), Findings: findings}
	s.auditDig = policyDigest
	s.mu.Unlock()
	s.changed()
}

// ConditionsInForce records the policy digest the managed matchConditions
// encode once they are in force (matchconditions.Reporter).
func (s *Writer) ConditionsInForce(policyDigest string) {
	s.mu.Lock()
	s.condDig = policyDigest
	s.mu.Unlock()
	s.changed()
}

// ConditionsWriteFailed records why the leader could not write the
// managed matchConditions, "" once it could (matchconditions.Reporter).
func (s *Writer) ConditionsWriteFailed(reason string) {
	s.mu.Lock()
	changed := s.condErr != reason
	s.condErr = reason
	s.mu.Unlock()
	if changed {
		s.changed()
	}
}

// WebhookProbed records the leader's last reachability probe
// (arming.Reporter): whether both Service webhooks answered it, a
// reason and a message that stays the same while nothing changes.
func (s *Writer) WebhookProbed(reachable bool, reason, message string) {
	c := metav1.Condition{Type: v1alpha1.ConditionWebhookReachable, Status: metav1.ConditionFalse, Reason: reason, Message: policy.Clip(message, policy.MaxMessageBytes)}
	if reachable {
		c.Status = metav1.ConditionTrue
	}
	s.mu.Lock()
	changed := s.probe == nil || s.probe.Status != c.Status || s.probe.Reason != c.Reason || s.probe.Message != c.Message
	s.probe = &c
	s.mu.Unlock()
	if changed {
		s.changed()
	}
}

// BackstopInForce records that the backstop's policies and bindings encode
// the policy of digest policyDigest, carrying rules and leaving left to
// the webhook (backstop.Reporter).
func (s *Writer) BackstopInForce(policyDigest string, rules, left []string) {
	s.setBackstop(backstopReport{state: "InForce", digest: policyDigest, rules: rules, left: left})
}

// BackstopLifted records that the bindings are gone on purpose (the
// break-glass deleted them with the webhook configurations), so the
// apiserver enforces nothing of the backstop (backstop.Reporter).
func (s *Writer) BackstopLifted(message string) {
	s.setBackstop(backstopReport{state: "Lifted", message: message})
}

// BackstopFailed records why the leader could not write the backstop:
// reason WriteFailed or CompileFailed (backstop.Reporter).
func (s *Writer) BackstopFailed(reason, message string) {
	s.setBackstop(backstopReport{state: reason, message: message})
}

func (s *Writer) setBackstop(r backstopReport) {
	s.mu.Lock()
	changed := !reflect.DeepEqual(s.backstop, r)
	s.backstop = r
	s.mu.Unlock()
	if changed {
		s.changed()
	}
}

// Work writes the status while this replica leads: at once, then whenever
// an input changes, and again after a failed write. It exposes nothing as
// leader, so it has no reset.
func (s *Writer) Work() leader.Work {
	return leader.Term(s.log, "leading: writing the ClusterIPPolicy status", nil, s.lead)
}

func (s *Writer) lead(ctx context.Context) { s.loop.Run(ctx) }

// pass writes the status if it changed.
func (s *Writer) pass(ctx context.Context) (time.Duration, error) {
	s.passesStarted.Add(1)
	err := s.write(ctx)
	if apierrors.IsConflict(err) {
		// A newer object is on its way to the watcher, which kicks; the
		// retry is for a watch that lapsed.
		s.log.V(1).Info("the ClusterIPPolicy changed while its status was written; the newer one will be written")
		return statusRetryInterval, nil
	}
	return 0, err
}

// desired computes the status for the object last observed, and the
// object; nil while none was observed.
func (s *Writer) desired() (*unstructured.Unstructured, *v1alpha1.ClusterIPPolicyStatus, v1alpha1.ClusterIPPolicyStatus) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.obj == nil {
		return nil, nil, v1alpha1.ClusterIPPolicyStatus{}
	}
	var old v1alpha1.ClusterIPPolicyStatus
	if st, found, _ := unstructured.NestedMap(s.obj.Object, "status"); found {
		if b, err := json.Marshal(st); err == nil {
			_ = json.Unmarshal(b, &old) // a malformed status is rewritten whole
		}
	}
	gen, inForce, digest := s.obj.GetGeneration(), s.inForce, s.digest
	if inForce == 0 {
		// This replica never loaded a good generation (it started while
		// the object was refused): keep what the status already names.
		inForce, digest = old.GenerationInForce, old.PolicyDigest
	}
	next := v1alpha1.ClusterIPPolicyStatus{ObservedGeneration: gen, GenerationInForce: inForce, PolicyDigest: digest}
	next.Conditions = append([]metav1.Condition(nil), old.Conditions...)
	ready := metav1.Condition{Type: v1alpha1.ConditionReady, ObservedGeneration: gen}
	switch {
	case s.loadErr == nil:
		ready.Status, ready.Reason = metav1.ConditionTrue, "Loaded"
		ready.Message = fmt.Sprintf("generation %d is in force (policy digest %s)", gen, digest)
	case inForce > 0:
		ready.Status, ready.Reason = metav1.ConditionFalse, "Refused"
		ready.Message = fmt.Sprintf("generation %d refused: %s; generation %d stays in force", gen, policy.Clip(s.loadErr.Error(), policy.MaxMessageBytes), inForce)
	default:
		ready.Status, ready.Reason = metav1.ConditionFalse, "Refused"
		ready.Message = fmt.Sprintf("generation %d refused: %s; no generation of this object has loaded, so the webhook is not ready", gen, policy.Clip(s.loadErr.Error(), policy.MaxMessageBytes))
	}
	meta.SetStatusCondition(&next.Conditions, ready)

	if s.o.Audit {
		audited := metav1.Condition{Type: v1alpha1.ConditionAudited, ObservedGeneration: gen}
		if s.audit != nil {
			a := *s.audit
			a.PolicyGeneration = s.digestGen[s.auditDig]
			next.Audit = &a
		}
		switch {
		case s.audit == nil || s.auditDig != digest:
			audited.Status, audited.Reason = metav1.ConditionUnknown, "AuditPending"
			audited.Message = fmt.Sprintf("no periodic audit has checked the existing Services against generation %d yet", inForce)
		case s.audit.ViolatingServices > 0:
			audited.Status, audited.Reason = metav1.ConditionFalse, "ViolationsFound"
			audited.Message = fmt.Sprintf("%d existing Services break generation %d of the policy; `clusterip-policy audit` names them, and each has a Warning Event (reason %s)", s.audit.ViolatingServices, inForce, names.AuditEventReason)
		default:
			audited.Status, audited.Reason = metav1.ConditionTrue, "NoViolations"
			audited.Message = fmt.Sprintf("no existing Service breaks generation %d of the policy", inForce)
		}
		meta.SetStatusCondition(&next.Conditions, audited)
	} else {
		meta.RemoveStatusCondition(&next.Conditions, v1alpha1.ConditionAudited)
	}

	if s.o.Conditions {
		mc := metav1.Condition{Type: v1alpha1.ConditionMatchConditionsInForce, ObservedGeneration: gen}
		if s.condDig != "" {
			next.MatchConditions = &v1alpha1.MatchConditionsStatus{Generation: s.digestGen[s.condDig], PolicyDigest: s.condDig}
		}
		switch {
		case s.condErr != "":
			mc.Status, mc.Reason = metav1.ConditionFalse, "WriteFailed"
			mc.Message = "the leader cannot write the managed matchConditions, so the configurations keep the conditions they hold (every create is sent where they hold none): " + s.condErr
		case s.condDig == "":
			mc.Status, mc.Reason = metav1.ConditionUnknown, "Pending"
			mc.Message = "the managed matchConditions have not been reported in force yet"
		case s.condDig != digest:
			mc.Status, mc.Reason = metav1.ConditionFalse, "Lagging"
			mc.Message = fmt.Sprintf("the managed matchConditions encode policy digest %s, not generation %d (digest %s) in force; the requests they skip follow the older policy until the leader writes them", s.condDig, inForce, digest)
		default:
			mc.Status, mc.Reason = metav1.ConditionTrue, "InForce"
			mc.Message = fmt.Sprintf("the managed matchConditions encode generation %d", inForce)
		}
		meta.SetStatusCondition(&next.Conditions, mc)
	} else {
		meta.RemoveStatusCondition(&next.Conditions, v1alpha1.ConditionMatchConditionsInForce)
	}
	if s.o.Probe {
		c := metav1.Condition{Type: v1alpha1.ConditionWebhookReachable, ObservedGeneration: gen, Status: metav1.ConditionUnknown, Reason: "Pending",
			Message: "the leader has not probed yet whether the apiservers reach the webhook"}
		if s.probe != nil {
			c.Status, c.Reason, c.Message = s.probe.Status, s.probe.Reason, s.probe.Message
		}
		meta.SetStatusCondition(&next.Conditions, c)
	} else {
		meta.RemoveStatusCondition(&next.Conditions, v1alpha1.ConditionWebhookReachable)
	}
	if s.o.Backstop {
		meta.SetStatusCondition(&next.Conditions, s.backstopCondition(gen, inForce, digest))
		if b := s.backstop; b.state == "InForce" {
			next.Backstop = &v1alpha1.BackstopStatus{Generation: s.digestGen[b.digest], PolicyDigest: b.digest,
				Rules: clipList(b.rules, 16, 128), Left: clipList(b.left, 16, 512)}
		}
	} else {
		meta.RemoveStatusCondition(&next.Conditions, v1alpha1.ConditionBackstopInForce)
	}
	return s.obj, &old, next
}

// backstopCondition is BackstopInForce for the keeper's last report.
func (s *Writer) backstopCondition(gen, inForce int64, digest string) metav1.Condition {
	c := metav1.Condition{Type: v1alpha1.ConditionBackstopInForce, ObservedGeneration: gen}
	b := s.backstop
	switch {
	case b.state == "":
		c.Status, c.Reason = metav1.ConditionUnknown, "Pending"
		c.Message = "the leader has not written the backstop's admission policies yet"
	case b.state == "InForce" && b.digest != digest:
		c.Status, c.Reason = metav1.ConditionFalse, "Lagging"
		c.Message = fmt.Sprintf("the backstop encodes policy digest %s, not generation %d (digest %s) in force; the leader writes it again", b.digest, inForce, digest)
	case b.state == "InForce":
		c.Status, c.Reason = metav1.ConditionTrue, "InForce"
		c.Message = fmt.Sprintf("the apiserver enforces %d rules of generation %d in-process, with or without the webhook", len(b.rules), inForce)
		if len(b.left) > 0 {
			c.Message += fmt.Sprintf("; %d left to the webhook alone (status.backstop.left)", len(b.left))
		}
	default:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, b.state, policy.Clip(b.message, policy.MaxMessageBytes)
	}
	return c
}

// clipList keeps at most n entries of at most size bytes each, as the
// CRD's schema allows.
func clipList(l []string, n, size int) []string {
	var out []string
	for _, x := range l[:min(len(l), n)] {
		out = append(out, policy.Clip(x, size))
	}
	return out
}

// write updates the status unless it already says the same, so the update
// event it causes does not write again.
func (s *Writer) write(ctx context.Context) error {
	obj, old, next := s.desired()
	if obj == nil || statusEqual(*old, next) {
		return nil
	}
	b, err := json.Marshal(next)
	if err != nil {
		return fmt.Errorf("render the status: %w", err)
	}
	var st map[string]any
	if err := json.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("render the status: %w", err)
	}
	u := obj.DeepCopy()
	u.Object["status"] = st
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = s.client.Resource(policysource.GVR).UpdateStatus(wctx, u, metav1.UpdateOptions{FieldManager: "clusterip-policy-webhook"})
	return err
}

// statusEqual compares two statuses as the apiserver stores them: condition
// times at the second, which is all RFC 3339 in JSON keeps.
func statusEqual(a, b v1alpha1.ClusterIPPolicyStatus) bool {
	norm := func(s v1alpha1.ClusterIPPolicyStatus) v1alpha1.ClusterIPPolicyStatus {
		s.Conditions = append([]metav1.Condition(nil), s.Conditions...)
		for i := range s.Conditions {
			s.Conditions[i].LastTransitionTime = metav1.NewTime(s.Conditions[i].LastTransitionTime.UTC().Truncate(time.Second))
		}
		if len(s.Conditions) == 0 {
			s.Conditions = nil
		}
		if s.Audit != nil {
			a := *s.Audit
			a.Time = metav1.NewTime(a.Time.UTC().Truncate(time.Second))
			if len(a.Findings) == 0 {
				a.Findings = nil
			}
			s.Audit = &a
		}
		return s
	}
	return reflect.DeepEqual(norm(a), norm(b))
}
