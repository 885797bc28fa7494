// Package servingcerts is the admission port's certificate with
// --certificate-source=managed: the elected replica (Keeper) creates and
// renews a CA and the serving certificate in two Secrets and writes the
// caBundle of every webhook of the webhook configurations; every replica
// (Source) serves the serving Secret read through the API. With
// --certificate-source=file the certificate is a mounted --cert-dir (cert-manager,
// a Secret of your own) and only the expiry gauge is this package's.
//
// A CA rotation never fails a review: the new CA joins the caBundle
// (old and new), and only once every configuration carries that bundle and
// --ca-bundle-settle has passed (the apiservers load a changed
// configuration from their own informer within milliseconds) does the
// leader write a serving certificate the new CA signed. A serving
// certificate renewed under the same CA changes no caBundle. docs/design.md
// ("Certificates") has the reasoning and why this is not
// open-policy-agent/cert-controller's rotator.
package servingcerts

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"clusterip-policy/certs"
	"clusterip-policy/internal/leader"
	"clusterip-policy/internal/names"
	"clusterip-policy/internal/poll"
	"clusterip-policy/internal/sharedinformers"
	"clusterip-policy/internal/webhookconfig"
)

// The --certificate-source values.
const (
	SourceFile    = "file"
	SourceManaged = "managed"
)

// FieldManager names the leader's writes (managedFields): the caBundle of
// the configurations and the two Secrets.
const FieldManager = "clusterip-policy-certificates"

// Options are the certificate flags.
type Options struct {
	Source    string
	Namespace string // of both Secrets
	Secret    string // the serving Secret every replica reads
	CASecret  string // the CA's key and the bundle; the leader alone reads it
	Service   string // the webhook Service: the certificate's DNS names
	ExtraSANs []string
	// Validity and CAValidity are the lifetimes of what the leader issues;
	// each is renewed after 2/3 of it.
	Validity, CAValidity time.Duration
	// Settle is how long a new caBundle must have been in every
	// configuration before the leader serves a certificate only it trusts.
	Settle time.Duration
	// Configurations are the configurations whose webhooks get the
	// caBundle, serve's one value (webhookconfig.Names).
	Configurations webhookconfig.Names
}

// Limits of the flags: lifetimes short enough for a test to see a
// renewal within a minute, long enough that a renewal is not a hot loop.
const (
	minValidity = 10 * time.Second
	maxValidity = 20 * 365 * 24 * time.Hour
	maxSettle   = 5 * time.Minute
)

// Managed reports whether the leader manages the certificates.
func (o Options) Managed() bool { return o.Source == SourceManaged }

// AddFlags declares the certificate flags (--cert-dir, which serve reads
// for the file source, is serve's), checked by Validate.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Source, "certificate-source", SourceFile, "Where the admission port's certificate comes from: file (--cert-dir; the default) or managed: the elected replica creates and renews a CA (--ca-secret, which only it reads) and the serving certificate (--cert-secret), and writes the caBundle of every webhook of the two webhook configurations; every replica serves the serving Secret read through the API (a watch of that Secret by name), not a mounted volume. A new CA joins the caBundle beside the old one and is served only after --ca-bundle-settle. Needs create on Secrets in --cert-namespace, get, list, watch and update on the two Secrets by name, and get and update on the two configurations (manifests/base/rbac.yaml); uses the Lease.")
	fs.StringVar(&o.Namespace, "cert-namespace", names.WebhookNamespace(), "With --certificate-source=managed: namespace of the two Secrets and of the webhook Service (default: $POD_NAMESPACE from the downward API).")
	fs.StringVar(&o.Secret, "cert-secret", "clusterip-policy-webhook-tls", "With --certificate-source=managed: the kubernetes.io/tls Secret every replica serves (tls.crt, tls.key; ca.crt is the caBundle in force). The leader creates it.")
	fs.StringVar(&o.CASecret, "ca-secret", "clusterip-policy-webhook-ca", "With --certificate-source=managed: the Secret holding the CA's key and the bundle of trusted CAs; only the leader reads it. The leader creates it; deleting it makes a new CA (rotated without a failed review).")
	fs.StringVar(&o.Service, "cert-service", "clusterip-policy-webhook", "With --certificate-source=managed: the webhook Service, whose DNS names (name, name.ns, name.ns.svc, name.ns.svc.cluster.local) the serving certificate carries.")
	fs.StringArrayVar(&o.ExtraSANs, "cert-extra-san", nil, "With --certificate-source=managed: one more DNS name or IP address for the serving certificate (repeatable), for a webhook registered by URL.")
	fs.DurationVar(&o.Validity, "cert-validity", 90*24*time.Hour, "With --certificate-source=managed: lifetime of the serving certificate; it is renewed after 2/3 of it (the caBundle does not change). 10s-20y, at most --ca-validity.")
	fs.DurationVar(&o.CAValidity, "ca-validity", 5*365*24*time.Hour, "With --certificate-source=managed: lifetime of the CA; it is rotated after 2/3 of it, the old CA staying in the caBundle until it expires. 10s-20y.")
	fs.DurationVar(&o.Settle, "ca-bundle-settle", 5*time.Second, "With --certificate-source=managed: how long a new caBundle must have been in every webhook configuration before the replicas serve a certificate of a new CA: the time your apiservers take to load a changed configuration, with a margin (docs/design.md has the figures). 0-5m.")
}

