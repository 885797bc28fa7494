// Package matchconditions is the leader's loop that keeps one
// matchCondition of each Service webhook
// (matchconditions.Name) in step with the policy and the active ranges, so
// the apiservers call the webhook only where its answer can differ from
// "allowed, unchanged" (docs/matchconditions.md). It changes nothing else
// in the two configurations: clientConfig, the caBundle cert-manager
// injects and the static conditions stay as they are. That is why it reads
// each configuration (get) before it writes it back (update): the update
// carries what was read, and a conflict (someone wrote meanwhile) is
// retried on a fresh read. With management off every replica removes a
// condition left behind (Keeper.KeepRemoved).
package matchconditions

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"clusterip-policy/internal/leader"
	"clusterip-policy/internal/poll"
	"clusterip-policy/internal/readiness"
	"clusterip-policy/internal/sharedinformers"
	"clusterip-policy/internal/webhookconfig"
	"clusterip-policy/pkg/allocview"
	"clusterip-policy/pkg/matchconditions"
	"clusterip-policy/pkg/policy"
)

// The annotations written with the conditions, in the same update: what
// the configuration's managed condition encodes. The policy annotation is the
// digest of the policy (as in the audit log's policyDigest) whose rules
// the apiservers apply to the requests they no longer send.
const (
	conditionsDigestAnnotation = "clusterip-policy.io/match-conditions-digest"
	conditionsPolicyAnnotation = "clusterip-policy.io/match-conditions-policy"
)

const (
	// conditionsPollInterval is how often the leader compares the wanted
	// conditions with those it last wrote: a policy or ServiceCIDR change
	// reaches the configurations within it (plus one write).
	conditionsPollInterval = 200 * time.Millisecond
	// conditionsVerifyInterval is how often it re-reads the configurations
	// even when nothing changed, so that an older condition written back by
	// someone else (a restored backup) does not stay.
	conditionsVerifyInterval = 5 * time.Second
	// conditionsMaxBackoff bounds the wait between failed writes.
	conditionsMaxBackoff = 10 * time.Second
	// conditionsAbsentPoll bounds the wait while the configurations do
	// not exist yet: an install applies them once the pods are ready (and
	// a benchmark or a re-install recreates them), and the conditions
	// should follow within a second, not after a long backoff. One GET a
	// second is nothing to the apiserver.
	conditionsAbsentPoll = time.Second
)

// Options are the managed matchConditions' flags.
type Options struct {
	Manage bool
	// Configurations are the two webhook configurations, serve's one value
	// (webhookconfig.Names).
	Configurations webhookconfig.Names
	// Settle is how long after a write the leader waits before it reports
	// the new conditions in force: the apiservers load a changed webhook
	// configuration from their own informer (measured on one loaded
	// apiserver: 5-53 ms; docs/matchconditions.md).
	Settle time.Duration
}

// AddFlags declares the managed matchConditions' flags, checked by
// Validate (the configurations' names are webhookconfig.Names').
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&o.Manage, "manage-match-conditions", false, "Keep the matchCondition "+matchconditions.Name+" of both Service webhooks in step with the policy and the active ServiceCIDRs, so the apiservers call the webhook only where its answer can differ from \"allowed, unchanged\" (docs/matchconditions.md). One replica, elected with the Lease, writes it; it changes nothing else in the configurations. Needs get and update on the two configurations (manifests/base/rbac.yaml). Off (the default; manifests/base turns it on): the configurations' static conditions are all there is, and the leader removes a managed condition left from when it was on.")
	fs.DurationVar(&o.Settle, "match-conditions-settle", time.Second, "How long after writing the managed matchCondition the leader waits before it reports the policy in force for the requests the condition skips (clusterip_policy_match_conditions_synced, the log line \"managed matchConditions in force\"): the time the apiservers take to load a changed webhook configuration, with a margin (5-53 ms measured on one loaded apiserver). 0-1m.")
}

// Validate checks the flags, naming the flag, the value and the fix.
func (o *Options) Validate() error {
	if o.Settle < 0 || o.Settle > time.Minute {
		return fmt.Errorf("--match-conditions-settle %s is outside 0-1m; give the time your apiservers take to load a changed webhook configuration, with a margin (default 1s)", o.Settle)
	}
	return nil
}

// Metrics are the managed matchConditions'.
type Metrics struct {
	managed       prometheus.Gauge
	synced        prometheus.Gauge
	updates       *prometheus.CounterVec
	prefixes      prometheus.Gauge
	otherMutators prometheus.Gauge
	leftBehind    prometheus.Gauge
}

