package bench

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"clusterip-policy/test/e2e/framework"
	"clusterip-policy/test/fixtures"
	"clusterip-policy/test/procstat"
)

// Options configure a benchmark.
type Options struct {
	Knobs Knobs
	// Command is how the run was started, for the summary's header.
	Command string
	// Out gets the tables; Logf the progress.
	Out  io.Writer
	Logf func(format string, args ...any)
	// Dir holds the cluster (logs, certificates); a new temporary
	// directory when empty.
	Dir string
	// ProfileDir gets the apiserver's CPU profiles of the runs whose
	// configuration Knobs.Profile names (profile.go); with it empty,
	// nothing is profiled.
	ProfileDir string
}

// Bounds of every wait and run, whatever the knobs.
const (
	switchTimeout  = 60 * time.Second // a configuration comes into force
	cleanupTimeout = 2 * time.Minute  // the created Services and their IPAddresses are gone
	createTimeout  = 30 * time.Second // one create
	runTimeout     = 10 * time.Minute // all creates of one run (or of Grow)
	pollInterval   = 200 * time.Millisecond
)

// Bench is a running benchmark cluster: one etcd, one kube-apiserver, ours
// and the nop webhook, both running all the time (only the registration
// changes), so every configuration pays the same background cost.
type Bench struct {
	o  Options
	c  *framework.Cluster
	cs kubernetes.Interface
	// bulk is cs with cleanupTimeout as its request timeout: one
	// DeleteCollection of a run's Services takes longer than a create's
	// createTimeout on a busy machine (1,500 Services: over 30 s at a
	// load average of 20).
	bulk    kubernetes.Interface
	nop     *framework.Process
	nopAddr string

	ours, nopConfigs *framework.WebhookConfigurations
	current          string // configuration in force
	registration     string // the webhook configurations as the switch to it left them
	existing         int    // Services in existingNamespace
	ipBaseline       int    // IPAddress objects with no measured Service alive
}

// Start brings up the cluster, ours (with o.Knobs.WebhookArgs) and the
// nop webhook (built from test/nopwebhook), with nothing registered.
func Start(ctx context.Context, o Options) (b *Bench, err error) {
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	if err := o.Knobs.Check(); err != nil {
		return nil, err
	}
	c, err := framework.Start(ctx, framework.Options{
		Dir: o.Dir, Webhooks: 1, NoRegister: true, Policy: fixtures.Policy(policySpec()), WebhookArgs: o.Knobs.WebhookArgs, Logf: o.Logf,
		// ours is the webhook alone, as measured before the backstop;
		// the backstop's own configurations add it.
		NoBackstop: true,
		APIServers: []framework.APIServerOptions{{ServiceClusterIPRange: ServiceRange, ExtraArgs: apiserverArgs(o)}},
	})
	if err != nil {
		if len(o.Knobs.WebhookArgs) > 0 {
			return nil, fmt.Errorf("start the cluster, ours with the extra flags %q (BENCH_ARGS): %w", o.Knobs.WebhookArgs, err)
		}
		return nil, fmt.Errorf("start the cluster: %w", err)
	}
	b = &Bench{o: o, c: c, current: ConfigNone}
	defer func() {
		if err != nil {
			b.Stop()
		}
	}()
	cfg := c.RESTConfig(0)
	// The clients must never wait on client-go's rate limiter: it would
	// measure itself. Every create is bounded by createTimeout instead.
	cfg.QPS, cfg.Burst, cfg.Timeout = 1e6, 1e6, createTimeout
	if b.cs, err = kubernetes.NewForConfig(cfg); err != nil {
		return b, err
	}
	bulk := rest.CopyConfig(cfg)
	bulk.Timeout = cleanupTimeout
	if b.bulk, err = kubernetes.NewForConfig(bulk); err != nil {
		return b, err
	}
	if err := b.startNop(ctx); err != nil {
		return b, err
	}
	if b.ours, err = framework.LoadWebhookConfigurations(c.Root); err != nil {
		return b, err
	}
	b.ours.PointAt(c.Webhooks[0].Addr(), c.WebhookCA.CertPEM)
	b.ours.Arm()
	if b.nopConfigs, err = framework.LoadWebhookConfigurations(c.Root); err != nil {
		return b, err
	}
	b.nopConfigs.PointAt(b.nopAddr, c.WebhookCA.CertPEM)
	b.nopConfigs.Arm()
	// The same webhooks under other object names: a webhook of ours that
	// manages its configurations (matchConditions) finds them by name, and
	// must not edit the nop's.
	b.nopConfigs.Mutating.Name += "-nop"
	b.nopConfigs.Validating.Name += "-nop"
	for _, ns := range []string{benchNamespace, existingNamespace} {
		if err := framework.EnsureNamespace(ctx, b.cs, ns); err != nil {
			return b, err
		}
	}
	if err := b.waitNone(ctx); err != nil {
		return b, err
	}
	b.registration = b.registered(ctx)
	return b, nil
}

