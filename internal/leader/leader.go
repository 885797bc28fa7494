// Package leader elects, with one Lease, the replica that runs the
// leader-only work (the reservation holds, the periodic audit, the managed
// matchConditions, the ClusterIPPolicy status), and runs that work, a list
// of Works, for each term it leads. It has its own options: the Lease
// elects every loop, not one of them.
package leader

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"clusterip-policy/internal/names"
)

// One Lease (--leader-election-lease) elects the replica that runs the
// leader-only work. Each loop reads the cluster as a whole and writes to it
// (IPAddresses, Events, the webhook configurations, the policy's status),
// so one writer is enough, and one Lease keeps the RBAC to the one Role
// that names it.

// Options are the Lease's flags.
type Options struct {
	Namespace string
	Name      string
	// Identity is this replica's name in the Lease.
	Identity string
	// LeaseDuration, RenewDeadline and RetryPeriod are client-go's
	// leader election timings (--leader-election-lease-duration,
	// --leader-election-renew-deadline, --leader-election-retry-period):
	// how long a dead leader's Lease holds off the others, how long the
	// leader keeps trying to renew before it gives up the term, and how
	// often every replica tries.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// The timings' defaults: client-go's and controller-runtime's.
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// AddFlags declares the Lease's flags, checked by Validate.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Namespace, "leader-election-namespace", names.WebhookNamespace(), "Namespace of the Lease that elects the replica keeping the holds and running the periodic audit (default: $POD_NAMESPACE from the downward API). Reservations of Services in this namespace are not held, nor are its Services audited: the webhook configurations exclude it, so the policy does not apply there. Nor are those of any namespace the Service webhooks' namespaceSelector leaves out: the leader reads it from the live configurations (--mutating-webhook-configuration, --validating-webhook-configuration) and the namespaces' labels.")
	fs.StringVar(&o.Name, "leader-election-lease", "clusterip-policy-holds", "Name of that Lease (one Lease for the holds and the periodic audit).")
	fs.StringVar(&o.Identity, "leader-election-identity", DefaultIdentity(), "This replica's identity in the Lease (default: $POD_NAME, else the host name with a random suffix).")
	fs.DurationVar(&o.LeaseDuration, "leader-election-lease-duration", DefaultLeaseDuration, "How long the Lease holds off the other replicas after its holder stopped renewing it: the longest a dead leader leaves the leader work (holds, audit, backstop, status) undone. Longer than --leader-election-renew-deadline; at most 5m.")
	fs.DurationVar(&o.RenewDeadline, "leader-election-renew-deadline", DefaultRenewDeadline, "How long the leader keeps trying to renew the Lease (an apiserver slow or away) before it ends its term. Longer than 1.2 retry periods.")
	fs.DurationVar(&o.RetryPeriod, "leader-election-retry-period", DefaultRetryPeriod, "How often every replica tries to take or renew the Lease (500ms-1m); each try is one API call.")
}

// Validate checks the flags, naming the flag, the value and the fix. It is
// called once, whenever any leader work is on; works names them (the flags
// that turned them on), so the operator sees why a Lease is needed at all:
// in CRD mode the ClusterIPPolicy status alone campaigns.
func (o Options) Validate(works []string) error {
	why := "the Lease elects the replica that runs " + strings.Join(works, ", ")
	if o.Namespace == "" {
		return fmt.Errorf("--leader-election-namespace is empty, and %s; give the webhook's namespace (POD_NAMESPACE from the downward API)", why)
	}
	if errs := validation.IsDNS1123Label(o.Namespace); len(errs) > 0 {
		return fmt.Errorf("--leader-election-namespace %q is not a namespace name (%s), and %s; give the webhook's namespace (POD_NAMESPACE from the downward API)", o.Namespace, strings.Join(errs, "; "), why)
	}
	if o.Name == "" {
		return fmt.Errorf("--leader-election-lease is empty, and %s; give the Lease name, such as clusterip-policy-holds", why)
	}
	if errs := validation.IsDNS1123Subdomain(o.Name); len(errs) > 0 {
		return fmt.Errorf("--leader-election-lease %q is not a Lease name (%s), and %s; give a lowercase name such as clusterip-policy-holds", o.Name, strings.Join(errs, "; "), why)
	}
	if o.Identity == "" {
		return fmt.Errorf("--leader-election-identity is empty, and %s; leave the flag out (the pod name, else the host name with a random suffix) or give this replica's name", why)
	}
	return o.validateTimings()
}