// Validate checks the flags, naming the flag, the value and the fix.
// certDirSet says whether --cert-dir was given on the command line.
func (o Options) Validate(certDirSet bool) error {
	switch o.Source {
	case SourceFile:
		return nil
	case SourceManaged:
	default:
		return fmt.Errorf("--certificate-source %q is not a certificate source; use managed (the webhook creates and renews its CA and certificate in a Secret) or file (--cert-dir, for cert-manager or a Secret of your own)", o.Source)
	}
	if certDirSet {
		return errors.New("--cert-dir and --certificate-source=managed exclude each other: managed serves the Secret named by --cert-secret, read through the API; drop --cert-dir, or use --certificate-source=file")
	}
	if errs := validation.IsDNS1123Label(o.Namespace); len(errs) > 0 {
		return fmt.Errorf("--cert-namespace %q is not a namespace name (%s); give the webhook's namespace (POD_NAMESPACE from the downward API)", o.Namespace, strings.Join(errs, "; "))
	}
	for flag, v := range map[string]string{"--cert-secret": o.Secret, "--ca-secret": o.CASecret} {
		if errs := validation.IsDNS1123Subdomain(v); len(errs) > 0 {
			return fmt.Errorf("%s %q is not a Secret name (%s); give a lowercase name such as clusterip-policy-webhook-tls", flag, v, strings.Join(errs, "; "))
		}
	}
	if o.Secret == o.CASecret {
		return fmt.Errorf("--cert-secret and --ca-secret are both %q; the CA's key must not be in the Secret every replica reads: give two names", o.Secret)
	}
	if errs := validation.IsDNS1123Label(o.Service); len(errs) > 0 {
		return fmt.Errorf("--cert-service %q is not a Service name (%s); give the webhook Service's name, such as clusterip-policy-webhook", o.Service, strings.Join(errs, "; "))
	}
	for _, san := range o.ExtraSANs {
		if net.ParseIP(san) == nil && len(validation.IsDNS1123Subdomain(san)) > 0 {
			return fmt.Errorf("--cert-extra-san %q is neither an IP address nor a DNS name", san)
		}
	}
	for flag, v := range map[string]time.Duration{"--cert-validity": o.Validity, "--ca-validity": o.CAValidity} {
		if v < minValidity || v > maxValidity {
			return fmt.Errorf("%s %s is outside %s-%s; the default is right for a cluster, a few minutes suit a test of renewal", flag, v, minValidity, maxValidity)
		}
	}
	if o.Validity > o.CAValidity {
		return fmt.Errorf("--cert-validity %s is longer than --ca-validity %s; a certificate cannot outlive its CA: shorten --cert-validity", o.Validity, o.CAValidity)
	}
	if o.Settle < 0 || o.Settle > maxSettle {
		return fmt.Errorf("--ca-bundle-settle %s is outside 0-%s; give the time your apiservers take to load a changed webhook configuration, with a margin (default 5s)", o.Settle, maxSettle)
	}
	return nil
}

// names are the DNS names and addresses the serving certificate carries.
func (o Options) names() ([]string, []net.IP) {
	dns := certs.ServiceDNSNames(o.Service, o.Namespace)
	var ips []net.IP
	for _, san := range o.ExtraSANs {
		if ip := net.ParseIP(san); ip != nil {
			ips = append(ips, ip)
		} else {
			dns = append(dns, san)
		}
	}
	return dns, ips
}

