package leader

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"clusterip-policy/internal/sharedinformers"
)

// The Lease's flags are checked once, whatever leader work is on, and the
// message names the flag, the value, why a Lease is needed and the fix.
func TestValidateNamesTheFlagTheValueTheWorkAndTheFix(t *testing.T) {
	good := Options{Namespace: "clusterip-policy", Name: DefaultName, PreviousName: PreviousDefaultName, Identity: "webhook-0",
		LeaseDuration: DefaultLeaseDuration, RenewDeadline: DefaultRenewDeadline, RetryPeriod: DefaultRetryPeriod}
	works := []string{"the ClusterIPPolicy status (--policy-source=crd)"}
	if err := good.Validate(works); err != nil {
		t.Fatalf("good options: %v", err)
	}
	for _, tc := range []struct {
		name string
		edit func(*Options)
		want []string
	}{
		{"empty namespace", func(o *Options) { o.Namespace = "" },
			[]string{"--leader-election-namespace is empty", "runs the ClusterIPPolicy status (--policy-source=crd)", "POD_NAMESPACE"}},
		{"namespace that is no name", func(o *Options) { o.Namespace = "Cluster_IP" },
			[]string{`--leader-election-namespace "Cluster_IP" is not a namespace name`, "RFC 1123", "POD_NAMESPACE"}},
		{"empty lease", func(o *Options) { o.Name = "" },
			[]string{"--leader-election-lease is empty", "--policy-source=crd", "leave the flag out (clusterip-policy-leader)"}},
		{"lease that is no name", func(o *Options) { o.Name = "Holds/1" },
			[]string{`--leader-election-lease "Holds/1" is not a Lease name`, "such as clusterip-policy-leader"}},
		{"previous lease that is no name", func(o *Options) { o.PreviousName = "Holds" },
			[]string{`--leader-election-previous-lease "Holds" is not a Lease name`, "leave the flag out (clusterip-policy-holds", "give it empty once no replica of such a build runs"}},
		{"empty identity", func(o *Options) { o.Identity = "" },
			[]string{"--leader-election-identity is empty", "leave the flag out"}},
		{"a lease no longer than the renew deadline", func(o *Options) { o.LeaseDuration = o.RenewDeadline },
			[]string{"--leader-election-lease-duration 10s must be longer than --leader-election-renew-deadline 10s", "two replicas could lead at once"}},
		{"a renew deadline within a retry period", func(o *Options) { o.RenewDeadline = 2 * time.Second },
			[]string{"--leader-election-renew-deadline 2s must be longer than 1.2 retry periods"}},
		{"a retry period of zero", func(o *Options) { o.RetryPeriod = 0 },
			[]string{"--leader-election-retry-period 0s is outside 500ms-1m"}},
		{"a lease of an hour", func(o *Options) { o.LeaseDuration = time.Hour },
			[]string{"--leader-election-lease-duration 1h0m0s is over 5m"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := good
			tc.edit(&o)
			err := o.Validate(works)
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%q lacks %q", err, w)
				}
			}
		})
	}
}

// A Term's resets run when its loop returns (the term ended), after the
// loop, so the gauges a leader set are zeroed on a replica that no longer
// leads.
func TestTermResetsWhenTheTermEnds(t *testing.T) {
	var order []string
	w := Term(logr.Discard(), "leading", nil, func(ctx context.Context) {
		order = append(order, "loop")
		<-ctx.Done()
	}, func() { order = append(order, "reset 1") }, func() { order = append(order, "reset 2") })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	w(ctx)
	if got := strings.Join(order, ", "); got != "loop, reset 1, reset 2" {
		t.Fatalf("order %q", got)
	}
}

