package servingcerts

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"clusterip-policy/certs"
	"clusterip-policy/internal/sharedinformers"
	"clusterip-policy/internal/webhookconfig"
	"clusterip-policy/test/fixtures"
)

func testOptions() Options {
	return Options{
		Source: SourceManaged, Namespace: "clusterip-policy",
		Secret: "clusterip-policy-webhook-tls", CASecret: "clusterip-policy-webhook-ca",
		Service: "clusterip-policy-webhook", ExtraSANs: []string{"127.0.0.1"},
		Validity: time.Hour, CAValidity: 3 * time.Hour, Settle: 5 * time.Second,
		Configurations: webhookconfig.Names{Mutating: "clusterip-policy", Validating: "clusterip-policy"},
	}
}

// configurations as manifests/base has them: one mutating webhook, three
// validating ones (Services, ServiceCIDRs, the ClusterIPPolicy object).
func configurations() (*admissionregistrationv1.MutatingWebhookConfiguration, *admissionregistrationv1.ValidatingWebhookConfiguration) {
	m := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "clusterip-policy"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{Name: "mutate-services.clusterip-policy.io"}}}
	v := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "clusterip-policy"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{
			{Name: "validate-services.clusterip-policy.io"},
			{Name: "validate-servicecidrs.clusterip-policy.io"},
			{Name: "validate-clusterippolicies.clusterip-policy.io"},
		}}
	return m, v
}

type world struct {
	t      *testing.T
	client *fake.Clientset
	k      *Keeper
	clock  time.Time
	st     term
}

func newWorld(t *testing.T, o Options) *world {
	m, v := configurations()
	w := &world{t: t, client: fake.NewClientset(m, v), clock: time.Now()}
	w.k = newKeeper(t, w.client, o)
	w.k.now = func() time.Time { return w.clock }
	return w
}

// newKeeper is a Keeper over client within a term: the replica's Source of
// the serving Secret and the term's watch of the configurations, both
// running until the test ends.
func newKeeper(t *testing.T, client *fake.Clientset, o Options) *Keeper {
	t.Helper()
	replica := sharedinformers.New(client, sharedinformers.Configurations{})
	src, err := NewSource(replica, o.Namespace, o.Secret, logr.Discard(), NewMetrics(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	k := New(client, src, o, logr.Discard(), NewMetrics(prometheus.NewRegistry()))
	term := sharedinformers.New(client, sharedinformers.Configurations{Mutating: o.Configurations.Mutating, Validating: o.Configurations.Validating})
	if k.configurations, err = term.WebhookConfigurations("certificates"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); replica.Shutdown(); term.Shutdown() })
	replica.Start(ctx.Done())
	term.Start(ctx.Done())
	return k
}

// watched waits until the term's watch of the configurations has seen what
// the client holds, as the leader's does milliseconds after a change.
func (w *world) watched() {
	w.t.Helper()
	fixtures.Eventually(w.t, "the configurations watched", 10*time.Second, func() bool {
		ctx := context.Background()
		m, merr := w.client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, w.k.o.Configurations.Mutating, metav1.GetOptions{})
		v, verr := w.client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, w.k.o.Configurations.Validating, metav1.GetOptions{})
		wm, wmerr := w.k.configurations.Mutating()
		wv, wverr := w.k.configurations.Validating()
		// The whole object: the fake client keeps no resourceVersion.
		same := func(a, b any, aerr, berr error) bool {
			if aerr != nil || berr != nil {
				return apierrors.IsNotFound(aerr) && apierrors.IsNotFound(berr)
			}
			return equality.Semantic.DeepEqual(a, b)
		}
		return same(m, wm, merr, wmerr) && same(v, wv, verr, wverr)
	})
}

func (w *world) pass() time.Time {
	w.t.Helper()
	w.watched()
	next, err := w.k.pass(context.Background(), &w.st)
	if err != nil {
		w.t.Fatalf("pass at %s: %v", w.clock, err)
	}
	return next
}

func (w *world) secret(name string) *corev1.Secret {
	w.t.Helper()
	s, err := w.client.CoreV1().Secrets("clusterip-policy").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	return s
}

