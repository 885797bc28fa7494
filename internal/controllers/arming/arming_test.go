package arming

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"clusterip-policy/internal/names"
)

func TestAProbeCountsOnlyItsOwnWarnings(t *testing.T) {
	const id = "00112233aabbccdd"
	tests := []struct {
		name             string
		warnings         []string
		mutate, validate bool
	}{
		{name: "both stages answered", warnings: []string{names.ProbeWarning("mutate", id), "another webhook's warning", names.ProbeWarning("validate", id)}, mutate: true, validate: true},
		{name: "only the mutating webhook answered", warnings: []string{names.ProbeWarning("mutate", id)}, mutate: true},
		{name: "an earlier probe's id does not count", warnings: []string{names.ProbeWarning("mutate", "ffffffffffffffff"), names.ProbeWarning("validate", "ffffffffffffffff")}},
		{name: "a warning that merely contains the text does not count", warnings: []string{"x " + names.ProbeWarning("mutate", id)}},
		{name: "no warnings", warnings: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Evaluate(id, tt.warnings, nil, time.Millisecond)
			if r.Reached[StageMutate] != tt.mutate || r.Reached[StageValidate] != tt.validate {
				t.Fatalf("reached %v, want mutate %v validate %v", r.Reached, tt.mutate, tt.validate)
			}
			if r.All() != (tt.mutate && tt.validate) {
				t.Fatalf("All() = %v", r.All())
			}
		})
	}
}

func TestTheConditionNamesWhatIsUnreachableAndItsFailurePolicy(t *testing.T) {
	armedBoth := armState{armed: map[string]bool{StageMutate: true, StageValidate: true}, present: map[string]bool{StageMutate: true, StageValidate: true}}
	notArmed := armState{armed: map[string]bool{}, present: map[string]bool{StageMutate: true, StageValidate: true}}
	reached := Result{Reached: map[string]bool{StageMutate: true, StageValidate: true}}
	none := Result{Reached: map[string]bool{}}
	callFailed := Result{Reached: map[string]bool{}, Err: errors.New(`Internal error occurred: failed calling webhook "mutate-services.clusterip-policy.io": failed to call webhook: Post "https://127.0.0.1:1/mutate-v1-service?timeout=5s": dial tcp 127.0.0.1:1: connect: connection refused (Service default/clusterip-policy-reachability-probe-x7k2q)`)}
	forbidden := Result{Reached: map[string]bool{}, Err: errors.New(`services is forbidden: User "system:serviceaccount:clusterip-policy:clusterip-policy-webhook" cannot create resource "services" in API group "" in the namespace "default"`)}
	// A ValidatingAdmissionPolicy of the cluster's that wants labels on
	// every Service: the mutating webhook answered, the validating one was
	// never called.
	refusedByPolicy := Result{Reached: map[string]bool{StageMutate: true}, Err: errors.New(`services "clusterip-policy-reachability-probe-x7k2q" is invalid: : ValidatingAdmissionPolicy 'require-team-label' with binding 'require-team-label' denied request: every Service needs the label team`)}
	refusedByWebhook := Result{Reached: map[string]bool{}, Err: errors.New(`admission webhook "validate.kyverno.svc" denied the request: Service default/clusterip-policy-reachability-probe-x7k2q: label team is required`)}
	tests := []struct {
		name      string
		r         Result
		st        armState
		arm       bool
		reachable bool
		reason    string
		contains  []string
	}{
		{name: "reached and armed", r: reached, st: armedBoth, arm: true, reachable: true, reason: "Reachable", contains: []string{"both Service webhooks answered", "(failurePolicy Fail)"}},
		{name: "reached, not armed yet", r: reached, st: notArmed, arm: true, reachable: true, reason: "Reachable", contains: []string{"(failurePolicy Ignore: not armed)"}},
		{name: "armed and unreachable: fail-closed, said so", r: callFailed, st: armedBoth, arm: true, reason: "Unreachable",
			contains: []string{"mutating webhook mutate-services.clusterip-policy.io (failurePolicy Fail) and the validating webhook", "connection refused", "fail meanwhile (fail-closed)", "clusterip-policy-reachability-probe)"}},
		{name: "not armed and unreachable: admitted, said so", r: none, st: notArmed, arm: true, reason: "Unreachable", contains: []string{"(failurePolicy Ignore: not armed)", "failurePolicy Ignore admits the request"}},
		{name: "the probe refused by an admission policy before the validating webhook: the real cause, not unreachable", r: refusedByPolicy, st: notArmed, arm: true, reason: "ProbeRefused",
			contains: []string{"another admission step refused the leader's dry-run probe before the validating webhook validate-services.clusterip-policy.io (failurePolicy Ignore: not armed) could answer it", "ValidatingAdmissionPolicy 'require-team-label'", "cannot be armed", "clusterip-policy.io/reachability-probe"}},
		{name: "the probe refused by another mutating webhook before ours", r: refusedByWebhook, st: notArmed, arm: true, reason: "ProbeRefused",
			contains: []string{"before the mutating webhook mutate-services.clusterip-policy.io (failurePolicy Ignore: not armed) and the validating webhook", `admission webhook "validate.kyverno.svc" denied the request`}},
		{name: "the dry run refused by RBAC", r: forbidden, st: notArmed, arm: true, reason: "ProbeFailed", contains: []string{"the dry run failed: services is forbidden"}},
		{name: "no configuration yet: not an outage", r: none, st: armState{armed: map[string]bool{}, present: map[string]bool{}}, arm: true, reason: "NotRegistered", contains: []string{"the webhook configurations do not exist"}},
		{name: "configurations unreadable: not taken for absent", r: none, st: armState{armed: map[string]bool{}, present: map[string]bool{}, err: errors.New("forbidden")}, arm: true, reason: "Unreachable", contains: []string{"(failurePolicy unreadable: see the leader's log)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reachable, reason, msg := Condition(tt.r, tt.st, tt.arm)
			if reachable != tt.reachable || reason != tt.reason {
				t.Fatalf("got %v/%s, want %v/%s: %s", reachable, reason, tt.reachable, tt.reason, msg)
			}
			for _, c := range tt.contains {
				if !strings.Contains(msg, c) {
					t.Errorf("message %q does not contain %q", msg, c)
				}
			}
			if strings.Contains(msg, "x7k2q") {
				t.Errorf("message %q names the probe's generated name, so it would change every probe", msg)
			}
		})
	}
}