// clusterip_policy_leader is 0 on a replica that campaigns, 1 from its
// term's start, and 0 again only once every work of the term has returned
// (until then the replica still writes as leader). The fake client stands
// in for the apiserver here; the e2e tests watch the gauge on real replicas.
func TestLeaderGaugeFollowsTheTerm(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	if got := testutil.ToFloat64(m.leading); got != 0 {
		t.Fatalf("before campaigning: %v", got)
	}
	o := Options{Namespace: "clusterip-policy", Name: "clusterip-policy-leader", Identity: "webhook-0",
		LeaseDuration: DefaultLeaseDuration, RenewDeadline: DefaultRenewDeadline, RetryPeriod: DefaultRetryPeriod}
	ctx, cancel := context.WithCancel(context.Background())
	started, release := make(chan struct{}), make(chan struct{})
	var atWorkEnd float64
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, fake.NewClientset(), o, sharedinformers.Configurations{}, logr.Discard(), m, func(wctx context.Context) {
			close(started)
			<-wctx.Done()
			<-release
			atWorkEnd = testutil.ToFloat64(m.leading)
		})
	}()
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the work did not start within 10s")
	}
	if got := testutil.ToFloat64(m.leading); got != 1 {
		t.Fatalf("while leading: %v", got)
	}
	cancel()
	close(release)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10s of its context's end")
	}
	if atWorkEnd != 1 {
		t.Errorf("while the work was still returning: %v, want 1", atWorkEnd)
	}
	if got := testutil.ToFloat64(m.leading); got != 0 {
		t.Errorf("after the term: %v", got)
	}
}

// The leader campaigns for the previous Lease beside its own only when
// one is named and differs: the same name twice would be one Lease locked
// twice.
func TestLockTakesThePreviousLeaseToo(t *testing.T) {
	client := fake.NewClientset()
	for _, tc := range []struct {
		previous string
		want     string
	}{
		{PreviousDefaultName, "*resourcelock.MultiLock"},
		{"", "*resourcelock.LeaseLock"},
		{DefaultName, "*resourcelock.LeaseLock"},
	} {
		o := Options{Namespace: "clusterip-policy", Name: DefaultName, PreviousName: tc.previous, Identity: "webhook-0"}
		if got := fmt.Sprintf("%T", o.lock(client)); got != tc.want {
			t.Errorf("previous %q: %s, want %s", tc.previous, got, tc.want)
		}
	}
}

// Each term's Works share one informer factory, from the term's context,
// and its informers have stopped by the time Run returns: a replica that
// no longer leads watches nothing of the leader's.
func TestATermsInformersStopWithIt(t *testing.T) {
	o := Options{Namespace: "clusterip-policy", Name: DefaultName, Identity: "webhook-0",
		LeaseDuration: DefaultLeaseDuration, RenewDeadline: DefaultRenewDeadline, RetryPeriod: DefaultRetryPeriod}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "a"}})
	informers := make(chan cache.SharedIndexInformer, 2)
	work := func(wctx context.Context) {
		f, err := sharedinformers.FromContext(wctx)
		if err != nil {
			t.Error(err)
			informers <- nil
			return
		}
		inf, err := f.For("test", &corev1.Namespace{}, sharedinformers.Filter{}, func(c kubernetes.Interface, fl sharedinformers.Filter) cache.SharedIndexInformer {
			return coreinformers.NewFilteredNamespaceInformer(c, 0, cache.Indexers{}, fl.Tweak)
		})
		if err != nil {
			t.Error(err)
		}
		f.Start(wctx.Done())
		informers <- inf
		<-wctx.Done()
	}
	done := make(chan error, 1)
	go func() { done <- Run(ctx, client, o, sharedinformers.Configurations{}, logr.Discard(), nil, work, work) }()
	var got []cache.SharedIndexInformer
	for range 2 {
		select {
		case inf := <-informers:
			got = append(got, inf)
		case <-time.After(10 * time.Second):
			t.Fatal("the works did not start within 10s")
		}
	}
	if got[0] == nil || got[0] != got[1] {
		t.Fatalf("the two works of the term got informers %p and %p; want one, the term's", got[0], got[1])
	}
	if !sharedinformers.WaitForSync(ctx, got[0]) {
		t.Fatal("not synced")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10s of its context's end")
	}
	if !got[0].IsStopped() {
		t.Error("the term's informer still runs after Run returned")
	}
}