// served is what a replica would serve now.
func (w *world) served() (leaf, ca *x509.Certificate) {
	w.t.Helper()
	s, err := parseServing(w.secret(w.k.o.Secret))
	if err != nil {
		w.t.Fatalf("the serving Secret does not load: %v", err)
	}
	return s.leaf, s.ca
}

// bundles returns the caBundle of each of the four webhooks.
func (w *world) bundles() [][]byte {
	w.t.Helper()
	ctx := context.Background()
	m, err := w.client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "clusterip-policy", metav1.GetOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	v, err := w.client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "clusterip-policy", metav1.GetOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	var out [][]byte
	for _, h := range m.Webhooks {
		out = append(out, h.ClientConfig.CABundle)
	}
	for _, h := range v.Webhooks {
		out = append(out, h.ClientConfig.CABundle)
	}
	return out
}

// trusted parses the one caBundle every webhook carries (it fails if they
// differ).
func (w *world) trusted() []*x509.Certificate {
	w.t.Helper()
	b := w.bundles()
	for i := range b {
		if !bytes.Equal(b[i], b[0]) {
			w.t.Fatalf("webhook %d has another caBundle than webhook 0", i)
		}
	}
	certs, err := parseCerts(b[0], "caBundle")
	if err != nil {
		w.t.Fatalf("caBundle: %v", err)
	}
	return certs
}

// requireVerifies fails unless the apiservers, trusting the caBundle,
// would accept leaf (one a replica may still serve).
func (w *world) requireVerifies(when string, leaf *x509.Certificate) {
	w.t.Helper()
	pool := x509.NewCertPool()
	for _, c := range w.trusted() {
		pool.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "clusterip-policy-webhook.clusterip-policy.svc", CurrentTime: w.clock, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		w.t.Fatalf("%s: the apiservers would refuse the certificate a replica still serves: %v", when, err)
	}
}

// requireTrusted fails unless the apiservers, trusting the caBundle, would
// accept what a replica serves, for the names it is called by.
func (w *world) requireTrusted(when string) {
	w.t.Helper()
	leaf, _ := w.served()
	pool := x509.NewCertPool()
	for _, c := range w.trusted() {
		pool.AddCert(c)
	}
	for _, name := range []string{"clusterip-policy-webhook.clusterip-policy.svc", "127.0.0.1"} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: name, CurrentTime: w.clock, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			w.t.Fatalf("%s: the apiservers would refuse the served certificate for %s: %v", when, name, err)
		}
	}
}

func TestFirstPassCreatesTheCAAndCertificateAndInjectsEveryWebhook(t *testing.T) {
	w := newWorld(t, testOptions())
	next := w.pass()
	leaf, ca := w.served()
	if ca == nil || !ca.IsCA {
		t.Fatal("the serving Secret's ca.crt does not hold the CA that signed tls.crt")
	}
	if got := len(w.bundles()); got != 4 {
		t.Fatalf("%d webhooks, want 4", got)
	}
	if trusted := w.trusted(); len(trusted) != 1 || !trusted[0].Equal(ca) {
		t.Errorf("caBundle holds %s, want the one CA", subjects(trusted))
	}
	w.requireTrusted("after the first pass")
	if caSec := w.secret(w.k.o.CASecret); len(caSec.Data[KeyCAKey]) == 0 {
		t.Error("the CA Secret holds no key")
	}
	if bytes.Contains(w.secret(w.k.o.Secret).Data[KeyCACert], []byte("PRIVATE KEY")) {
		t.Error("the serving Secret, which every replica reads, holds a private key in ca.crt")
	}
	if w.secret(w.k.o.Secret).Type != corev1.SecretTypeTLS {
		t.Error("the serving Secret is not kubernetes.io/tls")
	}
	if !next.Equal(renewAt(leaf)) {
		t.Errorf("next pass at %s, want the serving certificate's renewal %s", next, renewAt(leaf))
	}
	// A second pass changes nothing.
	before := len(w.client.Actions())
	w.pass()
	for _, a := range w.client.Actions()[before:] {
		if a.GetVerb() != "get" {
			t.Errorf("a pass with nothing due wrote: %s %s", a.GetVerb(), a.GetResource().Resource)
		}
	}
}

