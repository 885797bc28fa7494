//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"clusterip-policy/certs"
	"clusterip-policy/test/e2e/framework"
	"clusterip-policy/test/fixtures"
)

// The fault scenarios (`make chaos`): three kube-apiservers on one etcd
// behind a haproxy that health-checks their /readyz, two webhook replicas
// behind another haproxy (standing in for the webhook's Service) that
// watch the cluster through the apiservers' load balancer, and 8 clients
// creating, updating and deleting Services through it. One fault per
// scenario; afterwards the cluster is held against the policy and against
// every answer the clients got. Each prints one "e2e: chaos" line with its
// figures (RELIABILITY.md).

const (
	chaosClients  = 8
	chaosDuration = 15 * time.Second
	chaosFaultAt  = 4 * time.Second
	chaosMaxOps   = 2000 // per client, a bound whatever the speed
)

// chaosStaticPool gives client i 16 addresses of the static band of
// 10.96.0.0/16 that no other client uses, away from .1 and .10.
func chaosStaticPool(i int) []string {
	var out []string
	for k := range 16 {
		out = append(out, fmt.Sprintf("10.96.0.%d", 32+i*16+k))
	}
	return out
}

func chaosCluster(t *testing.T, ranges ...string) *framework.Cluster {
	var apiservers []framework.APIServerOptions
	for _, r := range ranges {
		apiservers = append(apiservers, framework.APIServerOptions{ServiceClusterIPRange: r})
	}
	return own(t, framework.Options{APIServers: apiservers, LoadBalancer: true, Webhooks: 2, Policy: sharedPolicy})
}