// apiserverArgs are the flags the harness adds to the framework's: several
// workers make the cleanup's DeleteCollection (one delete per Service,
// each releasing its address) faster, and the measured creates do not use
// them; --profiling when a configuration is profiled (the framework turns
// it off, and the last occurrence of a flag wins).
func apiserverArgs(o Options) []string {
	args := []string{"--delete-collection-workers=4"}
	if o.ProfileDir != "" && len(o.Knobs.Profile) > 0 {
		args = append(args, "--profiling=true")
	}
	return args
}

// Dir is the cluster's directory (logs of every process).
func (b *Bench) Dir() string { return b.c.Dir }

// Stop stops the nop webhook and the cluster.
func (b *Bench) Stop() {
	if b.nop != nil {
		b.nop.Stop(5 * time.Second)
	}
	b.c.Stop()
}

// startNop builds test/nopwebhook into the cluster directory and starts it
// with a serving certificate from the webhook CA, on loopback.
func (b *Bench) startNop(ctx context.Context) error {
	bin := filepath.Join(b.c.Dir, "nopwebhook")
	goTool := os.Getenv("GO")
	if goTool == "" {
		goTool = "go"
	}
	build := exec.CommandContext(ctx, goTool, "build", "-o", bin, "./test/nopwebhook")
	build.Dir = b.c.Root
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build test/nopwebhook: %w: %s", err, out)
	}
	certs := &framework.Webhook{CertDir: filepath.Join(b.c.Dir, "nopwebhook-certs"), CA: b.c.WebhookCA}
	if _, err := certs.RotateCert(); err != nil {
		return err
	}
	port, err := framework.FreePort()
	if err != nil {
		return err
	}
	b.nopAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	argv := []string{bin, "--bind-address=127.0.0.1", "--port=" + strconv.Itoa(port), "--cert-dir=" + certs.CertDir}
	if b.nop, err = framework.StartProcess("nopwebhook", filepath.Join(b.c.Dir, "logs", "nopwebhook.log"), argv, framework.ProcessOptions{}); err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AddCert(b.c.WebhookCA.Cert)
	var dialErr error // the last dial's: nil once the nop webhook serves
	_ = fixtures.WaitContext(ctx, 30*time.Second, func() bool {
		var conn *tls.Conn
		if conn, dialErr = tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", b.nopAddr, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}); dialErr == nil {
			conn.Close()
		}
		exited, _ := b.nop.Exited()
		return dialErr == nil || exited
	})
	if dialErr == nil {
		b.o.Logf("bench: nop webhook serving on %s (pid %d)", b.nopAddr, b.nop.Pid())
		return nil
	}
	if exited, werr := b.nop.Exited(); exited {
		return fmt.Errorf("nop webhook exited (%v); last lines of %s:\n%s", werr, b.nop.LogPath, b.nop.Tail(20)) //nolint:errorlint // werr is nil after a clean exit, which %v prints as <nil>
	}
	return fmt.Errorf("nop webhook not serving TLS on %s within 30s: %w", b.nopAddr, dialErr)
}