// The caBundle is written as the certificates' own field manager, which a
// Helm upgrade by server-side apply leaves alone (test/e2e's helm tests),
// into every webhook and nothing else of the configuration.
func TestTheCABundleIsWrittenAsItsOwnFieldManagerAndNothingElse(t *testing.T) {
	w := newWorld(t, testOptions())
	ctx := context.Background()
	m, err := w.client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "clusterip-policy", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m.Webhooks[0].MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "another-loops", Expression: "true"}}
	if _, err := w.client.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(ctx, m, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	managers := map[string]string{}
	w.client.PrependReactor("update", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if u, ok := a.(k8stesting.UpdateActionImpl); ok && strings.HasSuffix(a.GetResource().Resource, "webhookconfigurations") {
			managers[a.GetResource().Resource] = u.UpdateOptions.FieldManager
		}
		return false, nil, nil
	})
	w.pass()
	want := map[string]string{"mutatingwebhookconfigurations": FieldManager, "validatingwebhookconfigurations": FieldManager}
	if fmt.Sprint(managers) != fmt.Sprint(want) {
		t.Errorf("the configurations were updated by the field managers %v, want %v", managers, want)
	}
	w.requireTrusted("after the first pass")
	m, err = w.client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "clusterip-policy", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c := m.Webhooks[0].MatchConditions; len(c) != 1 || c[0].Name != "another-loops" {
		t.Errorf("the caBundle write changed the matchConditions to %v", c)
	}
}

func TestServingRenewalKeepsTheCAAndTheBundle(t *testing.T) {
	w := newWorld(t, testOptions())
	w.pass()
	leaf, ca := w.served()
	bundle := w.bundles()[0]
	w.clock = renewAt(leaf)
	before := len(w.client.Actions())
	w.pass()
	leaf2, ca2 := w.served()
	if leaf2.Equal(leaf) {
		t.Fatal("the serving certificate was not renewed at 2/3 of its lifetime")
	}
	if !ca2.Equal(ca) {
		t.Error("a serving renewal changed the CA")
	}
	if !bytes.Equal(w.bundles()[0], bundle) {
		t.Error("a serving renewal changed the caBundle")
	}
	for _, a := range w.client.Actions()[before:] {
		if a.GetVerb() == "update" && a.GetResource().Resource != "secrets" {
			t.Errorf("a serving renewal wrote %s", a.GetResource().Resource)
		}
	}
	w.requireTrusted("after the serving renewal")
}

// The CA rotation: the bundle with both CAs first, the new certificate
// only after --ca-bundle-settle; at every step what is served is trusted.
func TestCARotationServesTheNewCAOnlyAfterTheBundleSettled(t *testing.T) {
	o := testOptions()
	w := newWorld(t, o)
	w.pass()
	_, oldCA := w.served()
	// Renew the serving certificate as due until the CA falls due.
	for {
		leaf, _ := w.served()
		if !renewAt(leaf).Before(renewAt(oldCA)) {
			break
		}
		w.clock = renewAt(leaf)
		w.pass()
		w.requireTrusted("a serving renewal before the CA's")
	}
	w.clock = renewAt(oldCA)
	next := w.pass()
	trusted := w.trusted()
	if len(trusted) != 2 || !trusted[1].Equal(oldCA) {
		t.Fatalf("after the CA fell due the caBundle holds %s, want the new CA and the old", subjects(trusted))
	}
	if _, ca := w.served(); !ca.Equal(oldCA) {
		t.Fatal("the replicas were given a certificate of the new CA before the bundle settled")
	}
	w.requireTrusted("the bundle just written")
	if want := w.clock.Add(o.Settle); !next.Equal(want) {
		t.Errorf("next pass at %s, want when the bundle has settled, %s", next, want)
	}
	w.clock = next.Add(-time.Millisecond)
	w.pass()
	if _, ca := w.served(); !ca.Equal(oldCA) {
		t.Fatal("switched before the settle had passed")
	}
	w.clock = next
	w.pass()
	if _, ca := w.served(); ca.Equal(oldCA) || !ca.Equal(trusted[0]) {
		t.Fatal("the serving certificate did not move to the new CA once the bundle settled")
	}
	w.requireTrusted("after the switch")
	// The old CA leaves the bundle when it expires.
	w.clock = oldCA.NotAfter
	w.pass()
	if got := w.trusted(); len(got) != 1 || got[0].Equal(oldCA) {
		t.Errorf("after the old CA expired the caBundle holds %s", subjects(got))
	}
	w.requireTrusted("after the old CA was dropped")
}

