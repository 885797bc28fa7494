//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"clusterip-policy/test/fixtures"
)

// TestMemoryWithEveryRoleAtScale is a measurement, run on demand
// (BENCHMARKS.md, "Informers: one factory per replica and per term"): one
// cluster with E2E_MEMORY_COUNT IPAddresses (default 100,000, made by
// test/ipaddresses), then each webhook binary of E2E_MEMORY_BINARIES
// (name=path,name=path) in turn against it, one at a time, with every
// leader role on: its VmRSS once ready and 60s later, its peak (VmHWM),
// the kube-apiserver's VmRSS then, and the watches it opens by resource.
// Without E2E_MEMORY_BINARIES it is skipped: it takes minutes.
func TestMemoryWithEveryRoleAtScale(t *testing.T) {
	spec := os.Getenv("E2E_MEMORY_BINARIES")
	if spec == "" {
		t.Skip("a measurement: set E2E_MEMORY_BINARIES=name=path[,name=path] (and E2E_MEMORY_COUNT, default 100000)")
	}
	type binary struct{ name, path string }
	var binaries []binary
	for _, item := range strings.Split(spec, ",") {
		name, path, ok := strings.Cut(item, "=")
		if !ok || name == "" {
			t.Fatalf("E2E_MEMORY_BINARIES item %q: want name=path", item)
		}
		abs, err := filepath.Abs(path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(abs); err != nil {
			t.Fatalf("E2E_MEMORY_BINARIES %s: %v", name, err)
		}
		binaries = append(binaries, binary{name, abs})
	}
	count := 100_000
	if v := os.Getenv("E2E_MEMORY_COUNT"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 200_000 {
			t.Fatalf("E2E_MEMORY_COUNT %q: want 1 to 200000", v)
		}
		count = n
	}

	c, ctx := ownEveryRole(t, 60*time.Minute)

	// The addresses, through the command BENCHMARKS.md's memory figures
	// were made with (loopback only, its own bounded concurrency).
	tool := filepath.Join(t.TempDir(), "ipaddresses")
	build := exec.CommandContext(ctx, "go", "build", "-o", tool, "./test/ipaddresses")
	build.Dir = c.Root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build test/ipaddresses: %v\n%s", err, out)
	}
	start := time.Now()
	out, err := exec.CommandContext(ctx, tool, "--kubeconfig", c.AdminKubeconfig, "--count", strconv.Itoa(count), "--timeout", "45m").CombinedOutput()
	if err != nil {
		t.Fatalf("ipaddresses: %v\n%s", err, out)
	}
	t.Logf("e2e: %d IPAddresses created in %s: %s", count, time.Since(start).Round(time.Second), strings.TrimSpace(string(out)))
	baseline, err := watchesByResource(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	apiBefore := statusKiB(t, c.APIServers[0].Pid(), "VmRSS")
	t.Logf("e2e: kube-apiserver VmRSS %s with no webhook", mib(apiBefore))

	for i, b := range binaries {
		c.Bin.Webhook = b.path
		start := time.Now()
		// Not StartWebhooks: its minute to ready is short for the first
		// list of this many addresses on a busy machine.
		w, err := c.StartWebhookUnready(ctx)
		if err != nil {
			t.Fatalf("%s: %v", b.name, err)
		}
		if err := w.WaitReady(ctx, 5*time.Minute); err != nil {
			t.Fatalf("%s: %v", b.name, err)
		}
		idx := len(c.Webhooks) - 1
		if i == 0 {
			if err := c.RegisterWebhooks(ctx); err != nil {
				t.Fatal(err)
			}
		}
		ready := time.Since(start)
		rssReady := statusKiB(t, w.Pid(), "VmRSS")
		// Leading with every role: the backstop in force and an audit pass
		// over the view (the namespaces listed, the scope read).
		fixtures.EventuallyNil(t, b.name+" to lead with every role", 3*time.Minute, func() error {
			return leadingWithEveryRole(ctx, c, idx)
		})
		leading := time.Since(start)
		// 60s after ready, as BENCHMARKS.md's earlier figures.
		select {
		case <-time.After(60*time.Second - leading + ready):
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
		rssLater := statusKiB(t, w.Pid(), "VmRSS")
		hwm := statusKiB(t, w.Pid(), "VmHWM")
		apiRSS := statusKiB(t, c.APIServers[0].Pid(), "VmRSS")
		watches, err := watchesByResource(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		_, rows := countsAdded(baseline, watches)
		t.Logf("e2e: %s: ready in %s, leading with every role in %s; webhook VmRSS %s once ready, %s 60s later, VmHWM %s; kube-apiserver VmRSS %s; watches by resource: %s",
			b.name, ready.Round(100*time.Millisecond), leading.Round(100*time.Millisecond), mib(rssReady), mib(rssLater), mib(hwm), mib(apiRSS), rows)
		// The next binary starts on a cluster without this one: stopped
		// (SIGTERM, the Lease released), its watches closed.
		w.Stop(30 * time.Second)
		fixtures.EventuallyNil(t, b.name+"'s watches to close", time.Minute, func() error {
			now, err := watchesByResource(ctx, c)
			if err != nil {
				return err
			}
			for r, n := range now {
				if n > baseline[r] {
					return fmt.Errorf("%s: %v watches, %v before the webhook", r, n, baseline[r])
				}
			}
			return nil
		})
	}
}

// statusKiB reads a field in kB (VmRSS, VmHWM) of /proc/PID/status.
func statusKiB(t *testing.T, pid int, field string) int {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			if err != nil {
				t.Fatalf("/proc/%d/status %s: %v", pid, line, err)
			}
			return n
		}
	}
	t.Fatalf("/proc/%d/status has no %s", pid, field)
	return 0
}

func mib(kib int) string { return fmt.Sprintf("%.1f MiB", float64(kib)/1024) }
