//go:build e2e

package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"clusterip-policy/test/e2e/framework"
	"clusterip-policy/test/fixtures"
)

// cliPolicy: the benchmark's /16 with one reserved range for the namespace
// the Services are created in, so that bands --usage has a range row to
// count and suggest a range to offer first.
const cliPolicy = "allowedCIDRs: [10.96.0.0/16]\nreservedRanges:\n- {cidr: 10.96.0.64/26, namespaces: [scale], note: scale}\n"

// TestBenchCLI is `make bench-cli`: `bands --usage` and `suggest` against a
// real apiserver whose /16 holds BENCH_CLI_SERVICES Services (20,000 by
// default), each command run three times, its wall time and peak memory
// (the child's maximum resident set) written to .local/bench/cli.md. It
// runs only with BENCH_CLI=1: creating the Services takes minutes.
func TestBenchCLI(t *testing.T) {
	if os.Getenv("BENCH_CLI") != "1" {
		t.Skip("the CLI benchmark runs with BENCH_CLI=1 (make bench-cli)")
	}
	n := 20000
	if s := os.Getenv("BENCH_CLI_SERVICES"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 || v > 60000 {
			t.Fatalf("BENCH_CLI_SERVICES %q: want a number of Services from 1 to 60000 (the /16's dynamic band)", s)
		}
		n = v
	}
	benchCLI(t, n, 3, 45*time.Minute)
}

// TestBenchCLISmoke is the same with 200 Services and one run of each
// command, in CI (bench-smoke): it fails when the commands' counts or
// suggestions are wrong, whatever their speed.
func TestBenchCLISmoke(t *testing.T) { benchCLI(t, 200, 1, 5*time.Minute) }