// Metrics are the certificates'.
type Metrics struct {
	loads    *prometheus.CounterVec // every replica: serving Secret loads
	renewals *prometheus.CounterVec // leader: certificates issued
	bundle   *prometheus.CounterVec // leader: caBundle writes
	passes   *prometheus.CounterVec // leader: passes by result
	failing  prometheus.Gauge       // leader: 1 while the last pass failed
}

// NewMetrics registers the metrics in reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		loads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "clusterip_policy_certificate_loads_total",
			Help: "Loads of the serving Secret by this replica with --certificate-source=managed (result: loaded, refused; a refused Secret leaves the last good certificate in force).",
		}, []string{"result"}),
		renewals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "clusterip_policy_certificate_issued_total",
			Help: "Certificates the leader issued with --certificate-source=managed (certificate: serving, ca).",
		}, []string{"certificate"}),
		bundle: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "clusterip_policy_certificate_cabundle_writes_total",
			Help: "Webhook configurations whose caBundle the leader wrote (result: updated, failed).",
		}, []string{"result"}),
		passes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "clusterip_policy_certificate_passes_total",
			Help: "The leader's passes over the certificates and caBundles (result: ok, failed).",
		}, []string{"result"}),
		failing: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "clusterip_policy_certificate_renewal_failing",
			Help: "1 on the leader while its last pass over the certificates and caBundles failed (it retries with backoff, at most every 30s); 0 otherwise and on other replicas.",
		}),
	}
	reg.MustRegister(m.loads, m.renewals, m.bundle, m.passes, m.failing)
	for _, r := range []string{"loaded", "refused"} {
		m.loads.WithLabelValues(r)
	}
	for _, c := range []string{"serving", "ca"} {
		m.renewals.WithLabelValues(c)
	}
	for _, r := range []string{"updated", "failed"} {
		m.bundle.WithLabelValues(r)
		m.passes.WithLabelValues(r)
	}
	m.passes.WithLabelValues("ok")
	return m
}

// Keeper is the leader's work: the CA, the serving certificate and the
// caBundles.
type Keeper struct {
	client kubernetes.Interface
	// served is every replica's watch of the serving Secret, which the
	// leader's passes follow too.
	served   *Source
	o        Options
	log      logr.Logger
	metrics  *Metrics
	now      func() time.Time
	dnsNames []string
	ips      []net.IP
	// configurations are the term's watch of the two configurations
	// (trustedNow reads their caBundles); set by watch, nil between terms.
	configurations *sharedinformers.WebhookConfigurations
}

// New keeps the certificates o names; served is this replica's Source of
// the serving Secret.
func New(client kubernetes.Interface, served *Source, o Options, log logr.Logger, m *Metrics) *Keeper {
	dns, ips := o.names()
	return &Keeper{client: client, served: served, o: o, log: log, metrics: m, now: time.Now, dnsNames: dns, ips: ips}
}

// Work keeps the certificates while this replica leads.
func (k *Keeper) Work() leader.Work {
	return leader.Term(k.log, "keeping the webhook's CA, serving certificate and caBundles",
		[]any{"secret", k.o.Namespace + "/" + k.o.Secret, "caSecret", k.o.Namespace + "/" + k.o.CASecret,
			"configurations", []string{k.o.Configurations.Mutating, k.o.Configurations.Validating}, "validity", k.o.Validity.String(), "caValidity", k.o.CAValidity.String()},
		k.lead, func() { k.metrics.failing.Set(0) })
}

// resync bounds how long the leader goes without a pass: a change it was
// not told of (a watch that lapsed) is repaired within it.
const resync = time.Minute

// firstList bounds the wait of a term's start for its informers' first
// list.
const firstList = 10 * time.Second

// maxBackoff bounds the retries of a failing pass.
const maxBackoff = 30 * time.Second

// term is what the leader knows within one term.
type term struct {
	// bundle is the digest of the caBundle last seen or written in every
	// configuration, since when this term knows it is there: the apiservers
	// trust it from settle later.
	bundle string
	since  time.Time
}