// A new leader (a restart) keeps the CA; a new term that finds a
// rotation half done waits the settle from its own start.
func TestANewTermKeepsTheCAAndWaitsTheSettleItDidNotSee(t *testing.T) {
	w := newWorld(t, testOptions())
	w.pass()
	_, ca := w.served()
	w.st = term{} // a new leader
	w.k = newKeeper(t, w.client, testOptions())
	w.k.now = func() time.Time { return w.clock }
	w.pass()
	if _, ca2 := w.served(); !ca2.Equal(ca) {
		t.Fatal("a new leader made a new CA")
	}
	// Half a rotation: the CA Secret has a new CA, the configurations and
	// the serving certificate not yet (the old leader died between).
	w.clock = renewAt(ca)
	w.k.now = func() time.Time { return w.clock }
	if _, err := w.k.pass(context.Background(), &term{}); err != nil {
		t.Fatal(err)
	}
	w.st = term{}
	w.pass()
	if _, ca3 := w.served(); !ca3.Equal(ca) {
		t.Fatal("a new term served the new CA without waiting the settle from its own start")
	}
	w.clock = w.clock.Add(w.k.o.Settle)
	w.pass()
	if _, ca3 := w.served(); ca3.Equal(ca) {
		t.Fatal("the new CA is not served after the settle")
	}
	w.requireTrusted("after the resumed rotation")
}

