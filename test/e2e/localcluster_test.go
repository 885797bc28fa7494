//go:build e2e

package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"clusterip-policy/test/e2e/framework"
)

// TestMakeUpDemoDown runs what the README tells a newcomer to run: `make up`
// (hack/local-up.sh), `make demo` (hack/demo.sh) and `make down`
// (hack/local-down.sh), in a directory of the test's own, and checks that
// the local webhook runs as manifests/base deploys it (the policy object,
// the hold, the managed condition) and that the demo shows one denial per
// rule it promises, then that nothing it started is left running.
func TestMakeUpDemoDown(t *testing.T) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	env := append(os.Environ(), "LOCAL_DIR="+filepath.Join(dir, "cluster"), "LOCAL_KUBECONFIG="+filepath.Join(dir, "kubeconfig"))
	run := func(t *testing.T, timeout time.Duration, script string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(root, "hack", script))
		cmd.Dir, cmd.Env = root, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("hack/%s: %v\n%s", script, err, out)
		}
		return string(out)
	}
	pidsFile := filepath.Join(dir, "cluster", "pids")
	t.Cleanup(func() {
		if _, err := os.Stat(pidsFile); err == nil {
			run(t, time.Minute, "local-down.sh") // a failed test leaves nothing running
		}
	})

	up := run(t, 4*time.Minute, "local-up.sh")
	for _, want := range []string{"policy: ClusterIPPolicy default, from examples/clusterippolicy.yaml", "stop with: make down"} {
		if !strings.Contains(up, want) {
			t.Errorf("make up's output lacks %q:\n%s", want, up)
		}
	}
	pids := readPids(t, pidsFile)
	if len(pids) != 3 {
		t.Fatalf("make up recorded %d processes, want etcd, kube-apiserver, webhook: %v", len(pids), pids)
	}

	demo := run(t, 2*time.Minute, "demo.sh")
	t.Logf("make demo:\n%s", demo)
	for _, want := range []string{
		// The policy object is in force, as in the base.
		"default   True    1            1",
		// The reservation is held before its Service exists.
		"10.96.0.10   kube-system   kube-dns",
		// The leader wrote the managed condition into both configurations.
		"mutatingwebhookconfiguration clusterip-policy: not-default-kubernetes policy-may-apply",
		"validatingwebhookconfiguration clusterip-policy: not-default-kubernetes allocating-requests-only policy-may-apply",
		"patched: the webhook assigns the reserved 10.96.0.10",
		"denied by mutate-services.clusterip-policy.io: spec.clusterIP: Invalid value: \"10.96.0.10\": is reserved for Service kube-system/kube-dns",
		"denied by mutate-services.clusterip-policy.io: spec.clusterIP: Invalid value: \"10.96.200.5\": lies in the dynamic band",
		"denied by mutate-services.clusterip-policy.io: spec.clusterIP: Invalid value: \"10.200.0.1\": is outside every active Service CIDR",
		"kube-system   kube-dns      ClusterIP   10.96.0.10",
		"reserved-for-other", "static-ip-in-dynamic-band", "outside-service-cidrs",
	} {
		if !strings.Contains(demo, want) {
			t.Errorf("make demo's output lacks %q", want)
		}
	}
	// The plain create (my-service) never reached the webhook: the managed
	// condition skipped it, as it does in a deployed cluster.
	if decisions := demo[strings.Index(demo, "6. The webhook's decisions"):]; strings.Contains(decisions, "default/my-service") {
		t.Errorf("the demo's decision table has my-service, which the managed condition should have kept from the webhook:\n%s", decisions)
	}
	// A second run starts from a clean slate (it deletes what the first made).
	if again := run(t, 2*time.Minute, "demo.sh"); !strings.Contains(again, "allowed: service/kube-dns created") {
		t.Errorf("a second make demo did not create kube-dns again:\n%s", again)
	}

	down := run(t, time.Minute, "local-down.sh")
	for _, name := range []string{"webhook", "kube-apiserver", "etcd"} {
		if !strings.Contains(down, "stopping "+name) {
			t.Errorf("make down did not stop %s:\n%s", name, down)
		}
	}
	for name, pid := range pids {
		if syscall.Kill(pid, 0) == nil {
			t.Errorf("%s (pid %d) still runs after make down", name, pid)
		}
	}
}

// readPids reads DIR/pids as hack/local-down.sh does: "name pid binary".
func readPids(t *testing.T, path string) map[string]int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pids := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			t.Fatalf("%s: line %q is not name pid binary", path, line)
		}
		pid, err := strconv.Atoi(f[1])
		if err != nil {
			t.Fatalf("%s: line %q: %v", path, line, err)
		}
		pids[f[0]] = pid
	}
	return pids
}