// validateTimings holds the three timings to what client-go requires
// (the lease longer than the renew deadline, which is longer than 1.2
// retry periods) and to bounds that keep a failover within minutes.
func (o Options) validateTimings() error {
	switch {
	case o.RetryPeriod < 500*time.Millisecond || o.RetryPeriod > time.Minute:
		return fmt.Errorf("--leader-election-retry-period %s is outside 500ms-1m; the default is %s", o.RetryPeriod, DefaultRetryPeriod)
	case o.LeaseDuration > 5*time.Minute:
		return fmt.Errorf("--leader-election-lease-duration %s is over 5m: a leader that dies would leave the holds, the audit and the backstop unkept that long; the default is %s", o.LeaseDuration, DefaultLeaseDuration)
	case o.RenewDeadline <= time.Duration(float64(o.RetryPeriod)*leaderelection.JitterFactor):
		return fmt.Errorf("--leader-election-renew-deadline %s must be longer than %.1f retry periods (--leader-election-retry-period %s); the defaults are %s and %s", o.RenewDeadline, leaderelection.JitterFactor, o.RetryPeriod, DefaultRenewDeadline, DefaultRetryPeriod)
	case o.LeaseDuration <= o.RenewDeadline:
		return fmt.Errorf("--leader-election-lease-duration %s must be longer than --leader-election-renew-deadline %s, or two replicas could lead at once; the defaults are %s and %s", o.LeaseDuration, o.RenewDeadline, DefaultLeaseDuration, DefaultRenewDeadline)
	}
	return nil
}

// DefaultIdentity is the pod name from the downward API, else the host
// name with a random suffix, so two processes on one host differ.
func DefaultIdentity() string {
	if n := os.Getenv("POD_NAME"); n != "" {
		return n
	}
	h, _ := os.Hostname()
	return h + "_" + rand.String(6)
}

// Work runs while its replica leads, until ctx (the leadership)
// ends; it undoes what it exposes as leader (metrics) before returning.
type Work func(ctx context.Context)

// Term makes a Work of a loop: it logs msg (with keysAndValues) as the term
// starts, runs loop until the term ends, then runs each reset, so a replica
// that no longer leads exposes nothing it knew as leader (gauges zeroed).
func Term(log logr.Logger, msg string, keysAndValues []any, loop func(ctx context.Context), resets ...func()) Work {
	return func(ctx context.Context) {
		log.Info(msg, keysAndValues...)
		defer func() {
			for _, r := range resets {
				r()
			}
		}()
		loop(ctx)
	}
}

// Run takes part in leader election until ctx ends; while leading it
// runs every work. client-go calls OnStartedLeading in a goroutine and does
// not wait for it when leadership is lost, so Run waits for the works
// of one term to return before it campaigns again: one replica never runs
// two terms' works at once (their metrics would race).
func Run(ctx context.Context, client kubernetes.Interface, o Options, log logr.Logger, works ...Work) error {
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: o.Namespace, Name: o.Name},
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: o.Identity},
	}
	var term sync.WaitGroup
	for ctx.Err() == nil {
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock: lock, LeaseDuration: o.LeaseDuration, RenewDeadline: o.RenewDeadline, RetryPeriod: o.RetryPeriod,
			ReleaseOnCancel: true, Name: o.Name,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(lctx context.Context) {
					log.Info("leading", "lease", o.Namespace+"/"+o.Name, "identity", o.Identity, "works", len(works))
					for _, w := range works {
						term.Add(1)
						go func() { defer term.Done(); w(lctx) }()
					}
				},
				OnStoppedLeading: func() {
					log.Info("stopped leading", "identity", o.Identity)
				},
			},
		})
		if err != nil {
			return fmt.Errorf("leader election: %w", err)
		}
		le.Run(ctx) // returns when leadership is lost or ctx ends, and cancels the term's context
		term.Wait()
	}
	return nil
}
