// Package server is clusterip-policy's one composition root: it parses and
// checks the serve flags, builds the policy source, the view, the admission
// handlers and the leader-only loops, and runs them until a signal.
// docs/architecture.md has the map.
package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/pflag"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"clusterip-policy/internal/admission"
	"clusterip-policy/internal/controllers/arming"
	"clusterip-policy/internal/controllers/backstop"
	"clusterip-policy/internal/controllers/holds"
	"clusterip-policy/internal/controllers/matchconditions"
	"clusterip-policy/internal/controllers/periodicaudit"
	"clusterip-policy/internal/controllers/policystatus"
	"clusterip-policy/internal/controllers/servingcerts"
	"clusterip-policy/internal/exitcode"
	"clusterip-policy/internal/judged"
	"clusterip-policy/internal/leader"
	"clusterip-policy/internal/logging"
	"clusterip-policy/internal/names"
	"clusterip-policy/internal/policysource"
	"clusterip-policy/internal/readiness"
	"clusterip-policy/internal/tlsauth"
	"clusterip-policy/internal/version"
	"clusterip-policy/internal/webhookconfig"
	"clusterip-policy/pkg/allocview"
	"clusterip-policy/pkg/allocview/kubesource"
	"clusterip-policy/pkg/policy"
)

type serveOptions struct {
	policyPath     string
	policySource   string
	kubeconfig     string
	logLevel       logging.Level
	certDir        string
	bindAddress    string
	port           int
	healthAddr     string
	metricsAddr    string
	serviceCIDRs   []string
	reloadInterval time.Duration
	shutdownDelay  time.Duration
	maxStaleness   time.Duration
	clientCAFile   string
	// configurations are the two webhook configurations' names, bound once
	// and handed to every loop that reads or writes them (validate).
	configurations webhookconfig.Names
	holds          holds.Options
	lease          leader.Options
	audit          periodicaudit.Options
	conditions     matchconditions.Options
	certs          servingcerts.Options
	certDirSet     bool // --cert-dir given on the command line
	arming         arming.Options
	backstop       backstop.Options
}

// serveFlags is serve's flag set: its own flags and each package's
// options', each declared by its AddFlags beside the Validate that checks
// it (a flag's name, default and help are in one file).
func serveFlags(o *serveOptions) *pflag.FlagSet {
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	o.addFlags(fs)
	o.configurations.AddFlags(fs)
	o.certs.AddFlags(fs)
	o.lease.AddFlags(fs)
	o.holds.AddFlags(fs)
	o.audit.AddFlags(fs)
	o.conditions.AddFlags(fs)
	o.arming.AddFlags(fs)
	o.backstop.AddFlags(fs)
	return fs
}

