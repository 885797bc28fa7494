package bench

import (
	"encoding/json"
	"math"
	"net/netip"
	"strings"
	"testing"
	"time"

	"clusterip-policy/pkg/allocview"
	"clusterip-policy/test/e2e/framework"
)

func TestPercentileIsNearestRank(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{50, 50 * time.Millisecond}, {90, 90 * time.Millisecond}, {99, 99 * time.Millisecond}, {100, 100 * time.Millisecond}, {0.1, time.Millisecond}} {
		if got := Percentile(d, c.p); got != c.want {
			t.Errorf("p%v of 1..100 ms = %s, want %s", c.p, got, c.want)
		}
	}
	if got := Percentile([]time.Duration{7, 9}, 50); got != 7 {
		t.Errorf("p50 of [7 9] = %d, want 7 (nearest rank)", got)
	}
	if got := Percentile(nil, 99); got != 0 {
		t.Errorf("p99 of nothing = %s, want 0", got)
	}
}

func TestSpreadLeavesOutMissingFigures(t *testing.T) {
	s := SpreadOf([]float64{3, math.NaN(), 1, 2, 10})
	if s.Median != 2.5 || s.Min != 1 || s.Max != 10 || s.N != 4 {
		t.Errorf("SpreadOf = %+v, want median 2.5 of 4, 1-10", s)
	}
	if s := SpreadOf([]float64{math.NaN()}); s.N != 0 || !math.IsNaN(float64(s.Median)) {
		t.Errorf("SpreadOf(NaN) = %+v, want no figure", s)
	}
	b, err := json.Marshal(SpreadOf(nil))
	if err != nil || string(b) != `{"median":null,"min":null,"max":null,"n":0}` {
		t.Errorf("JSON of an empty spread = %s, %v; want nulls", b, err)
	}
}

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestKnobsFromEnv(t *testing.T) {
	k, err := KnobsFromEnv(env(nil))
	if err != nil || k.Rounds != 3 || k.Creates != 300 || len(k.Existing) != 2 || k.Existing[1] != 5000 || len(k.Configs) != 4 || len(k.Workloads) != 3 ||
		strings.Join(k.WebhookArgs, " ") != "--manage-match-conditions" {
		t.Fatalf("defaults = %+v, %v", k, err)
	}
	k, err = KnobsFromEnv(env(map[string]string{
		"BENCH_ROUNDS": "5", "BENCH_CREATES": "1000", "BENCH_EXISTING": "5000, 0,5000",
		"BENCH_CONFIGS": "ours,none", "BENCH_WORKLOADS": "mixed:16", "BENCH_ARGS": " --manage-match-conditions  --hold-reservations ",
		"BENCH_PROFILE": "ours, ours",
	}))
	if err != nil || k.Rounds != 5 || k.Creates != 1000 || len(k.Existing) != 2 || k.Existing[0] != 0 ||
		strings.Join(k.Configs, ",") != "ours,none" || k.Workloads[0] != (Workload{KindMixed, 16}) || strings.Join(k.Profile, ",") != "ours" ||
		strings.Join(k.WebhookArgs, " ") != "--manage-match-conditions --hold-reservations" {
		t.Fatalf("knobs = %+v, %v", k, err)
	}
	for name, c := range map[string]struct{ env, want string }{
		"rounds":      {"BENCH_ROUNDS=0", `BENCH_ROUNDS "0": use a whole number from 1 to 50`},
		"creates":     {"BENCH_CREATES=lots", `BENCH_CREATES "lots"`},
		"existing":    {"BENCH_EXISTING=0,-1", `BENCH_EXISTING "-1"`},
		"config":      {"BENCH_CONFIGS=nop,kyverno", `"kyverno" is not a configuration`},
		"workload":    {"BENCH_WORKLOADS=dynamic", `"dynamic" is not a workload; use kind:clients`},
		"clients":     {"BENCH_WORKLOADS=dynamic:0", `clients of dynamic:0 "0"`},
		"args":        {"BENCH_ARGS=manage", `"manage" is not a flag`},
		"harness":     {"BENCH_ARGS=--hold-reservations --bind-address=0.0.0.0", "--bind-address is set by the harness"},
		"kubeconfig":  {"BENCH_ARGS=--kubeconfig", "--kubeconfig is set by the harness"},
		"profile":     {"BENCH_PROFILE=ours,apiserver", `BENCH_PROFILE "ours,apiserver": "apiserver" is not a configuration`},
		"profile-run": {"BENCH_PROFILE=ours-other-mutator", `profile "ours-other-mutator": the run does not measure that configuration`},
		"mixed-large": {"BENCH_CREATES=5000", "the mixed workload would request 500 static addresses, but the static band has 225 free for it; use BENCH_CREATES of at most 2250"},
	} {
		kv := strings.SplitN(c.env, "=", 2)
		if _, err := KnobsFromEnv(env(map[string]string{kv[0]: kv[1]})); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %s gave %v, want an error with %q", name, c.env, err, c.want)
		}
	}
	if _, err := KnobsFromEnv(env(map[string]string{"BENCH_CREATES": "5000", "BENCH_WORKLOADS": "dynamic:8"})); err != nil {
		t.Errorf("5000 creates without the mixed workload: %v", err)
	}
}

