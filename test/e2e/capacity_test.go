//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"clusterip-policy/internal/testutil"
	"clusterip-policy/manifests"
	"clusterip-policy/test/e2e/framework"
	"clusterip-policy/test/fixtures"
)

// bandCounts are the four states of clusterip_policy_band_addresses for
// one band.
type bandCounts struct{ free, allocated, held, reservedRange float64 }

// scrapeBand reads the webhook's clusterip_policy_band_addresses of one
// band of the ServiceCIDR "kubernetes", the four states from one scrape (one
// snapshot of the view: separate scrapes may straddle a change and add up
// to more than the band).
func scrapeBand(ctx context.Context, c *framework.Cluster, band string) (bandCounts, error) {
	var b bandCounts
	text, err := c.Webhooks[0].Metrics()
	if err != nil {
		return b, err
	}
	for state, dst := range map[string]*float64{"free": &b.free, "allocated": &b.allocated, "held": &b.held, "reserved-range": &b.reservedRange} {
		v, err := framework.SumMetric(strings.NewReader(text), "clusterip_policy_band_addresses", `service_cidr="kubernetes"`, `band="`+band+`"`, `state="`+state+`"`)
		if err != nil {
			return b, err
		}
		*dst = v
	}
	return b, nil
}

// waitBand waits until the webhook's view shows want allocated addresses
// in the band (its IPAddress watch lags a create by a moment).
func waitBand(t *testing.T, ctx context.Context, c *framework.Cluster, band string, allocated float64) bandCounts {
	t.Helper()
	var last bandCounts
	var err error
	if fixtures.Wait(10*time.Second, func() bool {
		last, err = scrapeBand(ctx, c, band)
		return err == nil && last.allocated == allocated
	}) != nil {
		t.Fatalf("the %s band's gauge never showed %v allocated within 10s: last %+v (%v)", band, allocated, last, err)
	}
	return last
}

// With --service-cluster-ip-range=10.96.0.0/27 the dynamic band holds 14
// addresses (10.96.0.17-10.96.0.30). Dynamic creates fill it one by one;
// after each, the webhook's gauge is read, and the alert
// ClusterIPPolicyDynamicBandFilling, as shipped in alerts.yaml, is
// evaluated by promtool on those scraped values. It must fire before the
// 15th create, the first that gets a static-band address; and `bands
// --usage` shows what the gauge shows.
func TestDynamicBandFillingAlertsBeforeTheStaticBandIsUsed(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		testutil.MissingTool(t, "promtool is not installed (apt-get install prometheus): the alert cannot be evaluated")
	}
	c := own(t, framework.Options{
		APIServers: []framework.APIServerOptions{{ServiceClusterIPRange: "10.96.0.0/27"}},
		// No reservation: the 15th create below may get any static-band
		// address, and one reserved for kube-dns would be denied (holds are
		// off here), which is another test's business.
		Policy:   fixtures.Policy("allowedCIDRs: [10.96.0.0/12]\nreserveKubernetesService: true\nenforcement:\n  default: deny\n"),
		Webhooks: 1,
	})
	cs := c.Client(0)
	ctx := testContext(t, 3*time.Minute)
	ns := namespace(t, c, "capacity")
	dynamic := band{netip.MustParseAddr("10.96.0.17"), netip.MustParseAddr("10.96.0.30")}
	static := band{netip.MustParseAddr("10.96.0.1"), netip.MustParseAddr("10.96.0.16")}

	steps := []bandCounts{waitBand(t, ctx, c, "dynamic", 0)}
	if s := steps[0]; s.free != 14 || s.held != 0 || s.reservedRange != 0 {
		t.Fatalf("an empty /27: dynamic band %+v, want 14 free", s)
	}
	for i := 1; i <= 14; i++ {
		got := mustCreate(t, ctx, cs, fixtures.Service(ns, fmt.Sprintf("dynamic-%02d", i)))
		if !dynamic.contains(got.Spec.ClusterIP) {
			t.Fatalf("%s got %s, outside the dynamic band %s", got.Name, got.Spec.ClusterIP, dynamic)
		}
		s := waitBand(t, ctx, c, "dynamic", float64(i))
		if s.free != float64(14-i) {
			t.Fatalf("after %d dynamic creates: %+v, want %d free", i, s, 14-i)
		}
		steps = append(steps, s)
	}

	t.Run("bands --usage shows the gauge's counts", func(t *testing.T) {
		staticGauge := waitBand(t, ctx, c, "static", 1) // default/kubernetes
		out := runBandsUsage(t, c)
		for _, row := range out {
			want := map[string]bandCounts{"dynamic": steps[14], "static": staticGauge}[row.Band]
			got := bandCounts{float64(row.Free), float64(row.Allocated), float64(row.Held), float64(row.ReservedRange)}
			if row.ServiceCIDR != "kubernetes" || row.CIDR != "10.96.0.0/27" || got != want {
				t.Errorf("bands --usage row %+v, want the gauge's %+v", row, want)
			}
		}
		if len(out) != 2 {
			t.Fatalf("bands --usage printed %d rows, want 2 (static and dynamic): %+v", len(out), out)
		}
	})

	first := firstFiringStep(t, promtool, steps)
	t.Logf("e2e: capacity: /27 dynamic band (14 addresses): ClusterIPPolicyDynamicBandFilling's expression first holds after %d dynamic creates (%v free); the dynamic band is full after 14", first, steps[first].free)
	if first < 0 || first > 14 {
		t.Fatalf("the alert never fired while the dynamic band filled (%+v)", steps)
	}
	if first == 0 || steps[first].free == 0 {
		t.Fatalf("the alert fired at step %d with %v free: want it silent on an empty band and firing while room is left", first, steps[first].free)
	}

	t.Run("the next dynamic create is the first in the static band", func(t *testing.T) {
		got := mustCreate(t, ctx, cs, fixtures.Service(ns, "spilled"))
		if !static.contains(got.Spec.ClusterIP) {
			t.Fatalf("the 15th dynamic Service got %s, want the static band %s (the dynamic band is full)", got.Spec.ClusterIP, static)
		}
	})
}