// TestChaos runs the faults that need a healthy three-apiserver cluster,
// one after another on one cluster, each in a namespace of its own.
func TestChaos(t *testing.T) {
	c := chaosCluster(t, "10.96.0.0/16", "10.96.0.0/16", "10.96.0.0/16")
	ctx := testContext(t, 15*time.Minute)
	var leftovers []leftover
	run := func(t *testing.T, sc chaosScenario) { leftovers = append(leftovers, runChaos(ctx, t, c, sc)...) }
	defer func() { reportLeftovers(ctx, t, c, leftovers) }()

	t.Run("kill -9 of one apiserver, restarted a few seconds later", func(t *testing.T) {
		run(t, chaosScenario{name: "apiserver killed", fault: func(ctx context.Context) (string, error) {
			c.CrashAPIServer(1)
			killed := time.Now()
			time.Sleep(4 * time.Second)
			if err := c.RestartAPIServer(ctx, 1); err != nil {
				return "", err
			}
			return fmt.Sprintf("%s killed, ready again %s later", c.APIServers[1].Name, time.Since(killed).Round(100*time.Millisecond)), nil
		}})
	})

	t.Run("kill -9 of one webhook replica, restarted later", func(t *testing.T) {
		run(t, chaosScenario{name: "webhook replica killed", fault: func(ctx context.Context) (string, error) {
			c.Webhooks[0].Kill()
			killed := time.Now()
			time.Sleep(6 * time.Second)
			if err := c.RestartWebhook(ctx, 0); err != nil {
				return "", err
			}
			return fmt.Sprintf("%s killed, ready again %s later", c.Webhooks[0].Name, time.Since(killed).Round(100*time.Millisecond)), nil
		}})
	})

	t.Run("the apiserver that carries the webhooks' watch dies", func(t *testing.T) {
		var victim int
		var counts []float64
		// Each apiserver watches IPAddresses for itself; the one with the
		// most watches also carries the webhooks'.
		for i := range c.APIServers {
			n, err := c.APIServerMetric(ctx, i, "apiserver_longrunning_requests", `resource="ipaddresses"`, `verb="WATCH"`)
			if err != nil {
				t.Fatalf("read the watches of %s: %v", c.APIServers[i].Name, err)
			}
			counts = append(counts, n)
			if n > counts[victim] {
				victim = i
			}
		}
		if slices.Min(counts) == slices.Max(counts) {
			t.Fatalf("cannot tell which apiserver carries the webhooks' IPAddress watch: WATCH counts %v", counts)
		}
		t.Logf("IPAddress WATCH requests per apiserver: %v; killing %s", counts, c.APIServers[victim].Name)
		run(t, chaosScenario{name: "watch apiserver killed", watchDecisions: true, fault: func(ctx context.Context) (string, error) {
			c.CrashAPIServer(victim)
			killed := time.Now()
			time.Sleep(4 * time.Second)
			if err := c.RestartAPIServer(ctx, victim); err != nil {
				return "", err
			}
			return fmt.Sprintf("%s (IPAddress watches %v) killed, ready again %s later", c.APIServers[victim].Name, counts, time.Since(killed).Round(100*time.Millisecond)), nil
		}})
	})

	t.Run("a broken policy file written while requests flow", func(t *testing.T) {
		failuresBefore := reloadFailures(ctx, c)
		run(t, chaosScenario{name: "broken policy file", fault: func(ctx context.Context) (string, error) {
			if err := certs.WriteFileAtomic(c.PolicyFile, []byte("reservations: [this is not: a policy\n"), 0o644); err != nil {
				return "", err
			}
			time.Sleep(6 * time.Second)
			if err := certs.WriteFileAtomic(c.PolicyFile, []byte(sharedPolicy), 0o644); err != nil {
				return "", err
			}
			return "policy file replaced by invalid YAML for 6s, then restored", nil
		}})
		if after := reloadFailures(ctx, c); after <= failuresBefore {
			t.Errorf("no replica counted a refused policy (clusterip_policy_policy_reloads_total{result=\"failure\"} %v -> %v)", failuresBefore, after)
		}
	})

	t.Run("a ServiceCIDR deleted while Services are created in it", func(t *testing.T) {
		lb := c.LBClient()
		extra := fixtures.ServiceCIDR("chaos-extra", "10.97.0.0/24")
		if _, err := lb.NetworkingV1().ServiceCIDRs().Create(ctx, extra, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create ServiceCIDR %s: %v", extra.Name, err)
		}
		probeNS := namespace(t, c, "chaos-probe")
		if err := retryUntil(ctx, 15*time.Second, func() error {
			_, err := dryRunCreate(ctx, lb, fixtures.Service(probeNS, "probe", fixtures.WithClusterIP("10.97.0.5")))
			return err
		}); err != nil {
			t.Fatalf("the new ServiceCIDR 10.97.0.0/24 is not usable: %v", err)
		}
		deleted := []netip.Prefix{netip.MustParsePrefix("10.97.0.0/24")}
		var deletedAt time.Time
		run(t, chaosScenario{
			name: "ServiceCIDR deleted",
			staticPool: func(i int) []string {
				return append([]string{fmt.Sprintf("10.97.0.%d", 2+i)}, chaosStaticPool(i)...)
			},
			acceptDenial: func(err error) bool {
				s := err.Error()
				return strings.Contains(s, "10.97.0.") && (strings.Contains(s, "is outside every active Service CIDR") || strings.Contains(s, "does not match the current range"))
			},
			deleted: deleted, deletedAt: &deletedAt,
			fault: func(ctx context.Context) (string, error) {
				if err := lb.NetworkingV1().ServiceCIDRs().Delete(ctx, extra.Name, metav1.DeleteOptions{}); err != nil {
					return "", err
				}
				// The webhooks and apiservers learn of the deletion through
				// their watches; a create answered up to a second later
				// may have been decided before.
				deletedAt = time.Now().Add(time.Second)
				return "ServiceCIDR 10.97.0.0/24 deleted (no kube-controller-manager here, so no finalizer holds it)", nil
			},
		})
	})
}