// lead passes whenever something it reads changes, when a certificate
// falls due, and at least every resync, until ctx (the term) ends. A burst
// of events (its own writes come back as events) is one pass: they come
// within kickGap.
func (k *Keeper) lead(ctx context.Context) {
	var st term
	loop := &poll.Loop{
		Pass: func(ctx context.Context) (time.Duration, error) {
			next, err := k.pass(ctx, &st)
			if due := time.Until(next); due > 0 || err != nil {
				return due, err
			}
			return -1, nil // fell due during the pass
		},
		Resync: resync, MinGap: kickGap, Backoff: time.Second, MaxBackoff: maxBackoff,
		Log: k.log, Failing: "the certificates or caBundles could not be kept; retrying",
		OnPass: func(err error) {
			if err != nil {
				k.metrics.passes.WithLabelValues("failed").Inc()
				k.metrics.failing.Set(1)
				return
			}
			k.metrics.passes.WithLabelValues("ok").Inc()
			k.metrics.failing.Set(0)
		},
	}
	stop := k.watch(ctx, loop.Kick)
	defer stop()
	loop.Run(ctx)
}

// kickGap is the shortest time between two passes that events started.
const kickGap = 50 * time.Millisecond

// watch calls kick on every change of the two Secrets and the
// configurations, until stop: the serving Secret from the replica's
// watch of it (Source), the CA Secret and the configurations from the
// term's informer factory (ctx carries it), which the other leader loops
// share. An informer that cannot be had (a bug of the wiring) is logged;
// the passes still run, every resync.
func (k *Keeper) watch(ctx context.Context, kick func()) (stop func()) {
	h := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { kick() },
		UpdateFunc: func(any, any) { kick() },
		DeleteFunc: func(any) { kick() },
	}
	type registered struct {
		informer cache.SharedIndexInformer
		reg      cache.ResourceEventHandlerRegistration
	}
	var regs []registered
	add := func(inf cache.SharedIndexInformer) {
		if reg, err := inf.AddEventHandler(h); err == nil {
			regs = append(regs, registered{inf, reg})
		}
	}
	add(k.served.informer)
	f, err := sharedinformers.FromContext(ctx)
	var caSecret cache.SharedIndexInformer
	if err == nil {
		caSecret, err = namedSecret(f, "certificates", k.o.Namespace, k.o.CASecret)
	}
	if err == nil {
		k.configurations, err = f.WebhookConfigurations("certificates")
	}
	if err != nil {
		k.log.Error(err, "cannot watch the CA Secret and the webhook configurations; passing every resync only", "resync", resync.String())
		return func() {}
	}
	add(caSecret)
	for _, inf := range k.configurations.Informers() {
		add(inf)
	}
	f.Start(ctx.Done())
	// The first pass reads the configurations only when the Secrets lost
	// track of what is trusted; a list that does not come within
	// firstList (RBAC, the apiserver away) fails that pass, which says so.
	sctx, cancel := context.WithTimeout(ctx, firstList)
	sharedinformers.WaitForSync(sctx, append(k.configurations.Informers(), caSecret)...)
	cancel()
	return func() {
		// The term's informers stop with the term; the replica's serving
		// Secret informer runs on, without the leader's handler.
		for _, r := range regs {
			_ = r.informer.RemoveEventHandler(r.reg)
		}
		k.configurations = nil
	}
}

// pass brings the CA, the caBundles and the serving certificate to what
// they should be at now, in that order, and returns when the next pass is
// due.
func (k *Keeper) pass(ctx context.Context, st *term) (time.Time, error) {
	now := k.now()
	cur, err := k.readServing(ctx)
	if err != nil {
		return now, err
	}
	// 1. The CA.
	tr, err := k.ensureCA(ctx, cur, now)
	if err != nil {
		return now, err
	}
	// 2. The caBundle of every webhook of the configurations.
	settled, err := k.injectAndSettle(ctx, st, tr.pem, now)
	if err != nil {
		return now, err
	}
	// 3. The serving certificate.
	return k.serve(ctx, cur, tr, settled, now)
}

// servingNow is the serving Secret as a pass read it.
type servingNow struct {
	secret *corev1.Secret // nil: there is none
	// leaf is what the replicas serve, ca the CA of its ca.crt that signed
	// it; nil when the Secret is gone or does not load (ca also when its
	// ca.crt does not name the signer).
	leaf, ca *x509.Certificate
}

// unknown reports that the serving Secret is gone or does not load, so the
// leader cannot tell what the replicas serve (each keeps its last good
// certificate until it loads a new one).
func (s servingNow) unknown() bool { return s.leaf == nil }