// snapshot reads the apiserver's counters and the CPU time of the
// apiserver and both webhooks, the CPU before and after the /metrics
// scrape (Snapshot.CPU, CPUAfterScrape), so a run's delta leaves the
// scrapes out.
func (b *Bench) snapshot(ctx context.Context) (Snapshot, error) {
	s := Snapshot{At: time.Now()}
	var err error
	if s.CPU, err = b.cpu(); err != nil {
		return s, err
	}
	text, err := b.cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return s, fmt.Errorf("GET /metrics of the apiserver: %w", err)
	}
	if s.Counters, err = ParseCounters(string(text)); err != nil {
		return s, err
	}
	s.CPUAfterScrape, err = b.cpu()
	return s, err
}

// cpu reads the CPU time of the apiserver and both webhooks.
func (b *Bench) cpu() (map[string]time.Duration, error) {
	out := map[string]time.Duration{}
	for name, pid := range map[string]int{procAPIServer: b.c.APIServers[0].Pid(), procOurs: b.c.Webhooks[0].Pid(), procNop: b.nop.Pid()} {
		cpu, err := procstat.ProcessCPU(pid)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out[name] = cpu
	}
	return out, nil
}

// Grow creates Services in existingNamespace (without an address, from
// 16 clients, with no admission in force) until there are n.
func (b *Bench) Grow(ctx context.Context, n int) error {
	if n <= b.existing {
		return nil
	}
	if err := b.Switch(ctx, ConfigNone); err != nil {
		return err
	}
	plan := make([]Request, 0, n-b.existing)
	for i := b.existing; i < n; i++ {
		plan = append(plan, Request{Name: fmt.Sprintf("existing-%d", i), Owner: -1})
	}
	o := b.create(ctx, existingNamespace, "existing", plan, 16)
	if o.Errors > 0 {
		return fmt.Errorf("create %d existing Services: %d failed, first: %v", len(plan), o.Errors, o.FirstErrors)
	}
	b.existing = n
	b.o.Logf("bench: %d existing Services (%d created in %s, %.0f/s)", n, len(plan), o.Elapsed.Round(time.Millisecond), float64(len(plan))/o.Elapsed.Seconds())
	return nil
}

// Measure runs one workload under the configuration in force, then deletes
// what it created and waits until the cluster is as before.
func (b *Bench) Measure(ctx context.Context, round int, w Workload, plan []Request) (Result, error) {
	if b.ipBaseline == 0 {
		n, err := b.stableIPAddressCount(ctx)
		if err != nil {
			return Result{}, err
		}
		b.ipBaseline = n
	}
	before, err := b.snapshot(ctx)
	if err != nil {
		return Result{}, err
	}
	var (
		profiles   int
		profileErr error
		profiled   = make(chan struct{})
	)
	pctx, stopProfile := context.WithCancel(ctx)
	if b.profiling() {
		go func() {
			defer close(profiled)
			profiles, profileErr = b.profile(pctx, round, w)
		}()
	} else {
		close(profiled)
	}
	o := b.create(ctx, benchNamespace, "created", plan, w.Clients)
	stopProfile()
	<-profiled
	if profileErr != nil {
		return Result{}, profileErr
	}
	if profiles > 0 {
		b.o.Logf("bench: %s, %s: %d CPU profiles of the apiserver in %s", b.current, w, profiles, b.o.ProfileDir)
	}
	after, err := b.snapshot(ctx)
	if err != nil {
		return Result{}, err
	}
	inForce := false
	if b.current == ConfigVAP {
		// After the snapshot, so the probe's cost is not the run's.
		if inForce, _, err = b.vapDenies(ctx); err != nil {
			return Result{}, err
		}
	}
	r := NewResult(round, b.existing, w, b.current, plan, o, after.Sub(before), inForce)
	r.Registration = b.registered(ctx)
	r.RegistrationChanged = r.Registration != b.registration
	r.Problems = r.Check()
	start := time.Now()
	err = b.cleanup(ctx)
	b.o.Logf("bench: %s, %s, %d existing: %d creates in %s (%d failed), cleanup %s", b.current, w, b.existing, len(plan), o.Elapsed.Round(time.Millisecond), o.Errors, time.Since(start).Round(time.Millisecond))
	return r, err
}