// TestChaosDivergentRange: one of three apiservers runs with a divergent
// --service-cluster-ip-range (the upstream report of apiservers with
// different ranges behind one load balancer), under the same load.
func TestChaosDivergentRange(t *testing.T) {
	c := chaosCluster(t, "10.96.0.0/16", "10.96.0.0/16", "192.168.0.0/24")
	ctx := testContext(t, 5*time.Minute)
	leftovers := runChaos(ctx, t, c, chaosScenario{
		name: "divergent apiserver range",
		forbidden: func(rng *rand.Rand, name string) (*corev1.Service, string) {
			if rng.IntN(3) == 0 {
				// The divergent apiserver's own flag range, which is no
				// ServiceCIDR.
				return fixtures.Service("", name, fixtures.WithClusterIP(fmt.Sprintf("192.168.0.%d", 1+rng.IntN(250)))), "is outside every active Service CIDR"
			}
			return defaultForbidden(rng, name)
		},
		fault: func(context.Context) (string, error) {
			return c.APIServers[2].Name + " runs with --service-cluster-ip-range=192.168.0.0/24 throughout", nil
		},
	})
	reportLeftovers(ctx, t, c, leftovers)
}

// chaosScenario is one fault under load.
type chaosScenario struct {
	name  string
	fault func(ctx context.Context) (string, error) // runs at chaosFaultAt, may block until recovered
	// Optional: the load's static pool, forbidden requests and accepted
	// denials; ServiceCIDRs deleted by the fault and when.
	staticPool   func(int) []string
	forbidden    func(*rand.Rand, string) (*corev1.Service, string)
	acceptDenial func(error) bool
	deleted      []netip.Prefix
	deletedAt    *time.Time
	// watchDecisions reports what the webhooks decided while their view
	// may have been stale.
	watchDecisions bool
}

// runChaos runs one scenario and returns the IPAddresses that outlived
// their Services.
func runChaos(ctx context.Context, t *testing.T, c *framework.Cluster, sc chaosScenario) []leftover {
	t.Helper()
	ns := namespace(t, c, "chaos")
	if sc.staticPool == nil {
		sc.staticPool = chaosStaticPool
	}
	stale := sampleStaleness(ctx, c)
	marks := make([]int64, len(c.Webhooks))
	for i, w := range c.Webhooks {
		marks[i] = w.LogSize()
	}

	var faultAt time.Time
	var faultInfo string
	var faultErr error
	faultDone := make(chan struct{})
	go func() {
		defer close(faultDone)
		select {
		case <-ctx.Done():
			faultErr = ctx.Err()
			return
		case <-time.After(chaosFaultAt):
		}
		faultAt = time.Now()
		faultInfo, faultErr = sc.fault(ctx)
	}()
	start := time.Now()
	res := runLoad(ctx, t, c, loadOptions{
		Namespace: ns, Clients: chaosClients, Duration: chaosDuration, MaxOps: chaosMaxOps,
		Forbidden: sc.forbidden, StaticPool: sc.staticPool, AcceptDenial: sc.acceptDenial,
	})
	loadTook := time.Since(start)
	<-faultDone
	if faultErr != nil {
		t.Fatalf("inject the fault: %v", faultErr)
	}
	staleMax := stale.stop()

	var deletedAt time.Time
	if sc.deletedAt != nil {
		deletedAt = *sc.deletedAt
	}
	chk := checkCluster(ctx, t, c, res, ns, sc.deleted, deletedAt)
	tl := res.tally()
	t.Logf("e2e: chaos %s: %d requests in %s (%d attempts, %d retried), %d succeeded (%d after retries), %d expected denials, %d refused as still held, %d real errors; clients disturbed for %s after the fault; admitted outside policy %d, Services lost %d, resurrected %d, duplicate IPs %d, orphaned by a deleted ServiceCIDR %d; Services in the cluster %d; leftover IPAddresses %d; max view staleness per replica %v; fault: %s",
		sc.name, tl.Sent, loadTook.Round(100*time.Millisecond), tl.Attempts, tl.RetriedAttempts, tl.Succeeded, tl.RetriedOK, tl.ExpectedDenials, tl.Held, tl.RealErrors,
		res.disruption(faultAt).Round(10*time.Millisecond), len(res.AdmittedOutside)+len(chk.Outside), len(chk.Lost), len(chk.Resurrected), len(chk.Duplicates), len(chk.Orphaned),
		chk.Services, len(chk.Leftovers), staleMax, faultInfo)
	if sc.watchDecisions {
		logDecisionsSince(t, c, marks)
	}

	if tl.Succeeded == 0 || tl.ExpectedDenials == 0 {
		t.Errorf("the load did not exercise both paths: %d succeeded, %d expected denials", tl.Succeeded, tl.ExpectedDenials)
	}
	for what, list := range map[string][]string{
		"admitted outside policy (by the clients' answers)": res.AdmittedOutside,
		"in the cluster outside policy":                     chk.Outside,
		"lost (told created, not there)":                    chk.Lost,
		"resurrected (told deleted, still there)":           chk.Resurrected,
		"sharing an address":                                chk.Duplicates,
	} {
		if len(list) > 0 {
			t.Errorf("%d Services %s: %v", len(list), what, head(list, 10))
		}
	}
	if tl.RealErrors > 0 {
		t.Errorf("%d requests failed for real: %s", tl.RealErrors, strings.Join(res.realErrors(10), "\n  "))
	}
	return chk.Leftovers
}