// readServing reads what the replicas serve now, and the CA that signed
// it: that CA stays in the caBundle until it expires, whatever happened
// to the CA Secret. A Secret that does not load is read as no certificate,
// which the pass replaces.
func (k *Keeper) readServing(ctx context.Context) (servingNow, error) {
	tlsSec, err := k.client.CoreV1().Secrets(k.o.Namespace).Get(ctx, k.o.Secret, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return servingNow{}, fmt.Errorf("read the serving Secret %s/%s: %w", k.o.Namespace, k.o.Secret, err)
	}
	if apierrors.IsNotFound(err) {
		return servingNow{}, nil
	}
	cur := servingNow{secret: tlsSec}
	if s, err := parseServing(tlsSec); err == nil {
		cur.leaf, cur.ca = s.leaf, s.ca
	} else {
		k.log.Info("the serving Secret does not load; issuing a new certificate", "secret", k.o.Namespace+"/"+k.o.Secret, "error", err.Error())
	}
	return cur, nil
}

// trust is what ensureCA leaves in force: the CA the leader signs with and
// the bundle of CAs to trust, that CA first.
type trust struct {
	ca     *certs.CA
	bundle []*x509.Certificate
	pem    []byte // bundle encoded: every caBundle and the serving Secret's ca.crt
}

// ensureCA brings the CA Secret to what it should be at now. A new CA is
// made when readCA gives a reason (no CA yet, it does not load, it falls
// due) and joins the bundle beside the CAs it replaces; without one, the
// bundle is rewritten only when it changed (a CA in it expired, or
// keptCAs adds one the Secret lost).
func (k *Keeper) ensureCA(ctx context.Context, cur servingNow, now time.Time) (trust, error) {
	caSec, err := k.client.CoreV1().Secrets(k.o.Namespace).Get(ctx, k.o.CASecret, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return trust{}, fmt.Errorf("read the CA Secret %s/%s: %w", k.o.Namespace, k.o.CASecret, err)
	}
	if apierrors.IsNotFound(err) {
		caSec = nil
	}
	ca, previous, reason := k.readCA(caSec, now)
	kept, err := k.keptCAs(cur, previous, now)
	if err != nil {
		return trust{}, err
	}
	previous = append(previous, kept...)
	if reason != "" {
		next, err := certs.NewCAAt(fmt.Sprintf("%s%d-%s", certs.CANamePrefix, now.Unix(), rand.String(5)), now, k.o.CAValidity)
		if err != nil {
			return trust{}, err
		}
		if ca != nil {
			previous = append([]*x509.Certificate{ca.Cert}, previous...)
		}
		bundle := mergeBundle(next.Cert, previous, now)
		if err := k.writeCA(ctx, caSec, next, bundle); err != nil {
			return trust{}, err
		}
		k.metrics.renewals.WithLabelValues("ca").Inc()
		k.log.Info("new CA; the caBundle trusts it beside the CAs it replaces, and the serving certificate moves to it once the apiservers have the bundle", "reason", reason,
			"ca", next.Cert.Subject.CommonName, "notAfter", next.Cert.NotAfter.UTC().Format(time.RFC3339), "bundle", subjects(bundle))
		ca, previous = next, bundle
	}
	bundle := mergeBundle(ca.Cert, previous, now)
	bundlePEM := encodeBundle(bundle)
	if caSec != nil && reason == "" && !bytes.Equal(caSec.Data[KeyCABundle], bundlePEM) {
		// A CA in the bundle expired and is dropped, or the CA of the served
		// certificate was missing from it (the CA Secret was replaced).
		if err := k.writeCA(ctx, caSec, ca, bundle); err != nil {
			return trust{}, err
		}
		k.log.Info("updated the bundle of trusted CAs", "bundle", subjects(bundle))
	}
	return trust{ca: ca, bundle: bundle, pem: bundlePEM}, nil
}

