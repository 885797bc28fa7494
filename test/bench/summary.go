package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
)

// Figure is one column of the summary.
type Figure struct {
	Key   string // JSON key of Result and of Row.Figures
	Label string
	get   func(Result) Num
}

// Figures in column order.
var Figures = []Figure{
	{"createsPerSec", "creates/s", func(r Result) Num { return r.CreatesPerSec }},
	{"p50ms", "p50 ms", func(r Result) Num { return r.P50ms }},
	{"p90ms", "p90 ms", func(r Result) Num { return r.P90ms }},
	{"p99ms", "p99 ms", func(r Result) Num { return r.P99ms }},
	{"apiserverCPUmsPerCreate", "apiserver CPU ms/create", func(r Result) Num { return r.APIServerCPUPerCreate }},
	{"webhookCPUmsPerCall", "webhook CPU ms/call", func(r Result) Num { return r.WebhookCPUPerCall }},
	{"webhookCallsPerCreate", "webhook calls/create", func(r Result) Num { return r.CallsPerCreate }},
	{"mutateAdmissionMeanms", "mutate admission ms", func(r Result) Num { return r.MutateMeanms }},
	{"validateAdmissionMeanms", "validate admission ms", func(r Result) Num { return r.ValidateMeanms }},
	{"vapAdmissionMeanms", "VAP plugin ms", func(r Result) Num { return r.VAPPluginMeanms }},
	{"mapPluginmsPerCreate", "MAP plugin ms/create", func(r Result) Num { return r.MAPPluginPerCreate }},
	{"webhookPluginsmsPerCreate", "webhook plugins ms/create", func(r Result) Num { return r.WebhookPluginPerCreate }},
	{"matchConditionsmsPerCreate", "skipping matchConditions ms/create", func(r Result) Num { return r.MatchCondPerCreate }},
}

// ratioKeys are the figures compared with none and nop (ratio of medians).
var ratioKeys = []string{"createsPerSec", "p50ms", "p99ms", "apiserverCPUmsPerCreate"}

// Row is one configuration at one workload and number of existing
// Services, over every round.
type Row struct {
	Existing int               `json:"existing"`
	Workload Workload          `json:"workload"`
	Config   string            `json:"config"`
	Rounds   int               `json:"rounds"`
	Problems int               `json:"runsWithProblems"` // such runs are left out of Figures
	Figures  map[string]Spread `json:"figures"`
	VsNone   map[string]Num    `json:"vsNone,omitempty"`
	VsNop    map[string]Num    `json:"vsNop,omitempty"`
	// PairedVsNone and PairedVsNop are the ratios taken within each round
	// (this configuration's run over the base's run of the same round,
	// both without problems), median and range over the rounds. The
	// machine's pace drifts between rounds more than configurations
	// differ; a ratio within a round cancels most of that drift, so these
	// are the figures to quote.
	PairedVsNone map[string]Spread `json:"pairedVsNone,omitempty"`
	PairedVsNop  map[string]Spread `json:"pairedVsNop,omitempty"`
}

// Meta says where and how the figures were taken.
type Meta struct {
	Started       string `json:"started"`
	Finished      string `json:"finished"`
	Knobs         Knobs  `json:"knobs"`
	Machine       string `json:"machine"` // CPUs, load average at start and end
	KubeAPIServer string `json:"kubeAPIServer"`
	Commit        string `json:"commit"`
	Command       string `json:"command"`
	VAPExpression string `json:"vapExpression"`
}

// Summary is a whole benchmark: every run and the rows over rounds.
type Summary struct {
	Meta Meta     `json:"meta"`
	Rows []Row    `json:"rows"`
	Runs []Result `json:"runs"`
}

