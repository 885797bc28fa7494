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
	"github.com/prometheus/client_golang/prometheus"
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
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
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
	"clusterip-policy/internal/metricsauth"
	"clusterip-policy/internal/names"
	"clusterip-policy/internal/policysource"
	"clusterip-policy/internal/readiness"
	"clusterip-policy/internal/sharedinformers"
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
	metrics        metricsauth.Options
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
	o.metrics.AddFlags(fs)
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
	fs.StringVar(&o.clientCAFile, "client-ca-file", "", "PEM file of the CA certificate(s) that sign the kube-apiservers' client certificates (the kubeconfig of the apiserver's --admission-control-config-file). When set, the admission port requires and verifies a client certificate at the TLS handshake, so only the apiservers can call the webhook; the file is re-read every 10s and a file that fails to load is refused (the last good one stays). Empty: any client is accepted. Either way the port speaks TLS 1.2 or newer (TLS 1.2 only with ECDHE and AES-GCM or ChaCha20-Poly1305) and HTTP/1.1 only: the apiserver calls webhooks behind a Service over HTTP/1.1, and HTTP/2 would only add its rapid-reset exposure. Probes stay on their plain-HTTP port, and metrics on theirs unless --metrics-secure.")
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
	if err := o.metrics.Validate(o.metricsAddr); err != nil {
		return nil, err
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

// newHostContext makes the clients every part of the server shares.
func newHostContext(o *serveOptions, log logr.Logger, registry prometheus.Registerer) (*hostContext, error) {
	cfg, err := restConfig(o.kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.UserAgent = "clusterip-policy/" + version.Version()
	// Explicit rather than client-go's default of 5 a second, burst 10,
	// which every group of a clientset shares: the view's lists, the
	// Lease, the audit and the conditions' writes. The holds have a client
	// of their own (holds.ClientQPS). docs/operations.md, "API calls".
	cfg.QPS, cfg.Burst = clientQPS, clientBurst
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return &hostContext{o: o, cfg: cfg, client: client, dyn: dyn, log: log, registry: registry, informers: sharedinformers.New(client, sharedinformers.Configurations{})}, nil
}

// buildCore makes what every review needs, whatever the features: the
// ClusterIPPolicy status sink, the policy and its source, the view of
// ServiceCIDRs and IPAddresses, the namespaces' labels, and the gate that
// answers whether a review can be decided. It sets c.status, c.gate and
// c.namespaces.
func buildCore(c *hostContext, staticCIDRs []netip.Prefix) ([]runnable, error) {
	o := c.o
	// The ClusterIPPolicy status writer (its role runs with
	// --policy-source=crd) is the sink the other loops report to: built
	// first, handed to the features.
	c.status = policystatus.New(c.dyn, policystatus.Options{Audit: o.audit.Interval > 0, Conditions: o.conditions.Manage, Probe: o.arming.Arm, Backstop: o.backstop.Enabled}, c.log.WithName("policy-status"))
	pm := policysource.NewMetrics(c.registry)
	var run []runnable
	var policies *policysource.Store
	if o.policySource == policysource.SourceCRD {
		policies = policysource.NewStore(policy.ObjectResource+"/"+policy.ObjectName, c.log.WithName("policy"), pm)
		object := policysource.NewObjectSource(c.dyn, policies, c.status, c.log.WithName("policy"))
		run = append(run, runnable{"policy object watcher", object.Run})
	} else {
		policies = policysource.NewStore(o.policyPath, c.log.WithName("policy"), pm)
		if err := policies.Reload(); err != nil {
			return nil, err // no good policy to fall back to at start
		}
		run = append(run, runnable{"policy watcher", func(ctx context.Context) error { policies.Watch(ctx, o.reloadInterval); return nil }})
	}
	view := allocview.NewView()
	source := kubesource.New(c.client, view, c.log.WithName("view"))
	readiness.RegisterViewMetrics(c.registry, view, source)
	// Every replica watches the namespaces' labels: a reserved range's
	// namespaceSelector needs them, and a review carries none.
	namespaces, err := judged.NewLabels(c.informers)
	if err != nil {
		return nil, err
	}
	c.namespaces = namespaces
	c.gate = &readiness.Gate{Policies: policies, View: view, StaleFor: source.StaleFor, MaxStaleness: o.maxStaleness, StaticCIDRs: staticCIDRs, NamespaceLabels: c.namespaces.Of}
	readiness.RegisterBandUsage(c.registry, view, readiness.ReservedBands(policies))
	readiness.RegisterRangeUsage(c.registry, view, readiness.ReservedRanges(policies))
	return append(run,
		runnable{"view", source.Run},
		runnable{"namespace labels", func(ctx context.Context) error { c.namespaces.Run(ctx); return nil }},
	), nil
}

// runServer builds the core and every feature (features.go), serves the
// admission endpoints, the probes and the metrics, and runs until a
// signal or the first failure.
func runServer(o serveOptions, staticCIDRs []netip.Prefix, log logr.Logger) error {
	c, err := newHostContext(&o, log, defaultRegistry)
	if err != nil {
		return err
	}
	run, err := buildCore(c, staticCIDRs)
	if err != nil {
		return err
	}
	h, err := buildFeatures(c)
	if err != nil {
		return err
	}
	run = append(run, h.run...)

	// Not webhook.Options.ClientCAName: it reads the CA once at start, and
	// only from inside --cert-dir (see internal/tlsauth).
	var cas *tlsauth.ClientCAs
	if o.clientCAFile != "" {
		if cas, err = tlsauth.NewClientCAs(o.clientCAFile, log.WithName("tls")); err != nil {
			return fmt.Errorf("--client-ca-file: %w", err)
		}
		log.Info("client certificates required on the admission port", "clientCAFile", o.clientCAFile, "digest", cas.Digest(), "cas", cas.Subject())
		run = append(run, runnable{"client CA watcher", func(ctx context.Context) error { cas.Watch(ctx, tlsauth.ReloadInterval); return nil }})
	}
	server := webhook.NewServer(webhook.Options{Host: o.bindAddress, Port: o.port, CertDir: o.certDir, TLSOpts: append(tlsauth.Options(cas), h.tls...)})
	for path, handler := range admission.Endpoints(admission.Config{Gate: c.gate, DecisionLog: log.WithName("audit"), Registry: defaultRegistry, Hook: h.hook}) {
		server.Register(path, handler)
	}
	// Every row has registered its informers: the replica's factory starts
	// them once, and runs with the webhook (the serving Secret's watch
	// among them) until the server stops.
	log.Info("watching", "informers", c.informers.Registered())
	serve := append(h.serve, runnable{"informers", c.informers.Run}, runnable{"webhook server", server.Start})

	var draining atomic.Bool
	readyChecks := map[string]healthz.Checker{
		"webhook": tlsauth.ReadyChecker(server, cas, o.bindAddress, o.port),
		// The same answer every review gets: policy loaded, view synced
		// and not stale for longer than --max-view-staleness.
		"reviews": func(*http.Request) error {
			_, err := c.gate.Check(time.Now())
			return err
		},
		"shutdown": func(*http.Request) error {
			if draining.Load() {
				return errors.New("shutting down")
			}
			return nil
		},
	}
	for name, check := range h.ready {
		readyChecks[name] = check
	}
	run = append(run, runnable{"health probes", func(ctx context.Context) error { return serveHTTP(ctx, o.healthAddr, probeMux(readyChecks)) }})
	metrics, err := metricsServing(c)
	if err != nil {
		return err
	}
	run = append(run, metrics...)
	run = append(run, leaderElection(c, h.works)...)
	return host(log, o.shutdownDelay, &draining, serve, run)
}

// leaderElection campaigns for the Lease when there is leader work, and
// runs the works in each term this replica leads; its gauge
// (clusterip_policy_leader) exists only then.
func leaderElection(c *hostContext, works []leader.Work) []runnable {
	if len(works) == 0 {
		return nil
	}
	m := leader.NewMetrics(c.registry)
	return []runnable{{"leader election", func(ctx context.Context) error {
		// The term's informer factory reads the two configurations, every
		// mutating one when the conditions are managed (they weigh every
		// other mutator; that informer then serves ours too).
		cfgs := sharedinformers.Configurations{Mutating: c.o.configurations.Mutating, Validating: c.o.configurations.Validating, EveryMutating: c.o.conditions.Manage}
		return leader.Run(ctx, c.client, c.o.lease, cfgs, c.log.WithName("leader"), m, works...)
	}}}
}

// metricsServing is what serves /metrics from the registry: nothing with
// --metrics-bind-address=0, plain HTTP by default, and with
// --metrics-secure controller-runtime's metrics server over HTTPS with
// the admission port's TLS versions and suites (HTTP/1.1 only, no client
// certificates), guarded by our filter: controller-runtime's own would
// double the binary and answer a forged token with 500 and an error line
// each (docs/design.md).
func metricsServing(c *hostContext) ([]runnable, error) {
	o := c.o
	switch {
	case o.metricsAddr == "0":
		return nil, nil
	case o.metrics.Secure:
		httpClient, err := rest.HTTPClientFor(c.cfg)
		if err != nil {
			return nil, fmt.Errorf("kubernetes client: %w", err)
		}
		filter := metricsauth.NewFilterProvider(c.registry, c.log.WithName("metrics-auth"))
		metrics, err := metricsserver.NewServer(o.metrics.ServerOptions(o.metricsAddr, tlsauth.Options(nil), filter), c.cfg, httpClient)
		if err != nil {
			return nil, fmt.Errorf("--metrics-secure: %w", err)
		}
		return []runnable{{"metrics", metrics.Start}}, nil
	default:
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(defaultRegistry, promhttp.HandlerOpts{}))
		return []runnable{{"metrics", func(ctx context.Context) error { return serveHTTP(ctx, o.metricsAddr, mux) }}}, nil
	}
}

// probeMux serves /healthz (the process answers) and /readyz (checks).
func probeMux(readyChecks map[string]healthz.Checker) *http.ServeMux {
	probes := http.NewServeMux()
	live := &healthz.Handler{Checks: map[string]healthz.Checker{"ping": healthz.Ping}}
	ready := &healthz.Handler{Checks: readyChecks}
	probes.Handle("/healthz", http.StripPrefix("/healthz", live))
	probes.Handle("/healthz/", http.StripPrefix("/healthz", live))
	probes.Handle("/readyz", http.StripPrefix("/readyz", ready))
	probes.Handle("/readyz/", http.StripPrefix("/readyz", ready))
	return probes
}

// host runs serve with the webhook's context and run with the background
// one, until a signal or the first failure. On a signal it reports not
// ready (draining) and keeps serving for shutdownDelay, so load balancers
// and apiservers stop sending requests first; then the webhook stops
// (finishing in-flight reviews), then everything else.
func host(log logr.Logger, shutdownDelay time.Duration, draining *atomic.Bool, serve, run []runnable) error {
	signals, stopSignals := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stopSignals()
	webhookCtx, stopWebhook := context.WithCancel(context.Background())
	defer stopWebhook()
	bgCtx, stopBackground := context.WithCancel(context.Background())
	defer stopBackground()

	errs := make(chan error, len(serve)+len(run)) // one per goroutine, so none blocks on exit
	var wg sync.WaitGroup
	start := func(ctx context.Context, r runnable) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.run(ctx); err != nil {
				errs <- fmt.Errorf("%s: %w", r.name, err)
			}
		}()
	}
	for _, r := range serve {
		start(webhookCtx, r)
	}
	for _, r := range run {
		start(bgCtx, r)
	}

	var failure error
	select {
	case <-signals.Done():
		log.Info("shutting down: reporting not ready, then finishing in-flight reviews", "delay", shutdownDelay.String())
		draining.Store(true)
		time.Sleep(shutdownDelay)
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