// The addresses the plan asks for must lie where the comments say: the
// static requests and reservations in the static band of the range, the
// static pool clear of every reservation and of the probe address.
func TestPlanAddressesLieInTheStaticBand(t *testing.T) {
	r, err := allocview.NewRange("bench", netip.MustParsePrefix(ServiceRange))
	if err != nil {
		t.Fatal(err)
	}
	reserved := map[string]bool{"10.96.0.1": true, dnsIP: true, probeIP: true}
	for _, ip := range ownerIPs {
		reserved[ip] = true
	}
	for ip := range reserved {
		if !r.Static().Contains(netip.MustParseAddr(ip)) {
			t.Errorf("%s is not in the static band %s", ip, r.Static())
		}
	}
	seen := map[string]bool{}
	for _, ip := range staticPool {
		if !r.Static().Contains(netip.MustParseAddr(ip)) || reserved[ip] || seen[ip] {
			t.Errorf("static pool address %s: in static band %v, reserved %v, repeated %v", ip, r.Static().Contains(netip.MustParseAddr(ip)), reserved[ip], seen[ip])
		}
		seen[ip] = true
	}
	if last := staticPool[len(staticPool)-1]; last != r.Static().Last.String() {
		t.Errorf("the static pool ends at %s, the static band at %s", last, r.Static().Last)
	}

	plan := Plan(KindMixed, "r1-w2", 2250)
	names := map[string]bool{}
	static, owners := 0, 0
	for _, q := range plan {
		if names[q.Name] {
			t.Fatalf("name %s planned twice", q.Name)
		}
		names[q.Name] = true
		if q.ClusterIP != "" {
			static++
		}
		if q.Owner >= 0 {
			owners++
			if q.Name != ownerName(q.Owner) || q.ClusterIP != "" {
				t.Errorf("owner %d planned as %+v", q.Owner, q)
			}
		}
	}
	if static != 225 || owners != len(ownerIPs) {
		t.Errorf("mixed plan of 2250: %d static, %d owners; want 225 and %d", static, owners, len(ownerIPs))
	}
	small := Plan(KindMixed, "x", 30)
	if small[9].ClusterIP == "" || small[25].Owner != 0 || small[0].ClusterIP != "" {
		t.Errorf("mixed plan of 30 = %+v; want static at 9, the first owner at 25", small)
	}
	for _, q := range Plan(KindDynamic, "x", 100) {
		if q.ClusterIP != "" || q.Owner >= 0 {
			t.Fatalf("dynamic plan has %+v", q)
		}
	}
	if !strings.Contains(policySpec(), "service: bench/owner-7") {
		t.Errorf("policy without the owners:\n%s", policySpec())
	}
}

