package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"clusterip-policy/pkg/matchconditions"
	"clusterip-policy/pkg/policy"
)

// The leader keeps one matchCondition of each Service webhook
// (matchconditions.Name) in step with the policy and the active ranges, so
// the apiservers call the webhook only where its answer can differ from
// "allowed, unchanged" (docs/matchconditions.md). It changes nothing else
// in the two configurations: clientConfig, the caBundle cert-manager
// injects and the static conditions stay as they are. That is why it reads
// each configuration (get) before it writes it back (update): the update
// carries what was read, and a conflict (someone wrote meanwhile) is
// retried on a fresh read.

// The names of the webhook entries the managed condition goes in, as in
// manifests/base/webhook-configurations.yaml.
const (
	mutatingServiceWebhook   = "mutate-services.clusterip-policy.io"
	validatingServiceWebhook = "validate-services.clusterip-policy.io"
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

type matchConditionOptions struct {
	manage     bool
	mutating   string
	validating string
	// settle is how long after a write the leader waits before it reports
	// the new conditions in force: the apiservers load a changed webhook
	// configuration from their own informer (measured on one loaded
	// apiserver: 5-53 ms; docs/matchconditions.md).
	settle time.Duration
}

func (o *matchConditionOptions) validate() error {
	if o.mutating == "" || o.validating == "" {
		return errors.New("--mutating-webhook-configuration and --validating-webhook-configuration must name the configurations (clusterip-policy in manifests/base)")
	}
	if o.settle < 0 || o.settle > time.Minute {
		return fmt.Errorf("--match-conditions-settle %s is outside 0-1m; give the time your apiservers take to load a changed webhook configuration, with a margin (default 1s)", o.settle)
	}
	return nil
}

type conditionMetrics struct {
	synced   prometheus.Gauge
	updates  *prometheus.CounterVec
	prefixes prometheus.Gauge
}

func newConditionMetrics(reg prometheus.Registerer) *conditionMetrics {
	m := &conditionMetrics{
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
	}
	reg.MustRegister(m.synced, m.updates, m.prefixes)
	for _, r := range []string{"updated", "failed"} {
		m.updates.WithLabelValues(r) // served as 0 from the start, so an alert on increase() sees the first failure
	}
	return m
}

// conditionKeeper writes the managed conditions while its replica leads.
type conditionKeeper struct {
	client      kubernetes.Interface
	ready       readiness
	staticCIDRs []netip.Prefix
	o           matchConditionOptions
	log         logr.Logger
	metrics     *conditionMetrics
	// inForce, if set, is told the policy digest each time the written
	// conditions are reported in force (the ClusterIPPolicy status,
	// policystatus.go, says which generation they encode).
	inForce func(policyDigest string)
}

// wanted returns the conditions for the policy and view in force, and
// false while the webhook is not ready (then nothing is written: the
// configurations keep what they have, which was right for an earlier
// policy or is absent).
func (k *conditionKeeper) wanted(now time.Time) (matchconditions.Conditions, *policy.Policy, bool) {
	st, err := k.ready.check(now)
	if err != nil {
		return matchconditions.Conditions{}, nil, false
	}
	env := policy.Env{Policy: st.policy.policy, Snapshot: st.snap, StaticCIDRs: k.staticCIDRs}
	return matchconditions.Compute(env.Policy, env.Ranges()), env.Policy, true
}

// lead keeps the conditions in step until ctx (the leadership) ends.
//
// "In force" is reported (clusterip_policy_match_conditions_synced 1, the
// log line "managed matchConditions in force") only --match-conditions-settle after
// the write that put them there, the time the apiservers take to load a
// changed configuration (docs/matchconditions.md has the figures). Until
// then requests skipped under the previous conditions follow the previous
// policy, which the configurations' annotation still names.
func (k *conditionKeeper) lead(ctx context.Context) {
	k.log.Info("leading: keeping the managed matchConditions", "mutatingWebhookConfiguration", k.o.mutating, "validatingWebhookConfiguration", k.o.validating)
	defer k.metrics.synced.Set(0)
	var written string // conditions digest + policy digest last written (or found in place)
	var verified, retryAt, settledAt time.Time
	reported, absent := false, false
	backoff := conditionsPollInterval
	t := time.NewTicker(conditionsPollInterval)
	defer t.Stop()
	for {
		now := time.Now()
		want, pol, ok := k.wanted(now)
		key := want.Digest
		if ok {
			key += "/" + pol.Digest
		}
		if ok && now.After(retryAt) && (key != written || now.Sub(verified) >= conditionsVerifyInterval) {
			if key != written {
				k.metrics.synced.Set(0)
			}
			changed, err := k.write(ctx, want, pol.Digest)
			switch {
			case err != nil && ctx.Err() == nil:
				k.metrics.synced.Set(0)
				if apierrors.IsNotFound(err) {
					// An install applies the configurations once the pods
					// are ready (docs/deploying.md): not a failure yet.
					// Logged once per absence, polled every second.
					if !absent {
						k.log.Info("waiting for the webhook configurations to exist", "reason", err.Error(), "pollEvery", conditionsAbsentPoll.String())
					}
					absent, written = true, ""
					retryAt = now.Add(conditionsAbsentPoll)
					break
				}
				k.metrics.updates.WithLabelValues("failed").Inc()
				k.log.Error(err, "cannot write the managed matchConditions; the apiservers keep filtering with the conditions the configurations hold", "retryIn", backoff.String())
				retryAt = now.Add(backoff)
				backoff = min(2*backoff, conditionsMaxBackoff)
			case err == nil:
				absent = false
				if changed {
					k.metrics.updates.WithLabelValues("updated").Inc()
					k.log.Info("managed matchConditions written",
						"policyDigest", pol.Digest, "conditionsDigest", want.Digest, "allowListPrefixes", len(want.AllowList),
						"allowListCapped", want.AllowListCapped, "owners", len(want.Owners), "ownersCapped", want.OwnersCapped)
					settledAt, reported = now.Add(k.o.settle), false
				}
				if key != written && !changed {
					// Found in place (a new leader): the previous leader may
					// have written it a moment ago, so it settles too.
					settledAt, reported = now.Add(k.o.settle), false
				}
				written, verified, backoff = key, now, conditionsPollInterval
				k.metrics.prefixes.Set(float64(len(want.AllowList)))
			}
		}
		if !ok && reported {
			// Not ready: the leader cannot tell whether what is written
			// is still right. Nothing is changed (the configurations keep
			// the last conditions); in force is reported again once ready.
			reported = false
			k.metrics.synced.Set(0)
		}
		if ok && key == written && !reported && !now.Before(settledAt) {
			reported = true
			k.metrics.synced.Set(1)
			k.log.Info("managed matchConditions in force: the requests they skip follow this policy", "policyDigest", pol.Digest, "conditionsDigest", want.Digest)
			if k.inForce != nil {
				k.inForce(pol.Digest)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// write puts the conditions into both configurations, validating first.
// The order does not matter for safety: each condition on its own is true
// for every request its webhook would act on under the policy it encodes,
// and the policy annotation says which one that is. It reports whether
// anything was changed.
func (k *conditionKeeper) write(ctx context.Context, c matchconditions.Conditions, policyDigest string) (bool, error) {
	ann := map[string]string{conditionsDigestAnnotation: c.Digest, conditionsPolicyAnnotation: policyDigest}
	v, err := k.updateValidating(ctx, c.Validating, ann)
	if err != nil {
		return false, err
	}
	m, err := k.updateMutating(ctx, c.Mutating, ann)
	return v || m, err
}

// removeManaged takes the managed condition out of both configurations,
// if it is there: run when --manage-match-conditions is off, so a
// condition written while it was on does not stay behind with an
// allow-list nobody updates. Only the static conditions remain.
func (k *conditionKeeper) removeManaged(ctx context.Context) {
	ann := map[string]string{conditionsDigestAnnotation: "", conditionsPolicyAnnotation: ""}
	if _, err := k.updateValidating(ctx, "", ann); err != nil {
		k.logRemoveError(err)
		return
	}
	if _, err := k.updateMutating(ctx, "", ann); err != nil {
		k.logRemoveError(err)
	}
}

func (k *conditionKeeper) logRemoveError(err error) {
	if apierrors.IsForbidden(err) || apierrors.IsNotFound(err) {
		k.log.Info("--manage-match-conditions is off and the webhook configurations cannot be read or written; if it was on before, remove the matchCondition "+matchconditions.Name+" from both (or apply manifests/base/webhook-configurations.yaml with kubectl replace)", "reason", err.Error())
		return
	}
	k.log.Error(err, "--manage-match-conditions is off, but the managed matchCondition could not be removed; remove "+matchconditions.Name+" from both webhook configurations by hand")
}

// leadRemoving is the leader work when management is off.
func (k *conditionKeeper) leadRemoving(ctx context.Context) {
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	k.removeManaged(wctx)
}

// conflictBackoff bounds the retries of one write on conflicts: 6 tries
// within about 0.7 s (20 ms doubling, with jitter).
var conflictBackoff = wait.Backoff{Steps: 6, Duration: 20 * time.Millisecond, Factor: 2, Jitter: 0.2}

func (k *conditionKeeper) updateValidating(ctx context.Context, expr string, ann map[string]string) (bool, error) {
	api := k.client.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	written := false
	err := retry.RetryOnConflict(conflictBackoff, func() error {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		cfg, err := api.Get(rctx, k.o.validating, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("ValidatingWebhookConfiguration %s: %w", k.o.validating, err)
		}
		found, changed := false, false
		for i := range cfg.Webhooks {
			if cfg.Webhooks[i].Name == validatingServiceWebhook {
				found = true
				var ch bool
				if cfg.Webhooks[i].MatchConditions, ch, err = setCondition(cfg.Webhooks[i].MatchConditions, expr); err != nil {
					return fmt.Errorf("ValidatingWebhookConfiguration %s, webhook %s: %w", k.o.validating, validatingServiceWebhook, err)
				}
				changed = changed || ch
			}
		}
		if !found {
			return fmt.Errorf("ValidatingWebhookConfiguration %s has no webhook %s; apply manifests/base/webhook-configurations.yaml or fix --validating-webhook-configuration", k.o.validating, validatingServiceWebhook)
		}
		if annChanged := setAnnotations(&cfg.ObjectMeta, ann); !changed && !annChanged {
			return nil
		}
		_, err = api.Update(rctx, cfg, metav1.UpdateOptions{FieldManager: "clusterip-policy-webhook"})
		written = err == nil
		return err
	})
	return written, err
}

func (k *conditionKeeper) updateMutating(ctx context.Context, expr string, ann map[string]string) (bool, error) {
	api := k.client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	written := false
	err := retry.RetryOnConflict(conflictBackoff, func() error {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		cfg, err := api.Get(rctx, k.o.mutating, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("MutatingWebhookConfiguration %s: %w", k.o.mutating, err)
		}
		found, changed := false, false
		for i := range cfg.Webhooks {
			if cfg.Webhooks[i].Name == mutatingServiceWebhook {
				found = true
				var ch bool
				if cfg.Webhooks[i].MatchConditions, ch, err = setCondition(cfg.Webhooks[i].MatchConditions, expr); err != nil {
					return fmt.Errorf("MutatingWebhookConfiguration %s, webhook %s: %w", k.o.mutating, mutatingServiceWebhook, err)
				}
				changed = changed || ch
			}
		}
		if !found {
			return fmt.Errorf("MutatingWebhookConfiguration %s has no webhook %s; apply manifests/base/webhook-configurations.yaml or fix --mutating-webhook-configuration", k.o.mutating, mutatingServiceWebhook)
		}
		if annChanged := setAnnotations(&cfg.ObjectMeta, ann); !changed && !annChanged {
			return nil
		}
		_, err = api.Update(rctx, cfg, metav1.UpdateOptions{FieldManager: "clusterip-policy-webhook"})
		written = err == nil
		return err
	})
	return written, err
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