func TestAnApiserverErrorIsClippedInTheCondition(t *testing.T) {
	r := Result{Reached: map[string]bool{}, Err: errors.New(strings.Repeat("x", 100000))}
	_, _, msg := Condition(r, armState{}, true)
	if len(msg) > 1500 {
		t.Fatalf("message of %d bytes", len(msg))
	}
}

func TestProbesAreJitteredWithinTwentyPercent(t *testing.T) {
	for u, want := range map[float64]time.Duration{0: 8 * time.Second, 0.5: 10 * time.Second, 0.999999: 12 * time.Second} {
		if got := Jittered(10*time.Second, u).Round(time.Millisecond); got != want {
			t.Errorf("Jittered(10s, %v) = %s, want %s", u, got, want)
		}
	}
}

func TestAProbeIDIsOneTheWebhookAccepts(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		id := newProbeID()
		if !names.ValidProbeID(id) {
			t.Fatalf("the webhook would not answer probe id %q", id)
		}
		seen[id] = true
	}
	if len(seen) != 100 {
		t.Fatalf("%d distinct ids of 100", len(seen))
	}
}

func TestOptions(t *testing.T) {
	for _, tt := range []struct {
		o    Options
		want string
	}{
		{Options{ProbeInterval: 10 * time.Second}, ""},
		{Options{ProbeInterval: time.Second}, "--reachability-probe-interval 1s is outside 2s-5m"},
		{Options{ProbeInterval: 10 * time.Minute}, "--reachability-probe-interval 10m0s is outside 2s-5m"},
	} {
		err := tt.o.Validate()
		if (err == nil) != (tt.want == "") || (err != nil && !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%+v: %v, want %q", tt.o, err, tt.want)
		}
	}
}

// The gauge the alert reads is 0 only for a webhook that is registered and
// did not answer: -1 while its configuration does not exist (an install
// that applies it last, an uninstall that deleted it first) and after the
// term, so neither fires ClusterIPPolicyWebhookUnreachable.
func TestTheReachableGaugeIsZeroOnlyForARegisteredWebhookThatDidNotAnswer(t *testing.T) {
	reg := prometheus.NewRegistry()
	k := New(nil, Options{Arm: true, ProbeInterval: 10 * time.Second}, logr.Discard(), NewMetrics(reg), nil, nil)
	gauge := func(stage string) float64 { return testutil.ToFloat64(k.metrics.reachable.WithLabelValues(stage)) }
	if gauge(StageMutate) != -1 {
		t.Fatalf("before a probe: %v, want -1", gauge(StageMutate))
	}
	onlyMutating := armState{armed: map[string]bool{}, present: map[string]bool{StageMutate: true}}
	k.expose(Result{Reached: map[string]bool{}}, onlyMutating)
	if gauge(StageMutate) != 0 || gauge(StageValidate) != -1 {
		t.Fatalf("mutating registered and unanswered, validating absent: %v %v, want 0 -1", gauge(StageMutate), gauge(StageValidate))
	}
	k.expose(Result{Reached: map[string]bool{StageMutate: true, StageValidate: true}}, armState{armed: map[string]bool{}, present: map[string]bool{StageMutate: true, StageValidate: true}})
	if gauge(StageMutate) != 1 || gauge(StageValidate) != 1 {
		t.Fatalf("both answered: %v %v", gauge(StageMutate), gauge(StageValidate))
	}
	k.metrics.reset()
	if gauge(StageMutate) != -1 || gauge(StageValidate) != -1 {
		t.Fatal("after the term the gauges must say nothing is known here (-1)")
	}
}