// keptCAs are the CAs the configurations trust now that the bundle must
// go on trusting beyond previous, the CA Secret's. When the CA Secret lost
// the CA of what is served (deleted, damaged), that CA is kept; when what
// is served is unknown (both Secrets deleted), every CA the configurations
// trust now: as the CAs a rotation replaces are kept (until they expire,
// at most maxBundle). A CA that someone wrote into the serving Secret's
// ca.crt is never added to the caBundle on that Secret's word: only what
// the configurations already trust is kept.
func (k *Keeper) keptCAs(cur servingNow, previous []*x509.Certificate, now time.Time) ([]*x509.Certificate, error) {
	lost := cur.ca != nil && !slices.ContainsFunc(previous, cur.ca.Equal)
	if !lost && !cur.unknown() {
		return nil, nil
	}
	trusted, err := k.trustedNow()
	if err != nil {
		return nil, err
	}
	var kept []*x509.Certificate
	for _, c := range trusted {
		if (cur.unknown() || c.Equal(cur.ca)) && c.IsCA && now.Before(c.NotAfter) && !slices.ContainsFunc(previous, c.Equal) && !slices.ContainsFunc(kept, c.Equal) {
			kept = append(kept, c)
		}
	}
	// Within the bound (maxBundle), ours before any other a hand
	// wrote there, the newest first: a bundle stuffed by hand must not
	// push out the CA of what the replicas serve.
	slices.SortStableFunc(kept, func(a, b *x509.Certificate) int {
		if ao, bo := strings.HasPrefix(a.Subject.CommonName, certs.CANamePrefix), strings.HasPrefix(b.Subject.CommonName, certs.CANamePrefix); ao != bo {
			if ao {
				return -1
			}
			return 1
		}
		return b.NotBefore.Compare(a.NotBefore)
	})
	return kept, nil
}

// injectAndSettle writes bundlePEM into every webhook of the
// configurations and returns when the apiservers trust it: --ca-bundle-settle
// after this term first saw that bundle there. A bundle that changed,
// by this pass or by a hand, starts the wait again.
func (k *Keeper) injectAndSettle(ctx context.Context, st *term, bundlePEM []byte, now time.Time) (time.Time, error) {
	changed, err := k.inject(ctx, bundlePEM)
	if err != nil {
		return time.Time{}, err
	}
	digest := digestOf(bundlePEM)
	if changed || st.bundle != digest {
		st.bundle, st.since = digest, now
	}
	return st.since.Add(k.o.Settle), nil
}

// serve issues the serving certificate when servingReason says one is
// due, but not before settled while the apiservers may not trust its CA
// yet: while the replicas serve what an older CA of the bundle signed (a
// rotation), or may (the serving Secret is gone), they keep serving it, so
// no review meets a certificate the apiservers refuse. With none due it
// keeps the serving Secret's ca.crt equal to the bundle. It returns when
// the next pass is due: the CA's renewal, the expiry of an older CA of the
// bundle, or the serving certificate's renewal.
func (k *Keeper) serve(ctx context.Context, cur servingNow, tr trust, settled, now time.Time) (time.Time, error) {
	next := renewAt(tr.ca.Cert)
	for _, c := range tr.bundle[1:] {
		next = earliest(next, c.NotAfter) // dropped from the bundle then
	}
	leaf := cur.leaf
	if why := servingReason(leaf, tr.ca.Cert, k.dnsNames, k.ips, now); why != "" {
		if leaf != nil && leaf.CheckSignatureFrom(tr.ca.Cert) != nil && issuerIn(leaf, tr.bundle) != nil && now.Before(settled) {
			// Replicas serve leaf; the apiservers may not trust ca yet.
			k.log.V(1).Info("waiting for the apiservers to load the caBundle before serving a certificate of the new CA", "until", settled.UTC().Format(time.RFC3339Nano))
			return earliest(next, settled), nil
		}
		if cur.unknown() && len(tr.bundle) > 1 && now.Before(settled) {
			// Replicas may serve what an older CA of the bundle signed,
			// and the bundle changed a moment ago: the apiservers may not
			// trust ca yet, and the replicas would load a certificate
			// they refuse. (A first install has no older CA to wait
			// for; a bundle that has not changed has settled.)
			k.log.Info("the serving Secret is gone; the replicas serve their last certificate until the apiservers have loaded the caBundle with the new CA", "until", settled.UTC().Format(time.RFC3339Nano), "bundle", subjects(tr.bundle))
			return earliest(next, settled), nil
		}
		kp, signed, err := k.issue(tr.ca, now)
		if err != nil {
			return now, err
		}
		if err := k.writeServing(ctx, cur.secret, kp, tr.pem); err != nil {
			return now, err
		}
		k.metrics.renewals.WithLabelValues("serving").Inc()
		k.log.Info("issued the serving certificate", "reason", why, "serial", signed.SerialNumber.Text(16),
			"notAfter", signed.NotAfter.UTC().Format(time.RFC3339), "ca", tr.ca.Cert.Subject.CommonName, "dnsNames", k.dnsNames, "ips", k.ips)
		leaf = signed
	} else if !bytes.Equal(cur.secret.Data[KeyCACert], tr.pem) {
		if err := k.writeServing(ctx, cur.secret, nil, tr.pem); err != nil {
			return now, err
		}
	}
	return earliest(next, renewAt(leaf)), nil
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])[:16]
}

