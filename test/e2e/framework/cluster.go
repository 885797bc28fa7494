package framework

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"clusterip-policy/certs"
)

// Options describe a cluster to start.
type Options struct {
	// Dir holds everything of the cluster; a new temporary directory when
	// empty.
	Dir      string
	Root     string   // repository root; RepoRoot() when empty
	Binaries Binaries // DefaultBinaries(Root) when zero
	// APIServers to start, in order, on one etcd. Default: one with
	// 10.96.0.0/16. Every one after the first gets a UTS namespace of its
	// own unless its Hostname is set.
	APIServers []APIServerOptions
	// Policy is the YAML policy text, written to Dir/policy.yaml; or
	// PolicyFile names an existing file the webhooks read directly.
	Policy     string
	PolicyFile string
	// Webhooks is the number of webhook processes; webhook i talks to
	// apiserver i modulo the number of apiservers, or to the load balancer.
	// Several webhooks are registered behind a haproxy on loopback, as a
	// Service in front of the replicas would be.
	Webhooks int
	// LoadBalancer puts a haproxy in front of the apiservers, health
	// checked on /readyz, and sends the webhooks' watches through it, as
	// in a highly available control plane. LBClient talks through it.
	LoadBalancer bool
	// NoRBAC skips creating the webhook's roles from manifests/base, and
	// NoRegister skips registering the webhook configurations: for a test
	// that applies the deployment manifests itself.
	NoRBAC, NoRegister bool
	Detach             bool // leave the processes running after this process exits
	// PKI, when set, is used instead of a fresh one in Dir/pki (a real node
	// signs its components' certificates with it before the apiserver starts).
	PKI  *PKI
	Logf func(format string, args ...any)

	// WebhookArgs are extra `clusterip-policy serve` flags for every webhook the
	// cluster starts (for example --hold-reservations).
	WebhookArgs []string
	// NoBackstop starts the webhooks without --backstop, which every
	// cluster's webhooks otherwise run with, as the manifests ship them:
	// for a test of what the webhook alone does while it cannot answer,
	// or a measurement of the webhook alone.
	NoBackstop bool

	// WebhookClientAuth makes every apiserver present a client certificate
	// to the webhooks and every webhook require it (see clientauth.go).
	WebhookClientAuth bool

	// ManagedCerts starts every webhook with --certificate-source=managed
	// and registers the configurations with no caBundle: the leader writes
	// it (WebhookOptions.ManagedCerts).
	ManagedCerts bool
	// ArmByLeader registers the Service webhooks as the manifests do, not
	// armed (failurePolicy Ignore), for a webhook run with
	// --arm-failure-policy to arm. Without it the harness arms them itself
	// (Fail), so every test that relies on fail-closed behaviour (a stopped
	// webhook, a condition that fails to evaluate) keeps it.
	ArmByLeader bool
}

// Cluster is a running control plane with its webhooks.
type Cluster struct {
	Dir        string
	Root       string
	Bin        Binaries
	PKI        *PKI
	Admin      *Identity
	Etcd       *Etcd
	APIServers []*APIServer
	// AdminKubeconfig talks to the first apiserver; AdminKubeconfigFor
	// names one per apiserver.
	AdminKubeconfig string
	PolicyFile      string
	WebhookCA       *certs.CA
	Webhooks        []*Webhook
	// APIServerLB fronts the apiservers (Options.LoadBalancer); WebhookLB
	// fronts the webhook replicas when there are several.
	APIServerLB *HAProxy
	WebhookLB   *HAProxy
	// LBKubeconfig is the admin kubeconfig through APIServerLB.
	LBKubeconfig string
	Configs      *WebhookConfigurations
	RBAC         *RBAC
	ClientAuth   *WebhookClientAuth // nil unless Options.WebhookClientAuth

	opts Options
	// Logf reports progress; tests point it at their own t.Logf.
	Logf func(format string, args ...any)
}

