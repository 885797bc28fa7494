// Package arming is the leader's loop that proves, again and again, that
// the apiservers reach a ready replica through each Service webhook, and
// that arms the webhooks: the manifests register them with failurePolicy
// Ignore, so that no Service create fails while no replica is ready yet
// (an install, a GitOps sync that re-renders them), and the leader sets
// failurePolicy Fail on each Service webhook once its probe was answered
// through it (--arm-failure-policy; docs/design.md, "Arming the
// failurePolicy").
//
// The probe is a server-side dry-run create of a headless Service in
// namespace default carrying the annotation names.ProbeAnnotation with a
// fresh id: every condition of both Service webhooks sends it (it names an
// address, "None", that no allow-list holds), nothing is allocated or
// stored, and the policy allows it unchanged; each webhook that reviews it
// adds names.ProbeWarning(stage, id) to its answer, which the apiserver
// hands back. The warning proves that this apiserver called that webhook
// and a ready replica answered (an unready one denies as not ready).
//
// The loop only ever writes Fail: once armed, an unreachable webhook stays
// fail-closed (the product refuses what it cannot check) and is reported,
// in clusterip_policy_webhook_reachable, the ClusterIPPolicy status and the
// alert ClusterIPPolicyWebhookUnreachable. It changes nothing but the
// failurePolicy of the two Service webhooks (internal/webhookconfig).
package arming

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"clusterip-policy/internal/leader"
	"clusterip-policy/internal/names"
	"clusterip-policy/internal/poll"
	"clusterip-policy/internal/sharedinformers"
	"clusterip-policy/internal/webhookconfig"
)

// The stages, as the webhooks name themselves in the probe's warning and
// as the metrics label them.
const (
	StageMutate   = "mutate"
	StageValidate = "validate"
)

var stages = []string{StageMutate, StageValidate}

const (
	// checkInterval is how often the leader reads the two configurations'
	// failurePolicy: a GitOps sync or kubectl apply that renders Ignore
	// again is seen within it, probed and armed again.
	checkInterval = 2 * time.Second
	// probeTimeout bounds one probe: the apiserver calls the two webhooks
	// in series with their timeoutSeconds of 5 (the mutating one possibly
	// twice), so an unreachable replica is a probe of at most about 15 s.
	probeTimeout = 20 * time.Second
	// jitter spreads the probes over ±20% of the interval.
	jitter = 0.2
)

// Options are the arming's flags.
type Options struct {
	// Arm is --arm-failure-policy.
	Arm bool
	// ProbeInterval is --reachability-probe-interval.
	ProbeInterval time.Duration
	// Configurations are the two webhook configurations, serve's one value
	// (webhookconfig.Names, which checks them).
	Configurations webhookconfig.Names
}

// AddFlags declares the arming's flags, checked by Validate (the
// configurations' names are webhookconfig.Names').
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&o.Arm, "arm-failure-policy", false, "Arm the Service webhooks: the manifests register them with failurePolicy Ignore, so that no Service create fails while no replica is ready (an install, a GitOps sync that renders them again), and the leader sets failurePolicy Fail on each once the apiserver has reached a ready replica through it: a server-side dry-run create of a headless Service in namespace default that both webhooks answer with a warning naming the probe. It repeats every --reachability-probe-interval and reports the result (the ClusterIPPolicy status condition WebhookReachable, clusterip_policy_webhook_reachable, the alert ClusterIPPolicyWebhookUnreachable); once armed, an unreachable webhook stays Fail and is reported. A webhook found at Ignore again is probed and armed within seconds. Needs --audit-interval (what is admitted unchecked while not armed is named by the audit, which runs at once after arming), get and update on the two configurations, and create on services in namespace default (a dry run; manifests/base/rbac.yaml). docs/design.md, \"Arming the failurePolicy\". Off (the default; manifests/base and the chart turn it on): the failurePolicy is the manifests'.")
	fs.DurationVar(&o.ProbeInterval, "reachability-probe-interval", 10*time.Second, "How often the leader probes, with --arm-failure-policy, that the apiservers reach both Service webhooks (±20% jitter; at once while one is not armed). 2s-5m; at 10s the alert ClusterIPPolicyWebhookUnreachable fires within a minute of the webhook becoming unreachable, with 15s scrape and rule intervals.")
}

