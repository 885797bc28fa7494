// Package leader elects, with one Lease, the replica that runs the
// leader-only work (the reservation holds, the periodic audit, the managed
// matchConditions, the certificates, the arming, the backstop, the
// ClusterIPPolicy status), and runs that work, a list of Works, for each
// term it leads. It has its own options: the Lease elects every loop, not
// one of them.
package leader

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"clusterip-policy/internal/names"
	"clusterip-policy/internal/sharedinformers"
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
	// PreviousName is the Lease of the builds before the rename
	// (--leader-election-previous-lease): the leader holds it too, so an
	// old replica still holding it in a rolling upgrade keeps the new ones
	// from leading beside it. Empty, or Name: Name alone.
	PreviousName string
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

// DefaultName is the Lease's name: it elects the replica for every leader
// role. PreviousDefaultName is the name builds before v0.1.0 gave it, for
// the holds that were its first role; the leader holds both until v0.2.0.
const (
	DefaultName         = "clusterip-policy-leader"
	PreviousDefaultName = "clusterip-policy-holds"
)

// The timings' defaults: client-go's and controller-runtime's.
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// AddFlags declares the Lease's flags, checked by Validate.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Namespace, "leader-election-namespace", names.WebhookNamespace(), "Namespace of the Lease that elects the replica running the leader work: holds, periodic audit, managed matchConditions, certificates, arming, backstop, ClusterIPPolicy status (default: $POD_NAMESPACE from the downward API). Reservations of Services in this namespace are not held, nor are its Services audited: the webhook configurations exclude it, so the policy does not apply there. Nor are those of any namespace the Service webhooks' namespaceSelector leaves out: the leader reads it from the live configurations (--mutating-webhook-configuration, --validating-webhook-configuration) and the namespaces' labels.")
	fs.StringVar(&o.Name, "leader-election-lease", DefaultName, "Name of that Lease (one Lease for every leader role).")
	fs.StringVar(&o.PreviousName, "leader-election-previous-lease", PreviousDefaultName, "The Lease builds before v0.1.0 elected the leader with (named for the holds, though it elected every role). The leader holds it beside --leader-election-lease, so a replica of such a build still leading in a rolling upgrade keeps the new replicas from leading until it stops. Empty, or the same as --leader-election-lease: that Lease alone. Goes in v0.2.0.")
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
		return fmt.Errorf("--leader-election-lease is empty, and %s; leave the flag out (%s) or give the Lease name", why, DefaultName)
	}
	if errs := validation.IsDNS1123Subdomain(o.Name); len(errs) > 0 {
		return fmt.Errorf("--leader-election-lease %q is not a Lease name (%s), and %s; give a lowercase name such as %s", o.Name, strings.Join(errs, "; "), why, DefaultName)
	}
	if errs := validation.IsDNS1123Subdomain(o.PreviousName); o.PreviousName != "" && len(errs) > 0 {
		return fmt.Errorf("--leader-election-previous-lease %q is not a Lease name (%s); leave the flag out (%s, the Lease of builds before v0.1.0) or give it empty once no replica of such a build runs", o.PreviousName, strings.Join(errs, "; "), PreviousDefaultName)
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

// Metrics is the leader metric, the one every alert and dashboard reads for
// whether a replica leads.
type Metrics struct {
	leading prometheus.Gauge
}

// NewMetrics registers clusterip_policy_leader in reg. Serve calls it only
// when some leader work is on, so the gauge exists exactly on the replicas
// that campaign: a job whose gauges sum to 0 has leader work and no leader
// (the alert ClusterIPPolicyNoLeader), and a job without leader work has
// no gauge to alert on. It is ours rather than client-go's
// leader_election_master_status (which controller-runtime registers and
// every replica exports too): that name is shared by kube-controller-manager,
// kube-scheduler and every operator in the same Prometheus, and it flips
// when the elector wins, not when the works start and stop.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{leading: prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "clusterip_policy_leader",
		Help: "1 on the replica that holds the Lease (--leader-election-lease) and runs the leader work (holds, audit, conditions, certificates, arming, backstop, status), from its term's start until every work has returned; 0 on the other replicas. Absent when no leader work is on.",
	})}
	reg.MustRegister(m.leading)
	return m
}

