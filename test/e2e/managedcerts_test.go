//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"clusterip-policy/certs"
	"clusterip-policy/test/e2e/framework"
	"clusterip-policy/test/fixtures"
)

const (
	managedTLSSecret = "clusterip-policy-webhook-tls"
	managedCASecret  = "clusterip-policy-webhook-ca"
)

// managedState is what the apiservers trust and the webhook serves.
type managedState struct {
	bundle []*x509.Certificate // the mutating configuration's caBundle
	served *x509.Certificate   // what a new connection to the webhook gets
	secret *x509.Certificate   // tls.crt of the serving Secret
}

// pemCerts parses the PEM certificates of data; t.Errorf (not Fatalf: it
// runs in the prober's goroutine too) on one that does not parse.
func pemCerts(t *testing.T, data []byte) []*x509.Certificate {
	t.Helper()
	var out []*x509.Certificate
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return out
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Errorf("parse PEM certificate: %v", err)
			continue
		}
		out = append(out, c)
	}
}

// handshake opens a new TLS connection to addr trusting bundle alone, as
// an apiserver opening a new connection would, and returns the
// certificate served.
func handshake(addr string, bundle []*x509.Certificate) (*x509.Certificate, error) {
	pool := x509.NewCertPool()
	for _, c := range bundle {
		pool.AddCert(c)
	}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", addr, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12})
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0], nil
}

func readManaged(ctx context.Context, t *testing.T, cs kubernetes.Interface, addr string) (managedState, error) {
	var st managedState
	m, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "clusterip-policy", metav1.GetOptions{})
	if err != nil {
		return st, err
	}
	st.bundle = pemCerts(t, m.Webhooks[0].ClientConfig.CABundle)
	// The serving Secret may be gone a moment (deleted, not written
	// again yet): the replicas serve on.
	sec, err := cs.CoreV1().Secrets(framework.ManagedCertsNamespace).Get(ctx, managedTLSSecret, metav1.GetOptions{})
	switch {
	case err == nil:
		if c := pemCerts(t, sec.Data["tls.crt"]); len(c) > 0 {
			st.secret = c[0]
		}
	case !apierrors.IsNotFound(err):
		return st, err
	}
	st.served, err = handshake(addr, st.bundle)
	return st, err
}