func TestParseCounters(t *testing.T) {
	text := `# HELP apiserver_admission_webhook_request_total x
apiserver_admission_webhook_request_total{code="200",name="mutate-services.clusterip-policy.io",operation="CREATE",rejected="false",type="admit"} 7
apiserver_admission_webhook_request_total{code="400",name="mutate-services.clusterip-policy.io",operation="CREATE",rejected="true",type="admit"} 1
apiserver_admission_webhook_request_total{code="200",name="validate-services.clusterip-policy.io",operation="CREATE",rejected="false",type="validating"} 6
apiserver_admission_webhook_request_total{code="200",name="other.example.com",operation="CREATE",rejected="false",type="validating"} 2
apiserver_admission_webhook_admission_duration_seconds_sum{name="mutate-services.clusterip-policy.io",operation="CREATE",rejected="false",type="admit"} 0.016
apiserver_admission_webhook_admission_duration_seconds_count{name="mutate-services.clusterip-policy.io",operation="CREATE",rejected="false",type="admit"} 8
apiserver_validating_admission_policy_check_total{enforcement_action="deny",error_type="no_error",policy="bench-clusterip",policy_binding="bench-clusterip"} 1
apiserver_validating_admission_policy_check_total{enforcement_action="deny",error_type="no_error",policy="other",policy_binding="other"} 3
apiserver_admission_controller_admission_duration_seconds_sum{name="ValidatingAdmissionPolicy",operation="CREATE",rejected="false",type="validate"} 0.5
apiserver_admission_controller_admission_duration_seconds_count{name="ValidatingAdmissionPolicy",operation="CREATE",rejected="false",type="validate"} 100
apiserver_admission_controller_admission_duration_seconds_count{name="ValidatingAdmissionPolicy",operation="UPDATE",rejected="false",type="validate"} 9
apiserver_admission_controller_admission_duration_seconds_count{name="ValidatingAdmissionWebhook",operation="CREATE",rejected="false",type="validate"} 7
apiserver_admission_controller_admission_duration_seconds_sum{name="MutatingAdmissionPolicy",operation="CREATE",rejected="false",type="admit"} 0.25
apiserver_admission_controller_admission_duration_seconds_sum{name="MutatingAdmissionPolicy",operation="UPDATE",rejected="false",type="admit"} 9
`
	c, err := ParseCounters(text)
	if err != nil {
		t.Fatal(err)
	}
	if c.AllWebhookRequests != 16 || c.Requests[framework.MutatingWebhookName] != 8 || c.Requests[framework.ValidatingWebhookName] != 6 ||
		c.DurationSum[framework.MutatingWebhookName] != 0.016 || c.DurationCount[framework.MutatingWebhookName] != 8 || c.VAPDenials != 1 || c.VAPPluginSum != 0.5 || c.VAPPluginCount != 100 || c.MAPPluginSum != 0.25 {
		t.Errorf("ParseCounters = %+v", c)
	}
	if _, err := ParseCounters("apiserver_admission_webhook_request_total{name=\"x\"} many\n"); err == nil {
		t.Error("a broken sample was accepted")
	}
}

func delta(mutate, validate, other, vapDenials float64, apiCPU, whCPU time.Duration, config string) Delta {
	d := Delta{
		Elapsed:            time.Second,
		AllWebhookRequests: mutate + validate + other,
		Requests:           map[string]float64{webhookNames[0]: mutate, webhookNames[1]: validate},
		DurationSum:        map[string]float64{webhookNames[0]: mutate * 0.002, webhookNames[1]: validate * 0.001},
		DurationCount:      map[string]float64{webhookNames[0]: mutate, webhookNames[1]: validate},
		VAPDenials:         vapDenials,
		VAPPluginSum:       0.01,
		VAPPluginCount:     100,
		MAPPluginSum:       0.015,
		CPU:                map[string]time.Duration{procAPIServer: apiCPU, procNop: 0, procOurs: 0},
	}
	if config == ConfigOurs || config == ConfigNop {
		d.CPU[config] = whCPU
	}
	return d
}