// The webhook's configurations deleted while the leader runs (the
// break-glass, a prune, an uninstall that stopped halfway): the
// reachability gauge stays silent (-1: nothing to reach), so
// clusterip_policy_webhook_registered says it, 0 by stage, for the alert
// ClusterIPPolicyWebhookNotRegistered. A failed read says nothing (-1).
func TestTheRegisteredGaugeIsZeroWhileAConfigurationIsAbsent(t *testing.T) {
	reg := prometheus.NewRegistry()
	k := New(nil, Options{Arm: true, ProbeInterval: 10 * time.Second}, logr.Discard(), NewMetrics(reg), nil, nil)
	gauge := func(stage string) float64 { return testutil.ToFloat64(k.metrics.registered.WithLabelValues(stage)) }
	if gauge(StageMutate) != -1 || gauge(StageValidate) != -1 {
		t.Fatalf("before a read: %v %v, want -1 -1", gauge(StageMutate), gauge(StageValidate))
	}
	k.exposeArmed(armState{armed: map[string]bool{StageMutate: true}, present: map[string]bool{StageMutate: true}})
	if gauge(StageMutate) != 1 || gauge(StageValidate) != 0 {
		t.Fatalf("mutating there, validating deleted: %v %v, want 1 0", gauge(StageMutate), gauge(StageValidate))
	}
	k.exposeArmed(armState{armed: map[string]bool{}, present: map[string]bool{}})
	if gauge(StageMutate) != 0 || gauge(StageValidate) != 0 {
		t.Fatalf("both deleted: %v %v, want 0 0", gauge(StageMutate), gauge(StageValidate))
	}
	k.exposeArmed(armState{armed: map[string]bool{}, present: map[string]bool{}, err: errors.New("the apiserver timed out")})
	if gauge(StageMutate) != -1 || gauge(StageValidate) != -1 {
		t.Fatalf("a failed read: %v %v, want -1 -1", gauge(StageMutate), gauge(StageValidate))
	}
	k.metrics.reset()
	if gauge(StageMutate) != -1 {
		t.Fatal("after the term the gauge must say nothing is known here (-1)")
	}
}

// A probe that another admission step refused says nothing of the
// webhooks it did not reach: their reachability gauge is -1 (so the alert
// ClusterIPPolicyWebhookUnreachable does not name the wrong cause), and the
// probe counts as refused, which ClusterIPPolicyReachabilityProbeRefused
// reads.
func TestARefusedProbeIsNotReportedAsUnreachable(t *testing.T) {
	reg := prometheus.NewRegistry()
	k := New(nil, Options{Arm: true, ProbeInterval: 10 * time.Second}, logr.Discard(), NewMetrics(reg), nil, nil)
	present := armState{armed: map[string]bool{}, present: map[string]bool{StageMutate: true, StageValidate: true}}
	k.expose(Result{Reached: map[string]bool{StageMutate: true}, Err: errors.New(`ValidatingAdmissionPolicy 'require-team-label' with binding 'require-team-label' denied request: every Service needs the label team`)}, present)
	if m, v := testutil.ToFloat64(k.metrics.reachable.WithLabelValues(StageMutate)), testutil.ToFloat64(k.metrics.reachable.WithLabelValues(StageValidate)); m != 1 || v != -1 {
		t.Fatalf("reachable mutate %v validate %v, want 1 -1", m, v)
	}
	if n := testutil.ToFloat64(k.metrics.probes.WithLabelValues("refused")); n != 1 {
		t.Fatalf("refused probes %v, want 1", n)
	}
	// The same probe unanswered with no refusal is an outage: 0.
	k.expose(Result{Reached: map[string]bool{StageMutate: true}}, present)
	if v := testutil.ToFloat64(k.metrics.reachable.WithLabelValues(StageValidate)); v != 0 {
		t.Fatalf("unanswered, not refused: validate %v, want 0", v)
	}
}