// A fresh cluster with no Secret: the elected webhook makes the CA and the
// certificate, writes the caBundle of every webhook, and the apiserver
// calls it over TLS (the harness's registration waits for a mutate and a
// validate decision). A restarted webhook keeps the CA and the
// certificate; the CA's key is only in its own Secret.
func TestManagedCertificatesBootstrapAndRestart(t *testing.T) {
	start := time.Now()
	c := own(t, framework.Options{Policy: sharedPolicy, Webhooks: 1, ManagedCerts: true})
	t.Logf("e2e: cluster with a managed-certificate webhook up and called by the apiserver %s after start", time.Since(start).Round(time.Millisecond))
	ctx := testContext(t, 3*60e9)
	cs := c.Client(0)
	w := c.Webhooks[0]

	before, err := readManaged(ctx, t, cs, w.Addr())
	if err != nil {
		t.Fatalf("read the managed certificates: %v", err)
	}
	if len(before.bundle) != 1 || before.served.CheckSignatureFrom(before.bundle[0]) != nil {
		t.Fatalf("caBundle holds %d CAs; the served certificate must be signed by the one", len(before.bundle))
	}
	// Every webhook of both configurations carries the bundle.
	v, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "clusterip-policy", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Webhooks) < 3 {
		t.Fatalf("the validating configuration has %d webhooks; the base has three", len(v.Webhooks))
	}
	for _, h := range v.Webhooks {
		if b := pemCerts(t, h.ClientConfig.CABundle); len(b) != 1 || !b[0].Equal(before.bundle[0]) {
			t.Errorf("webhook %s has a caBundle of %d CAs, not the managed one", h.Name, len(b))
		}
	}
	tlsSec, err := cs.CoreV1().Secrets(framework.ManagedCertsNamespace).Get(ctx, managedTLSSecret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range tlsSec.Data {
		if k != "tls.key" && strings.Contains(string(v), "PRIVATE KEY") {
			t.Errorf("the serving Secret's %s holds a private key", k)
		}
	}
	if tlsSec.Type != corev1.SecretTypeTLS {
		t.Errorf("the serving Secret is of type %s", tlsSec.Type)
	}

	ns := namespace(t, c, "managed-certs")
	mustCreate(t, ctx, cs, fixtures.Service(ns, "before-restart", fixtures.WithClusterIP("10.96.0.61")))
	if n := len(decisionsFor(c, ns, "before-restart")); n < 2 {
		t.Fatalf("the create reached the webhook %d times, want mutate and validate", n)
	}

	// Restart: a new process, as a rolled pod.
	w.Stop(10 * time.Second)
	if err := w.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := w.WaitReady(ctx, 60*time.Second); err != nil {
		t.Fatalf("the restarted webhook did not get ready: %v", err)
	}
	after, err := readManaged(ctx, t, cs, w.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if len(after.bundle) != 1 || !after.bundle[0].Equal(before.bundle[0]) {
		t.Errorf("the restart changed the caBundle (%d CAs)", len(after.bundle))
	}
	if !after.served.Equal(before.served) {
		t.Errorf("the restart reissued the serving certificate (serial %s, was %s)", after.served.SerialNumber.Text(16), before.served.SerialNumber.Text(16))
	}
	requireManagedFreshHandshake(t, c, ns)
	measureBundleLoad(t, c, ns)
	if m, err := w.Metrics(); err != nil || !strings.Contains(m, `clusterip_policy_certificate_expiry_seconds{certificate="serving"}`) || !strings.Contains(m, `clusterip_policy_certificate_expiry_seconds{certificate="ca"}`) {
		t.Errorf("the expiry gauge is missing (err %v)", err)
	}
}

// Certificates forced to expire within a minute (serving 30 s, CA 60 s,
// --ca-bundle-settle 2s), under two replicas behind a load balancer, while
// clients keep creating Services with a static-band clusterIP (which the
// apiserver must send to both webhooks; four clients by server-side dry
// run, one by real creates): the serving certificate is renewed twice and
// more, the CA rotated once, and no create fails. A prober opens
// a new TLS connection every 50 ms trusting only the caBundle the
// configuration holds at that moment, as a new apiserver connection would:
// it never fails either.
func TestManagedCertificatesRenewAndRotateUnderLoad(t *testing.T) {
	c := own(t, framework.Options{Policy: sharedPolicy, Webhooks: 2, ManagedCerts: true,
		WebhookArgs: []string{"--cert-validity=30s", "--ca-validity=60s", "--ca-bundle-settle=2s"}})
	ctx := testContext(t, 5*60e9)
	l := startCertLoad(ctx, t, c, "managed-rotation")
	cs, addr, first, ns := l.cs, l.addr, l.first, l.ns
	began := l.began

	// Until the first CA has been replaced and its successor serves, and
	// at least 75 s (the first CA expires at 60 s), at most 3 minutes.
	var rotatedAt time.Duration
	for {
		time.Sleep(time.Second)
		st, err := readManaged(ctx, t, cs, addr)
		if err == nil && rotatedAt == 0 && st.served.CheckSignatureFrom(first.bundle[0]) != nil {
			rotatedAt = time.Since(began)
			t.Logf("e2e: the webhook serves a certificate of a new CA %s after the start of the load", rotatedAt.Round(time.Millisecond))
		}
		if rotatedAt > 0 && time.Since(began) > 75*time.Second {
			break
		}
		if time.Since(began) > 3*time.Minute {
			l.stop()
			t.Fatalf("no CA rotation within 3 minutes (last error %v)", err)
		}
	}
	l.stop()
	l.report()
	if len(l.served) < 3 {
		t.Errorf("%d serving certificates seen in %s; a 30 s certificate renewed at 20 s gives at least 3", len(l.served), time.Since(began).Round(time.Second))
	}
	if len(l.cas) < 2 {
		t.Errorf("%d CAs seen; the 60 s CA is rotated at 40 s", len(l.cas))
	}
	for _, w := range c.Webhooks {
		if exited, err := w.Exited(); exited {
			t.Errorf("%s exited: %v", w.Name, err)
		}
	}
	requireManagedFreshHandshake(t, c, ns)
	// The expired first CA left the bundle.
	last, err := readManaged(ctx, t, cs, addr)
	if err != nil {
		t.Fatal(err)
	}
	for _, ca := range last.bundle {
		if ca.Equal(first.bundle[0]) {
			t.Errorf("the first CA (expired at %s) is still in the caBundle", ca.NotAfter.Format(time.RFC3339))
		}
	}
}

// certLoad is the traffic a certificate change must not fail: four clients
// making server-side dry-run creates with a static-band clusterIP (the
// whole admission path, both webhooks over TLS, no address allocated), a
// fifth making real creates, each on an address of its own
// (10.96.0.20-10.96.0.219, kept until the namespace goes), and a prober
// opening a new TLS connection to addr every 50 ms trusting only the
// caBundle the configuration holds at that moment, as a new apiserver
// connection would. Real creates deleted at once and recreated on the same
// addresses provoked the apiserver's IPAddress repair race at this rate
// (repairip.go: "the ClusterIP 10.96.0.56 for Service c0-586 is not
// allocated; repairing" recreated the IPAddress of a Service being
// deleted, which then held the address for minutes), failing later creates
// with already-allocated: nothing these tests measure.
type certLoad struct {
	t                                                   *testing.T
	cs                                                  kubernetes.Interface
	addr                                                string       // where the webhook is called
	first                                               managedState // what was trusted and served before the load
	ns                                                  string
	began                                               time.Time
	cancel                                              context.CancelFunc
	wg                                                  sync.WaitGroup
	creates, realCreates, failed, probes, probeFailures atomic.Int64
	mu                                                  sync.Mutex
	failures                                            []string
	served, cas                                         map[string]bool // serials served, CA names trusted
}

const certLoadClients = 4

// startCertLoad reads what is trusted and served, makes a namespace named
// from nsPrefix, and starts the load in it.
func startCertLoad(ctx context.Context, t *testing.T, c *framework.Cluster, nsPrefix string) *certLoad {
	t.Helper()
	cs := c.Client(0)
	addr, err := c.WebhookEndpoint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first, err := readManaged(ctx, t, cs, addr)
	if err != nil {
		t.Fatal(err)
	}
	ns := namespace(t, c, nsPrefix)
	l := &certLoad{t: t, cs: cs, addr: addr, first: first, ns: ns, began: time.Now(), served: map[string]bool{}, cas: map[string]bool{}}
	runCtx, cancel := context.WithCancel(ctx)
	l.cancel = cancel
	for g := range certLoadClients + 1 {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for i := 0; runCtx.Err() == nil; i++ {
				real := g == certLoadClients
				// A dry run allocates nothing: each dry-run client asks
				// for one address of its own, 10.96.0.230-233, again and
				// again; the real creates take 10.96.0.20-219, one each.
				ip := fmt.Sprintf("10.96.0.%d", 230+g)
				if real {
					if i >= 200 {
						return
					}
					ip = fmt.Sprintf("10.96.0.%d", 20+i)
					select {
					case <-runCtx.Done():
						return
					case <-time.After(300 * time.Millisecond):
					}
				}
				name := fmt.Sprintf("c%d-%d", g, i)
				opts := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
				if real {
					opts = metav1.CreateOptions{}
				}
				_, err := cs.CoreV1().Services(ns).Create(runCtx, fixtures.Service(ns, name, fixtures.WithClusterIP(ip)), opts)
				if runCtx.Err() != nil {
					return
				}
				l.creates.Add(1)
				if real {
					l.realCreates.Add(1)
				}
				if err != nil {
					l.failed.Add(1)
					l.note(fmt.Sprintf("%s %s (dry run %v) at %s: %v", name, ip, !real, time.Now().Format("15:04:05.000"), err))
				}
			}
		}()
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		for runCtx.Err() == nil {
			st, err := readManaged(runCtx, t, cs, addr)
			if runCtx.Err() != nil {
				return
			}
			l.probes.Add(1)
			if err != nil {
				l.probeFailures.Add(1)
				l.note(fmt.Sprintf("probe at %s: %v", time.Now().Format("15:04:05.000"), err))
			} else {
				l.mu.Lock()
				l.served[st.served.SerialNumber.Text(16)] = true
				for _, ca := range st.bundle {
					l.cas[ca.Subject.CommonName] = true
				}
				l.mu.Unlock()
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	return l
}

func (l *certLoad) note(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.failures) < 20 {
		l.failures = append(l.failures, s)
	}
}

// stop ends the load and waits for its goroutines.
func (l *certLoad) stop() {
	l.cancel()
	l.wg.Wait()
}

// report logs the figures and fails the test on any failed create or
// probe, or when too few creates flowed to prove anything.
func (l *certLoad) report() {
	t := l.t
	t.Helper()
	t.Logf("e2e: %d creates (%d real, the rest server-side dry runs) over %s with %d clients, %d failed; %d new-connection probes, %d failed; %d serving certificates and %d CAs seen",
		l.creates.Load(), l.realCreates.Load(), time.Since(l.began).Round(time.Second), certLoadClients+1, l.failed.Load(), l.probes.Load(), l.probeFailures.Load(), len(l.served), len(l.cas))
	if len(l.failures) > 0 {
		t.Logf("what failed:\n%s", strings.Join(l.failures, "\n"))
	}
	if l.failed.Load() > 0 || l.probeFailures.Load() > 0 {
		t.Errorf("%d creates and %d probes failed", l.failed.Load(), l.probeFailures.Load())
	}
	if l.creates.Load() < 100 {
		t.Errorf("only %d creates flowed", l.creates.Load())
	}
}

// TestDeletingBothCertificateSecretsFailsNoReview runs the clean-up
// command of docs/install.md (delete both certificate Secrets) while two
// managed-certificate replicas serve under load: each replica keeps
// serving its last certificate until it loads the new Secret, so the
// leader keeps the CA the configurations trust in the new caBundle, and
// writes a certificate of the new CA only after --ca-bundle-settle. No
// create and no new-connection probe fails; the old CA stays trusted.
func TestDeletingBothCertificateSecretsFailsNoReview(t *testing.T) {
	c := own(t, framework.Options{Policy: sharedPolicy, Webhooks: 2, ManagedCerts: true, WebhookArgs: []string{"--ca-bundle-settle=2s"}})
	ctx := testContext(t, 3*60e9)
	l := startCertLoad(ctx, t, c, "managed-secrets-deleted")
	cs, addr, first := l.cs, l.addr, l.first
	time.Sleep(3 * time.Second) // load flowing before the deletion
	out, errOut, err := c.Kubectl(ctx, "", "-n", framework.ManagedCertsNamespace, "delete", "secret", managedTLSSecret, managedCASecret)
	if err != nil {
		l.stop()
		t.Fatalf("the clean-up command of docs/install.md: %v\n%s%s", err, out, errOut)
	}
	deleted := time.Now()
	// Until both replicas serve a certificate of a new CA, then 5 s more.
	var moved time.Duration
	for moved == 0 || time.Since(deleted) < moved+5*time.Second {
		time.Sleep(200 * time.Millisecond)
		if time.Since(deleted) > 90*time.Second {
			l.stop()
			t.Fatalf("the replicas did not move to a new CA within 90 s of the deletion")
		}
		if moved > 0 {
			continue
		}
		all := true
		for _, w := range c.Webhooks {
			if served, err := servedCertificate(w.Addr()); err != nil || served.CheckSignatureFrom(first.bundle[0]) == nil {
				all = false
			}
		}
		if all {
			moved = time.Since(deleted)
			t.Logf("e2e: both replicas serve a certificate of a new CA %s after both Secrets were deleted", moved.Round(time.Millisecond))
		}
	}
	l.stop()
	l.report()
	last, err := readManaged(ctx, t, cs, addr)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(last.bundle, first.bundle[0].Equal) {
		t.Errorf("the CA the replicas served before the deletion left the caBundle (%d CAs)", len(last.bundle))
	}
	if len(last.bundle) < 2 {
		t.Errorf("caBundle of %d CAs, want the new one beside the old", len(last.bundle))
	}
}

// servedCertificate is the certificate addr serves, read without
// verifying it.
func servedCertificate(addr string) (*x509.Certificate, error) {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", addr, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}) //nolint:gosec // reads the certificate, trusts nothing
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0], nil
}

// requireManagedFreshHandshake is requireFreshHandshake for the managed
// caBundle: one more validating webhook, at a URL the apiserver never
// called (localhost, a name the managed certificate carries), with the
// caBundle the leader wrote, must decide a labelled create.
func requireManagedFreshHandshake(t *testing.T, c *framework.Cluster, ns string) {
	t.Helper()
	ctx := testContext(t, 60e9)
	cs := c.Client(0)
	cur, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "clusterip-policy", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	check := cur.DeepCopy()
	check.Webhooks[0].MatchConditions = nil
	requireHandshakeThrough(t, ctx, c, ns, check, "e2e-managed-fresh-handshake", "trusting the managed caBundle")
}

// measureBundleLoad measures what --ca-bundle-settle waits for: how long
// after a caBundle is written the apiserver verifies new connections
// against it. A configuration of its own (localhost, labelled Services
// only, failurePolicy Fail) first trusts an unrelated CA, so every call
// fails the handshake; at T0 its caBundle becomes the managed one, and
// dry-run creates every 10 ms find the first that the webhook decides.
func measureBundleLoad(t *testing.T, c *framework.Cluster, ns string) {
	t.Helper()
	ctx := testContext(t, 60e9)
	cs := c.Client(0)
	cur, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "clusterip-policy", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	managed := cur.Webhooks[0].ClientConfig.CABundle
	unrelated, err := certs.NewCA("unrelated", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var took []time.Duration
	for round := range 5 {
		cfg := cur.DeepCopy()
		cfg.ObjectMeta = metav1.ObjectMeta{Name: fmt.Sprintf("e2e-bundle-load-%d", round)}
		cfg.Webhooks = cfg.Webhooks[:1]
		cfg.Webhooks[0].Name = "bundle-load.e2e.clusterip-policy.io"
		cfg.Webhooks[0].MatchConditions = nil
		url := fmt.Sprintf("https://localhost:%d%s", c.Webhooks[0].Port, framework.ValidatePath)
		cfg.Webhooks[0].ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: unrelated.CertPEM}
		label := fmt.Sprintf("round-%d", round)
		cfg.Webhooks[0].ObjectSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"e2e-bundle-load": label}}
		created, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, cfg, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		probe := func(i int) error {
			svc := fixtures.Service(ns, fmt.Sprintf("bundle-load-%d-%d", round, i))
			svc.Labels = map[string]string{"e2e-bundle-load": label}
			_, err := dryRunCreate(ctx, cs, svc)
			return err
		}
		// The unrelated CA is in force: a call fails the handshake.
		tries := 0
		fixtures.EventuallyNil(t, fmt.Sprintf("round %d: a webhook trusting an unrelated CA to fail the call", round), 20*time.Second, func() error {
			tries++
			err := probe(tries)
			if err == nil {
				return errors.New("the call succeeded")
			}
			if !strings.Contains(err.Error(), "failed calling webhook") {
				return fmt.Errorf("the call: %w", err)
			}
			return nil
		})
		created.Webhooks[0].ClientConfig.CABundle = managed
		t0 := time.Now()
		if _, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		// A measurement, not a wait: probed every 10ms (fixtures.Wait
		// backs off to 200ms), so took is the time to trust to 10ms.
		for i := 1000; ; i++ {
			if err := probe(i); err == nil {
				took = append(took, time.Since(t0))
				break
			}
			if time.Since(t0) > 20*time.Second {
				t.Fatalf("round %d: the apiserver did not trust the new caBundle within 20s", round)
			}
			time.Sleep(10 * time.Millisecond)
		}
		_ = cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, created.Name, metav1.DeleteOptions{})
	}
	slices.Sort(took)
	t.Logf("e2e: the apiserver verified new connections against a written caBundle %v after the write (5 rounds, with a 10 ms probe period and the dry-run create's own time)", took)
	// --ca-bundle-settle (default 5s) is what the leader waits after
	// writing a caBundle before serving a certificate only it trusts: the
	// apiserver must have loaded the bundle by then.
	const defaultSettle = 5 * time.Second
	if worst := took[len(took)-1]; worst >= defaultSettle {
		t.Errorf("the apiserver took %s to trust a written caBundle: the default --ca-bundle-settle %s is too short", worst, defaultSettle)
	}
}
