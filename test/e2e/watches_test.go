//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"clusterip-policy/test/e2e/framework"
	"clusterip-policy/test/fixtures"
)

// TestOneWatchOfNamespacesPerReplica: the leader's namespace scope (holds,
// audit) reads the replica's own watch of the namespaces, which every
// replica keeps for the reserved ranges, rather than opening a second one.
// Measured on the apiserver (apiserver_longrunning_requests, WATCH): the
// watches a leading replica with the holds and the audit on adds, by
// resource, logged whole; namespaces must be one.
func TestOneWatchOfNamespacesPerReplica(t *testing.T) {
	c := own(t, framework.Options{Policy: fixtures.Policy(""), Webhooks: 0, WebhookArgs: []string{"--hold-reservations", "--audit-interval=5m"}})
	replica := startCountingWatches(t, testContext(t, 2*time.Minute), c)
	// Leading, and the scope known with the namespaces listed: an audit
	// pass succeeded, which needs both.
	fixtures.EventuallyNil(t, "the replica to lead and pass an audit", time.Minute, func() error {
		return auditPassed(replica.ctx, c, 0)
	})
	var added map[string]float64
	var rows string
	fixtures.EventuallyNil(t, "the replica's watches to be counted", 30*time.Second, func() error {
		var err error
		if added, rows, err = replica.added(); err != nil {
			return err
		}
		if added["namespaces"] < 1 {
			return fmt.Errorf("no watch of namespaces yet: %v", added)
		}
		return nil
	})
	t.Logf("watches a leading replica (holds, audit) opens, by resource: %s", rows)
	if added["namespaces"] != 1 {
		t.Errorf("the replica watches namespaces %v times, want once (the replica's watch, read by the leader's scope too)", added["namespaces"])
	}
}

// everyRoleArgs are serve's flags for every leader feature, as the e2e
// harness runs them (the harness adds --backstop and, with ManagedCerts,
// --certificate-source=managed).
var everyRoleArgs = []string{"--policy-source=crd", "--hold-reservations", "--audit-interval=5m", "--manage-match-conditions", "--arm-failure-policy"}

// TestOneWatchPerResourceWithEveryRole: one replica leading with every
// leader feature on opens one watch of each resource its features share:
// the replica's informer factory watches the namespaces (and the holds,
// the serving Secret) once, the term's factory the two webhook
// configurations once (every mutating one, as the managed matchConditions
// need, which serves ours too). Measured on the apiserver
// (apiserver_longrunning_requests, WATCH), logged whole by resource. The
// view's own watches of ServiceCIDRs and IPAddresses (pkg/allocview/kubesource,
// kept out of any informer store for memory) are not the factories'.
func TestOneWatchPerResourceWithEveryRole(t *testing.T) {
	replica := startEveryRole(t, 3*time.Minute)
	ctx, c := replica.ctx, replica.c
	// Every feature's term has started: the audit passed (the namespaces
	// listed, the scope read from the configurations), the backstop is in
	// force, the certificates' leader wrote its CA Secret; and the
	// watches have stopped changing (two readings a second apart).
	var added map[string]float64
	var rows string
	fixtures.EventuallyNil(t, "every leader feature to run and its watches to settle", 2*time.Minute, func() error {
		if err := leadingWithEveryRole(ctx, c, 0); err != nil {
			return err
		}
		issued, err := c.WebhookMetric(ctx, 0, "clusterip_policy_certificate_passes_total", `result="ok"`)
		if err != nil {
			return fmt.Errorf("read clusterip_policy_certificate_passes_total: %w", err)
		}
		if issued < 1 {
			return fmt.Errorf("clusterip_policy_certificate_passes_total{result=\"ok\"} %v", issued)
		}
		first, err := watchesByResource(ctx, c)
		if err != nil {
			return err
		}
		time.Sleep(time.Second)
		second, err := watchesByResource(ctx, c)
		if err != nil {
			return err
		}
		for r, n := range second {
			if n != first[r] {
				return fmt.Errorf("the watches of %s still change: %v, then %v", r, first[r], n)
			}
		}
		added, rows = countsAdded(replica.before, second)
		return nil
	})
	t.Logf("watches a replica leading with every role opens, by resource: %s", rows)
	for _, r := range []string{"mutatingwebhookconfigurations", "validatingwebhookconfigurations", "namespaces"} {
		if added[r] != 1 {
			t.Errorf("the replica watches %s %v times, want once (one informer factory per replica, one per term, each type watched by one informer)", r, added[r])
		}
	}

	// Settled, the loops that check the configurations every few seconds
	// (arming every 2 s, the matchConditions every 5 s, the scope every
	// 5 s) read them from the term's watch: no request while nothing
	// changes. The webhook is the only client of the configurations here.
	const idle = 12 * time.Second
	first, err := configurationRequests(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(idle) // the window measured: every loop passes in it several times
	second, err := configurationRequests(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	requests, rows := countsAdded(first, second)
	t.Logf("requests to the webhook configurations in %s of a settled leader with every role: %s", idle, rows)
	for k, d := range requests {
		if d > 2 {
			t.Errorf("%v requests %s in %s of a settled leader, want at most 2: a loop reads the configurations through the API instead of the term's watch", d, k, idle)
		}
	}
}

// configurationRequests reads apiserver 0's apiserver_request_total for
// the two webhook configuration resources, by resource and verb.
func configurationRequests(ctx context.Context, c *framework.Cluster) (map[string]float64, error) {
	text, err := apiserverMetricsText(ctx, c)
	if err != nil {
		return nil, err
	}
	label := func(line, name string) string {
		_, rest, _ := strings.Cut(line, name+`="`)
		v, _, _ := strings.Cut(rest, `"`)
		return v
	}
	out := map[string]float64{}
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, "apiserver_request_total{") {
			continue
		}
		r := label(line, "resource")
		if r != "mutatingwebhookconfigurations" && r != "validatingwebhookconfigurations" {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			return nil, fmt.Errorf("apiserver metrics line %q: %w", line, err)
		}
		out[r+" "+label(line, "verb")] += v
	}
	return out, nil
}