// reportLeftovers waits (bounded) until the apiservers' repair loops have
// removed the IPAddresses that outlived their Services, and says how long
// they lived.
func reportLeftovers(ctx context.Context, t *testing.T, c *framework.Cluster, list []leftover) {
	if len(list) == 0 {
		t.Logf("e2e: chaos leftovers: no IPAddress outlived its Service")
		return
	}
	lived := waitLeftoversGone(ctx, c.LBClient(), list, 150*time.Second)
	var ds []time.Duration
	for _, d := range lived {
		if d >= 0 {
			ds = append(ds, d)
		}
	}
	slices.Sort(ds)
	still := len(list) - len(lived)
	summary := "none removed"
	if len(ds) > 0 {
		summary = fmt.Sprintf("lived %s-%s after their Service was deleted (median %s)", ds[0].Round(time.Second), ds[len(ds)-1].Round(time.Second), ds[len(ds)/2].Round(time.Second))
	}
	t.Logf("e2e: chaos leftovers: %d IPAddresses outlived their Services; %s; %d still there after 150s", len(list), summary, still)
	if still > 0 {
		t.Errorf("%d IPAddresses were never cleaned up by the apiservers' repair loop", still)
	}
}

func head(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], fmt.Sprintf("... (%d more)", len(s)-n))
	}
	return s
}

func reloadFailures(ctx context.Context, c *framework.Cluster) float64 {
	var sum float64
	for i := range c.Webhooks {
		v, _ := c.WebhookMetric(ctx, i, "clusterip_policy_policy_reloads_total", `result="failure"`)
		sum += v
	}
	return sum
}

// staleSampler reads every replica's clusterip_policy_view_stale_seconds
// every 200 ms and keeps the highest value.
type staleSampler struct {
	mu   sync.Mutex
	max  []float64
	stop func() []float64
}

func sampleStaleness(ctx context.Context, c *framework.Cluster) *staleSampler {
	s := &staleSampler{max: make([]float64, len(c.Webhooks))}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			for i := range c.Webhooks {
				if v, err := c.WebhookMetric(ctx, i, "clusterip_policy_view_stale_seconds"); err == nil {
					s.mu.Lock()
					s.max[i] = max(s.max[i], v)
					s.mu.Unlock()
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	s.stop = func() []float64 {
		cancel()
		<-done
		s.mu.Lock()
		defer s.mu.Unlock()
		return slices.Clone(s.max)
	}
	return s
}

// logDecisionsSince prints, per replica, what it decided after the marks
// and how stale its view said it was.
func logDecisionsSince(t *testing.T, c *framework.Cluster, marks []int64) {
	for i, w := range c.Webhooks {
		byOutcome := map[string]int{}
		stale, maxStale := 0, 0.0
		for _, d := range w.DecisionsFrom(marks[i]) {
			byOutcome[d.Decision]++
			if d.ViewStale > 0 {
				stale++
				maxStale = max(maxStale, d.ViewStale)
			}
		}
		t.Logf("e2e: chaos watch apiserver killed: %s decided %v; %d decisions flagged a stale view (max viewStaleSeconds %.1f)", w.Name, byOutcome, stale, maxStale)
	}
}
