package bench

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"
)

// Num is a figure that may be missing (NaN): JSON null, "-" in tables.
type Num float64

// MarshalJSON writes NaN and infinities as null.
func (n Num) MarshalJSON() ([]byte, error) {
	f := float64(n)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return []byte("null"), nil
	}
	return []byte(strconv.FormatFloat(f, 'g', 6, 64)), nil
}

// UnmarshalJSON reads null as NaN.
func (n *Num) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*n = Num(math.NaN())
		return nil
	}
	f, err := strconv.ParseFloat(string(b), 64)
	*n = Num(f)
	return err
}

// Result is one run: one configuration, one workload, one round.
type Result struct {
	Round    int      `json:"round"`
	Existing int      `json:"existing"`
	Workload Workload `json:"workload"`
	Config   string   `json:"config"`

	Creates int `json:"creates"` // attempted
	Errors  int `json:"errors"`
	Static  int `json:"static"` // of them, static requests
	Owners  int `json:"owners"` // of them, reservation owners

	Seconds       Num `json:"seconds"`
	CreatesPerSec Num `json:"createsPerSec"`
	P50ms         Num `json:"p50ms"`
	P90ms         Num `json:"p90ms"`
	P99ms         Num `json:"p99ms"`

	APIServerCPUms        Num `json:"apiserverCPUms"`
	APIServerCPUPerCreate Num `json:"apiserverCPUmsPerCreate"`
	// The registered webhook's CPU (nop or ours) over its calls; the
	// other webhook process idles alongside and is reported as idle CPU.
	WebhookCPUms      Num `json:"webhookCPUms"`
	WebhookCPUPerCall Num `json:"webhookCPUmsPerCall"`
	IdleWebhookCPUms  Num `json:"idleWebhookCPUms"`

	// Apiserver counters: calls per webhook name, and the mean of
	// apiserver_admission_webhook_admission_duration_seconds.
	MutateCalls   float64 `json:"mutateCalls"`
	ValidateCalls float64 `json:"validateCalls"`
	OtherCalls    float64 `json:"otherWebhookCalls"`
	// OtherMutatorCalls are the calls of the other mutating webhook of
	// ConfigOursOtherMutator.
	OtherMutatorCalls float64 `json:"otherMutatorCalls,omitempty"`
	CallsPerCreate    Num     `json:"webhookCallsPerCreate"`
	// MutateSkips and ValidateSkips are the creates a false matchCondition
	// kept from each Service webhook
	// (apiserver_admission_match_condition_exclusions_total).
	MutateSkips    float64 `json:"mutateSkips"`
	ValidateSkips  float64 `json:"validateSkips"`
	MutateMeanms   Num     `json:"mutateAdmissionMeanms"`
	ValidateMeanms Num     `json:"validateAdmissionMeanms"`
	// The ValidatingAdmissionPolicy plugin's mean time per create
	// (apiserver_admission_controller_admission_duration_seconds), in
	// every configuration: with no policy it matches nothing.
	VAPPluginMeanms Num `json:"vapAdmissionMeanms"`
	// The MutatingAdmissionPolicy plugin's time per create (the backstop's
	// record; near zero where no such policy exists).
	MAPPluginPerCreate Num `json:"mapPluginmsPerCreate"`
	// The two webhook admission plugins' time per create (rules,
	// selectors, matchConditions and any calls), and of it the
	// matchCondition evaluations that skipped a call.
	WebhookPluginPerCreate Num     `json:"webhookPluginsmsPerCreate"`
	MatchCondPerCreate     Num     `json:"matchConditionsmsPerCreate"`
	VAPDenials             float64 `json:"vapDenials"`
	// VAPInForce: for vap, a probe after the run was still denied by the
	// policy (allows are not counted by the apiserver, see snapshot.go).
	VAPInForce bool `json:"vapInForceAfter,omitempty"`
	// Registration is the webhook configurations in force after the run
	// (names, resource versions, matchConditions); RegistrationChanged
	// says they differ from those the switch verified.
	Registration        string   `json:"registration"`
	RegistrationChanged bool     `json:"registrationChanged,omitempty"`
	FirstErrors         []string `json:"firstErrors,omitempty"`
	OwnersMisplaced     []string `json:"ownersMisplaced,omitempty"`
	// Problems say why the run does not show the configuration it names
	// (Check); a run with problems is reported but must not be quoted.
	Problems []string `json:"problems,omitempty"`
}

