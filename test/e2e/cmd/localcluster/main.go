// Command localcluster runs the end-to-end harness's cluster for people:
// `make up` starts etcd, a kube-apiserver and the webhook in the background
// with it, `make demo` prints the webhook's decisions with it. The webhook
// runs as manifests/base deploys it: the policy is the ClusterIPPolicy
// object (the CRD from manifests/base, the object from --policy), with
// reservation holds, the managed matchConditions and the periodic audit.
//
//	localcluster up --dir .local/cluster --kubeconfig .local/kubeconfig \
//	    --service-cidr 10.96.0.0/16 --policy examples/clusterippolicy.yaml
//	localcluster audit --log .local/cluster/logs/webhook.log
//	localcluster node-up --dir .local/node   (hack/node-up.sh; a real node)
//
// `up` returns once the webhook is registered and every apiserver calls it,
// leaving the processes running; their process ids are in DIR/pids, which
// hack/local-down.sh reads to stop them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"clusterip-policy/certs"
	"clusterip-policy/pkg/policy"
	"clusterip-policy/test/e2e/framework"
	"clusterip-policy/test/fixtures"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: localcluster up|node-up|audit [flags]")
		return 2
	}
	var err error
	switch args[0] {
	case "up":
		err = up(args[1:], stdout)
	case "node-up":
		err = nodeUp(args[1:], stdout)
	case "audit":
		err = audit(args[1:], stdout)
	default:
		err = fmt.Errorf("unknown command %q; want up, node-up or audit", args[0])
	}
	if err != nil {
		fmt.Fprintln(stderr, "localcluster:", err)
		return 1
	}
	return 0
}

func up(args []string, stdout io.Writer) error {
	fl := flag.NewFlagSet("up", flag.ContinueOnError)
	dir := fl.String("dir", ".local/cluster", "directory for etcd data, certificates, kubeconfigs and logs; emptied first")
	kubeconfig := fl.String("kubeconfig", ".local/kubeconfig", "where to copy the admin kubeconfig")
	serviceCIDR := fl.String("service-cidr", "10.96.0.0/16", "--service-cluster-ip-range of the kube-apiserver")
	policy := fl.String("policy", "examples/clusterippolicy.yaml", "the ClusterIPPolicy object manifest to apply (kubectl apply -f it again after an edit)")
	clientAuth := fl.Bool("client-auth", false, "the apiserver presents a client certificate to the webhook, which requires it (--client-ca-file); files in DIR/webhook-client-auth")
	if err := fl.Parse(args); err != nil {
		return err
	}
	root, err := framework.RepoRoot()
	if err != nil {
		return err
	}
	abs := func(p string) string {
		if filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(root, p)
	}
	*dir, *kubeconfig, *policy = abs(*dir), abs(*kubeconfig), abs(*policy)
	if _, err := os.Stat(*policy); err != nil {
		return fmt.Errorf("policy: %w", err)
	}
	if err := os.RemoveAll(*dir); err != nil {
		return err
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	ctx, cancelTimeout := context.WithTimeout(ctx, 3*time.Minute)
	defer cancelTimeout()
	start := time.Now()
	logf := func(format string, a ...any) { fmt.Fprintf(stdout, strings.TrimPrefix(format, "e2e: ")+"\n", a...) }
	c, err := framework.Start(ctx, framework.Options{
		Dir:        *dir,
		Root:       root,
		APIServers: []framework.APIServerOptions{{ServiceClusterIPRange: *serviceCIDR}},
		Webhooks:   0, // started below, once the policy object exists
		Detach:     true,
		Logf:       logf,
		// The serve flags of manifests/base/deployment.yaml that change what
		// the webhook does (the others are its ports and paths).
		WebhookArgs: []string{"--policy-source=crd", "--hold-reservations", "--audit-interval=5m", "--manage-match-conditions", "--backstop"},

		WebhookClientAuth: *clientAuth,
	})
	if err == nil {
		err = applyPolicy(ctx, c, *policy)
	}
	if err == nil {
		err = c.StartWebhooks(ctx, 1)
	}
	if err == nil {
		err = c.RegisterWebhooks(ctx)
	}
	if err == nil {
		err = waitSettled(ctx, c, *policy, logf)
	}
	if err != nil {
		if c != nil {
			fmt.Fprintf(stdout, "logs:%s\n", c.LogsSince(framework.LogMarks{}, 40))
			// Nothing is recorded in DIR/pids yet, so make down could not
			// stop what started: stop it here.
			c.Stop()
		}
		return err
	}
	var pids strings.Builder
	for _, p := range c.Processes() {
		fmt.Fprintf(&pids, "%s %d %s\n", p.Name, p.Pid(), filepath.Base(p.Args[0]))
	}
	if err := certs.WriteFileAtomic(filepath.Join(*dir, "pids"), []byte(pids.String()), 0o644); err != nil {
		c.Stop()
		return err
	}
	data, err := os.ReadFile(c.AdminKubeconfig)
	if err == nil {
		err = certs.WriteFileAtomic(*kubeconfig, data, 0o600)
	}
	if err != nil {
		c.Stop()
		return err
	}
	w := c.Webhooks[0]
	rel := func(p string) string {
		if r, err := filepath.Rel(root, p); err == nil && !strings.HasPrefix(r, "..") {
			return r
		}
		return p
	}
	fmt.Fprintf(stdout, `
ready in %s:
  kube-apiserver  %s  (--service-cluster-ip-range=%s)
  webhook         https://%s  policy: ClusterIPPolicy default, from %s
                  (holds, managed matchConditions, periodic audit: as manifests/base)
  kubeconfig      %s
  audit log       %s
  all logs        %s
  metrics         http://%s/metrics   readiness http://%s/readyz
try:
  export KUBECONFIG=%s PATH=$PWD/.local/bin:$PATH
  kubectl create service clusterip web --tcp=80 --clusterip=10.96.200.5
  kubectl get clusterippolicy default     # edit %s, then kubectl apply -f it
stop with: make down
`, time.Since(start).Round(time.Millisecond), c.APIServers[0].URL, *serviceCIDR, w.Addr(), rel(*policy),
		rel(*kubeconfig), rel(w.LogPath), rel(filepath.Join(*dir, "logs")), w.MetricsAddr, w.HealthAddr, rel(*kubeconfig), rel(*policy))
	return nil
}

// waitSettled returns once the leader has done what a deployment's leader
// does right after start: every reserved address is held (an IPAddress
// exists for it) and the managed matchCondition is in both webhook
// configurations, so what `make demo` shows next is the steady state.
func waitSettled(ctx context.Context, c *framework.Cluster, path string, logf func(string, ...any)) error {
	p, err := policy.LoadFile(path)
	if err != nil {
		return err
	}
	start := time.Now()
	missing := ""
	settled := func() bool {
		for _, r := range p.Reservations {
			if _, _, err := c.Kubectl(ctx, "", "get", "ipaddress", r.IP.String(), "-o", "name"); err != nil {
				missing = "no IPAddress holds " + r.IP.String()
				return false
			}
		}
		for _, kind := range []string{"mutatingwebhookconfiguration", "validatingwebhookconfiguration"} {
			out, _, err := c.Kubectl(ctx, "", "get", kind, "clusterip-policy", "-o", "jsonpath={.webhooks[0].matchConditions[*].name}")
			if err != nil || !strings.Contains(out, "policy-may-apply") {
				missing = "the managed matchCondition is not in the " + kind + " yet"
				return false
			}
		}
		return true
	}
	if err := fixtures.WaitContext(ctx, time.Minute, settled); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%s after %s: see the webhook's log", missing, time.Since(start).Round(time.Second))
	}
	logf("holds and managed matchConditions in place %s after registration", time.Since(start).Round(time.Millisecond))
	return nil
}