func benchCLI(t *testing.T, services, runs int, within time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	c, err := framework.Start(ctx, framework.Options{Policy: fixtures.Policy(cliPolicy), NoRegister: true, NoRBAC: true, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	cs := c.Client(0)
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "scale"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := createServices(ctx, c, "scale", services); err != nil {
		t.Fatal(err)
	}
	t.Logf("bench: %d Services created in %s", services, time.Since(start).Round(time.Millisecond))
	// Two of the range's addresses named, so its row counts them.
	for i, ip := range []string{"10.96.0.65", "10.96.0.66"} {
		if _, err := cs.CoreV1().Services("scale").Create(ctx, fixtures.Service("scale", fmt.Sprintf("in-range-%d", i), fixtures.WithClusterIP(ip)), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	policyFile := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policyFile, []byte(fixtures.Policy(cliPolicy)), 0o644); err != nil {
		t.Fatal(err)
	}
	cluster := []string{"--policy", policyFile, "--kubeconfig=" + c.AdminKubeconfig}
	commands := []struct {
		name  string
		args  []string
		check func(out []byte) error
	}{
		{"bands --usage -o json", append([]string{"bands", "--usage", "-o", "json"}, cluster...), func(out []byte) error {
			return checkBandsUsage(out, services)
		}},
		{"suggest --namespace scale -c 5", append([]string{"suggest", "--namespace", "scale", "-c", "5"}, cluster...), func(out []byte) error {
			return checkSuggest(ctx, cs, out)
		}},
	}
	var report strings.Builder
	fmt.Fprintf(&report, "# CLI at scale\n\n- %d Services (plus the apiserver's kubernetes and 2 in the reserved range) in 10.96.0.0/16, kube-apiserver and etcd on this machine; %d runs of each command\n- %s\n\n| command | wall time per run | peak RSS per run |\n|---|---|---|\n", services, runs, time.Now().UTC().Format(time.RFC3339))
	for _, cmd := range commands {
		var walls, rss []string
		for range runs {
			out, wall, maxRSS, err := measure(ctx, c.Bin.Webhook, cmd.args)
			if err != nil {
				t.Fatalf("%s: %v\n%s", cmd.name, err, out)
			}
			if err := cmd.check(out); err != nil {
				t.Fatalf("%s: %v\n%s", cmd.name, err, out)
			}
			walls = append(walls, wall.Round(time.Millisecond).String())
			rss = append(rss, fmt.Sprintf("%.1f MiB", float64(maxRSS)/1024))
		}
		t.Logf("bench: %s: wall %v, peak RSS %v", cmd.name, walls, rss)
		fmt.Fprintf(&report, "| `%s` | %s | %s |\n", cmd.name, strings.Join(walls, ", "), strings.Join(rss, ", "))
	}
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, ".local", "bench")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cli.md"), []byte(report.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// createServices creates n Services without an address in ns, 16 at a
// time; every create is bounded by createTimeout and the whole by ctx.
func createServices(ctx context.Context, c *framework.Cluster, ns string, n int) error {
	cfg := c.RESTConfig(0)
	cfg.QPS, cfg.Burst, cfg.Timeout = 1e6, 1e6, createTimeout
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(n) || ctx.Err() != nil {
					return
				}
				if _, err := cs.CoreV1().Services(ns).Create(ctx, fixtures.Service(ns, fmt.Sprintf("s-%d", i)), metav1.CreateOptions{}); err != nil {
					errs <- fmt.Errorf("create Service %s/s-%d: %w", ns, i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs // nil when none failed
}

// measure runs the binary with args and returns its output, wall time and
// peak resident set in KiB (Linux's ru_maxrss).
func measure(ctx context.Context, bin string, args []string) ([]byte, time.Duration, int64, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = []string{"HOME=" + os.TempDir(), "PATH=" + os.Getenv("PATH")}
	start := time.Now()
	out, err := cmd.Output()
	wall := time.Since(start)
	var maxRSS int64
	if cmd.ProcessState != nil {
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			maxRSS = ru.Maxrss
		}
	}
	return out, wall, maxRSS, err
}

// checkBandsUsage: every Service created is counted, in the bands and the
// reserved range's row.
func checkBandsUsage(out []byte, services int) error {
	var doc struct {
		Usage []struct {
			Band      string `json:"band"`
			Allocated uint64 `json:"allocated"`
		} `json:"usage"`
		ReservedRanges []struct {
			Range string `json:"range"`
			Used  uint64 `json:"used"`
		} `json:"reservedRanges"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		return fmt.Errorf("not the JSON of bands --usage: %w", err)
	}
	var used uint64
	for _, b := range doc.Usage {
		used += b.Allocated
	}
	// Ours, the 2 in the range and the apiserver's kubernetes Service.
	if want := uint64(services + 3); used != want {
		return fmt.Errorf("the bands count %d addresses allocated, want %d", used, want)
	}
	if len(doc.ReservedRanges) != 1 || doc.ReservedRanges[0].Used != 2 {
		return fmt.Errorf("reserved ranges %+v, want 10.96.0.64/26 with 2 used", doc.ReservedRanges)
	}
	return nil
}

// checkSuggest: five addresses, each free (no IPAddress) and distinct, the
// reserved range's first as the namespace is the range's.
func checkSuggest(ctx context.Context, cs kubernetes.Interface, out []byte) error {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 5 {
		return fmt.Errorf("%d lines, want 5", len(lines))
	}
	var seen []string
	for _, l := range lines {
		ip, why, _ := strings.Cut(l, "\t")
		if _, err := netip.ParseAddr(ip); err != nil || slices.Contains(seen, ip) {
			return fmt.Errorf("line %q: not a new address", l)
		}
		seen = append(seen, ip)
		if !strings.Contains(why, "reserved range 10.96.0.64/26") {
			return fmt.Errorf("line %q: want the namespace's reserved range offered first", l)
		}
		if _, err := cs.NetworkingV1().IPAddresses().Get(ctx, ip, metav1.GetOptions{}); err == nil {
			return fmt.Errorf("suggested %s, which is allocated", ip)
		}
	}
	return nil
}
