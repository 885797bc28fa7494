package bench

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"clusterip-policy/pkg/matchconditions"
)

// Knobs are what a run of the benchmark can vary, read from the
// environment by KnobsFromEnv (`make bench-e2e BENCH_ROUNDS=5 ...`).
type Knobs struct {
	Rounds    int        `json:"rounds"`    // BENCH_ROUNDS: rounds; every configuration runs every workload once per round
	Creates   int        `json:"creates"`   // BENCH_CREATES: creates per run
	Existing  []int      `json:"existing"`  // BENCH_EXISTING: numbers of existing Services to measure at, ascending
	Configs   []string   `json:"configs"`   // BENCH_CONFIGS: configurations, of AllConfigs
	Workloads []Workload `json:"workloads"` // BENCH_WORKLOADS: kind:clients, for example dynamic:8
	// WebhookArgs are extra `clusterip-policy serve` flags for ours (BENCH_ARGS,
	// split at white space); default --manage-match-conditions, as
	// manifests/base runs it.
	WebhookArgs []string `json:"webhookArgs"`
	// Profile are the configurations during whose runs the apiserver's CPU
	// profile is taken (BENCH_PROFILE, comma-separated; none by default):
	// the apiserver then runs with --profiling, and each such run writes
	// its profiles to .local/bench/profiles/ (profile.go). Profiling costs
	// the apiserver some CPU of its own, so a run that profiles is for
	// finding where the time goes, not for the tables.
	Profile []string `json:"profile,omitempty"`
}

// Configuration names, public: they appear in the output and the JSON.
const (
	ConfigNone = "none"
	ConfigNop  = "nop"
	ConfigOurs = "ours"
	ConfigVAP  = "vap"
	// ConfigOursOtherMutator is ours beside another mutating webhook for
	// Service creates (the nop webhook under another name, registered
	// after ours): the leader then sends every create to our mutating
	// webhook, so that the apiserver reinvokes it after the other one
	// (docs/matchconditions.md, "Other mutating admission"). What that
	// costs is this configuration's figures against ours.
	ConfigOursOtherMutator = "ours-other-mutator"
	// The floors: what two Service webhooks that are never called cost
	// the apiserver, whatever their conditions say. Both register the nop
	// webhook (never called) with manifests/base's configurations, each
	// Service webhook's matchConditions replaced: ConfigFloorStatic keeps
	// the static conditions and adds one that is always false (ours'
	// shape with a managed condition that costs nothing to evaluate);
	// ConfigFloorSingle has the false condition alone (one condition per
	// webhook, the least any matchCondition can cost). Neither guards
	// anything: they are measurements, never a way to deploy.
	ConfigFloorStatic = "floor-static"
	ConfigFloorSingle = "floor-single"
	// ConfigBackstop is the backstop alone (docs/backstop.md): the
	// ValidatingAdmissionPolicies, and where served the record
	// MutatingAdmissionPolicy, that the leader compiles from the same
	// policy, with no webhook registered. Its figures against vap are
	// what the backstop costs the apiserver beside a minimal policy.
	ConfigBackstop = "backstop"
)

// AllConfigs are the configurations in their reporting order.
var AllConfigs = []string{ConfigNone, ConfigNop, ConfigOurs, ConfigVAP, ConfigBackstop, ConfigOursOtherMutator, ConfigFloorStatic, ConfigFloorSingle}

// DefaultConfigs are those a run measures unless BENCH_CONFIGS says
// otherwise.
var DefaultConfigs = []string{ConfigNone, ConfigNop, ConfigOurs, ConfigVAP}

// Workload kinds.
const (
	KindDynamic = "dynamic" // every create without clusterIP
	KindMixed   = "mixed"   // 10% static requests in the static band, a few reservation owners, the rest dynamic
)

// Workload is a kind of create traffic at a number of concurrent clients.
type Workload struct {
	Kind    string `json:"kind"`
	Clients int    `json:"clients"`
}