// Summarize groups runs by number of existing Services, workload and
// configuration (in knob order), and puts the median and range of each
// figure over the runs without problems, with the ratios of the medians to
// none and to nop at the same workload.
func Summarize(meta Meta, runs []Result) Summary {
	s := Summary{Meta: meta, Runs: runs}
	type key struct {
		existing int
		w        Workload
		config   string
	}
	groups := map[key][]Result{}
	var order []key
	for _, r := range runs {
		k := key{r.Existing, r.Workload, r.Config}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], r)
	}
	configRank := func(c string) int {
		if i := slices.Index(meta.Knobs.Configs, c); i >= 0 {
			return i
		}
		return len(meta.Knobs.Configs) + slices.Index(AllConfigs, c)
	}
	workloadRank := func(w Workload) int { return slices.Index(meta.Knobs.Workloads, w) }
	slices.SortStableFunc(order, func(a, b key) int {
		if a.existing != b.existing {
			return a.existing - b.existing
		}
		if wa, wb := workloadRank(a.w), workloadRank(b.w); wa != wb {
			return wa - wb
		}
		return configRank(a.config) - configRank(b.config)
	})
	rows := map[key]*Row{}
	for _, k := range order {
		row := &Row{Existing: k.existing, Workload: k.w, Config: k.config, Figures: map[string]Spread{}}
		for _, f := range Figures {
			var v []float64
			for _, r := range groups[k] {
				if len(r.Problems) == 0 {
					v = append(v, float64(f.get(r)))
				}
			}
			row.Figures[f.Key] = SpreadOf(v)
		}
		for _, r := range groups[k] {
			row.Rounds++
			if len(r.Problems) > 0 {
				row.Problems++
			}
		}
		rows[k] = row
	}
	// round -> run, per group, for the paired ratios
	byRound := func(k key) map[int]Result {
		m := map[int]Result{}
		for _, r := range groups[k] {
			if len(r.Problems) == 0 {
				m[r.Round] = r
			}
		}
		return m
	}
	for _, k := range order {
		row := rows[k]
		for _, base := range []struct {
			config string
			into   *map[string]Spread
		}{{ConfigNone, &row.PairedVsNone}, {ConfigNop, &row.PairedVsNop}} {
			bk := key{k.existing, k.w, base.config}
			if _, ok := rows[bk]; !ok || base.config == k.config {
				continue
			}
			mine, theirs := byRound(k), byRound(bk)
			*base.into = map[string]Spread{}
			for _, fk := range ratioKeys {
				f := Figures[slices.IndexFunc(Figures, func(f Figure) bool { return f.Key == fk })]
				var v []float64
				for round, r := range mine {
					if b, ok := theirs[round]; ok {
						v = append(v, Ratio(float64(f.get(r)), float64(f.get(b))))
					}
				}
				(*base.into)[fk] = SpreadOf(v)
			}
		}
		for _, base := range []struct {
			config string
			into   *map[string]Num
		}{{ConfigNone, &row.VsNone}, {ConfigNop, &row.VsNop}} {
			b, ok := rows[key{k.existing, k.w, base.config}]
			if !ok || base.config == k.config {
				continue
			}
			*base.into = map[string]Num{}
			for _, f := range ratioKeys {
				(*base.into)[f] = Num(Ratio(float64(row.Figures[f].Median), float64(b.Figures[f].Median)))
			}
		}
		s.Rows = append(s.Rows, *row)
	}
	return s
}

// fmtRatioSpread shows a spread of ratios: 0.95× (0.90–1.02).
func fmtRatioSpread(s Spread) string {
	switch s.N {
	case 0:
		return "-"
	case 1:
		return fmtRatio(s.Median)
	}
	return fmt.Sprintf("%s (%s–%s)", fmtRatio(s.Median), strings.TrimSuffix(fmtRatio(s.Min), "×"), strings.TrimSuffix(fmtRatio(s.Max), "×"))
}

// JSON is the summary as indented JSON.
func (s Summary) JSON() ([]byte, error) { return json.MarshalIndent(s, "", "  ") }

func fmtNum(n Num) string {
	f := float64(n)
	switch {
	case math.IsNaN(f) || math.IsInf(f, 0):
		return "-"
	case math.Abs(f) >= 100:
		return fmt.Sprintf("%.0f", f)
	case math.Abs(f) >= 10:
		return fmt.Sprintf("%.1f", f)
	default:
		return fmt.Sprintf("%.2f", f)
	}
}

func fmtSpread(s Spread) string {
	if s.N == 0 {
		return "-"
	}
	if s.N == 1 {
		return fmtNum(s.Median)
	}
	return fmt.Sprintf("%s (%s–%s)", fmtNum(s.Median), fmtNum(s.Min), fmtNum(s.Max))
}

func fmtRatio(n Num) string {
	if math.IsNaN(float64(n)) || math.IsInf(float64(n), 0) {
		return "-"
	}
	return fmt.Sprintf("%.2f×", float64(n))
}