// create sends plan's creates from clients goroutines, each taking the
// next request until none are left, ctx ends or runTimeout passes; creates
// not sent by then count as failed.
func (b *Bench) create(ctx context.Context, ns, label string, plan []Request, clients int) Outcome {
	ctx, cancel := context.WithTimeout(ctx, runTimeout)
	defer cancel()
	o := Outcome{OwnerIPs: map[int]string{}}
	var (
		mu   sync.Mutex
		next atomic.Int64
		wg   sync.WaitGroup
	)
	lat := make([]time.Duration, len(plan))
	ok := make([]bool, len(plan))
	start := time.Now()
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= len(plan) {
					return
				}
				q := plan[i]
				svc := &corev1.Service{
					ObjectMeta: metav1.ObjectMeta{Name: q.Name, Namespace: ns, Labels: map[string]string{"bench": label}},
					Spec:       corev1.ServiceSpec{ClusterIP: q.ClusterIP, Ports: []corev1.ServicePort{{Port: 80}}},
				}
				t0 := time.Now()
				got, err := b.cs.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
				d := time.Since(t0)
				mu.Lock()
				if err != nil {
					o.Errors++
					if len(o.FirstErrors) < maxFirstErrors {
						o.FirstErrors = append(o.FirstErrors, fmt.Sprintf("%s/%s: %.300s", ns, q.Name, err.Error()))
					}
				} else {
					lat[i], ok[i] = d, true
					if q.Owner >= 0 {
						o.OwnerIPs[q.Owner] = got.Spec.ClusterIP
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	o.Elapsed = time.Since(start)
	for i := range plan {
		if ok[i] {
			o.Latencies = append(o.Latencies, lat[i])
		}
	}
	if missed := len(plan) - len(o.Latencies) - o.Errors; missed > 0 {
		o.Errors += missed
		o.FirstErrors = append(o.FirstErrors, fmt.Sprintf("%d creates not sent: %v", missed, ctx.Err()))
	}
	return o
}

// cleanup deletes the measured Services in one call and waits until none
// is left and the IPAddress objects are back to the baseline, so every
// run starts with the same number of Services and allocated addresses.
func (b *Bench) cleanup(ctx context.Context) error {
	sel := metav1.ListOptions{LabelSelector: "bench=created"}
	// The typed client has no DeleteCollection for Services; the
	// apiserver's generic store serves it.
	if err := b.bulk.CoreV1().RESTClient().Delete().Namespace(benchNamespace).Resource("services").
		VersionedParams(&sel, scheme.ParameterCodec).Do(ctx).Error(); err != nil {
		return fmt.Errorf("delete the measured Services: %w", err)
	}
	var last string
	if fixtures.WaitContext(ctx, cleanupTimeout, func() bool {
		left, err := b.cs.CoreV1().Services(benchNamespace).List(ctx, metav1.ListOptions{Limit: 1})
		if err != nil || len(left.Items) > 0 {
			last = fmt.Sprintf("Services left in %s (%v)", benchNamespace, err)
			return false
		}
		n, err := b.countIPAddresses(ctx)
		last = fmt.Sprintf("%d IPAddresses, want %d as before the run (%v)", n, b.ipBaseline, err)
		return err == nil && n == b.ipBaseline
	}) != nil {
		return fmt.Errorf("cleanup not done within %s: %s", cleanupTimeout, last)
	}
	return nil
}

// countIPAddresses counts IPAddress objects, from the list's remaining
// item count when the apiserver gives one, else page by page.
func (b *Bench) countIPAddresses(ctx context.Context) (int, error) {
	l, err := b.cs.NetworkingV1().IPAddresses().List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return 0, err
	}
	if l.RemainingItemCount != nil {
		return len(l.Items) + int(*l.RemainingItemCount), nil
	}
	n, cont := 0, ""
	for range 1000 { // at most 500,000 objects
		l, err := b.cs.NetworkingV1().IPAddresses().List(ctx, metav1.ListOptions{Limit: 500, Continue: cont})
		if err != nil {
			return 0, err
		}
		n += len(l.Items)
		if cont = l.Continue; cont == "" {
			return n, nil
		}
	}
	return 0, errors.New("more than 500,000 IPAddresses")
}

// stableIPAddressCount waits until two counts a second apart agree (holds
// of reservations, if ours keeps them, come and go after a grace period).
func (b *Bench) stableIPAddressCount(ctx context.Context) (int, error) {
	prev := -1
	for range 60 {
		n, err := b.countIPAddresses(ctx)
		if err != nil {
			return 0, err
		}
		if n == prev {
			return n, nil
		}
		prev = n
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(time.Second):
		}
	}
	return 0, errors.New("the number of IPAddresses did not settle within 60s")
}

