//go:build e2e

// The end-to-end scenarios: every request goes through a real kube-apiserver
// (v1.37, on etcd, on loopback) that calls the real webhook binary. Run them
// with `make e2e`, which builds the binaries first.
//
// Scenarios that can share a cluster run on one (the "shared" cluster, one
// apiserver on 10.96.0.0/16), each in namespaces of its own; the small-range,
// two-apiserver and manifest scenarios start their own. When a test fails,
// it prints what every process logged while it ran, and the cluster
// directories (all logs, certificates, kubeconfigs) are kept.
package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"clusterip-policy/test/e2e/framework"
	"clusterip-policy/test/fixtures"
)

// sharedSpec reserves the kube-dns address of the Kubernetes docs and
// approves every ServiceCIDR inside 10.96.0.0/12 (kubeadm's default range);
// a test that changes a field changes it here and wraps it with
// fixtures.Policy.
const sharedSpec = `allowedCIDRs: [10.96.0.0/12]
reserveKubernetesService: true
` + fixtures.KubeDNSSpec + `enforcement:
  default: deny
exemptions:
  namespaces: []
`

// sharedPolicy is sharedSpec, the ClusterIPPolicy object.
var sharedPolicy = fixtures.Policy(sharedSpec)

var (
	sharedOnce    sync.Once
	sharedCluster *framework.Cluster
	sharedErr     error

	clustersMu sync.Mutex
	clusters   []*framework.Cluster // every cluster started, to stop and to keep or remove
	failedDirs = map[string]bool{}
)

func TestMain(m *testing.M) {
	code := m.Run()
	clustersMu.Lock()
	defer clustersMu.Unlock()
	for _, c := range clusters {
		c.Stop()
		switch {
		case code != 0 || failedDirs[c.Dir] || os.Getenv("E2E_KEEP") != "":
			fmt.Printf("e2e: kept the logs, certificates and kubeconfigs of the cluster in %s\n", c.Dir)
		default:
			os.RemoveAll(c.Dir)
		}
	}
	os.Exit(code)
}

// shared returns the cluster most scenarios share, starting it on first use.
func shared(t *testing.T) *framework.Cluster {
	t.Helper()
	sharedOnce.Do(func() {
		sharedCluster, sharedErr = startCluster(t, framework.Options{Policy: sharedPolicy, Webhooks: 1})
	})
	if sharedErr != nil {
		t.Fatalf("start the shared cluster: %v", sharedErr)
	}
	sharedCluster.Logf = t.Logf
	t.Cleanup(func() { sharedCluster.Logf = func(string, ...any) {} })
	watchLogs(t, sharedCluster)
	return sharedCluster
}

// own starts a cluster for this test alone, stopped when the test ends.
func own(t *testing.T, o framework.Options) *framework.Cluster {
	t.Helper()
	c, err := startCluster(t, o)
	if err != nil {
		t.Fatalf("start a cluster: %v", err)
	}
	t.Cleanup(func() {
		clustersMu.Lock()
		defer clustersMu.Unlock()
		c.Stop()
		if t.Failed() {
			failedDirs[c.Dir] = true
			return
		}
		for i, k := range clusters {
			if k == c {
				clusters = append(clusters[:i], clusters[i+1:]...)
				break
			}
		}
		if os.Getenv("E2E_KEEP") == "" {
			os.RemoveAll(c.Dir)
		}
	})
	watchLogs(t, c)
	return c
}

func startCluster(t *testing.T, o framework.Options) (*framework.Cluster, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	o.Logf = t.Logf
	start := time.Now()
	c, err := framework.Start(ctx, o)
	if c != nil {
		clustersMu.Lock()
		clusters = append(clusters, c)
		clustersMu.Unlock()
	}
	if err != nil {
		if c != nil {
			failedDirs[c.Dir] = true
			t.Logf("logs of the cluster that failed to start:%s", c.LogsSince(framework.LogMarks{}, 80))
		}
		return nil, err
	}
	t.Logf("e2e: cluster ready in %s (%s)", time.Since(start).Round(time.Millisecond), c.Dir)
	return c, nil
}

// watchLogs prints, when t fails, the last 80 lines each process of c
// logged while t ran, and keeps c's directory.
func watchLogs(t *testing.T, c *framework.Cluster) {
	marks := c.Marks()
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		clustersMu.Lock()
		failedDirs[c.Dir] = true
		clustersMu.Unlock()
		t.Logf("process logs for the failed test %s:%s", t.Name(), c.LogsSince(marks, 80))
	})
}

// testContext ends with the test, at the latest after d.
func testContext(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// lastLines is for failure messages.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
