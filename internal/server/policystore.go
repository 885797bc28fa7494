package server

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	"clusterip-policy/pkg/policy"
)

// loadedPolicy is a policy with the generation it was published under.
type loadedPolicy struct {
	policy     *policy.Policy
	generation uint64
}

// policyStore holds the policy in force and reloads it when its file
// changes. A ConfigMap mounted as a directory changes by an atomic symlink
// swap, which polling the content sees as reliably as any file event.
type policyStore struct {
	path    string
	log     logr.Logger
	metrics *metrics
	cur     atomic.Pointer[loadedPolicy]
}

func newPolicyStore(path string, log logr.Logger, m *metrics) *policyStore {
	return &policyStore{path: path, log: log, metrics: m}
}

// Current returns the policy in force, or nil before the first load.
func (s *policyStore) Current() *loadedPolicy { return s.cur.Load() }

// reload reads the file; a new, valid policy replaces the current one, an
// invalid one is refused (logged and counted) and the last good one stays.
func (s *policyStore) reload() error {
	p, err := policy.LoadFile(s.path)
	s.publish(p, err)
	return err
}

func (s *policyStore) publish(p *policy.Policy, err error) {
	cur := s.cur.Load()
	if err != nil {
		s.metrics.policyReloads.WithLabelValues("failure").Inc()
		if cur != nil {
			s.log.Error(err, "refused the changed policy; the last good one stays in force", "path", s.path, "policyGeneration", cur.generation, "policyDigest", cur.policy.Digest)
		}
		return
	}
	if cur != nil && cur.policy.Digest == p.Digest {
		return // unchanged
	}
	next := &loadedPolicy{policy: p, generation: 1}
	if cur != nil {
		next.generation = cur.generation + 1
	}
	s.cur.Store(next)
	s.metrics.policyReloads.WithLabelValues("success").Inc()
	s.metrics.policyGeneration.Set(float64(next.generation))
	s.log.Info("policy loaded", "path", s.path, "policyGeneration", next.generation, "policyDigest", p.Digest,
		"reservations", len(p.Reservations), "allowedCIDRs", len(p.AllowedCIDRs), "defaultAction", p.DefaultAction)
}

// watch re-reads the file every interval until ctx ends. A bad file is
// reported (and counted) once, not at every interval while it stays bad.
func (s *policyStore) watch(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	lastErr := ""
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		p, err := policy.LoadFile(s.path)
		switch {
		case err == nil:
			lastErr = ""
		case err.Error() == lastErr:
			continue
		default:
			lastErr = err.Error()
		}
		s.publish(p, err)
	}
}