// Start brings up etcd, the apiservers, the webhook's RBAC, the webhooks and
// their registration, and waits until each apiserver calls the webhooks. On
// error it stops whatever it started.
func Start(ctx context.Context, o Options) (c *Cluster, err error) {
	if o.Root == "" {
		if o.Root, err = RepoRoot(); err != nil {
			return nil, err
		}
	}
	if o.Binaries == (Binaries{}) {
		o.Binaries = DefaultBinaries(o.Root)
	}
	if err := o.Binaries.Check(o.Webhooks > 0); err != nil {
		return nil, err
	}
	if len(o.APIServers) == 0 {
		o.APIServers = []APIServerOptions{{ServiceClusterIPRange: "10.96.0.0/16"}}
	}
	if o.Dir == "" {
		if o.Dir, err = os.MkdirTemp("", "clusterip-policy-e2e-"); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(filepath.Join(o.Dir, "logs"), 0o755); err != nil {
		return nil, err
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	c = &Cluster{Dir: o.Dir, Root: o.Root, Bin: o.Binaries, opts: o, Logf: o.Logf}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	if err := c.StartControlPlane(ctx); err != nil {
		return c, err
	}
	if !o.NoRBAC {
		if err := c.ApplyRBAC(ctx); err != nil {
			return c, err
		}
	}
	if o.Webhooks > 0 {
		if err := c.StartWebhooks(ctx, o.Webhooks); err != nil {
			return c, err
		}
		if !o.NoRegister {
			if err := c.RegisterWebhooks(ctx); err != nil {
				return c, err
			}
		}
	}
	return c, nil
}

// StartControlPlane starts etcd and the apiservers and writes the admin
// kubeconfigs.
func (c *Cluster) StartControlPlane(ctx context.Context) error {
	po := ProcessOptions{Detach: c.opts.Detach}
	start := time.Now()
	var err error
	if c.PKI = c.opts.PKI; c.PKI == nil {
		if c.PKI, err = NewPKI(filepath.Join(c.Dir, "pki")); err != nil {
			return err
		}
	}
	adminCert, err := c.PKI.ClientCert("e2e-admin", "system:masters")
	if err != nil {
		return err
	}
	c.Admin = &Identity{User: "e2e-admin", Groups: []string{"system:masters"}, Cert: adminCert}
	if c.opts.WebhookClientAuth {
		if c.ClientAuth, err = NewWebhookClientAuth(filepath.Join(c.Dir, "webhook-client-auth")); err != nil {
			return err
		}
	}
	if err := retryPortClash(func() (err error) {
		c.Etcd, err = StartEtcd(ctx, c.Bin.Etcd, c.Dir, po)
		return err
	}); err != nil {
		return err
	}
	for i, ao := range c.opts.APIServers {
		if ao.Name == "" {
			ao.Name = "kube-apiserver"
			if i > 0 {
				ao.Name = fmt.Sprintf("kube-apiserver-%d", i+1)
			}
		}
		if i > 0 && ao.Hostname == "" {
			ao.Hostname = fmt.Sprintf("e2e-apiserver-%d", i+1)
		}
		ao.ExtraArgs = c.ClientAuth.APIServerArgs(ao.ExtraArgs)
		var a *APIServer
		if err := retryPortClash(func() (err error) {
			a, err = StartAPIServer(ctx, c.Bin.KubeAPIServer, c.Dir, c.PKI, c.Admin, c.Etcd.URL, ao, po)
			return err
		}); err != nil {
			return err
		}
		c.APIServers = append(c.APIServers, a)
		if err := c.Admin.WriteKubeconfig(c.AdminKubeconfigFor(i), a.URL, c.PKI.CA.CertPEM); err != nil {
			return err
		}
		if i == 0 {
			// Later apiservers find the default ServiceCIDR made from the
			// first one's flag, as in a cluster upgraded one apiserver at a
			// time.
			if err := c.waitDefaultServiceCIDR(ctx); err != nil {
				return err
			}
		}
	}
	c.AdminKubeconfig = c.AdminKubeconfigFor(0)
	if c.opts.LoadBalancer {
		var backends []Backend
		for _, a := range c.APIServers {
			backends = append(backends, Backend{Name: a.Name, Addr: strings.TrimPrefix(a.URL, "https://")})
		}
		// Watches last minutes; client-go ends them itself after 5-10.
		lb, err := StartHAProxy(ctx, c.Dir, backends, HAProxyOptions{Name: "apiserver-lb", CheckTLS: true, Timeout: 15 * time.Minute}, po)
		if err != nil {
			return err
		}
		c.APIServerLB = lb
		c.LBKubeconfig = filepath.Join(c.Dir, "admin-lb.kubeconfig")
		if err := c.Admin.WriteKubeconfig(c.LBKubeconfig, lb.URL(), c.PKI.CA.CertPEM); err != nil {
			return err
		}
	}
	c.Logf("e2e: control plane up in %s: etcd %s, apiservers %s (dir %s)", time.Since(start).Round(time.Millisecond), c.Etcd.URL, c.apiserverURLs(), c.Dir)
	return nil
}

func (c *Cluster) apiserverURLs() string {
	var s []string
	for _, a := range c.APIServers {
		s = append(s, a.URL+" ("+a.ServiceClusterIPRange+")")
	}
	return strings.Join(s, ", ")
}

// AdminKubeconfigFor is the admin kubeconfig of apiserver i.
func (c *Cluster) AdminKubeconfigFor(i int) string {
	if i == 0 {
		return filepath.Join(c.Dir, "admin.kubeconfig")
	}
	return filepath.Join(c.Dir, fmt.Sprintf("admin-%d.kubeconfig", i+1))
}

// RESTConfig is the admin client configuration of apiserver i.
func (c *Cluster) RESTConfig(i int) *rest.Config {
	return c.Admin.RESTConfig(c.APIServers[i].URL, c.PKI.CA.CertPEM)
}

// Client is an admin clientset of apiserver i.
func (c *Cluster) Client(i int) kubernetes.Interface {
	return kubernetes.NewForConfigOrDie(c.RESTConfig(i))
}

// LBRESTConfig is the admin client configuration through the apiservers'
// load balancer (Options.LoadBalancer).
func (c *Cluster) LBRESTConfig() *rest.Config {
	return c.Admin.RESTConfig(c.APIServerLB.URL(), c.PKI.CA.CertPEM)
}

// LBClient is an admin clientset through the apiservers' load balancer.
func (c *Cluster) LBClient() kubernetes.Interface {
	return kubernetes.NewForConfigOrDie(c.LBRESTConfig())
}

func (c *Cluster) waitDefaultServiceCIDR(ctx context.Context) error {
	cs := c.Client(0)
	return poll(ctx, `ServiceCIDR "kubernetes"`, 30*time.Second, 100*time.Millisecond, []*Process{c.APIServers[0].Process}, func(ctx context.Context) (bool, error) {
		_, err := cs.NetworkingV1().ServiceCIDRs().Get(ctx, "kubernetes", metav1.GetOptions{})
		return err == nil, err
	})
}

// StartWebhooks starts n webhook processes with serving certificates from
// one webhook CA, and waits until each is ready. They authenticate as the
// service account of the manifests' RBAC (a client certificate for that
// name), or as admin when c.RBAC is nil.
func (c *Cluster) StartWebhooks(ctx context.Context, n int) error {
	return c.startWebhooks(ctx, n, true)
}

// StartWebhookUnready starts one more webhook like StartWebhooks but does
// not wait for it to get ready.
func (c *Cluster) StartWebhookUnready(ctx context.Context) (*Webhook, error) {
	if err := c.startWebhooks(ctx, 1, false); err != nil {
		return nil, err
	}
	return c.Webhooks[len(c.Webhooks)-1], nil
}

func (c *Cluster) startWebhooks(ctx context.Context, n int, wait bool) error {
	if err := c.ensureWebhookCA(); err != nil {
		return err
	}
	if c.PolicyFile = c.opts.PolicyFile; c.PolicyFile == "" {
		c.PolicyFile = filepath.Join(c.Dir, "policy.yaml")
		if err := certs.WriteFileAtomic(c.PolicyFile, []byte(c.opts.Policy), 0o644); err != nil {
			return err
		}
	}
	id, err := c.webhookIdentity()
	if err != nil {
		return err
	}
	for i := range n {
		name := "webhook"
		if len(c.Webhooks) > 0 || n > 1 {
			name = fmt.Sprintf("webhook-%d", len(c.Webhooks)+1)
		}
		server := c.APIServers[len(c.Webhooks)%len(c.APIServers)].URL
		if c.APIServerLB != nil {
			server = c.APIServerLB.URL()
		}
		kubeconfig := filepath.Join(c.Dir, name+".kubeconfig")
		if err := id.WriteKubeconfig(kubeconfig, server, c.PKI.CA.CertPEM); err != nil {
			return err
		}
		start := time.Now()
		o := WebhookOptions{Name: name, Kubeconfig: kubeconfig, Policy: c.PolicyFile, ExtraArgs: append(c.ClientAuth.WebhookArgs(), c.opts.WebhookArgs...), ManagedCerts: c.opts.ManagedCerts}
		if !c.opts.NoBackstop && !slices.Contains(o.ExtraArgs, "--backstop") {
			o.ExtraArgs = append(o.ExtraArgs, "--backstop")
		}
		if slices.Contains(c.opts.WebhookArgs, "--policy-source=crd") {
			o.Policy = "" // the webhook refuses --policy with the policy object
		}
		po := ProcessOptions{Detach: c.opts.Detach}
		var w *Webhook
		if err := retryPortClash(func() (err error) {
			if wait {
				w, err = StartWebhook(ctx, c.Bin.Webhook, c.Dir, c.WebhookCA, o, po)
			} else {
				w, err = StartWebhookUnready(c.Bin.Webhook, c.Dir, c.WebhookCA, o, po)
			}
			return err
		}); err != nil {
			return err
		}
		w.Client = c.ClientAuth.Identity()
		c.Webhooks = append(c.Webhooks, w)
		state := "ready"
		if !wait {
			state = "started"
		}
		c.Logf("e2e: %s (%d of %d) %s in %s on %s, talking to %s as %s", name, i+1, n, state, time.Since(start).Round(time.Millisecond), w.Addr(), server, id.User)
	}
	return nil
}

// ensureWebhookCA makes the CA that signs every webhook's serving
// certificate, once per cluster.
func (c *Cluster) ensureWebhookCA() error {
	if c.WebhookCA != nil {
		return nil
	}
	var err error
	c.WebhookCA, err = certs.NewCA("clusterip-policy-e2e-webhook-ca", certValidity)
	return err
}

// webhookIdentity is who the webhooks talk to the apiservers as: the
// service account of the manifests' RBAC (a client certificate for that
// name), or admin when no RBAC was applied.
func (c *Cluster) webhookIdentity() (*Identity, error) {
	if c.RBAC == nil {
		return c.Admin, nil
	}
	cert, err := c.PKI.ClientCert(c.RBAC.UserName(), c.RBAC.Groups()...)
	if err != nil {
		return nil, err
	}
	return &Identity{User: c.RBAC.UserName(), Groups: c.RBAC.Groups(), Cert: cert}, nil
}

// Processes are all processes of the cluster, in start order.
func (c *Cluster) Processes() []*Process {
	var ps []*Process
	if c.Etcd != nil {
		ps = append(ps, c.Etcd.Process)
	}
	for _, a := range c.APIServers {
		ps = append(ps, a.Process)
	}
	if c.APIServerLB != nil {
		ps = append(ps, c.APIServerLB.Process)
	}
	for _, w := range c.Webhooks {
		ps = append(ps, w.Process)
	}
	if c.WebhookLB != nil {
		ps = append(ps, c.WebhookLB.Process)
	}
	return ps
}

// Stop stops the load balancers, the webhooks, the apiservers and etcd, in
// reverse start order.
func (c *Cluster) Stop() {
	ps := c.Processes()
	for i := len(ps) - 1; i >= 0; i-- {
		ps[i].Stop(10 * time.Second)
	}
}

// Kubectl runs kubectl with the admin kubeconfig of the first apiserver
// (prepend --kubeconfig to choose another) and returns stdout and stderr.
func (c *Cluster) Kubectl(ctx context.Context, stdin string, args ...string) (string, string, error) {
	if len(args) == 0 || !strings.HasPrefix(args[0], "--kubeconfig") {
		args = append([]string{"--kubeconfig=" + c.AdminKubeconfig}, args...)
	}
	cmd := exec.CommandContext(ctx, c.Bin.Kubectl, args...)
	cmd.Dir = c.Root
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), stderr.String(), err
}

func randomSuffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