// NewMetrics registers the metrics in reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		synced: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "clusterip_policy_match_conditions_synced",
			Help: "1 on the leader while both webhook configurations carry the managed matchCondition for the policy and ServiceCIDRs in force; 0 while they lag (a change not yet written, a write failing) and on other replicas.",
		}),
		updates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "clusterip_policy_match_conditions_updates_total",
			Help: "Writes of the managed matchCondition by this replica as leader (result: updated, failed).",
		}, []string{"result"}),
		prefixes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "clusterip_policy_match_conditions_allowlist_prefixes",
			Help: "Prefixes in the validating allow-list last written (0: every create is sent to the validating webhook).",
		}),
		managed: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "clusterip_policy_match_conditions_managed",
			Help: "1 on every replica running with --manage-match-conditions, 0 otherwise: with clusterip_policy_match_conditions_synced it tells an alert that management is on but no leader has the conditions in step.",
		}),
		otherMutators: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "clusterip_policy_match_conditions_other_mutators",
			Help: "On the leader: other mutating webhooks and MutatingAdmissionPolicies that can act on Service creates (-1: they cannot be read, and on other replicas). While not 0, the mutating condition sends every Service create, so the webhook is called and reinvoked.",
		}),
		leftBehind: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "clusterip_policy_match_conditions_left_behind",
			Help: "1 while --manage-match-conditions is off and this replica has not yet confirmed that no managed matchCondition is left in the webhook configurations (a removal failing, RBAC missing); 0 once confirmed, and always with management on.",
		}),
	}
	m.otherMutators.Set(-1)
	reg.MustRegister(m.synced, m.updates, m.prefixes, m.managed, m.otherMutators, m.leftBehind)
	for _, r := range []string{"updated", "failed"} {
		m.updates.WithLabelValues(r) // served as 0 from the start, so an alert on increase() sees the first failure
	}
	return m
}

// Keeper writes the managed conditions while its replica leads, and
// removes them while management is off.
type Keeper struct {
	client   kubernetes.Interface
	gate     *readiness.Gate
	o        Options
	log      logr.Logger
	metrics  *Metrics
	mutators *mutatorWatch
	// report, if not nil, is told when the conditions are in force and
	// why a write failed.
	report Reporter
}

// Reporter is told what became of the leader's writes: the ClusterIPPolicy
// status (internal/controllers/policystatus) says which generation the
// conditions encode, and why they could not be written. Serve hands it to
// New.
type Reporter interface {
	// ConditionsInForce is told the policy digest each time the written
	// conditions are reported in force.
	ConditionsInForce(policyDigest string)
	// ConditionsWriteFailed is told why a write failed (refusal's text),
	// and "" once one succeeds.
	ConditionsWriteFailed(reason string)
}

// New keeps the conditions the gate's policy and view call for in the
// configurations o names, and tells report (nil: nobody) what became of
// its writes.
func New(client kubernetes.Interface, gate *readiness.Gate, o Options, log logr.Logger, m *Metrics, report Reporter) *Keeper {
	if o.Manage {
		m.managed.Set(1)
	}
	return &Keeper{client: client, gate: gate, o: o, log: log, metrics: m, report: report,
		mutators: &mutatorWatch{client: client, ourConfig: o.Configurations.Mutating, log: log}}
}

// wantedConditions is what the leader writes at one moment.
type wantedConditions struct {
	conds matchconditions.Conditions
	// policyDigest is the policy the conditions encode; "" for the
	// fail-safe conditions, which encode none.
	policyDigest string
	// failSafe: the leader is not ready, so it cannot tell what the policy
	// in force allows; the conditions send every create to the webhook.
	failSafe bool
	others   mutatorState
}

func (w wantedConditions) key() string { return w.conds.Digest + "/" + w.policyDigest }

// mutatorSyncWait is how long a new leader waits for its view of the other
// mutating admissions before it writes anything but the fail-safe
// conditions: long enough for the informers' first list, short enough that
// a policy change made meanwhile is not held back for long.
const mutatorSyncWait = 5 * time.Second

// readyHold is how long the leader must have been ready again before it
// replaces the fail-safe conditions by selective ones, so a readiness that
// flaps costs at most a write a second.
const readyHold = time.Second