// addFlags declares serve's own flags (the policy, the client, the ports
// and addresses, the client CAs), checked by validate.
func (o *serveOptions) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.policyPath, "policy", "", "Path of the ClusterIPPolicy object manifest (required unless --policy-source=crd; the retired policy file format still loads). It is re-read when it changes, so a ConfigMap mounted as a directory takes effect without a restart; a file that fails to load is refused and the last good policy stays.")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "Path of a kubeconfig for reaching the apiserver. Empty: the in-cluster service account.")
	o.logLevel = logging.Info
	fs.Var(&o.logLevel, "log-level", logging.LevelHelp)
	fs.StringVar(&o.certDir, "cert-dir", "/tls", "With --certificate-source=file: directory holding the serving certificate as tls.crt and tls.key (a kubernetes.io/tls Secret mounted as a volume, from cert-manager or your own), and optionally ca.crt (read for clusterip_policy_certificate_expiry_seconds{certificate=\"ca\"}). The files are reloaded when they change, so certificates rotate without a restart.")
	fs.StringVar(&o.bindAddress, "bind-address", "", "Address the webhook listens on; empty means all interfaces.")
	fs.IntVar(&o.port, "port", 9443, "Port of the HTTPS webhook endpoints "+strings.Join(names.Paths, ", ")+".")
	fs.StringVar(&o.healthAddr, "health-probe-bind-address", ":8081", "Address of /healthz (liveness: the process answers) and /readyz (ready: webhook serving, policy loaded, view of ServiceCIDRs and IPAddresses synced).")
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8080", "Address of the Prometheus /metrics endpoint; \"0\" turns it off.")
	fs.StringArrayVar(&o.serviceCIDRs, "service-cidr", nil, "Service CIDR to use when the cluster serves no ServiceCIDR objects (before Kubernetes 1.33). Repeatable, primary family first; replaces the policy's serviceCIDRs.")
	fs.StringVar(&o.policySource, "policy-source", policysource.SourceFile, "Where the policy comes from: file (--policy, the default) or crd (the cluster-scoped ClusterIPPolicy object named default, manifests/base/crd.yaml; its status shows whether its generation is in force). With crd, leave --policy unset.")
	fs.DurationVar(&o.reloadInterval, "policy-reload-interval", 2*time.Second, "How often the policy file is checked for changes.")
	fs.DurationVar(&o.shutdownDelay, "shutdown-delay", 15*time.Second, "On SIGTERM, how long to keep serving while reporting not-ready, so load balancers and apiservers stop sending requests before the server closes; in-flight reviews then finish.")
	fs.DurationVar(&o.maxStaleness, "max-view-staleness", 30*time.Second, "How long ServiceCIDRs or IPAddresses may go without an established watch (a failed, refused or cut stream; each review's audit line shows viewStaleSeconds) before /readyz fails and reviews are denied as not ready, rather than decided on a view that may be out of date.")
	fs.StringVar(&o.clientCAFile, "client-ca-file", "", "PEM file of the CA certificate(s) that sign the kube-apiservers' client certificates (the kubeconfig of the apiserver's --admission-control-config-file). When set, the admission port requires and verifies a client certificate at the TLS handshake, so only the apiservers can call the webhook; the file is re-read every 10s and a file that fails to load is refused (the last good one stays). Empty: any client is accepted. Either way the port speaks TLS 1.2 or newer (TLS 1.2 only with ECDHE and AES-GCM or ChaCha20-Poly1305) and HTTP/1.1 only: the apiserver calls webhooks behind a Service over HTTP/1.1, and HTTP/2 would only add its rapid-reset exposure. Probes and metrics stay on their plain-HTTP ports.")
}