// Validate checks the flags, naming the flag, the value and the fix.
func (o Options) Validate() error {
	if o.ProbeInterval < 2*time.Second || o.ProbeInterval > 5*time.Minute {
		return fmt.Errorf("--reachability-probe-interval %s is outside 2s-5m; the default 10s lets the alert ClusterIPPolicyWebhookUnreachable fire within a minute of the apiservers losing the webhook", o.ProbeInterval)
	}
	return nil
}

// Metrics are the probe's and the arming's.
type Metrics struct {
	reachable  *prometheus.GaugeVec
	armed      *prometheus.GaugeVec
	registered *prometheus.GaugeVec
	latency    prometheus.Gauge
	probes     *prometheus.CounterVec
	arms       *prometheus.CounterVec
}

// NewMetrics registers the metrics in reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		reachable: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "clusterip_policy_webhook_reachable",
			Help: "On the leader with --arm-failure-policy: 1 if the last reachability probe (a dry-run create the apiserver must send to the webhook) was answered by the Service webhook of this stage, 0 if not; -1 before the first probe, while the stage's webhook configuration does not exist, and on other replicas. The alert ClusterIPPolicyWebhookUnreachable reads it.",
		}, []string{"stage"}),
		armed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "clusterip_policy_webhook_failure_policy_armed",
			Help: "On the leader with --arm-failure-policy: 1 while the Service webhook of this stage has failurePolicy Fail, 0 while it has Ignore (not armed: a create the apiservers cannot send to the webhook is admitted unchecked, and the periodic audit reports it), -1 while unknown and on other replicas.",
		}, []string{"stage"}),
		registered: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "clusterip_policy_webhook_registered",
			Help: "On the leader with --arm-failure-policy: 1 while the webhook configuration of this stage's Service webhook exists, 0 while it does not (deleted: the break-glass, a GitOps prune, an uninstall that stopped halfway; nothing sends Service creates to the webhook), -1 while unknown and on other replicas. The alert ClusterIPPolicyWebhookNotRegistered reads it.",
		}, []string{"stage"}),
		latency: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "clusterip_policy_webhook_probe_duration_seconds",
			Help: "On the leader: how long the last reachability probe took, both webhook calls included (0 on other replicas).",
		}),
		probes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "clusterip_policy_webhook_probes_total",
			Help: "Reachability probes by this replica as leader, by result (reached: both Service webhooks answered; unreached: one or both did not; refused: another admission step refused the dry run before a Service webhook could answer it; failed: the dry run itself failed for another reason, such as RBAC). The alert ClusterIPPolicyReachabilityProbeRefused reads refused.",
		}, []string{"result"}),
		arms: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "clusterip_policy_webhook_arms_total",
			Help: "Writes of failurePolicy Fail by this replica as leader, by stage and result (armed, failed).",
		}, []string{"stage", "result"}),
	}
	reg.MustRegister(m.reachable, m.armed, m.registered, m.latency, m.probes, m.arms)
	m.reset()
	for _, r := range []string{"reached", "unreached", "refused", "failed"} {
		m.probes.WithLabelValues(r)
	}
	for _, s := range stages {
		for _, r := range []string{"armed", "failed"} {
			m.arms.WithLabelValues(s, r)
		}
	}
	return m
}

// reset is what a replica that does not lead exposes: nothing known.
func (m *Metrics) reset() {
	for _, s := range stages {
		m.reachable.WithLabelValues(s).Set(-1)
		m.armed.WithLabelValues(s).Set(-1)
		m.registered.WithLabelValues(s).Set(-1)
	}
	m.latency.Set(0)
}

// Result is one probe's outcome.
type Result struct {
	// Reached says, by stage, whether that Service webhook answered.
	Reached map[string]bool
	// Err is the dry run's own error, if it failed (with the webhook
	// armed and unreachable: "failed calling webhook"); nil if it passed.
	Err error
	// Took is the probe's round trip.
	Took time.Duration
}

// All reports whether both webhooks answered.
func (r Result) All() bool { return r.Reached[StageMutate] && r.Reached[StageValidate] }