// TestATermsWatchesCloseWhenTheLeaseIsLost: the leader term's informer
// factory is shut down when the term ends, so a replica that lost the
// Lease keeps only the replica's watches (the namespaces, the holds, the
// serving Secret, the view's, the policy object). The Lease is taken from
// it as a partitioned leader loses it: another holder written into it.
func TestATermsWatchesCloseWhenTheLeaseIsLost(t *testing.T) {
	replica := startEveryRole(t, 3*time.Minute, "--leader-election-previous-lease=")
	ctx, c := replica.ctx, replica.c
	leaderOnly := []string{"mutatingwebhookconfigurations", "validatingwebhookconfigurations", "mutatingadmissionpolicies"}
	var table string
	fixtures.EventuallyNil(t, "the term's watches to open", time.Minute, func() error {
		w, rows, err := replica.added()
		if err != nil {
			return err
		}
		table = rows
		for _, r := range leaderOnly {
			if w[r] != 1 {
				return fmt.Errorf("%s watched %v times: %s", r, w[r], rows)
			}
		}
		if w["secrets"] != 2 {
			return fmt.Errorf("secrets watched %v times, want 2 (the serving Secret, the CA Secret): %s", w["secrets"], rows)
		}
		return nil
	})
	t.Logf("watches while leading: %s", table)

	const ns, name = "clusterip-policy", "clusterip-policy-leader"
	fixtures.EventuallyNil(t, "another holder written into the Lease", 30*time.Second, func() error {
		l, err := c.Client(0).CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		other, hour, now := "someone-else", int32(3600), metav1.NewMicroTime(time.Now())
		l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.AcquireTime, l.Spec.RenewTime = &other, &hour, &now, &now
		_, err = c.Client(0).CoordinationV1().Leases(ns).Update(ctx, l, metav1.UpdateOptions{})
		return err
	})
	fixtures.EventuallyNil(t, "the term to end and its watches to close", time.Minute, func() error {
		if leading(ctx, c, 0) {
			return errors.New("still leading")
		}
		w, rows, err := replica.added()
		if err != nil {
			return err
		}
		table = rows
		for _, r := range leaderOnly {
			if w[r] != 0 {
				return fmt.Errorf("%s still watched %v times: %s", r, w[r], rows)
			}
		}
		if w["secrets"] != 1 || w["namespaces"] != 1 {
			return fmt.Errorf("secrets %v, namespaces %v, want 1 each (the replica's): %s", w["secrets"], w["namespaces"], rows)
		}
		return nil
	})
	t.Logf("watches once the Lease was lost: %s", table)
}

