package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/healthz"

	"clusterip-policy/internal/admission"
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
	"clusterip-policy/internal/sharedinformers"
)

// A feature is one row of what the server hosts beyond its core (the
// policy, the view, the admission endpoints): everything of one feature is
// built by its row, from one context, so adding a leader feature is one
// package plus one row here (plus its docs and RBAC). runServer hosts
// every row; the roles and metric-docs tests iterate the same table.
type feature struct {
	// name is the feature's logger name ("logger" of its log lines) and,
	// for a feature the Lease elects a replica for, its name in
	// docs/architecture.md's table of roles.
	name string
	// flag is how the flags name its leader role, as
	// leader.Options.Validate reports it; "" for a feature whose leader
	// work runs only for others that are named (the namespace scope).
	flag string
	// leads reports whether the options give the feature leader work:
	// what the Lease elects a replica for. nil: it never leads.
	leads func(o *serveOptions) bool
	// build makes the feature's parts. It runs whatever the flags, so a
	// metric a feature registers is there on every replica (as -1, or 0,
	// when off), and returns a Work exactly when leads says so.
	build func(c *hostContext) (parts, error)
}

// hostContext is what every feature is built from: the clients, the
// registry, the review gate and the ClusterIPPolicy status sink, plus what
// an earlier row shares with a later one (the table's order is the order
// of these dependencies).
type hostContext struct {
	o        *serveOptions
	cfg      *rest.Config
	client   kubernetes.Interface
	dyn      dynamic.Interface
	log      logr.Logger
	registry prometheus.Registerer
	gate     *readiness.Gate
	// informers is the replica's one informer factory: every feature
	// registers what it watches in its build (one informer per type, its
	// filter agreed: sharedinformers.Factory.For), and runServer starts it
	// once every row is built. A leader term has a factory of its own
	// (leader.Run), which the Works find in their context.
	informers *sharedinformers.Factory
	// namespaces is the replica's one watch of the namespaces' labels
	// (the core's): the reserved ranges read it in every review, and the
	// judged scope on the leader.
	namespaces *judged.Labels
	// status is the ClusterIPPolicy status writer, the sink the other
	// loops report to (its own Work is the policy-status row's).
	status *policystatus.Writer

	// skip is the namespaces the holds and the audit leave out (the
	// judged row); nil when both are off.
	skip *judged.Scope
	// audit is the periodic audit (its row), nil when off: arming asks it
	// for a pass at once after arming.
	audit *periodicaudit.Audit
}

// parts is what one feature gives the server to host.
type parts struct {
	// run is what every replica runs until the background context ends.
	run []runnable
	// serve is what runs with the webhook's context: until the server
	// stops, through the shutdown delay (the serving certificate).
	serve []runnable
	// work is the leader's part, run for each term this replica leads.
	work leader.Work
	// ready are /readyz checks, by name.
	ready map[string]healthz.Checker
	// hook is called after the mutating stage allowed a create (the
	// holds' release); tls edits the admission port's tls.Config.
	hook admission.AllocationHook
	tls  []func(*tls.Config)
}

// runnable is one goroutine the server runs and waits for.
type runnable struct {
	name string
	run  func(ctx context.Context) error
}