// trustedNow is every CA the caBundles of the configurations hold, as the
// term's watch of them last saw.
func (k *Keeper) trustedNow() ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	add := func(b []byte) {
		if certs, err := parseCerts(b, "caBundle"); err == nil {
			out = append(out, certs...)
		}
	}
	if k.configurations == nil {
		return nil, errors.New("the webhook configurations are not watched in this term, so the caBundles they trust cannot be read; the next pass tries again")
	}
	m, err := k.configurations.Mutating()
	switch {
	case err == nil:
		for _, h := range m.Webhooks {
			add(h.ClientConfig.CABundle)
		}
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("read MutatingWebhookConfiguration %s: %w", k.o.Configurations.Mutating, err)
	}
	v, err := k.configurations.Validating()
	switch {
	case err == nil:
		for _, h := range v.Webhooks {
			add(h.ClientConfig.CABundle)
		}
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("read ValidatingWebhookConfiguration %s: %w", k.o.Configurations.Validating, err)
	}
	return out, nil
}

// readCA reads the CA Secret: the signing CA, the other CAs of its bundle,
// and why a new CA is needed ("" if none is).
func (k *Keeper) readCA(sec *corev1.Secret, now time.Time) (*certs.CA, []*x509.Certificate, string) {
	if sec == nil {
		return nil, nil, "no CA yet"
	}
	var previous []*x509.Certificate
	if b, err := parseCerts(sec.Data[KeyCABundle], KeyCABundle); err == nil {
		previous = b
	}
	ca, err := certs.ParseCA(sec.Data[KeyCACert], sec.Data[KeyCAKey], "the CA Secret's "+KeyCACert, "the CA Secret's "+KeyCAKey)
	if err != nil {
		return nil, previous, fmt.Sprintf("the CA Secret %s/%s does not load (%v)", k.o.Namespace, k.o.CASecret, err)
	}
	return ca, previous, caReason(ca.Cert, now)
}

// writeCA creates or updates the CA Secret (an update carries the
// resourceVersion read, so two leaders cannot both rotate).
func (k *Keeper) writeCA(ctx context.Context, old *corev1.Secret, ca *certs.CA, bundle []*x509.Certificate) error {
	data := map[string][]byte{KeyCACert: ca.CertPEM, KeyCAKey: ca.KeyPEM, KeyCABundle: encodeBundle(bundle)}
	return k.writeSecret(ctx, old, k.o.CASecret, corev1.SecretTypeOpaque, data)
}

// writeServing creates or updates the serving Secret: a new pair (kp) and
// the caBundle, or, with kp nil, the caBundle alone.
func (k *Keeper) writeServing(ctx context.Context, old *corev1.Secret, kp *certs.KeyPair, bundlePEM []byte) error {
	data := map[string][]byte{KeyCACert: bundlePEM}
	if kp != nil {
		data[KeyTLSCert], data[KeyTLSKey] = kp.CertPEM, kp.KeyPEM
	} else {
		data[KeyTLSCert], data[KeyTLSKey] = old.Data[KeyTLSCert], old.Data[KeyTLSKey]
	}
	return k.writeSecret(ctx, old, k.o.Secret, corev1.SecretTypeTLS, data)
}