// WriteRoundTable prints the runs of one round, one line each.
func WriteRoundTable(w io.Writer, runs []Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "existing\tworkload\tconfig\tcreates\terrors\tcreates/s\tp50 ms\tp90 ms\tp99 ms\tapi CPU ms/create\twh CPU ms/call\tcalls/create\tmutate ms\tvalidate ms\tVAP plugin ms\tproblems\t")
	for _, r := range runs {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t\n",
			r.Existing, r.Workload, r.Config, r.Creates, r.Errors, fmtNum(r.CreatesPerSec), fmtNum(r.P50ms), fmtNum(r.P90ms), fmtNum(r.P99ms),
			fmtNum(r.APIServerCPUPerCreate), fmtNum(r.WebhookCPUPerCall), fmtNum(r.CallsPerCreate), fmtNum(r.MutateMeanms), fmtNum(r.ValidateMeanms), fmtNum(r.VAPPluginMeanms), len(r.Problems))
	}
	tw.Flush()
	for _, r := range runs {
		for _, p := range r.Problems {
			fmt.Fprintf(w, "PROBLEM round %d, %d existing, %s, %s: %s\n", r.Round, r.Existing, r.Workload, r.Config, p)
		}
	}
}

// Markdown is the summary as tables, one per number of existing Services
// and workload, for BENCHMARKS.md to quote.
func (s Summary) Markdown() string {
	var b strings.Builder
	m := s.Meta
	fmt.Fprintf(&b, "# End-to-end create benchmark\n\n")
	fmt.Fprintf(&b, "- command: `%s`\n", m.Command)
	fmt.Fprintf(&b, "- %s to %s; commit %s; kube-apiserver %s\n", m.Started, m.Finished, m.Commit, m.KubeAPIServer)
	fmt.Fprintf(&b, "- machine: %s\n", m.Machine)
	fmt.Fprintf(&b, "- %d rounds of %d creates per run; configurations %s, alternated in each round; workloads %v; ours with extra args %q\n",
		m.Knobs.Rounds, m.Knobs.Creates, strings.Join(m.Knobs.Configs, ", "), m.Knobs.Workloads, strings.Join(m.Knobs.WebhookArgs, " "))
	fmt.Fprintf(&b, "- cells: median (min–max) over the rounds without problems; ratios vs none and vs nop are taken within each round (this run over the base's run of the same round), median (min–max) over the rounds (JSON: pairedVsNone, pairedVsNop; vsNone and vsNop are the ratios of the medians); CPU from /proc/PID/stat (10 ms ticks); admission ms: apiserver_admission_webhook_admission_duration_seconds sum/count; calls: apiserver_admission_webhook_request_total; VAP plugin ms: apiserver_admission_controller_admission_duration_seconds{name=\"ValidatingAdmissionPolicy\"} sum/count on CREATE (runs in every configuration); MAP plugin ms/create: the same histogram for MutatingAdmissionPolicy over the creates; webhook plugins ms/create: the same histogram for MutatingAdmissionWebhook + ValidatingAdmissionWebhook (rules, selectors, matchConditions and calls) over the creates; skipping matchConditions ms/create: apiserver_admission_match_condition_evaluation_seconds sum on CREATE (timed only when a condition skips a webhook) over the creates\n")
	fmt.Fprintf(&b, "- vap: `%s`\n", strings.Join(strings.Fields(m.VAPExpression), " "))
	var last string
	for _, r := range s.Rows {
		if h := fmt.Sprintf("%d existing Services, %s clients", r.Existing, r.Workload); h != last {
			last = h
			fmt.Fprintf(&b, "\n## %d existing Services, %s (%d clients)\n\n", r.Existing, r.Workload.Kind, r.Workload.Clients)
			b.WriteString("| config |")
			for _, f := range Figures {
				b.WriteString(" " + f.Label + " |")
			}
			b.WriteString(" creates/s vs none | p99 vs none | API CPU vs none | creates/s vs nop | p99 vs nop | API CPU vs nop | runs (with problems) |\n|---|")
			b.WriteString(strings.Repeat("---:|", len(Figures)+7) + "\n")
		}
		fmt.Fprintf(&b, "| %s |", r.Config)
		for _, f := range Figures {
			fmt.Fprintf(&b, " %s |", fmtSpread(r.Figures[f.Key]))
		}
		for _, vs := range []map[string]Spread{r.PairedVsNone, r.PairedVsNop} {
			for _, k := range []string{"createsPerSec", "p99ms", "apiserverCPUmsPerCreate"} {
				if vs == nil {
					b.WriteString(" - |")
				} else {
					fmt.Fprintf(&b, " %s |", fmtRatioSpread(vs[k]))
				}
			}
		}
		fmt.Fprintf(&b, " %d (%d) |\n", r.Rounds, r.Problems)
	}
	return b.String()
}
