package leader

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
)

// The Lease's flags are checked once, whatever leader work is on, and the
// message names the flag, the value, why a Lease is needed and the fix.
func TestValidateNamesTheFlagTheValueTheWorkAndTheFix(t *testing.T) {
	good := Options{Namespace: "clusterip-policy", Name: "clusterip-policy-holds", Identity: "webhook-0",
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
			[]string{"--leader-election-lease is empty", "--policy-source=crd", "such as clusterip-policy-holds"}},
		{"lease that is no name", func(o *Options) { o.Name = "Holds/1" },
			[]string{`--leader-election-lease "Holds/1" is not a Lease name`, "such as clusterip-policy-holds"}},
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