var features = []feature{
	{
		// Which namespaces the Service webhooks are called for, read by
		// the leader from the live configurations (their
		// namespaceSelector) and the namespaces' labels: the holds and the
		// periodic audit skip the rest (docs/design.md, "Which namespaces
		// are judged here"). The Lease namespace is the webhook's own,
		// which the configurations exclude.
		name:  "judged",
		leads: func(o *serveOptions) bool { return o.holds.Enabled || o.audit.Interval > 0 },
		build: func(c *hostContext) (parts, error) {
			if !c.o.holds.Enabled && c.o.audit.Interval == 0 {
				return parts{}, nil
			}
			log := c.log.WithName("judged")
			c.skip = judged.NewScope(c.namespaces, c.o.configurations.Mutating, c.o.configurations.Validating, []string{c.o.lease.Namespace}, log)
			return parts{work: leader.Term(log, "leading: reading which namespaces the Service webhooks are called for", nil, c.skip.Run)}, nil
		},
	},
	{
		name: "holds", flag: "--hold-reservations",
		leads: func(o *serveOptions) bool { return o.holds.Enabled },
		build: buildHolds,
	},
	{
		name: "periodic-audit", flag: "--audit-interval",
		leads: func(o *serveOptions) bool { return o.audit.Interval > 0 },
		build: func(c *hostContext) (parts, error) {
			// Its metrics only while it runs, as the holds': a gauge of a
			// loop that is off would read as a loop that found nothing.
			if c.o.audit.Interval == 0 {
				return parts{}, nil
			}
			c.audit = periodicaudit.New(c.client, c.gate, c.skip, c.o.audit.Interval, c.o.lease.Identity, c.log.WithName("periodic-audit"), periodicaudit.NewMetrics(c.registry), c.status)
			if c.o.audit.Reports {
				c.audit.WriteReports(periodicaudit.NewReports(c.dyn, c.client.Discovery(), c.log.WithName("policy-reports"), periodicaudit.NewReportMetrics(c.registry)))
			}
			return parts{work: c.audit.Work()}, nil
		},
	},
	{
		name: "match-conditions", flag: "--manage-match-conditions",
		leads: func(o *serveOptions) bool { return o.conditions.Manage },
		build: func(c *hostContext) (parts, error) {
			keeper := matchconditions.New(c.client, c.gate, c.o.conditions, c.log.WithName("match-conditions"), matchconditions.NewMetrics(c.registry), c.status)
			if c.o.conditions.Manage {
				return parts{work: keeper.Work()}, nil
			}
			// Every replica, with or without a Lease: a managed condition
			// left from when management was on must go whatever else is on.
			return parts{run: []runnable{{"managed matchConditions removal", func(ctx context.Context) error { keeper.KeepRemoved(ctx); return nil }}}}, nil
		},
	},
	{
		name: "certificates", flag: "--certificate-source=managed",
		leads: func(o *serveOptions) bool { return o.certs.Managed() },
		build: buildCertificates,
	},
	{
		name: "arming", flag: "--arm-failure-policy",
		leads: func(o *serveOptions) bool { return o.arming.Arm },
		build: buildArming,
	},
	{
		name: "backstop", flag: "--backstop",
		leads: func(o *serveOptions) bool { return o.backstop.Enabled },
		build: func(c *hostContext) (parts, error) {
			// Registered whatever the flag, as -1 (nothing known here): a
			// dashboard or alert reads the same series on every replica.
			m := backstop.NewMetrics(c.registry)
			if !c.o.backstop.Enabled {
				return parts{}, nil
			}
			return parts{work: backstop.New(c.client, c.gate, c.o.backstop, c.log.WithName("backstop"), m, c.status).Work()}, nil
		},
	},
	{
		// The ClusterIPPolicy status has one writer, the leader: in CRD
		// mode this replica campaigns even when no other leader work is on.
		name: "policy-status", flag: "the ClusterIPPolicy status (--policy-source=crd)",
		leads: func(o *serveOptions) bool { return o.policySource == policysource.SourceCRD },
		build: func(c *hostContext) (parts, error) {
			if c.o.policySource != policysource.SourceCRD {
				return parts{}, nil
			}
			return parts{work: c.status.Work()}, nil
		},
	},
}

// buildHolds: every replica watches the holds and releases an owner's in
// the mutating stage; the leader keeps them written.
func buildHolds(c *hostContext) (parts, error) {
	if !c.o.holds.Enabled {
		return parts{}, nil
	}
	log := c.log.WithName("holds")
	hcfg := rest.CopyConfig(c.cfg)
	hcfg.QPS, hcfg.Burst = holds.ClientQPS, holds.ClientBurst
	hclient, err := kubernetes.NewForConfig(hcfg)
	if err != nil {
		return parts{}, fmt.Errorf("kubernetes client: %w", err)
	}
	m := holds.NewMetrics(c.registry)
	watch, err := holds.NewWatch(c.informers)
	if err != nil {
		return parts{}, err
	}
	// The keeper writes through a client of its own, so a reserved
	// range's creates never make a release wait on the client's limit.
	kcfg := rest.CopyConfig(hcfg)
	kcfg.QPS, kcfg.Burst = float32(2*c.o.holds.WriteRate), int(2*c.o.holds.WriteRate)
	kclient, err := kubernetes.NewForConfig(kcfg)
	if err != nil {
		return parts{}, fmt.Errorf("kubernetes client: %w", err)
	}
	return parts{
		hook: holds.NewReleaser(hclient, watch, log, m, time.Now),
		// A release is decided from the watch of the holds: until it has
		// listed them, an owner's create could not be told whether there
		// is a hold to release.
		ready: map[string]healthz.Checker{"holds": func(*http.Request) error {
			if !watch.Synced() {
				return errors.New("the reservation holds are not listed yet")
			}
			return nil
		}},
		work: holds.NewKeeper(kclient, watch, c.gate, c.skip, c.o.holds.Grace, c.o.holds.WriteRate, log, m).Work(),
	}, nil
}