// Rotate is configs starting at index r (mod len): round r's order, so
// each configuration takes each position in turn.
func Rotate(configs []string, r int) []string {
	n := len(configs)
	out := make([]string, n)
	for i := range configs {
		out[i] = configs[(i+r)%n]
	}
	return out
}

// Run is the whole benchmark: for each number of existing Services, every
// round switches to each configuration in a rotated order and runs every
// workload; it prints a table per round and returns the summary.
func (b *Bench) Run(ctx context.Context) (Summary, error) {
	k := b.o.Knobs
	meta := Meta{
		Started: time.Now().UTC().Format(time.RFC3339), Knobs: k, Command: b.o.Command,
		Commit: gitCommit(b.c.Root), VAPExpression: vapExpression,
	}
	if v, err := b.cs.Discovery().ServerVersion(); err == nil {
		meta.KubeAPIServer = v.GitVersion
	}
	load0 := loadAverage()
	var runs []Result
	for _, existing := range k.Existing {
		if err := b.Grow(ctx, existing); err != nil {
			return Summarize(meta, runs), err
		}
		b.ipBaseline = 0 // measured again before the first run at this size
		for round := 1; round <= k.Rounds; round++ {
			var roundRuns []Result
			order := Rotate(k.Configs, round-1)
			b.o.Logf("bench: %d existing Services, round %d of %d: %s", existing, round, k.Rounds, strings.Join(order, ", "))
			for _, config := range order {
				if err := b.Switch(ctx, config); err != nil {
					return Summarize(meta, runs), err
				}
				for wi, w := range k.Workloads {
					plan := Plan(w.Kind, fmt.Sprintf("r%d-w%d", round, wi), k.Creates)
					r, err := b.Measure(ctx, round, w, plan)
					if err != nil {
						return Summarize(meta, append(runs, r)), fmt.Errorf("%s, %s: %w", config, w, err)
					}
					runs = append(runs, r)
					roundRuns = append(roundRuns, r)
				}
			}
			fmt.Fprintf(b.o.Out, "\n--- %d existing Services, round %d of %d (order %s)\n", existing, round, k.Rounds, strings.Join(order, ", "))
			WriteRoundTable(b.o.Out, roundRuns)
		}
	}
	if err := b.Switch(ctx, ConfigNone); err != nil {
		return Summarize(meta, runs), err
	}
	meta.Finished = time.Now().UTC().Format(time.RFC3339)
	meta.Machine = fmt.Sprintf("%d CPUs (GOMAXPROCS %d), load average %s at start, %s at end", runtime.NumCPU(), runtime.GOMAXPROCS(0), load0, loadAverage())
	return Summarize(meta, runs), nil
}

func gitCommit(root string) string {
	out, err := exec.Command("git", "-C", root, "describe", "--always", "--dirty").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

// loadAverage is the 1, 5 and 15 minute load of /proc/loadavg: a shared
// machine shows here.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
