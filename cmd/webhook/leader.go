package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// One Lease (--leader-election-lease) elects the replica that runs the
// leader-only work: the reservation holds (--hold-reservations) and the
// periodic audit (--audit-interval). Both read the cluster as a whole and
// write to it (IPAddresses, Events), so one writer is enough, and one
// Lease keeps the RBAC to the one Role that names it.

// leaderWork runs while its replica leads, until ctx (the leadership)
// ends; it undoes what it exposes as leader (metrics) before returning.
type leaderWork func(ctx context.Context)

// runLeader takes part in leader election until ctx ends; while leading it
// runs every work and waits for all of them to return before leading ends.
func runLeader(ctx context.Context, client kubernetes.Interface, o holdOptions, log logr.Logger, works ...leaderWork) error {
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: o.leaseNamespace, Name: o.leaseName},
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: o.identity},
	}
	for ctx.Err() == nil {
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock: lock, LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
			ReleaseOnCancel: true, Name: o.leaseName,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(lctx context.Context) {
					log.Info("leading", "lease", o.leaseNamespace+"/"+o.leaseName, "identity", o.identity, "works", len(works))
					var wg sync.WaitGroup
					for _, w := range works {
						wg.Add(1)
						go func() { defer wg.Done(); w(lctx) }()
					}
					wg.Wait()
				},
				OnStoppedLeading: func() {
					log.Info("stopped leading", "identity", o.identity)
				},
			},
		})
		if err != nil {
			return fmt.Errorf("leader election: %w", err)
		}
		le.Run(ctx) // returns when leadership is lost or ctx ends
	}
	return nil
}