func outcome(n int) Outcome {
	o := Outcome{Elapsed: 2 * time.Second, OwnerIPs: map[int]string{0: ownerIPs[0]}}
	for i := range n {
		o.Latencies = append(o.Latencies, time.Duration(i+1)*time.Millisecond)
	}
	return o
}

const vapGone = "no longer denied the probe"

func TestResultFiguresAndChecks(t *testing.T) {
	plan := Plan(KindMixed, "x", 30) // 3 static, 1 owner
	w := Workload{KindMixed, 4}
	r := NewResult(1, 0, w, ConfigNop, plan, outcome(30), delta(30, 30, 0, 0, 600*time.Millisecond, 120*time.Millisecond, ConfigNop), true)
	if len(r.Problems) != 0 || r.CreatesPerSec != 15 || r.P50ms != 15 || r.P99ms != 30 || r.APIServerCPUPerCreate != 20 ||
		r.WebhookCPUPerCall != 2 || r.CallsPerCreate != 2 || r.MutateMeanms != 2 || r.ValidateMeanms != 1 || r.VAPPluginMeanms != 0.1 || r.MAPPluginPerCreate != 0.5 || r.Static != 3 || r.Owners != 1 {
		t.Errorf("nop result = %+v", r)
	}
	for name, c := range map[string]struct {
		config string
		d      Delta
		o      Outcome
		want   string
	}{
		"nop missed creates":    {ConfigNop, delta(29, 30, 0, 0, 0, 0, ConfigNop), outcome(30), "every create must reach both"},
		"none called a webhook": {ConfigNone, delta(0, 0, 1, 0, 0, 0, ConfigNone), outcome(30), "want none"},
		"none denied by vap":    {ConfigNone, delta(0, 0, 0, 2, 0, 0, ConfigNone), outcome(30), "none: 2 creates denied by the policy bench-clusterip"},
		"ours missed statics":   {ConfigOurs, delta(3, 2, 0, 0, 0, 0, ConfigOurs), outcome(30), "each static request must reach both"},
		"ours misplaced owner":  {ConfigOurs, delta(4, 3, 0, 0, 0, 0, ConfigOurs), Outcome{Elapsed: time.Second, OwnerIPs: map[int]string{0: "10.96.7.7"}}, `bench/owner-0 got "10.96.7.7", reserved 10.96.0.20`},
		"vap gone":              {ConfigVAP, delta(0, 0, 0, 0, 0, 0, ConfigVAP), outcome(30), vapGone},
		"vap with a webhook":    {ConfigVAP, delta(30, 0, 0, 0, 0, 0, ConfigVAP), outcome(30), "30 webhook calls; want none"},
		"failed creates":        {ConfigNone, delta(0, 0, 0, 0, 0, 0, ConfigNone), Outcome{Elapsed: time.Second, Errors: 2, FirstErrors: []string{"bench/x-1: boom"}}, "2 of 30 creates failed: [bench/x-1: boom]"},
	} {
		r := NewResult(1, 0, w, c.config, plan, c.o, c.d, c.config != ConfigVAP || c.want != vapGone)
		if !strings.Contains(strings.Join(r.Problems, "\n"), c.want) {
			t.Errorf("%s: problems %q, want one with %q", name, r.Problems, c.want)
		}
	}
	r = NewResult(1, 0, w, ConfigOurs, plan, outcome(30), delta(4, 3, 0, 0, 0, 0, ConfigOurs), true)
	r.Registration, r.RegistrationChanged = "mutating clusterip-policy@9 [managed]", true
	if p := strings.Join(r.Check(), "\n"); !strings.Contains(p, "ours: the webhook configurations changed during the run; now mutating clusterip-policy@9 [managed]") {
		t.Errorf("a registration changed during the run: problems %q", p)
	}
	if r := NewResult(1, 0, w, ConfigOurs, plan, outcome(30), delta(4, 3, 0, 0, 0, 0, ConfigOurs), true); len(r.Problems) != 0 {
		t.Errorf("ours seeing only the static requests and the owner: %v, want no problem", r.Problems)
	}
	// The floors: every create skipped by both Service webhooks, none
	// called.
	skipped := func(mutate, validate, calls float64) Delta {
		d := delta(calls, 0, 0, 0, 0, 0, ConfigFloorStatic)
		d.Exclusions = map[string]float64{webhookNames[0]: mutate, webhookNames[1]: validate}
		return d
	}
	for _, config := range []string{ConfigFloorStatic, ConfigFloorSingle} {
		if r := NewResult(1, 0, w, config, plan, outcome(30), skipped(30, 30, 0), true); len(r.Problems) != 0 || r.MutateSkips != 30 || r.ValidateSkips != 30 {
			t.Errorf("%s skipping all 30 creates: skips %v/%v, problems %v; want none", config, r.MutateSkips, r.ValidateSkips, r.Problems)
		}
		for name, d := range map[string]Delta{"a create not skipped": skipped(30, 29, 0), "a webhook called": skipped(30, 30, 1)} {
			r := NewResult(1, 0, w, config, plan, outcome(30), d, true)
			if p := strings.Join(r.Problems, "\n"); !strings.Contains(p, config+": ") || !strings.Contains(p, "every create must be skipped by both") {
				t.Errorf("%s, %s: problems %q, want the floor's", config, name, p)
			}
		}
	}
}