// validate checks every flag before anything starts, naming the flag, the
// value and the fix.
func (o *serveOptions) validate() ([]netip.Prefix, error) {
	switch o.policySource {
	case policysource.SourceFile:
	case policysource.SourceCRD:
		if o.policyPath != "" {
			return nil, fmt.Errorf("--policy %s and --policy-source=crd exclude each other: with crd the policy is the ClusterIPPolicy object %q; drop --policy, or use --policy-source=file", o.policyPath, policy.ObjectName)
		}
	default:
		return nil, fmt.Errorf("--policy-source %q is not a policy source; use file or crd", o.policySource)
	}
	if o.policySource == policysource.SourceFile && o.policyPath == "" {
		return nil, errors.New("--policy is required: the path of a ClusterIPPolicy object manifest (see examples/clusterippolicy.yaml), or --policy-source=crd")
	}
	if o.policySource == policysource.SourceFile {
		if _, err := policy.LoadFile(o.policyPath); err != nil {
			return nil, fmt.Errorf("--policy: %w", err)
		}
	}
	if o.port <= 0 || o.port > 65535 {
		return nil, fmt.Errorf("--port %d is not a TCP port; use 1-65535", o.port)
	}
	// The configurations' names, bound once, are every loop's.
	o.certs.Configurations, o.conditions.Configurations, o.arming.Configurations, o.backstop.Configurations = o.configurations, o.configurations, o.configurations, o.configurations
	if err := o.certs.Validate(o.certDirSet); err != nil {
		return nil, err
	}
	if !o.certs.Managed() {
		for _, f := range []string{"tls.crt", "tls.key"} {
			if _, err := os.Stat(filepath.Join(o.certDir, f)); err != nil {
				return nil, fmt.Errorf("--cert-dir %s: %w; mount the serving certificate there, or use --certificate-source=managed", o.certDir, err)
			}
		}
	}
	if o.reloadInterval <= 0 {
		return nil, fmt.Errorf("--policy-reload-interval %s must be positive", o.reloadInterval)
	}
	if o.maxStaleness <= 0 {
		return nil, fmt.Errorf("--max-view-staleness %s must be positive", o.maxStaleness)
	}
	if o.shutdownDelay < 0 {
		return nil, fmt.Errorf("--shutdown-delay %s must not be negative", o.shutdownDelay)
	}
	if o.clientCAFile != "" {
		if _, err := tlsauth.ParseBundle(o.clientCAFile, time.Now()); err != nil {
			return nil, fmt.Errorf("--client-ca-file: %w", err)
		}
	}
	if err := o.holds.Validate(); err != nil {
		return nil, err
	}
	if err := o.audit.Validate(); err != nil {
		return nil, err
	}
	if err := o.configurations.Validate(); err != nil {
		return nil, err
	}
	if err := o.conditions.Validate(); err != nil {
		return nil, err
	}
	if err := o.arming.Validate(); err != nil {
		return nil, err
	}
	o.backstop.Namespace = o.lease.Namespace
	if o.arming.Arm && o.audit.Interval == 0 {
		return nil, errors.New("--arm-failure-policy needs --audit-interval: while the Service webhooks are not armed (failurePolicy Ignore), a create the apiservers cannot send to the webhook is admitted unchecked, and the periodic audit is what names it; give --audit-interval=5m (manifests/base), or drop --arm-failure-policy and register the webhooks with failurePolicy Fail")
	}
	// The Lease is checked once, whenever any leader work is on: the
	// ClusterIPPolicy status alone (--policy-source=crd) campaigns too.
	if works := o.leaderWorks(); len(works) > 0 {
		if err := o.lease.Validate(works); err != nil {
			return nil, err
		}
	}
	var cidrs []netip.Prefix
	for _, s := range o.serviceCIDRs {
		p, err := allocview.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("--service-cidr: %w", err)
		}
		cidrs = append(cidrs, p)
	}
	return cidrs, nil
}

// serve runs the webhook with the flags fs parsed into o (Command); it
// returns the exit code.
func serve(o serveOptions, fs *pflag.FlagSet, args []string, stderr io.Writer) int {
	if len(args) > 0 {
		fmt.Fprintf(stderr, "serve takes no arguments, got %q\n", args)
		return exitcode.BadData
	}
	o.certDirSet = fs.Changed("cert-dir")
	log := logging.NewAt(stderr, o.logLevel)
	staticCIDRs, err := o.validate()
	if err != nil {
		log.Error(err, "invalid flags")
		return exitcode.BadData
	}
	ctrl.SetLogger(log)
	klog.SetLogger(log.WithName("client")) // client-go's warnings and errors, as JSON too
	flags := map[string]string{}
	fs.VisitAll(func(f *pflag.Flag) { flags[f.Name] = f.Value.String() })
	log.Info("starting clusterip-policy webhook", "version", version.Version(), "commit", version.Commit(), "flags", flags)

	logging.RouteStdlib(log.WithName("http"))
	if err := runServer(o, staticCIDRs, log); err != nil {
		log.Error(err, "webhook stopped")
		return exitcode.Denied
	}
	return exitcode.OK
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("no --kubeconfig and not running in a cluster: %w", err)
		}
		return cfg, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig %s: %w", kubeconfig, err)
	}
	return cfg, nil
}