func (k *Keeper) writeSecret(ctx context.Context, old *corev1.Secret, name string, typ corev1.SecretType, data map[string][]byte) error {
	api := k.client.CoreV1().Secrets(k.o.Namespace)
	opts := metav1.CreateOptions{FieldManager: FieldManager}
	if old == nil {
		_, err := api.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: k.o.Namespace, Labels: maps.Clone(ownLabels)},
			Type:       typ, Data: data,
		}, opts)
		if err != nil {
			return fmt.Errorf("create the Secret %s/%s: %w", k.o.Namespace, name, err)
		}
		return nil
	}
	if old.Type != typ {
		return fmt.Errorf("the Secret %s/%s is of type %s, not %s: it was not made by the webhook; delete it (the leader makes it again) or give another name (--cert-secret, --ca-secret)", k.o.Namespace, name, old.Type, typ)
	}
	sec := old.DeepCopy()
	sec.Data = data
	// A Secret someone else made (the serving Secret the previous chart
	// rendered, which the chart keeps through the upgrade) is ours from
	// the first write: the chart stops rendering it once the label says so.
	if sec.Labels == nil {
		sec.Labels = map[string]string{}
	}
	maps.Copy(sec.Labels, ownLabels)
	if _, err := api.Update(ctx, sec, metav1.UpdateOptions{FieldManager: FieldManager}); err != nil {
		return fmt.Errorf("update the Secret %s/%s: %w", k.o.Namespace, name, err)
	}
	return nil
}

// ownLabels mark the Secrets the leader writes. The chart reads
// app.kubernetes.io/managed-by: a serving Secret it rendered itself
// (managed-by Helm) it keeps rendering, one of ours it leaves alone
// (charts/clusterip-policy, "clusterip-policy.inheritedServingSecret").
var ownLabels = map[string]string{
	"app.kubernetes.io/name":       "clusterip-policy-webhook",
	"app.kubernetes.io/managed-by": "clusterip-policy",
}

// issue signs a serving certificate with ca, valid for --cert-validity but
// never beyond the CA.
func (k *Keeper) issue(ca *certs.CA, now time.Time) (*certs.KeyPair, *x509.Certificate, error) {
	validity := min(k.o.Validity, ca.Cert.NotAfter.Sub(now))
	kp, err := ca.Sign(certs.Options{
		CommonName: k.o.Service + "." + k.o.Namespace + ".svc",
		DNSNames:   k.dnsNames,
		IPs:        k.ips,
		Validity:   validity,
		Now:        now,
	})
	if err != nil {
		return nil, nil, err
	}
	leafs, err := parseCerts(kp.CertPEM, "the new certificate")
	if err != nil {
		return nil, nil, err
	}
	return kp, leafs[0], nil
}

// inject sets the caBundle of every webhook of both configurations to
// bundle and reports whether it changed any. It writes nothing else
// (webhookconfig.Update: the update carries the object as read, a
// conflict is retried on a fresh read). A configuration that does not
// exist yet (an install applies it after the Deployment) is skipped:
// nobody calls the webhook through it, and the watch brings the leader
// back when it appears.
func (k *Keeper) inject(ctx context.Context, bundle []byte) (bool, error) {
	setBundle := func(_ *metav1.ObjectMeta, entries []webhookconfig.Entry) (bool, error) {
		changed := false
		for _, e := range entries {
			if !bytes.Equal(e.ClientConfig.CABundle, bundle) {
				e.ClientConfig.CABundle = bytes.Clone(bundle)
				changed = true
			}
		}
		return changed, nil
	}
	mc := webhookconfig.Mutating(k.client, k.o.Configurations).EveryWebhook().WrittenBy(FieldManager)
	vc := webhookconfig.Validating(k.client, k.o.Configurations).EveryWebhook().WrittenBy(FieldManager)
	if w := k.configurations; w != nil {
		// The term's watch first: a pass whose bundles are in place
		// already (most, every resync) makes no request.
		mc, vc = mc.ReadFrom(w.Mutating), vc.ReadFrom(w.Validating)
	}
	m, err := webhookconfig.Update(ctx, mc, setBundle)
	err = k.countInject(m, err)
	if err != nil {
		return false, err
	}
	v, err := webhookconfig.Update(ctx, vc, setBundle)
	err = k.countInject(v, err)
	if m || v {
		k.log.Info("wrote the caBundle of the webhook configurations", "mutating", m, "validating", v, "digest", digestOf(bundle))
	}
	return m || v, err
}

// countInject counts one configuration's write and returns its error, but
// none for a configuration that does not exist (yet).
func (k *Keeper) countInject(changed bool, err error) error {
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		k.metrics.bundle.WithLabelValues("failed").Inc()
		return fmt.Errorf("write the caBundle: %w", err)
	case changed:
		k.metrics.bundle.WithLabelValues("updated").Inc()
	}
	return nil
}