func TestSummaryMediansAndRatios(t *testing.T) {
	plan := Plan(KindDynamic, "x", 100)
	w := Workload{KindDynamic, 8}
	var runs []Result
	for round, f := range []float64{1, 3, 2} {
		o := outcome(100)
		o.Elapsed = time.Duration(f * float64(time.Second)) // 100/f creates/s
		runs = append(runs,
			NewResult(round+1, 0, w, ConfigNone, plan, o, delta(0, 0, 0, 0, time.Second, 0, ConfigNone), true),
			NewResult(round+1, 0, w, ConfigNop, plan, Outcome{Latencies: o.Latencies, Elapsed: 2 * o.Elapsed}, delta(100, 100, 0, 0, 2*time.Second, time.Second, ConfigNop), true),
		)
	}
	// A run with a problem is counted but left out of the figures.
	runs = append(runs, NewResult(4, 0, w, ConfigNop, plan, outcome(100), delta(1, 1, 0, 0, 0, 0, ConfigNop), true))
	s := Summarize(Meta{Knobs: Knobs{Configs: AllConfigs, Workloads: []Workload{w}}}, runs)
	if len(s.Rows) != 2 || s.Rows[0].Config != ConfigNone || s.Rows[1].Config != ConfigNop {
		t.Fatalf("rows = %+v", s.Rows)
	}
	none, nop := s.Rows[0], s.Rows[1]
	if got := none.Figures["createsPerSec"]; got.Median != 50 || got.Min != 100.0/3 || got.Max != 100 || got.N != 3 {
		t.Errorf("none creates/s = %+v, want median 50 of 3 rounds", got)
	}
	if nop.Rounds != 4 || nop.Problems != 1 || nop.Figures["createsPerSec"].N != 3 {
		t.Errorf("nop row = %+v, want 4 runs, 1 with problems, figures of 3", nop)
	}
	if nop.VsNone["createsPerSec"] != 0.5 || nop.VsNone["apiserverCPUmsPerCreate"] != 2 || none.VsNop["createsPerSec"] != 2 || nop.VsNop != nil {
		t.Errorf("ratios: nop vs none %v, none vs nop %v, nop vs nop %v", nop.VsNone, none.VsNop, nop.VsNop)
	}
	// Within each round nop took twice as long as none: 0.5 in every
	// round, though the rounds' paces differ threefold.
	if got := nop.PairedVsNone["createsPerSec"]; got.N != 3 || got.Median != 0.5 || got.Min != 0.5 || got.Max != 0.5 {
		t.Errorf("paired creates/s of nop vs none = %+v, want 0.5 in each of 3 rounds", got)
	}
	if got := none.PairedVsNop["apiserverCPUmsPerCreate"]; got.N != 3 || got.Median != 0.5 {
		t.Errorf("paired apiserver CPU of none vs nop = %+v, want 0.5 in each of 3 rounds", got)
	}
	if nop.PairedVsNop != nil || none.PairedVsNone != nil {
		t.Errorf("a configuration compared with itself: %v %v", nop.PairedVsNop, none.PairedVsNone)
	}
	if _, err := s.JSON(); err != nil {
		t.Errorf("JSON: %v", err)
	}
	md := s.Markdown()
	for _, want := range []string{"## 0 existing Services, dynamic (8 clients)", "| none | 50.0 (33.3–100) |", "| nop |", "0.50× (0.50–0.50)", "| 4 (1) |"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	var sb strings.Builder
	WriteRoundTable(&sb, runs)
	if !strings.Contains(sb.String(), "PROBLEM round 4, 0 existing, dynamic:8, nop: nop: 1 mutate and 1 validate calls for 100 creates") {
		t.Errorf("round table does not show the problem:\n%s", sb.String())
	}
}

func TestRotateGivesEachConfigEachPosition(t *testing.T) {
	seen := map[string]map[int]bool{}
	for r := range 4 {
		for i, c := range Rotate(AllConfigs, r) {
			if seen[c] == nil {
				seen[c] = map[int]bool{}
			}
			seen[c][i] = true
		}
	}
	for _, c := range AllConfigs {
		if len(seen[c]) != 4 {
			t.Errorf("%s took positions %v in 4 rounds", c, seen[c])
		}
	}
}

// A run's CPU counts from after the first snapshot's /metrics scrape to
// before the second's: the scrapes are not the run's.
func TestSnapshotDeltaLeavesTheScrapesOut(t *testing.T) {
	before := Snapshot{
		CPU:            map[string]time.Duration{procAPIServer: 100 * time.Millisecond},
		CPUAfterScrape: map[string]time.Duration{procAPIServer: 130 * time.Millisecond},
		Counters:       Counters{Requests: map[string]float64{webhookNames[0]: 5}},
	}
	after := Snapshot{
		CPU:            map[string]time.Duration{procAPIServer: 730 * time.Millisecond},
		CPUAfterScrape: map[string]time.Duration{procAPIServer: 760 * time.Millisecond},
		Counters:       Counters{Requests: map[string]float64{webhookNames[0]: 305}},
	}
	d := after.Sub(before)
	if d.CPU[procAPIServer] != 600*time.Millisecond || d.Requests[webhookNames[0]] != 300 {
		t.Errorf("delta CPU %s, mutate calls %v; want 600ms and 300", d.CPU[procAPIServer], d.Requests[webhookNames[0]])
	}
}

func TestManagesConditionsReadsTheFlagAsPflagDoes(t *testing.T) {
	for args, want := range map[string]bool{
		"":                                false,
		"--manage-match-conditions":       true,
		"--manage-match-conditions=true":  true,
		"--manage-match-conditions=false": false,
		"--manage-match-conditions --manage-match-conditions=false": false,
		"--hold-reservations --manage-match-conditions":             true,
	} {
		if got := (Knobs{WebhookArgs: strings.Fields(args)}).ManagesConditions(); got != want {
			t.Errorf("%q: ManagesConditions() = %v, want %v", args, got, want)
		}
	}
}