// wanted returns the conditions to write now. Not ready, the leader cannot
// tell whether what is written still matches the policy the ready
// replicas enforce, so it writes the fail-safe conditions (every create is
// sent, as with the static conditions alone). While other mutating
// admission can set a ClusterIP after ours, or while that cannot be told,
// the mutating condition sends every create (see
// pkg/matchconditions/mutators.go).
func (k *Keeper) wanted(now time.Time) wantedConditions {
	// The conditions encode what a review would answer, so they ask the
	// gate what a review asks: a stale view is not ready here.
	st, err := k.gate.Check(now)
	if err != nil {
		return wantedConditions{conds: matchconditions.Compute(nil, allocview.RangeSet{}), failSafe: true}
	}
	env := st.Env
	w := wantedConditions{conds: matchconditions.Compute(env.Policy, env.Ranges()), policyDigest: env.Policy.Digest, others: k.mutators.state()}
	if !w.others.known || w.others.count > 0 {
		w.conds = w.conds.CallEveryCreate()
	}
	return w
}

// Work keeps the conditions in step while this replica leads; at the
// term's end the gauges say nothing is kept here.
func (k *Keeper) Work() leader.Work {
	return leader.Term(k.log, "leading: keeping the managed matchConditions",
		[]any{"mutatingWebhookConfiguration", k.o.Configurations.Mutating, "validatingWebhookConfiguration", k.o.Configurations.Validating}, k.lead,
		func() { k.metrics.otherMutators.Set(-1) }, func() { k.metrics.synced.Set(0) })
}

// lead keeps the conditions in step until ctx (the leadership) ends: a
// pass every conditionsPollInterval compares the wanted conditions with
// those written, and writes on a change, every conditionsVerifyInterval
// regardless, and after a failed write with backoff.
//
// "In force" is reported (clusterip_policy_match_conditions_synced 1, the
// log line "managed matchConditions in force") only --match-conditions-settle after
// the write that put them there, the time the apiservers take to load a
// changed configuration (docs/matchconditions.md has the figures). Until
// then requests skipped under the previous conditions follow the previous
// policy, which the configurations' annotation still names.
func (k *Keeper) lead(ctx context.Context) {
	go k.mutators.run(ctx)
	t := &leadTerm{start: time.Now(), others: mutatorState{count: -1}}
	// The term's watch of the configurations (the mutators' run starts
	// it): a write whose conditions are there already is then decided
	// without a request. Without it (a bug of the wiring, which the
	// mutators' run logs) every write reads through the API.
	if term, err := sharedinformers.FromContext(ctx); err == nil {
		if w, err := term.WebhookConfigurations("match-conditions"); err == nil {
			t.watched = w
		}
	}
	(&poll.Loop{
		Pass:   func(ctx context.Context) (time.Duration, error) { return 0, k.pass(ctx, t, time.Now()) },
		Resync: conditionsPollInterval, Backoff: conditionsPollInterval, MaxBackoff: conditionsMaxBackoff,
		Log:       k.log,
		Failing:   "cannot write the managed matchConditions; until a write succeeds the apiservers filter with what the configurations hold (failSafe: whether the fail-safe conditions, which send every Service create to the webhook, could be put in place meanwhile)",
		Recovered: "managed matchConditions written again",
	}).Run(ctx)
}

// leadTerm is what the leader knows of the configurations within a term.
type leadTerm struct {
	start time.Time
	// written is the key of the conditions last written or found in place,
	// "" while unknown (after a failure, while absent); verified is when.
	written  string
	verified time.Time
	// settledAt is when the apiservers have loaded what was written;
	// reported says it was reported in force.
	settledAt time.Time
	reported  bool
	// readySince is when the leader became ready (zero while not);
	// failSafeWritten says the fail-safe conditions are in place.
	readySince      time.Time
	failSafeWritten bool
	// absentRetry is when to look again for configurations that did not
	// exist; zero while they do.
	absentRetry time.Time
	others      mutatorState // as last logged
	// watched is the term's watch of the configurations; nil: none.
	watched *sharedinformers.WebhookConfigurations
}

