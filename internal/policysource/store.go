// Package policysource holds the policy in force and feeds it from one of
// two sources: a file (--policy, re-read when it changes) or the
// cluster-scoped ClusterIPPolicy object (--policy-source=crd), whose status
// the leader writes (internal/controllers/policystatus, told what became of
// each generation through Observer). It imports no other part of the application but the
// small leaves; readiness, admission and the controllers read it.
package policysource

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"clusterip-policy/internal/poll"
	"clusterip-policy/pkg/policy"
)

// The --policy-source values.
const (
	SourceFile = "file"
	SourceCRD  = "crd"
)

// Loaded is a policy with the generation it was published under (the
// decision log line's policyGeneration).
type Loaded struct {
	Policy     *policy.Policy
	Generation uint64
}

// Metrics are the policy source's: how its loads went and the generation
// in force.
type Metrics struct {
	reloads    *prometheus.CounterVec
	generation prometheus.Gauge
}

// NewMetrics registers the metrics in reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "clusterip_policy_policy_reloads_total",
			Help: "Policy file loads by result (success, failure). A failure keeps the last good policy.",
		}, []string{"result"}),
		generation: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "clusterip_policy_policy_generation",
			Help: "Generation of the policy in force; grows with each accepted change.",
		}),
	}
	reg.MustRegister(m.reloads, m.generation)
	return m
}

// Store holds the policy in force. With a file source it reloads the file
// when it changes (Watch); with the object source ObjectSource publishes
// into it. path names the source in its log lines.
type Store struct {
	path    string
	log     logr.Logger
	metrics *Metrics
	cur     atomic.Pointer[Loaded]
}

// NewStore is an empty store; nothing is in force until the first load.
func NewStore(path string, log logr.Logger, m *Metrics) *Store {
	return &Store{path: path, log: log, metrics: m}
}

// Current returns the policy in force, or nil before the first load.
func (s *Store) Current() *Loaded { return s.cur.Load() }

// Reload reads the file; a new, valid policy replaces the current one, an
// invalid one is refused (logged and counted) and the last good one stays.
func (s *Store) Reload() error {
	p, err := policy.LoadFile(s.path)
	s.publish(p, err)
	return err
}

func (s *Store) publish(p *policy.Policy, err error) {
	cur := s.cur.Load()
	if err != nil {
		s.metrics.reloads.WithLabelValues("failure").Inc()
		if cur != nil {
			s.log.Error(err, "refused the changed policy; the last good one stays in force", "path", s.path, "policyGeneration", cur.Generation, "policyDigest", cur.Policy.Digest)
		}
		return
	}
	if cur != nil && cur.Policy.Digest == p.Digest {
		return // unchanged
	}
	next := &Loaded{Policy: p, Generation: 1}
	if cur != nil {
		next.Generation = cur.Generation + 1
	}
	s.cur.Store(next)
	s.metrics.reloads.WithLabelValues("success").Inc()
	s.metrics.generation.Set(float64(next.Generation))
	s.log.Info("policy loaded", "path", s.path, "policyGeneration", next.Generation, "policyDigest", p.Digest,
		"reservations", len(p.Reservations), "allowedCIDRs", len(p.AllowedCIDRs), "defaultAction", p.DefaultAction)
}

// Watch re-reads the file every interval until ctx ends. A bad file is
// reported (and counted) once, not at every interval while it stays bad.
func (s *Store) Watch(ctx context.Context, interval time.Duration) {
	var p *policy.Policy
	poll.Reread(ctx, interval, func() (err error) {
		p, err = policy.LoadFile(s.path)
		return err
	}, func(err error) { s.publish(p, err) })
}
