package servingcerts

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"clusterip-policy/internal/sharedinformers"
)

// Source is what every replica serves with --certificate-source=managed:
// the certificate of the serving Secret, read through the API (a watch of
// that one Secret, by name) and handed to each TLS handshake from memory.
// Not a mounted volume: the kubelet refreshes a mounted Secret up to a
// minute or more after it changes (its sync period plus its cache TTL),
// and a replica that serves a certificate the caBundle no longer trusts
// for that long fails every review it gets. Through the watch a replica
// serves the new certificate milliseconds after the leader writes it.
//
// A Secret that cannot be loaded (a key that does not match, a damaged
// PEM) is refused and the last good certificate stays, as with the
// policy; a deleted Secret keeps the last good one too (the leader writes
// it again). Until a first good one arrives every handshake fails, so
// /readyz (its TLS check) fails and the replica gets no traffic.
type Source struct {
	informer        cache.SharedIndexInformer // the replica's factory's, of this Secret alone
	namespace, name string
	log             logr.Logger
	metrics         *Metrics
	cur             atomic.Pointer[served]
}

// served is a loaded serving Secret.
type served struct {
	cert            *tls.Certificate
	leaf, ca        *x509.Certificate // ca: the CA of ca.crt that signed leaf; nil if none
	resourceVersion string
}

// NewSource serves the Secret namespace/name, watched by the replica's
// informer factory f (its owner starts it).
func NewSource(f *sharedinformers.Factory, namespace, name string, log logr.Logger, m *Metrics) (*Source, error) {
	inf, err := namedSecret(f, "serving certificate", namespace, name)
	if err != nil {
		return nil, err
	}
	return &Source{informer: inf, namespace: namespace, name: name, log: log, metrics: m}, nil
}

// GetCertificate is the tls.Config hook: the certificate in force.
func (s *Source) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if c := s.cur.Load(); c != nil {
		return c.cert, nil
	}
	return nil, fmt.Errorf("no serving certificate yet: the Secret %s/%s has not been read, or holds none that loads; the elected replica writes it (--certificate-source=managed)", s.namespace, s.name)
}

// TLSOption sets GetCertificate on the admission port's tls.Config, so
// controller-runtime does not read --cert-dir.
func (s *Source) TLSOption() func(*tls.Config) {
	return func(cfg *tls.Config) { cfg.GetCertificate = s.GetCertificate }
}

// Served returns the certificate in force and the CA that signed it (nil,
// nil before the first load), for the expiry gauge.
func (s *Source) Served() (leaf, ca *x509.Certificate) {
	if c := s.cur.Load(); c != nil {
		return c.leaf, c.ca
	}
	return nil, nil
}

// Run loads the Secret as the factory's informer sees it, until ctx ends.
func (s *Source) Run(ctx context.Context) error {
	reg, err := s.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { s.load(obj) },
		UpdateFunc: func(_, obj any) { s.load(obj) },
		DeleteFunc: func(any) {
			s.log.Info("the serving Secret was deleted; serving the last certificate until the elected replica writes it again", "secret", s.namespace+"/"+s.name)
		},
	})
	if err != nil {
		return err
	}
	<-ctx.Done()
	return s.informer.RemoveEventHandler(reg)
}

// namedSecret is f's Secret informer of the one Secret namespace/name: a
// list and watch with a field selector on the name, which RBAC authorizes
// with resourceNames. A factory holds one Secret informer: the replica's
// is the serving Secret (Source, and the leader's kicks), a term's the CA
// Secret (the leader alone reads it).
func namedSecret(f *sharedinformers.Factory, by, namespace, name string) (cache.SharedIndexInformer, error) {
	return f.For(by, &corev1.Secret{}, sharedinformers.Named(namespace, name), func(c kubernetes.Interface, fl sharedinformers.Filter) cache.SharedIndexInformer {
		return coreinformers.NewFilteredSecretInformer(c, fl.Namespace, 0, cache.Indexers{}, fl.Tweak)
	})
}