type usageRow struct {
	ServiceCIDR   string `json:"serviceCIDR"`
	CIDR          string `json:"cidr"`
	Band          string `json:"band"`
	Size          uint64 `json:"size"`
	Free          uint64 `json:"free"`
	Allocated     uint64 `json:"allocated"`
	Held          uint64 `json:"held"`
	ReservedRange uint64 `json:"reservedRange"`
}

// runBandsUsage runs the real `bin/clusterip-policy bands --usage -o json`
// against the cluster.
func runBandsUsage(t *testing.T, c *framework.Cluster) []usageRow {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.Bin.Webhook, "bands", "--usage", "-o", "json", "--kubeconfig="+c.AdminKubeconfig)
	cmd.Env = []string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH")}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("bands --usage: %v (%s)", err, out)
	}
	var doc struct {
		Usage []usageRow `json:"usage"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatalf("bands --usage -o json: %v: %s", err, out)
	}
	return doc.Usage
}

// firstFiringStep evaluates the shipped alert on the scraped steps with
// promtool: each step's four samples last 6 minutes (the alert's 5 minutes
// of for, and one), and at each step's end the test expects no alert;
// promtool lists the steps where it fired. Returns the first, or -1.
func firstFiringStep(t *testing.T, promtool string, steps []bandCounts) int {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "manifests", manifests.MonitoringDir, manifests.AlertsFile))
	if err != nil {
		t.Fatal(err)
	}
	rf, err := manifests.ParseRulesFile(data)
	if err != nil {
		t.Fatal(err)
	}
	const alert = "ClusterIPPolicyDynamicBandFilling"
	var kept []manifests.Rule
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert == alert {
				r.Annotations = nil
				kept = append(kept, r)
			}
		}
	}
	if len(kept) != 1 {
		t.Fatalf("alerts.yaml has %d rules named %s, want 1", len(kept), alert)
	}
	rules, err := yaml.Marshal(manifests.RulesFile{Groups: []manifests.RuleGroup{{Name: "capacity", Rules: kept}}})
	if err != nil {
		t.Fatal(err)
	}
	const perStep = 6
	series := map[string][]string{}
	for _, s := range steps {
		for state, v := range map[string]float64{"free": s.free, "allocated": s.allocated, "held": s.held, "reserved-range": s.reservedRange} {
			series[state] = append(series[state], fmt.Sprintf("%gx%d", v, perStep-1))
		}
	}
	var test strings.Builder
	test.WriteString("rule_files: [rules.yaml]\nevaluation_interval: 1m\ntests:\n- interval: 1m\n  input_series:\n")
	for state, vs := range series {
		fmt.Fprintf(&test, "  - series: 'clusterip_policy_band_addresses{job=\"clusterip-policy-webhook\",instance=\"e2e\",service_cidr=\"kubernetes\",cidr=\"10.96.0.0/27\",band=\"dynamic\",state=\"%s\"}'\n    values: '%s'\n", state, strings.Join(vs, " "))
	}
	test.WriteString("  alert_rule_test:\n")
	for i := range steps {
		fmt.Fprintf(&test, "  - eval_time: %dm\n    alertname: %s\n    exp_alerts: []\n", i*perStep+perStep-1, alert)
	}
	dir := t.TempDir()
	for name, b := range map[string][]byte{"rules.yaml": rules, "test.yaml": []byte(test.String())} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, promtool, "test", "rules", "test.yaml")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err == nil {
		return -1
	}
	// The first failure is the earliest: promtool reports in eval order,
	// durations as Go spells them (1h17m).
	m := regexp.MustCompile(`alertname: ` + alert + `, time: ([0-9hms]+),`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("promtool test rules failed without naming %s: %v\n%s", alert, err, out)
	}
	at, perr := time.ParseDuration(string(m[1]))
	if perr != nil {
		t.Fatalf("promtool named the time %q: %v", m[1], perr)
	}
	return int(at/time.Minute) / perStep
}

// TestReservedRangeUsage: a reserved range's use is exported
// (clusterip_policy_reserved_range_addresses) and printed by bands --usage
// against the cluster's policy, counted on the live view: two Services of
// the range's namespace name two of its eight addresses.
func TestReservedRangeUsage(t *testing.T) {
	spec := "allowedCIDRs: [10.96.0.0/16]\nreservedRanges:\n- {cidr: 10.96.0.40/29, namespaces: [team-db], note: databases}\n"
	c := own(t, framework.Options{Policy: fixtures.Policy(spec), Webhooks: 1})
	cs := c.Client(0)
	ctx := testContext(t, 2*time.Minute)
	createNamespace(t, c, "team-db")
	for i, ip := range []string{"10.96.0.41", "10.96.0.42"} {
		mustCreate(t, ctx, cs, fixtures.Service("team-db", fmt.Sprintf("db-%d", i), fixtures.WithClusterIP(ip)))
	}
	scrape := func() (used, free float64, err error) {
		text, err := c.Webhooks[0].Metrics()
		if err != nil {
			return 0, 0, err
		}
		if used, err = framework.SumMetric(strings.NewReader(text), "clusterip_policy_reserved_range_addresses", `range="10.96.0.40/29"`, `state="used"`); err != nil {
			return 0, 0, err
		}
		free, err = framework.SumMetric(strings.NewReader(text), "clusterip_policy_reserved_range_addresses", `range="10.96.0.40/29"`, `state="free"`)
		return used, free, err
	}
	fixtures.EventuallyNil(t, "the range's gauge to count the two Services", 10*time.Second, func() error {
		used, free, err := scrape()
		if err != nil {
			return fmt.Errorf("scrape the range's gauge: %w", err)
		}
		if used != 2 || free != 6 {
			return fmt.Errorf("used %v free %v, want 2 and 6", used, free)
		}
		return nil
	})
	policyFile := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policyFile, []byte(fixtures.Policy(spec)), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, c.Bin.Webhook, "bands", "--usage", "-o", "json", "--policy", policyFile, "--kubeconfig="+c.AdminKubeconfig)
	cmd.Env = []string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH")}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("bands --usage: %v (%s)", err, out)
	}
	var doc struct {
		ReservedRanges []struct {
			Range            string `json:"range"`
			Size, Used, Free uint64
		} `json:"reservedRanges"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	// suggest offers the range's free addresses to its namespace first,
	// and none of them to another.
	for _, tc := range []struct{ ns, want string }{
		{"team-db", "10.96.0.40\treserved range 10.96.0.40/29 (databases)\n10.96.0.43\treserved range 10.96.0.40/29 (databases)\n10.96.0.44\treserved range 10.96.0.40/29 (databases)\n"},
		{"default", "10.96.0.2\tstatic band of ServiceCIDR \"kubernetes\"\n10.96.0.3\tstatic band of ServiceCIDR \"kubernetes\"\n10.96.0.4\tstatic band of ServiceCIDR \"kubernetes\"\n"},
	} {
		cmd := exec.CommandContext(ctx, c.Bin.Webhook, "suggest", "--namespace", tc.ns, "-c", "3", "--policy", policyFile, "--kubeconfig="+c.AdminKubeconfig)
		cmd.Env = []string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH")}
		got, err := cmd.Output()
		if err != nil || string(got) != tc.want {
			t.Errorf("suggest --namespace %s: %v\n%s\nwant\n%s", tc.ns, err, got, tc.want)
		}
	}
	if len(doc.ReservedRanges) != 1 || doc.ReservedRanges[0].Range != "10.96.0.40/29 (databases)" || doc.ReservedRanges[0].Size != 8 || doc.ReservedRanges[0].Used != 2 || doc.ReservedRanges[0].Free != 6 {
		t.Fatalf("bands --usage reservedRanges %+v, want 10.96.0.40/29 (databases): 8, 2 used, 6 free", doc.ReservedRanges)
	}
}
