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
// runs every work. client-go calls OnStartedLeading in a goroutine and does
// not wait for it when leadership is lost, so runLeader waits for the works
// of one term to return before it campaigns again: one replica never runs
// two terms' works at once (their metrics would race).
func runLeader(ctx context.Context, client kubernetes.Interface, o holdOptions, log logr.Logger, works ...leaderWork) error {
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: o.leaseNamespace, Name: o.leaseName},
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: o.identity},
	}
	var term sync.WaitGroup
	for ctx.Err() == nil {
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock: lock, LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
			ReleaseOnCancel: true, Name: o.leaseName,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(lctx context.Context) {
					log.Info("leading", "lease", o.leaseNamespace+"/"+o.leaseName, "identity", o.identity, "works", len(works))
					for _, w := range works {
						term.Add(1)
						go func() { defer term.Done(); w(lctx) }()
					}
				},
				OnStoppedLeading: func() {
					log.Info("stopped leading", "identity", o.identity)
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
