package bench

import (
	"fmt"
	"strings"
	"time"

	"clusterip-policy/test/e2e/framework"
)

// The apiserver metrics a run reads, before and after.
const (
	metricWebhookRequests = "apiserver_admission_webhook_request_total"
	metricWebhookDuration = "apiserver_admission_webhook_admission_duration_seconds"
	// check_total counts only denials and evaluation errors (the
	// dispatcher of k8s.io/apiserver does not count an allow), so the
	// policy's cost per request is read from the admission plugin's own
	// histogram, and that the policy is in force from a denied probe.
	metricVAPChecks      = "apiserver_validating_admission_policy_check_total"
	metricPluginDuration = "apiserver_admission_controller_admission_duration_seconds"
	vapPlugin            = "ValidatingAdmissionPolicy"
	// The MutatingAdmissionPolicy plugin: the backstop's record runs in
	// it, so its time belongs to the backstop's cost beside the VAP's.
	mapPlugin = "MutatingAdmissionPolicy"
	// The two webhook admission plugins' own time per request: matching
	// rules, selectors and matchConditions, and the calls they make. With
	// no call this is what registering a webhook costs a create.
	metricMatchConditions = "apiserver_admission_match_condition_evaluation_seconds"
	// Webhooks not called because a matchCondition was false, per
	// webhook name: exact, so the floors can show that each create was
	// skipped by both Service webhooks.
	metricMatchExclusions = "apiserver_admission_match_condition_exclusions_total"
)

// webhookPlugins are the admission plugins that run webhooks.
var webhookPlugins = []string{"MutatingAdmissionWebhook", "ValidatingAdmissionWebhook"}

// webhookNames are the two Service webhooks of the manifests, in the order
// the apiserver calls them.
var webhookNames = []string{framework.MutatingWebhookName, framework.ValidatingWebhookName}

// Counters are the apiserver's cumulative admission counters at one moment.
type Counters struct {
	AllWebhookRequests float64            // every webhook, every name
	Requests           map[string]float64 // per webhook name
	DurationSum        map[string]float64 // seconds, per webhook name
	DurationCount      map[string]float64
	Exclusions         map[string]float64 // per webhook name, on CREATE
	VAPDenials         float64            // of the benchmark's policy
	// The ValidatingAdmissionPolicy plugin on Service CREATEs, whatever
	// policies exist (with none, it matches nothing).
	VAPPluginSum   float64 // seconds
	VAPPluginCount float64
	// The MutatingAdmissionPolicy plugin on Service CREATEs (seconds).
	MAPPluginSum float64
	// Both webhook plugins on Service CREATEs (seconds), and the
	// matchCondition evaluations the apiserver times (those that skipped
	// a webhook or failed: it does not time a match).
	WebhookPluginSum float64
	MatchCondSum     float64
}

// ParseCounters reads Counters from the Prometheus text of the apiserver's
// /metrics.
func ParseCounters(text string) (Counters, error) {
	c := Counters{Requests: map[string]float64{}, DurationSum: map[string]float64{}, DurationCount: map[string]float64{}, Exclusions: map[string]float64{}}
	var err error
	sum := func(name string, match ...string) float64 {
		if err != nil {
			return 0
		}
		var v float64
		v, err = framework.SumMetric(strings.NewReader(text), name, match...)
		return v
	}
	c.AllWebhookRequests = sum(metricWebhookRequests)
	for _, n := range append(webhookNames[:len(webhookNames):len(webhookNames)], otherMutatorWebhook) {
		label := `name="` + n + `"`
		c.Requests[n] = sum(metricWebhookRequests, label)
		c.DurationSum[n] = sum(metricWebhookDuration+"_sum", label)
		c.DurationCount[n] = sum(metricWebhookDuration+"_count", label)
		c.Exclusions[n] = sum(metricMatchExclusions, label, `operation="CREATE"`)
	}
	c.VAPDenials = sum(metricVAPChecks, `policy="`+vapName+`"`)
	plugin := []string{`name="` + vapPlugin + `"`, `operation="CREATE"`}
	c.VAPPluginSum = sum(metricPluginDuration+"_sum", plugin...)
	c.VAPPluginCount = sum(metricPluginDuration+"_count", plugin...)
	c.MAPPluginSum = sum(metricPluginDuration+"_sum", `name="`+mapPlugin+`"`, `operation="CREATE"`)
	for _, p := range webhookPlugins {
		c.WebhookPluginSum += sum(metricPluginDuration+"_sum", `name="`+p+`"`, `operation="CREATE"`)
	}
	c.MatchCondSum = sum(metricMatchConditions+"_sum", `operation="CREATE"`)
	if err != nil {
		return c, fmt.Errorf("apiserver metrics: %w", err)
	}
	return c, nil
}

// Snapshot is what a run reads before and after: the apiserver's counters
// and the CPU time of the processes it measures.
type Snapshot struct {
	At       time.Time
	Counters Counters
	CPU      map[string]time.Duration // by process: apiserver, nop, ours
	// CPUAfterScrape is CPU again after reading the apiserver's /metrics,
	// which costs the apiserver CPU itself: a run counts from here, so
	// neither its own scrapes nor the probes' are in its figures.
	CPUAfterScrape map[string]time.Duration
}

// Delta is what happened between two snapshots.
type Delta struct {
	Elapsed            time.Duration
	AllWebhookRequests float64
	Requests           map[string]float64
	DurationSum        map[string]float64
	DurationCount      map[string]float64
	Exclusions         map[string]float64
	VAPDenials         float64
	VAPPluginSum       float64
	VAPPluginCount     float64
	MAPPluginSum       float64
	WebhookPluginSum   float64
	MatchCondSum       float64
	CPU                map[string]time.Duration
}

// Sub is s minus before.
func (s Snapshot) Sub(before Snapshot) Delta {
	d := Delta{
		Elapsed:            s.At.Sub(before.At),
		AllWebhookRequests: s.Counters.AllWebhookRequests - before.Counters.AllWebhookRequests,
		Requests:           map[string]float64{},
		DurationSum:        map[string]float64{},
		DurationCount:      map[string]float64{},
		Exclusions:         map[string]float64{},
		VAPDenials:         s.Counters.VAPDenials - before.Counters.VAPDenials,
		VAPPluginSum:       s.Counters.VAPPluginSum - before.Counters.VAPPluginSum,
		VAPPluginCount:     s.Counters.VAPPluginCount - before.Counters.VAPPluginCount,
		MAPPluginSum:       s.Counters.MAPPluginSum - before.Counters.MAPPluginSum,
		WebhookPluginSum:   s.Counters.WebhookPluginSum - before.Counters.WebhookPluginSum,
		MatchCondSum:       s.Counters.MatchCondSum - before.Counters.MatchCondSum,
		CPU:                map[string]time.Duration{},
	}
	for _, n := range append(webhookNames[:len(webhookNames):len(webhookNames)], otherMutatorWebhook) {
		d.Requests[n] = s.Counters.Requests[n] - before.Counters.Requests[n]
		d.DurationSum[n] = s.Counters.DurationSum[n] - before.Counters.DurationSum[n]
		d.DurationCount[n] = s.Counters.DurationCount[n] - before.Counters.DurationCount[n]
		d.Exclusions[n] = s.Counters.Exclusions[n] - before.Counters.Exclusions[n]
	}
	start := before.CPUAfterScrape
	if start == nil {
		start = before.CPU
	}
	for p, v := range s.CPU {
		d.CPU[p] = v - start[p]
	}
	return d
}