// ownEveryRole is a cluster without a replica yet, for replicas with every
// leader feature on: everyRoleArgs (after extraArgs), the managed
// certificates, the arming by the leader, and the backstop's policy
// object installed (the backstop needs one). ctx ends after timeout.
func ownEveryRole(t *testing.T, timeout time.Duration, extraArgs ...string) (*framework.Cluster, context.Context) {
	t.Helper()
	c := own(t, framework.Options{Webhooks: 0, ManagedCerts: true, ArmByLeader: true, WebhookArgs: append(extraArgs, everyRoleArgs...)})
	ctx := testContext(t, timeout)
	installPolicyObject(t, ctx, c, backstopPolicy)
	return c, ctx
}

// startEveryRole starts one replica on an ownEveryRole cluster and
// registers the webhooks (the leader arms them and writes their
// caBundle), counting the watches it opens.
func startEveryRole(t *testing.T, timeout time.Duration, extraArgs ...string) *countedReplica {
	t.Helper()
	c, ctx := ownEveryRole(t, timeout, extraArgs...)
	r := startCountingWatches(t, ctx, c)
	if err := c.RegisterWebhooks(ctx); err != nil {
		t.Fatal(err)
	}
	return r
}

// countedReplica is one replica started on c after apiserver 0's open
// watches were read (before), so that what it opens can be told apart.
type countedReplica struct {
	ctx    context.Context
	c      *framework.Cluster
	before map[string]float64
}

// startCountingWatches reads apiserver 0's open watches, then starts one
// replica on c.
func startCountingWatches(t *testing.T, ctx context.Context, c *framework.Cluster) *countedReplica {
	t.Helper()
	before, err := watchesByResource(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.StartWebhooks(ctx, 1); err != nil {
		t.Fatal(err)
	}
	return &countedReplica{ctx: ctx, c: c, before: before}
}

// added are the watches the replica opened (or closed), by resource, and
// the same as rows for a log.
func (r *countedReplica) added() (map[string]float64, string, error) {
	now, err := watchesByResource(r.ctx, r.c)
	if err != nil {
		return nil, "", err
	}
	added, rows := countsAdded(r.before, now)
	return added, rows, nil
}

// countsAdded is now less before, key by key, leaving out the keys whose
// count did not change, and the same as "key n" rows sorted and joined
// for a log.
func countsAdded(before, now map[string]float64) (map[string]float64, string) {
	added := map[string]float64{}
	var rows []string
	for k, n := range now {
		if d := n - before[k]; d != 0 {
			added[k] = d
			rows = append(rows, fmt.Sprintf("%s %v", k, d))
		}
	}
	sort.Strings(rows)
	return added, strings.Join(rows, ", ")
}

// auditPassed says whether replica i has passed an audit: it leads, and
// its scope is known with the namespaces listed.
func auditPassed(ctx context.Context, c *framework.Cluster, i int) error {
	passes, err := c.WebhookMetric(ctx, i, "clusterip_policy_audit_passes_total", `result="success"`)
	if err != nil {
		return fmt.Errorf("read clusterip_policy_audit_passes_total: %w", err)
	}
	if passes < 1 {
		return fmt.Errorf("clusterip_policy_audit_passes_total{result=\"success\"} %v", passes)
	}
	return nil
}

// leadingWithEveryRole says whether replica i leads with every role of
// ownEveryRole running: an audit passed and the backstop is in force.
func leadingWithEveryRole(ctx context.Context, c *framework.Cluster, i int) error {
	if err := auditPassed(ctx, c, i); err != nil {
		return err
	}
	if got := backstopCondition(ctx, c); !strings.HasPrefix(got, "True InForce: ") {
		return fmt.Errorf("BackstopInForce %q", got)
	}
	return nil
}

// watchesByResource reads apiserver 0's open WATCH requests, by resource.
func watchesByResource(ctx context.Context, c *framework.Cluster) (map[string]float64, error) {
	text, err := apiserverMetricsText(ctx, c)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_longrunning_requests{") || !strings.Contains(line, `verb="WATCH"`) {
			continue
		}
		_, rest, _ := strings.Cut(line, `resource="`)
		resource, _, _ := strings.Cut(rest, `"`)
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			return nil, fmt.Errorf("apiserver metrics line %q: %w", line, err)
		}
		out[resource] += v
	}
	return out, sc.Err()
}

// apiserverMetricsText is apiserver 0's /metrics, read as the admin.
func apiserverMetricsText(ctx context.Context, c *framework.Cluster) (string, error) {
	body, err := c.Client(0).CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return "", fmt.Errorf("GET /metrics: %w", err)
	}
	return string(body), nil
}