// What an operator may do to the Secrets and configurations, and what
// the leader makes of it.
func TestDamageIsRepaired(t *testing.T) {
	ctx := context.Background()
	t.Run("a caBundle reverted by a GitOps sync comes back", func(t *testing.T) {
		w := newWorld(t, testOptions())
		w.pass()
		m, _ := configurations()
		cur, _ := w.client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, m.Name, metav1.GetOptions{})
		cur.Webhooks[0].ClientConfig.CABundle = nil
		if _, err := w.client.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		w.pass()
		w.requireTrusted("after the revert")
	})
	t.Run("a deleted CA Secret makes a new CA, rotated like any other", func(t *testing.T) {
		w := newWorld(t, testOptions())
		w.pass()
		_, old := w.served()
		if err := w.client.CoreV1().Secrets("clusterip-policy").Delete(ctx, w.k.o.CASecret, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		w.pass()
		// The old CA is no longer in the CA Secret's bundle, but the
		// configurations still trusted it: the leader keeps serving the
		// old certificate until the new bundle settles.
		if _, ca := w.served(); !ca.Equal(old) {
			t.Fatal("switched to the new CA at once")
		}
		w.requireTrusted("right after the CA Secret was deleted")
		w.clock = w.clock.Add(w.k.o.Settle)
		w.pass()
		w.requireTrusted("after the settle")
	})
	t.Run("both Secrets deleted: what the replicas still serve stays trusted, and the new certificate waits for the settle", func(t *testing.T) {
		// The command docs/install.md gives for the clean-up after an
		// uninstall, run while the webhook runs: each replica keeps
		// serving its last certificate until it loads a new one.
		w := newWorld(t, testOptions())
		w.pass()
		oldLeaf, oldCA := w.served()
		for _, n := range []string{w.k.o.Secret, w.k.o.CASecret} {
			if err := w.client.CoreV1().Secrets("clusterip-policy").Delete(ctx, n, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		// The first pass writes the new CA and the bundle; the next one
		// (its own writes come back as events) finds the old CA in the CA
		// Secret's bundle, and still waits.
		for _, after := range []time.Duration{0, time.Second} {
			w.clock = w.clock.Add(after)
			w.pass()
			w.requireVerifies(fmt.Sprintf("%s after both Secrets were deleted", after), oldLeaf)
			if !slices.ContainsFunc(w.trusted(), oldCA.Equal) {
				t.Fatal("the CA of what the replicas serve left the caBundle")
			}
			if _, err := w.client.CoreV1().Secrets("clusterip-policy").Get(ctx, w.k.o.Secret, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Fatalf("%s after: a serving certificate of the new CA was written before the apiservers could load the bundle (err %v)", after, err)
			}
		}
		w.clock = w.clock.Add(w.k.o.Settle)
		w.pass()
		w.requireTrusted("after the settle")
		w.requireVerifies("after the settle, for a replica that has not loaded the new Secret yet", oldLeaf)
		if _, ca := w.served(); ca.Equal(oldCA) {
			t.Fatal("the new serving certificate is signed by the deleted CA")
		}
	})
	t.Run("both Secrets deleted under a caBundle stuffed by hand: only unexpired CAs kept, at most the bound, ours first", func(t *testing.T) {
		w := newWorld(t, testOptions())
		w.pass()
		oldLeaf, _ := w.served()
		// Five more CAs, one expired, and a serving certificate (no CA)
		// written into every webhook's caBundle beside the one in force.
		// Written before it: the bound must not push it out.
		inForce := w.bundles()[0]
		var stuffed []byte
		for range 5 {
			stuffed = append(stuffed, newCA(t, time.Hour).CertPEM...)
		}
		expired, err := certs.NewCAAt("expired", w.clock.Add(-2*time.Hour), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		kp, err := newCA(t, time.Hour).Sign(certs.Options{CommonName: "not-a-ca", Validity: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		stuffed = append(append(append(stuffed, expired.CertPEM...), kp.CertPEM...), inForce...)
		for _, n := range []string{"m", "v"} {
			if n == "m" {
				cur, _ := w.client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "clusterip-policy", metav1.GetOptions{})
				for i := range cur.Webhooks {
					cur.Webhooks[i].ClientConfig.CABundle = stuffed
				}
				_, err = w.client.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(ctx, cur, metav1.UpdateOptions{})
			} else {
				cur, _ := w.client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "clusterip-policy", metav1.GetOptions{})
				for i := range cur.Webhooks {
					cur.Webhooks[i].ClientConfig.CABundle = stuffed
				}
				_, err = w.client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(ctx, cur, metav1.UpdateOptions{})
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		for _, n := range []string{w.k.o.Secret, w.k.o.CASecret} {
			if err := w.client.CoreV1().Secrets("clusterip-policy").Delete(ctx, n, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		w.pass()
		got := w.trusted()
		if len(got) > maxBundle {
			t.Errorf("caBundle of %d CAs, more than the bound %d", len(got), maxBundle)
		}
		for _, c := range got {
			if !c.IsCA || !w.clock.Before(c.NotAfter) {
				t.Errorf("the caBundle kept %q (CA %v, until %s)", c.Subject.CommonName, c.IsCA, c.NotAfter)
			}
		}
		w.requireVerifies("after the deletion", oldLeaf)
	})
	t.Run("the serving Secret alone deleted: reissued at once by the CA in force", func(t *testing.T) {
		w := newWorld(t, testOptions())
		w.pass()
		_, oldCA := w.served()
		if err := w.client.CoreV1().Secrets("clusterip-policy").Delete(ctx, w.k.o.Secret, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		w.pass()
		if _, ca := w.served(); !ca.Equal(oldCA) {
			t.Fatal("a new CA for a deleted serving Secret")
		}
		w.requireTrusted("right after the serving Secret was deleted")
	})
	t.Run("a CA Secret whose key does not match is replaced", func(t *testing.T) {
		w := newWorld(t, testOptions())
		w.pass()
		sec := w.secret(w.k.o.CASecret)
		other := newCA(t, time.Hour)
		sec.Data[KeyCAKey] = other.KeyPEM
		if _, err := w.client.CoreV1().Secrets("clusterip-policy").Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		w.pass()
		if got := len(w.trusted()); got != 2 {
			t.Errorf("caBundle of %d CAs, want the new one beside the one still served", got)
		}
		w.requireTrusted("after the CA key was damaged")
	})
	t.Run("a damaged serving Secret is reissued", func(t *testing.T) {
		w := newWorld(t, testOptions())
		w.pass()
		sec := w.secret(w.k.o.Secret)
		sec.Data[KeyTLSKey] = newCA(t, time.Hour).KeyPEM
		if _, err := w.client.CoreV1().Secrets("clusterip-policy").Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		w.pass()
		w.requireTrusted("after the serving key was damaged")
	})
	t.Run("a certificate of a foreign CA written into the serving Secret: replaced at once, its CA never trusted", func(t *testing.T) {
		w := newWorld(t, testOptions())
		w.pass()
		foreign := newCA(t, time.Hour)
		kp, err := foreign.Sign(certs.Options{CommonName: "impostor", DNSNames: []string{"clusterip-policy-webhook.clusterip-policy.svc"}, Validity: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		sec := w.secret(w.k.o.Secret)
		sec.Data[KeyTLSCert], sec.Data[KeyTLSKey], sec.Data[KeyCACert] = kp.CertPEM, kp.KeyPEM, append(foreign.CertPEM, sec.Data[KeyCACert]...)
		if _, err := w.client.CoreV1().Secrets("clusterip-policy").Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		w.pass() // no settle: the impostor's CA is in no caBundle
		for _, c := range w.trusted() {
			if c.Equal(foreign.Cert) {
				t.Fatal("the foreign CA written into the serving Secret reached the caBundle")
			}
		}
		w.requireTrusted("right after the impostor was replaced")
	})
	t.Run("a Secret of another type is refused, naming the fix", func(t *testing.T) {
		w := newWorld(t, testOptions())
		if _, err := w.client.CoreV1().Secrets("clusterip-policy").Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: w.k.o.CASecret, Namespace: "clusterip-policy"}, Type: corev1.SecretTypeDockerConfigJson,
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		w.watched()
		_, err := w.k.pass(ctx, &w.st)
		if err == nil || !strings.Contains(err.Error(), "--ca-secret") {
			t.Errorf("err = %v, want one naming --ca-secret", err)
		}
	})
	t.Run("configurations not yet applied: the certificate is issued, the bundle follows", func(t *testing.T) {
		w := &world{t: t, client: fake.NewClientset(), clock: time.Now()}
		w.k = newKeeper(t, w.client, testOptions())
		w.k.now = func() time.Time { return w.clock }
		w.pass()
		w.served()
		m, v := configurations()
		_, _ = w.client.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, m, metav1.CreateOptions{})
		_, _ = w.client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, v, metav1.CreateOptions{})
		w.pass()
		w.requireTrusted("after the configurations were applied")
	})
	t.Run("an update conflict is retried on a fresh read", func(t *testing.T) {
		w := newWorld(t, testOptions())
		conflicts := 0
		w.client.PrependReactor("update", "validatingwebhookconfigurations", func(k8stesting.Action) (bool, runtime.Object, error) {
			if conflicts == 0 {
				conflicts++
				return true, nil, apierrors.NewConflict(admissionregistrationv1.Resource("validatingwebhookconfigurations"), "clusterip-policy", errors.New("modified meanwhile"))
			}
			return false, nil, nil
		})
		w.pass()
		if conflicts != 1 {
			t.Fatal("the reactor saw no update")
		}
		w.requireTrusted("after a conflict")
	})
}

func TestOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		name       string
		edit       func(*Options)
		certDirSet bool
		want       string
	}{
		{"valid", func(*Options) {}, false, ""},
		{"file ignores the rest", func(o *Options) { o.Source = SourceFile; o.Validity = 0 }, true, ""},
		{"unknown source", func(o *Options) { o.Source = "selfSigned" }, false, `--certificate-source "selfSigned" is not a certificate source; use managed`},
		{"--cert-dir with managed", func(*Options) {}, true, "--cert-dir and --certificate-source=managed exclude each other"},
		{"one Secret for both", func(o *Options) { o.CASecret = o.Secret }, false, "the CA's key must not be in the Secret every replica reads"},
		{"bad Secret name", func(o *Options) { o.Secret = "Bad_Name" }, false, `--cert-secret "Bad_Name" is not a Secret name`},
		{"bad namespace", func(o *Options) { o.Namespace = "" }, false, "--cert-namespace"},
		{"bad SAN", func(o *Options) { o.ExtraSANs = []string{"not a name"} }, false, `--cert-extra-san "not a name" is neither`},
		{"validity too short", func(o *Options) { o.Validity = time.Second }, false, "--cert-validity 1s is outside 10s-"},
		{"certificate outlives the CA", func(o *Options) { o.Validity = 4 * time.Hour }, false, "--cert-validity 4h0m0s is longer than --ca-validity 3h0m0s"},
		{"settle too long", func(o *Options) { o.Settle = time.Hour }, false, "--ca-bundle-settle 1h0m0s is outside 0-5m0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := testOptions()
			tc.edit(&o)
			err := o.Validate(tc.certDirSet)
			if tc.want == "" {
				if err != nil {
					t.Errorf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

// An upgrade from the chart that rendered its own certificate (a CA Helm
// generated, in the serving Secret and every caBundle; no CA Secret): the
// chart keeps that Secret and caBundle through the upgrade, and the leader
// takes them over without a moment where what is served is not trusted.
func TestTakesOverTheCertificateThePreviousChartRendered(t *testing.T) {
	o := testOptions()
	helmCA, err := certs.NewCA("clusterip-policy-ca", 10*365*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	kp, err := helmCA.Sign(certs.Options{CommonName: "clusterip-policy-webhook.clusterip-policy.svc",
		DNSNames: certs.ServiceDNSNames(o.Service, o.Namespace), IPs: []net.IP{net.ParseIP("127.0.0.1")}, Validity: 10 * 365 * 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	m, v := configurations()
	m.Webhooks[0].ClientConfig.CABundle = helmCA.CertPEM
	for i := range v.Webhooks {
		v.Webhooks[i].ClientConfig.CABundle = helmCA.CertPEM
	}
	chartSecret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: o.Secret, Namespace: o.Namespace,
			Labels:      map[string]string{"app.kubernetes.io/managed-by": "Helm", "helm.sh/chart": "clusterip-policy-0.0.9"},
			Annotations: map[string]string{"helm.sh/resource-policy": "keep", "meta.helm.sh/release-name": "clusterip-policy"}},
		Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{KeyCACert: helmCA.CertPEM, KeyTLSCert: kp.CertPEM, KeyTLSKey: kp.KeyPEM},
	}
	w := &world{t: t, client: fake.NewClientset(m, v, chartSecret), clock: time.Now()}
	w.k = newKeeper(t, w.client, o)
	w.k.now = func() time.Time { return w.clock }
	w.requireTrusted("before the leader's first pass")

	next := w.pass()
	trusted := w.trusted()
	if len(trusted) != 2 || !trusted[1].Equal(helmCA.Cert) {
		t.Fatalf("after the first pass the caBundle holds %s, want a new CA and the chart's", subjects(trusted))
	}
	if _, ca := w.served(); !ca.Equal(helmCA.Cert) {
		t.Fatal("the replicas were given a certificate of the new CA before the bundle settled")
	}
	w.requireTrusted("the bundle with both CAs just written")
	w.clock = next
	w.pass()
	_, ca := w.served()
	if !ca.Equal(trusted[0]) {
		t.Fatal("the serving certificate did not move to the leader's CA once the bundle settled")
	}
	w.requireTrusted("after the switch to the leader's CA")
	sec := w.secret(o.Secret)
	if sec.Labels["app.kubernetes.io/managed-by"] != "clusterip-policy" {
		t.Errorf("the taken-over Secret's managed-by is %q, want clusterip-policy (the chart stops rendering it on that label)", sec.Labels["app.kubernetes.io/managed-by"])
	}
	if sec.Annotations["helm.sh/resource-policy"] != "keep" {
		t.Error("the leader dropped helm.sh/resource-policy: keep, so the next helm upgrade would delete the Secret")
	}
}