// Keeper probes and arms while its replica leads.
type Keeper struct {
	client  kubernetes.Interface
	o       Options
	log     logr.Logger
	metrics *Metrics
	// report, if not nil, is told each probe's outcome.
	report Reporter
	// armed, if not nil, is called after a Service webhook was armed: the
	// periodic audit then runs a pass at once, naming anything admitted
	// unchecked while the webhook was not armed.
	armed func()
}

// Reporter is told each probe's outcome as a status condition (the
// ClusterIPPolicy status, internal/controllers/policystatus): reachable, a
// reason and a message that stays the same while nothing changes. Serve
// hands it to New.
type Reporter interface {
	WebhookProbed(reachable bool, reason, message string)
}

// New probes and arms the configurations o names through client, tells
// report (nil: nobody) each probe's outcome, and calls armed (nil: nothing)
// after it armed a Service webhook. The client's warning handler should
// drop warnings (rest.NoWarnings): the probe reads its warnings from the
// response, and would log two every probe otherwise.
func New(client kubernetes.Interface, o Options, log logr.Logger, m *Metrics, report Reporter, armed func()) *Keeper {
	return &Keeper{client: client, o: o, log: log, metrics: m, report: report, armed: armed}
}

// Work probes (and arms, with o.Arm) while this replica leads; at the
// term's end the gauges say nothing is known here.
func (k *Keeper) Work() leader.Work {
	return leader.Term(k.log, "leading: probing that the apiservers reach the webhook",
		[]any{"armFailurePolicy", k.o.Arm, "probeInterval", k.o.ProbeInterval.String(), "mutatingWebhookConfiguration", k.o.Configurations.Mutating, "validatingWebhookConfiguration", k.o.Configurations.Validating},
		k.lead, k.metrics.reset)
}

// armState is what the configurations say: by stage, whether the Service
// webhook has failurePolicy Fail, and whether it exists at all.
type armState struct {
	armed, present map[string]bool
	err            error // a read that failed for another reason than NotFound
}

// unarmed lists the stages whose webhook exists and is not armed.
func (s armState) unarmed() []string {
	var out []string
	for _, st := range stages {
		if s.present[st] && !s.armed[st] {
			out = append(out, st)
		}
	}
	return out
}

// lead probes every ProbeInterval (jittered), and with arming on reads the
// configurations every checkInterval and probes at once while one is not
// armed, arming each webhook its probe reached.
func (k *Keeper) lead(ctx context.Context) {
	// The term's watch of the configurations: the check every
	// checkInterval reads it, not the API. Without it (a bug of the
	// wiring) every read is a GET, as it says.
	var seen *sharedinformers.WebhookConfigurations
	if k.o.Arm {
		var err error
		if seen, err = sharedinformers.TermConfigurations(ctx, "arming", sharedinformers.FirstList); err != nil {
			k.log.Error(err, "cannot watch the webhook configurations; their failurePolicy is read through the API every check")
		}
	}
	var next time.Time // the next scheduled probe
	var last Result
	lastReport := ""
	pass := func(ctx context.Context) (time.Duration, error) {
		var st armState
		if k.o.Arm {
			st = k.read(ctx, seen)
			k.exposeArmed(st)
		}
		now := time.Now()
		unarmed := st.unarmed()
		var armErrs []error
		if !now.Before(next) || len(unarmed) > 0 {
			last = k.probe(ctx)
			if ctx.Err() != nil {
				return 0, nil
			}
			next = time.Now().Add(Jittered(k.o.ProbeInterval, rand.Float64()))
			k.expose(last, st)
			for _, stage := range unarmed {
				if last.Reached[stage] {
					armErrs = append(armErrs, k.arm(ctx, stage))
				}
			}
			if k.o.Arm && len(unarmed) > 0 {
				// Fresh: the watch may not have brought the write yet.
				st = k.read(ctx, nil)
				k.exposeArmed(st)
			}
			reachable, reason, msg := Condition(last, st, k.o.Arm)
			if key := reason + "\x00" + msg; key != lastReport {
				lastReport = key
				k.logResult(reachable, reason, msg)
			}
			if k.report != nil {
				k.report.WebhookProbed(reachable, reason, msg)
			}
		}
		return 0, errors.Join(armErrs...)
	}
	// The probe's result is logged by the pass, once per change; a failed
	// arming by the loop. Either is tried again at the next check.
	(&poll.Loop{Pass: pass, Resync: checkInterval, Log: k.log,
		Failing: "cannot arm the Service webhook (failurePolicy Fail); it stays Ignore and is retried within seconds"}).Run(ctx)
}