// pass compares the wanted conditions with those written, writes them if
// they differ or are due a verification, and reports them in force once
// settled. Its error is a failed write.
func (k *Keeper) pass(ctx context.Context, t *leadTerm, now time.Time) error {
	want := k.wanted(now)
	switch {
	case want.failSafe:
		t.readySince = time.Time{}
		if t.reported {
			t.reported = false
			k.metrics.synced.Set(0)
		}
	case t.readySince.IsZero():
		t.readySince = now
	}
	k.noteOthers(want.others, &t.others)
	// Hold back a selective write while the leader has just become ready
	// after fail-safe conditions (readyHold), and at the start of a term
	// until the other mutators are known (mutatorSyncWait): what is in
	// place stays meanwhile.
	hold := !want.failSafe && ((t.failSafeWritten && now.Sub(t.readySince) < readyHold) ||
		(!want.others.known && now.Sub(t.start) < mutatorSyncWait))
	key := want.key()
	var err error
	if !hold && !now.Before(t.absentRetry) && (key != t.written || now.Sub(t.verified) >= conditionsVerifyInterval) {
		err = k.put(ctx, t, want, now)
	}
	if !want.failSafe && key == t.written && !t.reported && !now.Before(t.settledAt) {
		t.reported = true
		k.metrics.synced.Set(1)
		k.log.Info("managed matchConditions in force: the requests they skip follow this policy", "policyDigest", want.policyDigest, "conditionsDigest", want.conds.Digest)
		if k.report != nil {
			k.report.ConditionsInForce(want.policyDigest)
		}
	}
	return err
}

// put writes the wanted conditions and notes the outcome in t.
func (k *Keeper) put(ctx context.Context, t *leadTerm, want wantedConditions, now time.Time) error {
	key := want.key()
	if key != t.written {
		k.metrics.synced.Set(0)
	}
	changed, err := k.writeSeen(ctx, t.watched, want.conds, want.policyDigest)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return k.writeFailed(ctx, t, want, err, now)
	}
	t.absentRetry = time.Time{}
	if k.report != nil {
		k.report.ConditionsWriteFailed("")
	}
	t.failSafeWritten = want.failSafe
	if changed {
		k.metrics.updates.WithLabelValues("updated").Inc()
		if want.failSafe {
			k.log.Info("not ready: the managed matchConditions now send every Service create to the webhook until this leader is ready again", "conditionsDigest", want.conds.Digest)
		} else {
			k.log.Info("managed matchConditions written",
				"policyDigest", want.policyDigest, "conditionsDigest", want.conds.Digest, "allowListPrefixes", len(want.conds.AllowList),
				"allowListCapped", want.conds.AllowListCapped, "owners", len(want.conds.Owners), "ownersCapped", want.conds.OwnersCapped,
				"mutatingSendsEveryCreate", want.conds.Mutating == "true")
		}
	}
	if changed || key != t.written {
		// Written now, or found in place by a new leader: the previous
		// leader may have written it a moment ago, so it settles too.
		t.settledAt, t.reported = now.Add(k.o.Settle), false
	}
	t.written, t.verified = key, now
	k.metrics.prefixes.Set(float64(len(want.conds.AllowList)))
	return nil
}

// writeFailed handles a failed write: absent configurations are waited
// for; otherwise the fail-safe conditions are put in place if they can be,
// and the refusal is returned for the loop to log and retry.
func (k *Keeper) writeFailed(ctx context.Context, t *leadTerm, want wantedConditions, err error, now time.Time) error {
	k.metrics.synced.Set(0)
	if apierrors.IsNotFound(err) {
		// An install applies the configurations once the pods are ready
		// (docs/operations.md): not a failure yet. Logged once per
		// absence, polled every second.
		if t.absentRetry.IsZero() {
			k.log.Info("waiting for the webhook configurations to exist", "reason", err.Error(), "pollEvery", conditionsAbsentPoll.String())
		}
		t.absentRetry, t.written = now.Add(conditionsAbsentPoll), ""
		return nil
	}
	k.metrics.updates.WithLabelValues("failed").Inc()
	failSafe := "the failed write was them"
	if !want.failSafe {
		// The conditions in place encode an earlier policy (or half of the
		// new one) and may skip requests the policy in force would deny:
		// send every create meanwhile.
		safe := matchconditions.Compute(nil, allocview.RangeSet{})
		changed, ferr := k.write(ctx, safe, "")
		switch {
		case ferr != nil:
			failSafe = "not written either: " + policy.Clip(ferr.Error(), 256)
		default:
			failSafe = "in place"
			t.failSafeWritten, t.written = true, ""
			if changed {
				k.metrics.updates.WithLabelValues("updated").Inc()
			}
		}
	}
	if k.report != nil {
		k.report.ConditionsWriteFailed(refusal(err))
	}
	return poll.WithValues(errors.New(refusal(err)), "failSafe", failSafe)
}