func (s *Source) load(obj any) {
	sec, ok := obj.(*corev1.Secret)
	if !ok || sec.Name != s.name {
		return
	}
	if c := s.cur.Load(); c != nil && c.resourceVersion == sec.ResourceVersion {
		return
	}
	next, err := parseServing(sec)
	if err != nil {
		s.metrics.loads.WithLabelValues("refused").Inc()
		s.log.Error(err, "refused the serving Secret; the last good certificate stays in force", "secret", s.namespace+"/"+s.name, "resourceVersion", sec.ResourceVersion)
		return
	}
	prev := s.cur.Swap(next)
	s.metrics.loads.WithLabelValues("loaded").Inc()
	if prev == nil || !prev.leaf.Equal(next.leaf) {
		caName := ""
		if next.ca != nil {
			caName = next.ca.Subject.CommonName
		}
		s.log.Info("serving certificate loaded", "secret", s.namespace+"/"+s.name, "serial", next.leaf.SerialNumber.Text(16),
			"notAfter", next.leaf.NotAfter.UTC().Format(time.RFC3339), "ca", caName)
	}
}

// parseServing loads a serving Secret: tls.crt and tls.key must be a pair;
// ca.crt, if it parses, names the CA that signed the certificate.
func parseServing(sec *corev1.Secret) (*served, error) {
	if len(sec.Data[KeyTLSCert]) == 0 || len(sec.Data[KeyTLSKey]) == 0 {
		return nil, fmt.Errorf("the Secret has no %s or no %s", KeyTLSCert, KeyTLSKey)
	}
	if len(sec.Data[KeyTLSCert]) > maxPEMBytes || len(sec.Data[KeyTLSKey]) > maxPEMBytes {
		return nil, fmt.Errorf("%s or %s is larger than %d bytes", KeyTLSCert, KeyTLSKey, maxPEMBytes)
	}
	cert, err := tls.X509KeyPair(sec.Data[KeyTLSCert], sec.Data[KeyTLSKey])
	if err != nil {
		return nil, fmt.Errorf("%s and %s: %w", KeyTLSCert, KeyTLSKey, err)
	}
	out := &served{cert: &cert, leaf: cert.Leaf, resourceVersion: sec.ResourceVersion}
	if bundle, err := parseCerts(sec.Data[KeyCACert], KeyCACert); err == nil {
		out.ca = issuerIn(cert.Leaf, bundle)
	}
	return out, nil
}

// maxCertFileBytes bounds what FromDir reads of a file.
const maxCertFileBytes = 1 << 20

// FromDir returns the certificate in dir/tls.crt and the CA of
// dir/ca.crt that signed it (nil if there is no ca.crt, as with a
// Secret made by hand), for the expiry gauge with --cert-dir: the files
// controller-runtime serves, read at each scrape.
func FromDir(dir string) func() (leaf, ca *x509.Certificate) {
	read := func(name string) []*x509.Certificate {
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			return nil
		}
		defer f.Close()
		data, err := io.ReadAll(io.LimitReader(f, maxCertFileBytes))
		if err != nil {
			return nil
		}
		certs, err := parseCerts(data, name)
		if err != nil {
			return nil
		}
		return certs
	}
	return func() (*x509.Certificate, *x509.Certificate) {
		chain := read(KeyTLSCert)
		if len(chain) == 0 {
			return nil, nil
		}
		return chain[0], issuerIn(chain[0], append(chain[1:], read(KeyCACert)...))
	}
}

// expiry is the gauge clusterip_policy_certificate_expiry_seconds: seconds
// until the served certificate and the CA that signed it expire, computed
// at each scrape.
type expiry struct {
	desc   *prometheus.Desc
	served func() (leaf, ca *x509.Certificate)
	now    func() time.Time
}

func (e *expiry) Describe(ch chan<- *prometheus.Desc) { ch <- e.desc }

func (e *expiry) Collect(ch chan<- prometheus.Metric) {
	leaf, ca := e.served()
	now := e.now()
	if leaf != nil {
		ch <- prometheus.MustNewConstMetric(e.desc, prometheus.GaugeValue, leaf.NotAfter.Sub(now).Seconds(), "serving")
	}
	if ca != nil {
		ch <- prometheus.MustNewConstMetric(e.desc, prometheus.GaugeValue, ca.NotAfter.Sub(now).Seconds(), "ca")
	}
}

// RegisterExpiry registers the expiry gauge of what served returns.
func RegisterExpiry(reg prometheus.Registerer, served func() (leaf, ca *x509.Certificate)) {
	reg.MustRegister(&expiry{
		desc: prometheus.NewDesc("clusterip_policy_certificate_expiry_seconds",
			"Seconds until the certificate this replica serves on the admission port (certificate=\"serving\") and the CA that signed it (certificate=\"ca\", when the Secret's or --cert-dir's ca.crt holds it) expire; negative once expired.",
			[]string{"certificate"}, nil),
		served: served,
		now:    time.Now,
	})
}