// Outcome is what the clients saw in one run.
type Outcome struct {
	Latencies   []time.Duration // of the successful creates
	Errors      int
	FirstErrors []string // at most maxFirstErrors
	// OwnerIPs are the addresses the reservation owners got, by owner index.
	OwnerIPs map[int]string
	Elapsed  time.Duration
}

const maxFirstErrors = 5

// NewResult computes the figures of one run from the plan, the clients'
// outcome and the snapshots' delta, then Checks it.
func NewResult(round, existing int, w Workload, config string, plan []Request, o Outcome, d Delta, vapInForce bool) Result {
	r := Result{Round: round, Existing: existing, Workload: w, Config: config, Creates: len(plan), Errors: o.Errors, FirstErrors: o.FirstErrors, VAPInForce: vapInForce}
	for _, q := range plan {
		switch {
		case q.ClusterIP != "":
			r.Static++
		case q.Owner >= 0:
			r.Owners++
		}
	}
	lat := slices.Clone(o.Latencies)
	slices.Sort(lat)
	ms := func(d time.Duration) Num {
		if len(lat) == 0 {
			return Num(math.NaN())
		}
		return Num(float64(d) / float64(time.Millisecond))
	}
	r.Seconds = Num(o.Elapsed.Seconds())
	r.CreatesPerSec = Num(perUnit(float64(len(lat)), o.Elapsed.Seconds()))
	r.P50ms, r.P90ms, r.P99ms = ms(Percentile(lat, 50)), ms(Percentile(lat, 90)), ms(Percentile(lat, 99))

	cpuMS := func(p string) float64 { return float64(d.CPU[p]) / float64(time.Millisecond) }
	r.APIServerCPUms = Num(cpuMS(procAPIServer))
	r.APIServerCPUPerCreate = Num(perUnit(cpuMS(procAPIServer), float64(len(plan))))

	r.MutateCalls = d.Requests[webhookNames[0]]
	r.ValidateCalls = d.Requests[webhookNames[1]]
	r.OtherMutatorCalls = d.Requests[otherMutatorWebhook]
	r.OtherCalls = d.AllWebhookRequests - r.MutateCalls - r.ValidateCalls - r.OtherMutatorCalls
	calls := r.MutateCalls + r.ValidateCalls
	r.CallsPerCreate = Num(perUnit(calls, float64(len(plan))))
	r.MutateMeanms = Num(perUnit(d.DurationSum[webhookNames[0]]*1000, d.DurationCount[webhookNames[0]]))
	r.ValidateMeanms = Num(perUnit(d.DurationSum[webhookNames[1]]*1000, d.DurationCount[webhookNames[1]]))
	r.MutateSkips, r.ValidateSkips = d.Exclusions[webhookNames[0]], d.Exclusions[webhookNames[1]]
	r.VAPDenials = d.VAPDenials
	r.VAPPluginMeanms = Num(perUnit(d.VAPPluginSum*1000, d.VAPPluginCount))
	r.MAPPluginPerCreate = Num(perUnit(d.MAPPluginSum*1000, float64(len(plan))))
	r.WebhookPluginPerCreate = Num(perUnit(d.WebhookPluginSum*1000, float64(len(plan))))
	r.MatchCondPerCreate = Num(perUnit(d.MatchCondSum*1000, float64(len(plan))))

	r.WebhookCPUms, r.WebhookCPUPerCall, r.IdleWebhookCPUms = Num(math.NaN()), Num(math.NaN()), Num(math.NaN())
	switch config {
	case ConfigNop:
		r.WebhookCPUms, r.IdleWebhookCPUms = Num(cpuMS(procNop)), Num(cpuMS(procOurs))
	case ConfigOurs, ConfigOursOtherMutator:
		r.WebhookCPUms, r.IdleWebhookCPUms = Num(cpuMS(procOurs)), Num(cpuMS(procNop))
	default:
		r.IdleWebhookCPUms = Num(cpuMS(procNop) + cpuMS(procOurs))
	}
	if config == ConfigNop || config == ConfigOurs || config == ConfigOursOtherMutator {
		r.WebhookCPUPerCall = Num(perUnit(float64(r.WebhookCPUms), calls))
	}
	if config == ConfigOurs || config == ConfigOursOtherMutator {
		for _, q := range plan {
			if q.Owner >= 0 && o.OwnerIPs[q.Owner] != ownerIPs[q.Owner] {
				r.OwnersMisplaced = append(r.OwnersMisplaced, fmt.Sprintf("%s/%s got %q, reserved %s", benchNamespace, q.Name, o.OwnerIPs[q.Owner], ownerIPs[q.Owner]))
			}
		}
	}
	r.Problems = r.Check()
	return r
}