// refusal says why a write of the conditions failed, in at most about
// 1.3 KiB. An apiserver that refuses an expression quotes all of it (up to
// MaxExpressionBytes) before its reason, so the middle is cut and the
// reason at the end kept. A refusal as invalid (422) names the likely
// cause: a kube-apiserver older than 1.31 compiles new expressions without
// the CEL IP and CIDR libraries the conditions use (pkg/matchconditions
// TestTheOldestApiserverThatAcceptsTheConditions).
func refusal(err error) string {
	s := err.Error()
	if len(s) > 1024 {
		s = strings.ToValidUTF8(s[:300]+fmt.Sprintf(" ...(%d bytes cut)... ", len(s)-1000)+s[len(s)-700:], "")
	}
	if apierrors.IsInvalid(err) {
		s += "; the apiserver refused the expressions: a kube-apiserver older than 1.31 has no isIP, ip or cidr for webhook matchConditions (docs/matchconditions.md, Kubernetes versions): upgrade it or turn --manage-match-conditions off"
	}
	return s
}

// noteOthers logs and exposes a change in the other mutating admissions.
func (k *Keeper) noteOthers(now mutatorState, last *mutatorState) {
	n := now.count
	if !now.known {
		n = -1
	}
	if n == last.count && slices.Equal(now.names, last.names) {
		return
	}
	k.metrics.otherMutators.Set(float64(n))
	switch {
	case !now.known:
		k.log.Info("cannot read the other mutating webhooks and MutatingAdmissionPolicies (yet); the mutating condition sends every Service create meanwhile")
	case n > 0:
		k.log.Info("other mutating admission can act on Service creates after ours; the mutating condition sends every Service create so that the webhook is called and reinvoked", "count", n, "first", now.names)
	default:
		k.log.Info("no other mutating admission acts on Service creates; the mutating condition skips plain creates")
	}
	*last = mutatorState{known: now.known, count: n, names: now.names}
}

// write puts the conditions into both configurations, validating first.
// The order does not matter for safety: each condition on its own is true
// for every request its webhook would act on under the policy it encodes,
// and the policy annotation says which one that is. It reports whether
// anything was changed.
func (k *Keeper) write(ctx context.Context, c matchconditions.Conditions, policyDigest string) (bool, error) {
	return k.writeSeen(ctx, nil, c, policyDigest)
}

// writeSeen is write with seen, when not nil, as the first read of each
// configuration (webhookconfig's ReadFrom): the verification every
// conditionsVerifyInterval then costs no request while the watch shows
// them as wanted.
func (k *Keeper) writeSeen(ctx context.Context, seen *sharedinformers.WebhookConfigurations, c matchconditions.Conditions, policyDigest string) (bool, error) {
	ann := map[string]string{conditionsDigestAnnotation: c.Digest, conditionsPolicyAnnotation: policyDigest}
	vc, mc := k.validating(), k.mutating()
	if seen != nil {
		vc, mc = vc.ReadFrom(seen.Validating), mc.ReadFrom(seen.Mutating)
	}
	v, err := update(ctx, vc, c.Validating, ann)
	if err != nil {
		return false, err
	}
	m, err := update(ctx, mc, c.Mutating, ann)
	return v || m, err
}

// removeManaged takes the managed condition out of both configurations,
// if it is there, and reports whether it changed anything. NotFound (no
// such configuration) counts as done: there is nothing to remove.
func (k *Keeper) removeManaged(ctx context.Context) (bool, error) {
	ann := map[string]string{conditionsDigestAnnotation: "", conditionsPolicyAnnotation: ""}
	v, err := update(ctx, k.validating(), "", ann)
	if err != nil && !apierrors.IsNotFound(err) {
		return v, err
	}
	m, err := update(ctx, k.mutating(), "", ann)
	if err != nil && !apierrors.IsNotFound(err) {
		return v || m, err
	}
	return v || m, nil
}

// removerRecheck is how often a replica with management off checks again
// that no managed condition is in place: one an older replica writes during
// a rollout, or a backup restores, goes within it.
const removerRecheck = time.Minute