// Jittered is interval spread over ±20% by u, a uniform number in [0, 1).
func Jittered(interval time.Duration, u float64) time.Duration {
	return time.Duration(float64(interval) * (1 - jitter + 2*jitter*u))
}

func (k *Keeper) logResult(reachable bool, reason, msg string) {
	if reachable {
		k.log.Info("reachability probe: "+msg, "reason", reason)
		return
	}
	k.log.Error(errors.New(msg), "reachability probe: the apiserver does not reach the webhook", "reason", reason)
}

// probe sends one dry-run create and reads which webhooks answered it.
func (k *Keeper) probe(ctx context.Context) Result {
	id := newProbeID()
	svc := &corev1.Service{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: names.ProbeGenerateName, Namespace: names.ProbeNamespace,
			Annotations: map[string]string{names.ProbeAnnotation: id},
		},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Name: "probe", Port: 9}}},
	}
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	start := time.Now()
	res := k.client.CoreV1().RESTClient().Post().
		Namespace(names.ProbeNamespace).Resource("services").
		Param("dryRun", metav1.DryRunAll).Param("fieldManager", webhookconfig.FieldManager).
		Body(svc).Do(pctx)
	var texts []string
	for _, w := range res.Warnings() {
		texts = append(texts, w.Text)
	}
	return Evaluate(id, texts, res.Error(), time.Since(start))
}

// Evaluate reads a probe's warnings: a stage answered if its warning for
// this probe's id is among them. The warnings are the apiserver's answer to
// this very request, so an id of an earlier probe never counts.
func Evaluate(id string, warnings []string, err error, took time.Duration) Result {
	r := Result{Reached: map[string]bool{}, Err: err, Took: took}
	for _, s := range stages {
		r.Reached[s] = slices.Contains(warnings, names.ProbeWarning(s, id))
	}
	return r
}