func (w Workload) String() string { return fmt.Sprintf("%s:%d", w.Kind, w.Clients) }

// harnessFlags are the `clusterip-policy serve` flags the harness sets
// (test/e2e/framework StartWebhook); BENCH_ARGS may not override them.
var harnessFlags = []string{"kubeconfig", "cert-dir", "bind-address", "port", "health-probe-bind-address", "metrics-bind-address", "policy", "shutdown-delay"}

// Limits keep a run bounded whatever the knobs say.
const (
	maxRounds   = 50
	maxCreates  = 20000
	maxExisting = 50000
	maxClients  = 64
)

// DefaultKnobs took 10 min 52 s on a shared 2-core machine (BENCHMARKS.md,
// "make bench-e2e with its defaults").
func DefaultKnobs() Knobs {
	return Knobs{
		Rounds:    3,
		Creates:   300,
		Existing:  []int{0, 5000},
		Configs:   slices.Clone(DefaultConfigs),
		Workloads: []Workload{{KindDynamic, 1}, {KindDynamic, 8}, {KindMixed, 8}},
	}
}

// KnobsFromEnv starts from DefaultKnobs and applies every BENCH_* variable
// that getenv returns non-empty, refusing a bad value with its name and
// the accepted range.
func KnobsFromEnv(getenv func(string) string) (Knobs, error) {
	k := DefaultKnobs()
	var err error
	if v := strings.TrimSpace(getenv("BENCH_ROUNDS")); v != "" {
		if k.Rounds, err = intIn("BENCH_ROUNDS", v, 1, maxRounds); err != nil {
			return k, err
		}
	}
	if v := strings.TrimSpace(getenv("BENCH_CREATES")); v != "" {
		if k.Creates, err = intIn("BENCH_CREATES", v, 10, maxCreates); err != nil {
			return k, err
		}
	}
	if v := strings.TrimSpace(getenv("BENCH_EXISTING")); v != "" {
		k.Existing = nil
		for _, s := range strings.Split(v, ",") {
			n, err := intIn("BENCH_EXISTING", strings.TrimSpace(s), 0, maxExisting)
			if err != nil {
				return k, fmt.Errorf("%w (a comma-separated list such as 0,5000)", err)
			}
			k.Existing = append(k.Existing, n)
		}
		slices.Sort(k.Existing)
		k.Existing = slices.Compact(k.Existing)
	}
	if v := strings.TrimSpace(getenv("BENCH_CONFIGS")); v != "" {
		k.Configs = nil
		for _, s := range strings.Split(v, ",") {
			s = strings.TrimSpace(s)
			if !slices.Contains(AllConfigs, s) {
				return k, fmt.Errorf("BENCH_CONFIGS %q: %q is not a configuration; use a comma-separated subset of %s", v, s, strings.Join(AllConfigs, ","))
			}
			if !slices.Contains(k.Configs, s) {
				k.Configs = append(k.Configs, s)
			}
		}
	}
	if v := strings.TrimSpace(getenv("BENCH_WORKLOADS")); v != "" {
		k.Workloads = nil
		for _, s := range strings.Split(v, ",") {
			w, err := parseWorkload(strings.TrimSpace(s))
			if err != nil {
				return k, fmt.Errorf("BENCH_WORKLOADS %q: %w", v, err)
			}
			if !slices.Contains(k.Workloads, w) {
				k.Workloads = append(k.Workloads, w)
			}
		}
	}
	if v := strings.TrimSpace(getenv("BENCH_PROFILE")); v != "" {
		for _, c := range strings.Split(v, ",") {
			c = strings.TrimSpace(c)
			if !slices.Contains(AllConfigs, c) {
				return k, fmt.Errorf("BENCH_PROFILE %q: %q is not a configuration; use a comma-separated subset of %s", v, c, strings.Join(AllConfigs, ","))
			}
			if !slices.Contains(k.Profile, c) {
				k.Profile = append(k.Profile, c)
			}
		}
	}
	// Unset: ours runs as manifests/base ships it, keeping its own
	// matchConditions in step with the policy. BENCH_ARGS=--manage-match-conditions=false
	// measures it with the static conditions only.
	k.WebhookArgs = []string{"--manage-match-conditions"}
	if v := strings.Fields(getenv("BENCH_ARGS")); len(v) > 0 {
		k.WebhookArgs = v
	}
	for _, a := range k.WebhookArgs {
		if !strings.HasPrefix(a, "--") {
			return k, fmt.Errorf("BENCH_ARGS %q: %q is not a flag; give `clusterip-policy serve` flags as --name=value", getenv("BENCH_ARGS"), a)
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if slices.Contains(harnessFlags, name) {
			return k, fmt.Errorf("BENCH_ARGS %q: --%s is set by the harness (the webhook listens and talks on loopback only, with the benchmark's policy and certificates); leave it out", getenv("BENCH_ARGS"), name)
		}
	}
	return k, k.Check()
}

// Check refuses knobs a run cannot honour.
func (k Knobs) Check() error {
	if k.Rounds < 1 || k.Rounds > maxRounds {
		return fmt.Errorf("rounds %d: use 1 to %d", k.Rounds, maxRounds)
	}
	if k.Creates < 10 || k.Creates > maxCreates {
		return fmt.Errorf("creates %d: use 10 to %d", k.Creates, maxCreates)
	}
	if len(k.Existing) == 0 || len(k.Configs) == 0 || len(k.Workloads) == 0 {
		return fmt.Errorf("nothing to measure: %d numbers of existing Services, %d configurations, %d workloads", len(k.Existing), len(k.Configs), len(k.Workloads))
	}
	for _, c := range k.Profile {
		if !slices.Contains(k.Configs, c) {
			return fmt.Errorf("profile %q: the run does not measure that configuration (configurations %s); add it to BENCH_CONFIGS or leave it out of BENCH_PROFILE", c, strings.Join(k.Configs, ","))
		}
	}
	for _, w := range k.Workloads {
		if w.Kind == KindMixed {
			if need := mixedStatic(k.Creates); need > len(staticPool) {
				return fmt.Errorf("creates %d: the mixed workload would request %d static addresses, but the static band has %d free for it; use BENCH_CREATES of at most %d, or leave mixed out of BENCH_WORKLOADS", k.Creates, need, len(staticPool), len(staticPool)*staticEvery)
			}
		}
	}
	return nil
}

func parseWorkload(s string) (Workload, error) {
	kind, clients, ok := strings.Cut(s, ":")
	if !ok || (kind != KindDynamic && kind != KindMixed) {
		return Workload{}, fmt.Errorf("%q is not a workload; use kind:clients with kind %s or %s, for example dynamic:8", s, KindDynamic, KindMixed)
	}
	n, err := intIn("clients of "+s, clients, 1, maxClients)
	if err != nil {
		return Workload{}, err
	}
	return Workload{Kind: kind, Clients: n}, nil
}

func intIn(name, s string, lo, hi int) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < lo || n > hi {
		return 0, fmt.Errorf("%s %q: use a whole number from %d to %d", name, s, lo, hi)
	}
	return n, nil
}

// managedCondition is the name of the matchCondition ours writes with
// --manage-match-conditions.
const managedCondition = matchconditions.Name

// ManagesConditions says whether ours runs with --manage-match-conditions
// on (the last occurrence of the flag wins, as pflag reads it).
func (k Knobs) ManagesConditions() bool {
	on := false
	for _, a := range k.WebhookArgs {
		switch a {
		case "--manage-match-conditions", "--manage-match-conditions=true":
			on = true
		case "--manage-match-conditions=false":
			on = false
		}
	}
	return on
}