// buildCertificates: the serving certificate every replica serves (the
// Secret read through the API when managed, the files of --cert-dir
// otherwise), and with managed certificates the leader's CA and renewals.
func buildCertificates(c *hostContext) (parts, error) {
	m := servingcerts.NewMetrics(c.registry)
	if !c.o.certs.Managed() {
		servingcerts.RegisterExpiry(c.registry, servingcerts.FromDir(c.o.certDir))
		return parts{}, nil
	}
	log := c.log.WithName("certificates")
	source, err := servingcerts.NewSource(c.informers, c.o.certs.Namespace, c.o.certs.Secret, log, m)
	if err != nil {
		return parts{}, err
	}
	servingcerts.RegisterExpiry(c.registry, source.Served)
	return parts{
		serve: []runnable{{"serving certificate watcher", source.Run}},
		tls:   []func(*tls.Config){source.TLSOption()},
		work:  servingcerts.New(c.client, source, c.o.certs, log, m).Work(),
	}, nil
}

// buildArming: the leader probes the webhook through the apiservers and
// sets failurePolicy Fail once it answers.
func buildArming(c *hostContext) (parts, error) {
	// Registered whatever the flag, as -1: the same series everywhere.
	m := arming.NewMetrics(c.registry)
	if !c.o.arming.Arm {
		return parts{}, nil
	}
	// The probe reads its warnings from the response; client-go would log
	// each of them (two every probe) with its default handler.
	probeCfg := rest.CopyConfig(c.cfg)
	probeCfg.WarningHandler, probeCfg.WarningHandlerWithContext = rest.NoWarnings{}, rest.NoWarnings{}
	probeClient, err := kubernetes.NewForConfig(probeCfg)
	if err != nil {
		return parts{}, fmt.Errorf("kubernetes client: %w", err)
	}
	// validate made sure the audit runs: after arming it names at once
	// what was admitted unchecked before (after a second, so that a create
	// admitted just before the apiservers loaded Fail is stored by then).
	audit := c.audit
	armed := func() { time.AfterFunc(time.Second, audit.Soon) }
	return parts{work: arming.New(probeClient, c.o.arming, c.log.WithName("arming"), m, c.status, armed).Work()}, nil
}

// leaderWorks names the leader-only work the flags turn on, by the flag
// that does: what the Lease elects a replica for.
func (o *serveOptions) leaderWorks() []string {
	var works []string
	for _, f := range features {
		if f.flag != "" && f.leads != nil && f.leads(o) {
			works = append(works, f.flag)
		}
	}
	return works
}

// hosted is every feature's parts, gathered.
type hosted struct {
	run, serve []runnable
	works      []leader.Work
	ready      map[string]healthz.Checker
	hook       admission.AllocationHook
	tls        []func(*tls.Config)
}

// buildFeatures builds every row of the table, in order, and checks that
// each gives a Work exactly when its leads says so (a row that does not
// is a bug of the row: the Lease would elect a replica for nothing, or run
// nothing it was elected for).
func buildFeatures(c *hostContext) (hosted, error) {
	h := hosted{ready: map[string]healthz.Checker{}}
	for _, f := range features {
		p, err := f.build(c)
		if err != nil {
			return h, fmt.Errorf("%s: %w", f.name, err)
		}
		if leads := f.leads != nil && f.leads(c.o); leads != (p.work != nil) {
			return h, fmt.Errorf("feature %s: leads is %t but its build gave %s Work", f.name, leads, map[bool]string{true: "a", false: "no"}[p.work != nil])
		}
		if p.work != nil {
			h.works = append(h.works, p.work)
		}
		h.run, h.serve, h.tls = append(h.run, p.run...), append(h.serve, p.serve...), append(h.tls, p.tls...)
		for name, check := range p.ready {
			if _, dup := h.ready[name]; dup {
				return h, fmt.Errorf("feature %s: a second ready check named %q", f.name, name)
			}
			h.ready[name] = check
		}
		if p.hook != nil {
			if h.hook != nil {
				return h, fmt.Errorf("feature %s: a second allocation hook; the admission endpoints call one", f.name)
			}
			h.hook = p.hook
		}
	}
	return h, nil
}
