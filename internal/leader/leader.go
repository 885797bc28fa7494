// Package leader elects, with one Lease, the replica that runs the
// leader-only work (the reservation holds, the periodic audit, the managed
// matchConditions, the ClusterIPPolicy status), and runs that work, a list
// of Works, for each term it leads. It has its own options: the Lease
// elects every loop, not one of them.
package leader

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
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
}

// Validate checks the flags, naming the flag and the fix.
func (o Options) Validate() error {
	if o.Namespace == "" {
		return errors.New("--leader-election-namespace is empty; give the webhook's namespace (POD_NAMESPACE from the downward API)")
	}
	if o.Name == "" {
		return errors.New("--leader-election-lease is empty; give the Lease name, such as clusterip-policy-holds")
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
			Lock: lock, LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
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