// applyPolicy installs the ClusterIPPolicy CRD from manifests/base and
// applies the object at path, before the webhook starts: in object mode it
// is not ready until it has loaded the object. A bad object is refused here
// by the CRD's schema, with kubectl's message.
func applyPolicy(ctx context.Context, c *framework.Cluster, path string) error {
	kubectl := func(args ...string) error {
		_, _, err := c.Kubectl(ctx, "", args...) // its error carries kubectl's message
		return err
	}
	if err := kubectl("apply", "-f", filepath.Join(c.Root, "manifests", "base", "crd.yaml")); err != nil {
		return err
	}
	if err := kubectl("wait", "--for=condition=Established", "crd/clusterippolicies.clusterip-policy.io", "--timeout=60s"); err != nil {
		return err
	}
	return kubectl("apply", "-f", path)
}

// audit prints the webhook's audit lines as a table, without the harness's
// own readiness probes.
func audit(args []string, stdout io.Writer) error {
	fl := flag.NewFlagSet("audit", flag.ContinueOnError)
	log := fl.String("log", ".local/cluster/logs/webhook.log", "the webhook's log")
	from := fl.Int64("from", 0, "byte offset to start at (the log's size before a demo step)")
	if err := fl.Parse(args); err != nil {
		return err
	}
	w := &framework.Webhook{Process: &framework.Process{LogPath: *log}}
	if _, err := os.Stat(*log); err != nil {
		return err
	}
	decisions := w.DecisionsFrom(*from)
	if len(decisions) == 0 {
		return errors.New("no admission decisions in " + *log)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STAGE\tOPERATION\tSERVICE\tDRY RUN\tDECISION\tRULES\tIPS\tMESSAGE")
	for _, d := range decisions {
		if strings.HasPrefix(d.Name, "e2e-probe-") {
			continue
		}
		ips := strings.Join(d.FinalIPs, ",")
		if ips == "" {
			ips = strings.Join(d.RequestedIPs, ",")
		}
		msg := d.Message
		if i := strings.Index(msg, ": Invalid value: "); i >= 0 {
			// The field and value are in the other columns already.
			if j := strings.Index(msg[i+len(": Invalid value: "):], ": "); j >= 0 {
				msg = msg[i+len(": Invalid value: ")+j+2:]
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s/%s\t%v\t%s\t%s\t%s\t%s\n", d.Stage, d.Operation, d.Namespace, d.Name, d.DryRun, d.Decision, strings.Join(d.Rules, ","), ips, msg)
	}
	return tw.Flush()
}