// newProbeID is 16 random lowercase hex digits (names.ValidProbeID).
func newProbeID() string {
	var b [8]byte
	_, _ = crand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (k *Keeper) expose(r Result, st armState) {
	for _, s := range stages {
		v := 0.0
		switch {
		case r.Reached[s]:
			v = 1
		case notRegistered(st, k.o.Arm, s):
			// Nothing to reach (an install that applies the
			// configurations last, an uninstall that deleted them
			// first): not an outage the alert should report.
			v = -1
		case isAdmissionRefusal(r.Err):
			// Refused before this webhook was called: its
			// reachability is unknown, and the alert would name the
			// wrong cause (ClusterIPPolicyReachabilityProbeRefused
			// names this one).
			v = -1
		}
		k.metrics.reachable.WithLabelValues(s).Set(v)
	}
	k.metrics.latency.Set(r.Took.Seconds())
	switch {
	case r.All():
		k.metrics.probes.WithLabelValues("reached").Inc()
	case isAdmissionRefusal(r.Err):
		k.metrics.probes.WithLabelValues("refused").Inc()
	case r.Err != nil && !isWebhookCallFailure(r.Err):
		k.metrics.probes.WithLabelValues("failed").Inc()
	default:
		k.metrics.probes.WithLabelValues("unreached").Inc()
	}
}

// exposeArmed sets, by stage, whether the webhook is armed and whether
// its configuration exists. A read that failed says nothing of either (-1).
func (k *Keeper) exposeArmed(st armState) {
	for _, s := range stages {
		v := -1.0
		switch {
		case st.armed[s]:
			v = 1
		case st.present[s]:
			v = 0
		}
		k.metrics.armed.WithLabelValues(s).Set(v)
		r := -1.0
		switch {
		case st.present[s]:
			r = 1
		case notRegistered(st, k.o.Arm, s):
			r = 0
		}
		k.metrics.registered.WithLabelValues(s).Set(r)
	}
}

// isAdmissionRefusal tells a dry run that an admission step refused (a
// ValidatingAdmissionPolicy, another webhook: its message reads `denied
// request` or `denied the request`) from one that failed otherwise (RBAC,
// a timeout, our webhook not called). The webhooks that did not answer
// then were not tried, so nothing is known of their reachability.
func isAdmissionRefusal(err error) bool {
	if err == nil || isWebhookCallFailure(err) {
		return false
	}
	m := err.Error()
	return strings.Contains(m, "denied the request") || strings.Contains(m, "denied request")
}

// isWebhookCallFailure tells the apiserver's refusal of a request whose
// webhook call failed (failurePolicy Fail) from other failures of the dry
// run: k8s.io/apiserver's webhook errors read `failed calling webhook`.
func isWebhookCallFailure(err error) bool {
	return err != nil && strings.Contains(err.Error(), "failed calling webhook")
}

// Condition is the status condition a probe's result and the
// configurations' state make: whether the webhook is reachable, a reason
// (Reachable, Unreachable, ProbeRefused, ProbeFailed, NotRegistered) and a message naming the webhooks
// and their failurePolicy. The message holds no time or id, so it stays the
// same while nothing changes and the status is not rewritten every probe.
func Condition(r Result, st armState, arm bool) (bool, string, string) {
	policyOf := func(stage string) string {
		switch {
		case !arm:
			return ""
		case st.armed[stage]:
			return " (failurePolicy Fail)"
		case st.present[stage]:
			return " (failurePolicy Ignore: not armed)"
		case st.err != nil:
			return " (failurePolicy unreadable: see the leader's log)"
		default:
			return " (webhook configuration not found)"
		}
	}
	if r.All() {
		msg := "both Service webhooks answered the leader's dry-run probe" + policyOf(StageMutate)
		if policyOf(StageMutate) != policyOf(StageValidate) {
			msg = "both Service webhooks answered the leader's dry-run probe: mutating" + policyOf(StageMutate) + ", validating" + policyOf(StageValidate)
		}
		return true, "Reachable", msg
	}
	if notRegistered(st, arm, StageMutate) && notRegistered(st, arm, StageValidate) {
		return false, "NotRegistered", "the webhook configurations do not exist: nothing sends Service creates to the webhook (an install applies them last; an uninstall deletes them first)"
	}
	var missing []string
	for _, s := range stages {
		if !r.Reached[s] {
			missing = append(missing, webhookName(s)+policyOf(s))
		}
	}
	if isAdmissionRefusal(r.Err) {
		return false, "ProbeRefused", "another admission step refused the leader's dry-run probe before " + strings.Join(missing, " and ") + " could answer it: " + clip(stripIDs(r.Err.Error())) +
			"; not an outage of the webhook, but a webhook the probe does not reach cannot be armed. Let the probe through that step: a dry-run create, by the webhook's service account, of a headless Service named " + names.ProbeGenerateName + "* in namespace " + names.ProbeNamespace + " with the annotation " + names.ProbeAnnotation + " (docs/operations.md, \"The reachability probe is refused\")"
	}
	msg := "the apiserver did not get an answer from " + strings.Join(missing, " and ") + " to the leader's dry-run create of a headless Service in namespace " + names.ProbeNamespace
	reason := "Unreachable"
	switch {
	case r.Err != nil && !isWebhookCallFailure(r.Err):
		reason = "ProbeFailed"
		msg += "; the dry run failed: " + clip(r.Err.Error())
	case r.Err != nil:
		msg += ": " + clip(stripIDs(r.Err.Error())) + "; Service creates the webhook must review fail meanwhile (fail-closed): check the pods, the Service, the caBundle and that the control plane may open the webhook's port (docs/operations.md, \"The apiservers cannot reach the webhook\")"
	default:
		msg += ": the apiserver could not call it (failurePolicy Ignore admits the request), or did not select it (configuration missing, namespace " + names.ProbeNamespace + " excluded); check the pods, the Service, the caBundle and that the control plane may open the webhook's port (docs/operations.md, \"The apiservers cannot reach the webhook\")"
	}
	return false, reason, msg
}

// notRegistered says that the stage's configuration was read as absent.
func notRegistered(st armState, arm bool, stage string) bool {
	return arm && st.err == nil && st.present != nil && !st.present[stage]
}

func webhookName(stage string) string {
	if stage == StageMutate {
		return "the mutating webhook " + names.MutatingServiceWebhook
	}
	return "the validating webhook " + names.ValidatingServiceWebhook
}

// maxErrorBytes bounds the apiserver's error quoted in the message.
const maxErrorBytes = 512

func clip(s string) string {
	if len(s) <= maxErrorBytes {
		return s
	}
	return strings.ToValidUTF8(s[:maxErrorBytes], "") + "..."
}

// stripIDs removes the generated name of the probe Service from an
// apiserver error, so the message is the same from one probe to the next.
func stripIDs(s string) string {
	for {
		i := strings.Index(s, names.ProbeGenerateName)
		if i < 0 {
			return s
		}
		j := i + len(names.ProbeGenerateName)
		for j < len(s) && (s[j] >= 'a' && s[j] <= 'z' || s[j] >= '0' && s[j] <= '9') {
			j++
		}
		s = s[:i] + "clusterip-policy-reachability-probe" + s[j:]
	}
}

// read returns the failurePolicy state of both Service webhooks: as seen
// (the term's watch) shows it when not nil and listed, through the API
// otherwise.
func (k *Keeper) read(ctx context.Context, seen *sharedinformers.WebhookConfigurations) armState {
	st := armState{armed: map[string]bool{}, present: map[string]bool{}}
	look := func(stage string) webhookconfig.Edit {
		return func(_ *metav1.ObjectMeta, entries []webhookconfig.Entry) (bool, error) {
			st.present[stage], st.armed[stage] = true, armedEntries(entries)
			return false, nil
		}
	}
	mc, vc := k.mutating(), k.validating()
	if seen != nil {
		// look changes nothing, so a listed watch answers without a request.
		mc, vc = mc.ReadFrom(seen.Mutating), vc.ReadFrom(seen.Validating)
	}
	_, errM := webhookconfig.Update(ctx, mc, look(StageMutate))
	_, errV := webhookconfig.Update(ctx, vc, look(StageValidate))
	for _, err := range []error{errM, errV} {
		if err != nil && !apierrors.IsNotFound(err) && st.err == nil {
			st.err = err
			k.log.Error(err, "cannot read the webhook configurations' failurePolicy; retrying", "retryIn", checkInterval.String())
		}
	}
	return st
}

// armedEntries reports whether every entry has failurePolicy Fail.
func armedEntries(entries []webhookconfig.Entry) bool {
	for _, e := range entries {
		if *e.FailurePolicy == nil || **e.FailurePolicy != admissionregistrationv1.Fail {
			return false
		}
	}
	return true
}

// arm sets failurePolicy Fail on the stage's Service webhook, nothing else.
// Its error is the loop's to log (once while it lasts: a write RBAC refuses
// is retried every checkInterval).
func (k *Keeper) arm(ctx context.Context, stage string) error {
	setFail := func(_ *metav1.ObjectMeta, entries []webhookconfig.Entry) (bool, error) {
		if armedEntries(entries) {
			return false, nil
		}
		for _, e := range entries {
			fail := admissionregistrationv1.Fail
			*e.FailurePolicy = &fail
		}
		return true, nil
	}
	var err error
	var name string
	if stage == StageMutate {
		_, err = webhookconfig.Update(ctx, k.mutating(), setFail)
		name = k.o.Configurations.Mutating
	} else {
		_, err = webhookconfig.Update(ctx, k.validating(), setFail)
		name = k.o.Configurations.Validating
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		k.metrics.arms.WithLabelValues(stage, "failed").Inc()
		return poll.WithValues(fmt.Errorf("the %s Service webhook of %s: %w", stage, name, err), "stage", stage, "configuration", name)
	}
	k.metrics.arms.WithLabelValues(stage, "armed").Inc()
	k.log.Info("armed: the apiserver reached a ready replica through this Service webhook, so its failurePolicy is now Fail", "stage", stage, "configuration", name)
	if k.armed != nil {
		k.armed()
	}
	return nil
}

func (k *Keeper) validating() webhookconfig.Configuration[*admissionregistrationv1.ValidatingWebhookConfiguration] {
	return webhookconfig.Validating(k.client, k.o.Configurations)
}

func (k *Keeper) mutating() webhookconfig.Configuration[*admissionregistrationv1.MutatingWebhookConfiguration] {
	return webhookconfig.Mutating(k.client, k.o.Configurations)
}