// KeepRemoved runs on every replica while --manage-match-conditions is off
// (no Lease needed, so it runs whatever else is on): it removes a managed
// condition left from when management was on, retrying with backoff until
// it succeeds, and checks again every removerRecheck. A condition nobody
// keeps would skip requests under a policy that may since have narrowed;
// clusterip_policy_match_conditions_left_behind is 1 until the removal is
// confirmed, and an alert reads it.
func (k *Keeper) KeepRemoved(ctx context.Context) {
	k.metrics.leftBehind.Set(1)
	(&poll.Loop{
		Pass: func(ctx context.Context) (time.Duration, error) {
			rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			changed, err := k.removeManaged(rctx)
			cancel()
			if err != nil {
				if ctx.Err() == nil {
					k.metrics.leftBehind.Set(1)
				}
				if apierrors.IsForbidden(err) {
					err = fmt.Errorf("%w; the webhook configurations cannot be read or written: if management was on before, remove the matchCondition %s from both (or apply manifests/base/webhook-configurations.yaml with kubectl replace)", err, matchconditions.Name)
				}
				return 0, err
			}
			if changed {
				k.metrics.updates.WithLabelValues("updated").Inc()
				k.log.Info("--manage-match-conditions is off: removed the managed matchCondition " + matchconditions.Name + " left in the webhook configurations; every create they select reaches the webhook again")
			}
			k.metrics.leftBehind.Set(0)
			return 0, nil
		},
		Resync: removerRecheck, Backoff: time.Second, MaxBackoff: removerRecheck,
		Log:     k.log,
		Failing: "--manage-match-conditions is off, but the managed matchCondition could not be removed; retrying (or remove " + matchconditions.Name + " from both webhook configurations by hand)",
	}).Run(ctx)
}

func (k *Keeper) validating() webhookconfig.Configuration[*admissionregistrationv1.ValidatingWebhookConfiguration] {
	return webhookconfig.Validating(k.client, k.o.Configurations)
}

func (k *Keeper) mutating() webhookconfig.Configuration[*admissionregistrationv1.MutatingWebhookConfiguration] {
	return webhookconfig.Mutating(k.client, k.o.Configurations)
}

// update sets the managed condition of c's Service webhook to expr ("":
// removes it) and the annotations to ann, in one update, and reports
// whether it wrote (webhookconfig.Update: nothing else changes).
func update[C any](ctx context.Context, c webhookconfig.Configuration[C], expr string, ann map[string]string) (bool, error) {
	return webhookconfig.Update(ctx, c, func(meta *metav1.ObjectMeta, entries []webhookconfig.Entry) (bool, error) {
		changed := false
		for _, e := range entries {
			conds, ch, err := setCondition(*e.MatchConditions, expr)
			if err != nil {
				return false, err
			}
			*e.MatchConditions = conds
			changed = changed || ch
		}
		annChanged := setAnnotations(meta, ann)
		return changed || annChanged, nil
	})
}

// maxMatchConditions is the apiserver's limit per webhook
// (admissionregistration validation, validateMatchConditions).
const maxMatchConditions = 64

// setCondition sets the condition named matchconditions.Name to expr, or
// removes it when expr is empty, and leaves every other condition as it
// is. It reports whether the list changed.
func setCondition(conds []admissionregistrationv1.MatchCondition, expr string) ([]admissionregistrationv1.MatchCondition, bool, error) {
	for i, c := range conds {
		if c.Name != matchconditions.Name {
			continue
		}
		switch {
		case expr == "":
			return append(conds[:i:i], conds[i+1:]...), true, nil
		case c.Expression == expr:
			return conds, false, nil
		}
		out := append([]admissionregistrationv1.MatchCondition(nil), conds...)
		out[i].Expression = expr
		return out, true, nil
	}
	if expr == "" {
		return conds, false, nil
	}
	if len(conds) >= maxMatchConditions {
		return conds, false, fmt.Errorf("already has %d matchConditions, the apiserver's limit; remove one to make room for %s", len(conds), matchconditions.Name)
	}
	return append(conds, admissionregistrationv1.MatchCondition{Name: matchconditions.Name, Expression: expr}), true, nil
}

// setAnnotations sets ann on m (an empty value removes the key) and
// reports whether m changed.
func setAnnotations(m *metav1.ObjectMeta, ann map[string]string) bool {
	changed := false
	for key, val := range ann {
		old, had := m.Annotations[key]
		switch {
		case val == "" && had:
			delete(m.Annotations, key)
			changed = true
		case val != "" && old != val:
			if m.Annotations == nil {
				m.Annotations = map[string]string{}
			}
			m.Annotations[key] = val
			changed = true
		}
	}
	return changed
}