// Process names in Snapshot.CPU.
const (
	procAPIServer = "apiserver"
	procNop       = "nop"
	procOurs      = "ours"
)

// Check says why a run does not measure what its configuration names: a
// failed create, a webhook called that is not registered, or one not
// called where it must be (nop sees every create; ours sees at least the
// static requests and the owners it assigns an address; the vap still
// denies a probe after the run).
func (r Result) Check() []string {
	var p []string
	if r.Errors > 0 {
		p = append(p, fmt.Sprintf("%d of %d creates failed: %v", r.Errors, r.Creates, r.FirstErrors))
	}
	n := float64(r.Creates)
	webhooks := r.MutateCalls + r.ValidateCalls + r.OtherCalls
	switch r.Config {
	case ConfigNone:
		if webhooks > 0 {
			p = append(p, fmt.Sprintf("none: the apiserver made %.0f webhook calls; want none", webhooks))
		}
	case ConfigNop:
		if r.MutateCalls < n || r.ValidateCalls < n {
			p = append(p, fmt.Sprintf("nop: %.0f mutate and %.0f validate calls for %d creates; every create must reach both", r.MutateCalls, r.ValidateCalls, r.Creates))
		}
	case ConfigOurs:
		if r.MutateCalls < float64(r.Static+r.Owners) || r.ValidateCalls < float64(r.Static) {
			p = append(p, fmt.Sprintf("ours: %.0f mutate and %.0f validate calls for %d static requests and %d owners; each static request must reach both, each owner the mutating one", r.MutateCalls, r.ValidateCalls, r.Static, r.Owners))
		}
		if len(r.OwnersMisplaced) > 0 {
			p = append(p, fmt.Sprintf("ours: reservation owners without their address: %v", r.OwnersMisplaced))
		}
	case ConfigOursOtherMutator:
		if r.MutateCalls < n || r.OtherMutatorCalls < n {
			p = append(p, fmt.Sprintf("ours-other-mutator: %.0f calls of our mutating webhook and %.0f of the other for %d creates; with another mutating webhook for Services every create must reach both", r.MutateCalls, r.OtherMutatorCalls, r.Creates))
		}
		if len(r.OwnersMisplaced) > 0 {
			p = append(p, fmt.Sprintf("ours-other-mutator: reservation owners without their address: %v", r.OwnersMisplaced))
		}
	case ConfigFloorStatic, ConfigFloorSingle:
		if webhooks > 0 || r.MutateSkips < n || r.ValidateSkips < n {
			p = append(p, fmt.Sprintf("%s: %.0f webhook calls, %.0f and %.0f creates skipped by the mutating and validating webhook's conditions for %d creates; every create must be skipped by both", r.Config, webhooks, r.MutateSkips, r.ValidateSkips, r.Creates))
		}
	case ConfigVAP:
		if !r.VAPInForce {
			p = append(p, fmt.Sprintf("vap: the policy %s no longer denied the probe after the run", vapName))
		}
		if webhooks > 0 {
			p = append(p, fmt.Sprintf("vap: the apiserver made %.0f webhook calls; want none", webhooks))
		}
	}
	if r.VAPDenials > 0 {
		p = append(p, fmt.Sprintf("%s: %.0f creates denied by the policy %s", r.Config, r.VAPDenials, vapName))
	}
	if r.RegistrationChanged {
		p = append(p, fmt.Sprintf("%s: the webhook configurations changed during the run; now %s", r.Config, r.Registration))
	}
	if r.OtherCalls > 0 && r.Config != ConfigNone && r.Config != ConfigVAP {
		p = append(p, fmt.Sprintf("%s: %.0f calls of webhooks other than the Service webhooks", r.Config, r.OtherCalls))
	}
	return p
}
