package server

import (
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"clusterip-policy/internal/controllers/arming"
	"clusterip-policy/internal/controllers/backstop"
	"clusterip-policy/internal/controllers/holds"
	"clusterip-policy/internal/controllers/matchconditions"
	"clusterip-policy/internal/controllers/periodicaudit"
	"clusterip-policy/internal/controllers/policystatus"
	"clusterip-policy/internal/controllers/servingcerts"
	"clusterip-policy/internal/judged"
	"clusterip-policy/internal/leader"
	"clusterip-policy/internal/policysource"
	"clusterip-policy/internal/readiness"
)

// A role is one leader-only loop: what the Lease elects a replica for (as
// Gatekeeper's operations). roles is the one list of them: validate names
// the ones the flags turn on (leaderWorks) when it checks the Lease's
// flags, and runServer runs the Work of each (leaderWorkList).
type role struct {
	// name is the loop's logger name ("logger" of its log lines), and
	// its name in docs/architecture.md's table of roles.
	name string
	// flag is how the flags name the role: the flag that turns it on, as
	// leader.Options.Validate reports it. "" for a helper that runs only
	// for roles that are named (the namespace scope).
	flag string
	// on reports whether the options turn the role on.
	on func(o *serveOptions) bool
	// work builds the role's Work from the parts serve built.
	work func(p *leaderParts) (leader.Work, error)
}

// leaderParts is what the roles' Works are built from: what serve builds
// once because something else shares it (the admission hook, the
// readiness checks, another role).
type leaderParts struct {
	o      *serveOptions
	cfg    *rest.Config
	client kubernetes.Interface
	log    logr.Logger
	gate   *readiness.Gate
	// skip is the namespaces the holds and the audit leave out; nil when
	// both are off.
	skip *judged.Scope
	// The holds' client, watch and metrics, shared with the release in
	// the mutating stage; nil with the holds off.
	holdClient kubernetes.Interface
	holdWatch  *holds.Watch
	// keeperClient is the leader's client for writing holds, apart from
	// holdClient so that a range's creates never delay a release.
	keeperClient kubernetes.Interface
	holdMetrics  *holds.Metrics
	// audit is the periodic audit, nil when off: the arming loop asks it
	// for a pass at once after arming.
	audit *periodicaudit.Audit
	// conditions runs on every replica too (its removal while off).
	conditions *matchconditions.Keeper
	// status is the ClusterIPPolicy status writer, the sink the other
	// loops report to.
	status          *policystatus.Writer
	certMetrics     *servingcerts.Metrics
	armingMetrics   *arming.Metrics
	backstopMetrics *backstop.Metrics
}

var roles = []role{
	{
		name: "judged",
		on:   func(o *serveOptions) bool { return o.holds.Enabled || o.audit.Interval > 0 },
		work: func(p *leaderParts) (leader.Work, error) {
			return leader.Term(p.log.WithName("judged"), "leading: reading which namespaces the Service webhooks are called for", nil, p.skip.Run), nil
		},
	},
	{
		name: "holds", flag: "--hold-reservations",
		on: func(o *serveOptions) bool { return o.holds.Enabled },
		work: func(p *leaderParts) (leader.Work, error) {
			return holds.NewKeeper(p.keeperClient, p.holdWatch, p.gate, p.skip, p.o.holds.Grace, p.o.holds.WriteRate, p.log.WithName("holds"), p.holdMetrics).Work(), nil
		},
	},
	{
		name: "periodic-audit", flag: "--audit-interval",
		on:   func(o *serveOptions) bool { return o.audit.Interval > 0 },
		work: func(p *leaderParts) (leader.Work, error) { return p.audit.Work(), nil },
	},
	{
		name: "match-conditions", flag: "--manage-match-conditions",
		on:   func(o *serveOptions) bool { return o.conditions.Manage },
		work: func(p *leaderParts) (leader.Work, error) { return p.conditions.Work(), nil },
	},
	{
		name: "certificates", flag: "--certificate-source=managed",
		on: func(o *serveOptions) bool { return o.certs.Managed() },
		work: func(p *leaderParts) (leader.Work, error) {
			return servingcerts.New(p.client, p.o.certs, p.log.WithName("certificates"), p.certMetrics).Work(), nil
		},
	},
	{
		name: "arming", flag: "--arm-failure-policy",
		on: func(o *serveOptions) bool { return o.arming.Arm },
		work: func(p *leaderParts) (leader.Work, error) {
			// The probe reads its warnings from the response; client-go would
			// log each of them (two every probe) with its default handler.
			probeCfg := rest.CopyConfig(p.cfg)
			probeCfg.WarningHandler, probeCfg.WarningHandlerWithContext = rest.NoWarnings{}, rest.NoWarnings{}
			probeClient, err := kubernetes.NewForConfig(probeCfg)
			if err != nil {
				return nil, fmt.Errorf("kubernetes client: %w", err)
			}
			// validate made sure the audit runs: after arming it names at
			// once what was admitted unchecked before (after a second, so
			// that a create admitted just before the apiservers loaded Fail
			// is stored by then).
			audit := p.audit
			armed := func() { time.AfterFunc(time.Second, audit.Soon) }
			return arming.New(probeClient, p.o.arming, p.log.WithName("arming"), p.armingMetrics, p.status, armed).Work(), nil
		},
	},
	{
		name: "backstop", flag: "--backstop",
		on: func(o *serveOptions) bool { return o.backstop.Enabled },
		work: func(p *leaderParts) (leader.Work, error) {
			return backstop.New(p.client, p.gate, p.o.backstop, p.log.WithName("backstop"), p.backstopMetrics, p.status).Work(), nil
		},
	},
	{
		// The ClusterIPPolicy status has one writer, the leader: in CRD
		// mode this replica campaigns even when no other leader work is on.
		name: "policy-status", flag: "the ClusterIPPolicy status (--policy-source=crd)",
		on:   func(o *serveOptions) bool { return o.policySource == policysource.SourceCRD },
		work: func(p *leaderParts) (leader.Work, error) { return p.status.Work(), nil },
	},
}

// leaderWorks names the leader-only work the flags turn on, by the flag
// that does: what the Lease elects a replica for.
func (o *serveOptions) leaderWorks() []string {
	var works []string
	for _, r := range roles {
		if r.flag != "" && r.on(o) {
			works = append(works, r.flag)
		}
	}
	return works
}

// leaderWorkList builds the Work of every role the options turn on.
func leaderWorkList(p *leaderParts) ([]leader.Work, error) {
	var works []leader.Work
	for _, r := range roles {
		if !r.on(p.o) {
			continue
		}
		w, err := r.work(p)
		if err != nil {
			return nil, err
		}
		works = append(works, w)
	}
	return works, nil
}