// Run takes part in leader election until ctx ends; while leading it
// runs every work and m reports it (m may be nil in tests). client-go calls OnStartedLeading in a goroutine and does
// not wait for it when leadership is lost, so Run waits for the works
// of one term to return before it campaigns again: one replica never runs
// two terms' works at once (their metrics would race).
//
// Each term has one informer factory (over client, reading the webhook
// configurations cfgs names), carried by the term's context
// (sharedinformers.FromContext): every Work registers what it reads, starts
// the factory and waits for its own informers. It is shut down once the
// works returned, so a replica that lost the Lease watches nothing of the
// leader's, and the next term lists anew.
func Run(ctx context.Context, client kubernetes.Interface, o Options, cfgs sharedinformers.Configurations, log logr.Logger, m *Metrics, works ...Work) error {
	lock := o.lock(client)
	log.Info("campaigning", "lock", lock.Describe(), "previous", o.previous(), "identity", o.Identity)
	var term sync.WaitGroup
	for ctx.Err() == nil {
		informers := sharedinformers.New(client, cfgs)
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock: lock, LeaseDuration: o.LeaseDuration, RenewDeadline: o.RenewDeadline, RetryPeriod: o.RetryPeriod,
			ReleaseOnCancel: true, Name: o.Name,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(lctx context.Context) {
					log.Info("leading", "lease", o.Namespace+"/"+o.Name, "identity", o.Identity, "works", len(works))
					m.set(1)
					tctx := sharedinformers.NewContext(lctx, informers)
					for _, w := range works {
						term.Add(1)
						go func() { defer term.Done(); w(tctx) }()
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
		// The term's context is cancelled, so every informer the works
		// started is stopping: wait for them. A term never led (the
		// elector returned before winning) started none.
		informers.Shutdown()
		for _, err := range informers.Conflicts() {
			log.Error(err, "a leader Work could not have the informer it asked for in this term (a bug: two Works ask for one type with different filters)")
		}
		log.V(1).Info("the term's informers stopped", "informers", informers.Registered())
		// After the works returned: until then this replica still writes
		// as leader, and the gauge says so.
		m.set(0)
	}
	return nil
}

// previous is the Lease the leader holds beside its own, "" for none.
func (o Options) previous() string {
	if o.PreviousName == o.Name {
		return ""
	}
	return o.PreviousName
}

// lock is the Lease, or the Lease and the previous one. client-go's
// MultiLock is deprecated (it was made for the move from ConfigMap and
// Endpoints locks to Leases, whose support is gone) but it is exactly this
// migration, tested live in TestLeaseRenameKeepsOneLeader: it creates and
// renews both Leases, reads them as one record (whose holder is unknown
// while they name different holders), and takes them only once that
// record is its own or has not changed for a lease duration. An old replica holding the previous Lease changes the pair's record at
// every renewal, so a new replica sees a live holder and waits; once the
// old one stops renewing, the pair runs out after the lease duration and
// the new replica takes both. A new leader renewing both keeps an old
// replica (a rollback) from leading beside it the same way.
func (o Options) lock(client kubernetes.Interface) resourcelock.Interface {
	lease := func(name string) *resourcelock.LeaseLock {
		return &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: o.Namespace, Name: name},
			Client:     client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: o.Identity},
		}
	}
	if o.previous() == "" {
		return lease(o.Name)
	}
	//nolint:staticcheck // SA1019: MultiLock is deprecated, and this is the migration it was made for (see above); it goes in v0.2.0.
	return &resourcelock.MultiLock{Primary: lease(o.Name), Secondary: lease(o.previous())}
}

func (m *Metrics) set(v float64) {
	if m != nil {
		m.leading.Set(v)
	}
}