func runServer(o serveOptions, staticCIDRs []netip.Prefix, log logr.Logger) error {
	cfg, err := restConfig(o.kubeconfig)
	if err != nil {
		return err
	}
	cfg.UserAgent = "clusterip-policy/" + version.Version()
	// Explicit rather than client-go's default of 5 a second, burst 10,
	// which every group of a clientset shares: the view's lists, the
	// Lease, the audit and the conditions' writes. The holds have a client
	// of their own (holds.ClientQPS). docs/operations.md, "API calls".
	cfg.QPS, cfg.Burst = clientQPS, clientBurst
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}

	view := allocview.NewView()
	pm := policysource.NewMetrics(defaultRegistry)
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	// The ClusterIPPolicy status writer (its role runs with
	// --policy-source=crd) is the sink the other loops report to: built
	// first, handed to their constructors.
	status := policystatus.New(dyn, policystatus.Options{Audit: o.audit.Interval > 0, Conditions: o.conditions.Manage, Probe: o.arming.Arm, Backstop: o.backstop.Enabled}, log.WithName("policy-status"))
	var object *policysource.ObjectSource
	var policies *policysource.Store
	if o.policySource == policysource.SourceCRD {
		policies = policysource.NewStore(policy.ObjectResource+"/"+policy.ObjectName, log.WithName("policy"), pm)
		object = policysource.NewObjectSource(dyn, policies, status, log.WithName("policy"))
	} else {
		policies = policysource.NewStore(o.policyPath, log.WithName("policy"), pm)
		if err := policies.Reload(); err != nil {
			return err // no good policy to fall back to at start
		}
	}
	source := kubesource.New(client, view, log.WithName("view"))
	readiness.RegisterViewMetrics(defaultRegistry, view, source)
	// Every replica watches the namespaces' labels: a reserved range's
	// namespaceSelector needs them, and a review carries none.
	nsLabels := judged.NewLabels(client)
	gate := &readiness.Gate{Policies: policies, View: view, StaleFor: source.StaleFor, MaxStaleness: o.maxStaleness, StaticCIDRs: staticCIDRs, NamespaceLabels: nsLabels.Of}
	readiness.RegisterBandUsage(defaultRegistry, view, readiness.ReservedBands(policies))
	readiness.RegisterRangeUsage(defaultRegistry, view, readiness.ReservedRanges(policies))
	var hook admission.AllocationHook // the holds' release; nil with holds off
	parts := &leaderParts{o: &o, cfg: cfg, client: client, log: log, gate: gate, status: status}
	// Which namespaces the Service webhooks are called for, read by the
	// leader from the live configurations (their namespaceSelector) and
	// the namespaces' labels: the holds and the periodic audit skip the
	// rest (docs/design.md, "Which namespaces are judged here"). The Lease
	// namespace is the webhook's own, which the configurations exclude.
	if o.holds.Enabled || o.audit.Interval > 0 {
		parts.skip = judged.NewScope(client, o.configurations.Mutating, o.configurations.Validating, []string{o.lease.Namespace}, log.WithName("judged"))
	}
	if o.holds.Enabled {
		hcfg := rest.CopyConfig(cfg)
		hcfg.QPS, hcfg.Burst = holds.ClientQPS, holds.ClientBurst
		hclient, err := kubernetes.NewForConfig(hcfg)
		if err != nil {
			return fmt.Errorf("kubernetes client: %w", err)
		}
		parts.holdClient, parts.holdMetrics = hclient, holds.NewMetrics(defaultRegistry)
		parts.holdWatch = holds.NewWatch(hclient) // every replica's watch of the holds
		hook = holds.NewReleaser(hclient, parts.holdWatch, log.WithName("holds"), parts.holdMetrics, time.Now)
		// The keeper writes through a client of its own, so a reserved
		// range's creates never make a release wait on the client's limit.
		kcfg := rest.CopyConfig(hcfg)
		kcfg.QPS, kcfg.Burst = float32(2*o.holds.WriteRate), int(2*o.holds.WriteRate)
		if parts.keeperClient, err = kubernetes.NewForConfig(kcfg); err != nil {
			return fmt.Errorf("kubernetes client: %w", err)
		}
	}
	holdWatch := parts.holdWatch
	if o.audit.Interval > 0 {
		parts.audit = periodicaudit.New(client, gate, parts.skip, o.audit.Interval, o.lease.Identity, log.WithName("periodic-audit"), periodicaudit.NewMetrics(defaultRegistry), status)
		if o.audit.Reports {
			parts.audit.WriteReports(periodicaudit.NewReports(dyn, client.Discovery(), log.WithName("policy-reports"), periodicaudit.NewReportMetrics(defaultRegistry)))
		}
	}
	keeper := matchconditions.New(client, gate, o.conditions, log.WithName("match-conditions"), matchconditions.NewMetrics(defaultRegistry), status)
	parts.conditions = keeper
	// Registered whatever the flag, as -1 (nothing known here): a
	// dashboard or alert reads the same series on every replica.
	parts.armingMetrics = arming.NewMetrics(defaultRegistry)
	parts.backstopMetrics = backstop.NewMetrics(defaultRegistry)

	// Not webhook.Options.ClientCAName: it reads the CA once at start, and
	// only from inside --cert-dir (see internal/tlsauth).
	var cas *tlsauth.ClientCAs
	if o.clientCAFile != "" {
		if cas, err = tlsauth.NewClientCAs(o.clientCAFile, log.WithName("tls")); err != nil {
			return fmt.Errorf("--client-ca-file: %w", err)
		}
		log.Info("client certificates required on the admission port", "clientCAFile", o.clientCAFile, "digest", cas.Digest(), "cas", cas.Subject())
	}
	// The serving certificate: the Secret read through the API (managed),
	// or controller-runtime's watcher of --cert-dir (file).
	tlsOpts := tlsauth.Options(cas)
	cm := servingcerts.NewMetrics(defaultRegistry)
	parts.certMetrics = cm
	var certSource *servingcerts.Source
	if o.certs.Managed() {
		certSource = servingcerts.NewSource(client, o.certs.Namespace, o.certs.Secret, log.WithName("certificates"), cm)
		tlsOpts = append(tlsOpts, certSource.TLSOption())
		servingcerts.RegisterExpiry(defaultRegistry, certSource.Served)
	} else {
		servingcerts.RegisterExpiry(defaultRegistry, servingcerts.FromDir(o.certDir))
	}
	// The leader-only loops: one Work for each role the flags turn on
	// (roles.go).
	leaderWorks, err := leaderWorkList(parts)
	if err != nil {
		return err
	}
	var leaderMetrics *leader.Metrics
	if len(leaderWorks) > 0 {
		leaderMetrics = leader.NewMetrics(defaultRegistry)
	}
	server := webhook.NewServer(webhook.Options{Host: o.bindAddress, Port: o.port, CertDir: o.certDir, TLSOpts: tlsOpts})
	for path, h := range admission.Endpoints(admission.Config{Gate: gate, DecisionLog: log.WithName("audit"), Registry: defaultRegistry, Hook: hook}) {
		server.Register(path, h)
	}

	var draining atomic.Bool
	readyChecks := map[string]healthz.Checker{
		"webhook": tlsauth.ReadyChecker(server, cas, o.bindAddress, o.port),
		// The same answer every review gets: policy loaded, view synced
		// and not stale for longer than --max-view-staleness.
		"reviews": func(*http.Request) error {
			_, err := gate.Check(time.Now())
			return err
		},
		// A release is decided from the watch of the holds: until it has
		// listed them, an owner's create could not be told whether there is
		// a hold to release.
		"holds": func(*http.Request) error {
			if holdWatch != nil && !holdWatch.Synced() {
				return errors.New("the reservation holds are not listed yet")
			}
			return nil
		},
		"shutdown": func(*http.Request) error {
			if draining.Load() {
				return errors.New("shutting down")
			}
			return nil
		},
	}
	probes := http.NewServeMux()
	probes.Handle("/healthz", http.StripPrefix("/healthz", &healthz.Handler{Checks: map[string]healthz.Checker{"ping": healthz.Ping}}))
	probes.Handle("/healthz/", http.StripPrefix("/healthz", &healthz.Handler{Checks: map[string]healthz.Checker{"ping": healthz.Ping}}))
	probes.Handle("/readyz", http.StripPrefix("/readyz", &healthz.Handler{Checks: readyChecks}))
	probes.Handle("/readyz/", http.StripPrefix("/readyz", &healthz.Handler{Checks: readyChecks}))

	signals, stopSignals := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stopSignals()
	// Two contexts: the webhook keeps serving through the shutdown delay,
	// everything else stops after it.
	webhookCtx, stopWebhook := context.WithCancel(context.Background())
	defer stopWebhook()
	bgCtx, stopBackground := context.WithCancel(context.Background())
	defer stopBackground()

	errs := make(chan error, 10) // one per goroutine below, so none blocks on exit
	var wg sync.WaitGroup
	goRun := func(name string, fn func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fn(); err != nil {
				errs <- fmt.Errorf("%s: %w", name, err)
			}
		}()
	}
	goRun("view", func() error { return source.Run(bgCtx) })
	goRun("namespace labels", func() error { nsLabels.Run(bgCtx); return nil })
	if holdWatch != nil {
		goRun("holds watch", func() error { holdWatch.Run(bgCtx); return nil })
	}
	if object != nil {
		goRun("policy object watcher", func() error { return object.Run(bgCtx) })
	} else {
		goRun("policy watcher", func() error { policies.Watch(bgCtx, o.reloadInterval); return nil })
	}
	if certSource != nil {
		// With the webhook's context: it serves until the server stops.
		goRun("serving certificate watcher", func() error { return certSource.Run(webhookCtx) })
	}
	goRun("webhook server", func() error { return server.Start(webhookCtx) })
	if !o.conditions.Manage {
		// Every replica, with or without a Lease: a managed condition left
		// from when management was on must go whatever else is on.
		goRun("managed matchConditions removal", func() error { keeper.KeepRemoved(bgCtx); return nil })
	}
	if len(leaderWorks) > 0 {
		goRun("leader election", func() error {
			return leader.Run(bgCtx, client, o.lease, log.WithName("leader"), leaderMetrics, leaderWorks...)
		})
	}
	if cas != nil {
		goRun("client CA watcher", func() error { cas.Watch(bgCtx, tlsauth.ReloadInterval); return nil })
	}
	goRun("health probes", func() error { return serveHTTP(bgCtx, o.healthAddr, probes) })
	if o.metricsAddr != "0" {
		metricsMux := http.NewServeMux()
		metricsMux.Handle("/metrics", promhttp.HandlerFor(defaultRegistry, promhttp.HandlerOpts{}))
		goRun("metrics", func() error { return serveHTTP(bgCtx, o.metricsAddr, metricsMux) })
	}

	var failure error
	select {
	case <-signals.Done():
		log.Info("shutting down: reporting not ready, then finishing in-flight reviews", "delay", o.shutdownDelay.String())
		draining.Store(true)
		time.Sleep(o.shutdownDelay)
	case failure = <-errs:
	}
	stopWebhook() // waits for in-flight requests (up to a minute) inside Start
	stopBackground()
	wg.Wait()
	log.Info("stopped")
	return failure
}

// clientQPS and clientBurst bound the API calls of everything but the
// holds (holds.ClientQPS): the view's lists and watches, the Lease, the
// periodic audit, the ClusterIPPolicy status and the managed conditions.
const (
	clientQPS   = 20
	clientBurst = 40
)

// defaultRegistry is controller-runtime's, where the webhook server's own
// metrics live: one /metrics serves both.
var defaultRegistry = crmetrics.Registry

// serveHTTP serves plain HTTP on addr until ctx ends.
func serveHTTP(ctx context.Context, addr string, h http.Handler) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
