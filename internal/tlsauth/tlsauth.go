// Package tlsauth is the admission port's TLS: the versions, suites and
// protocols it accepts, and, with --client-ca-file, the client certificates
// it requires (the CA bundle re-read when it changes), with a readiness
// check that completes the handshake as the apiservers do.
package tlsauth

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"clusterip-policy/certs"
	"clusterip-policy/internal/poll"
)

// maxClientCAFileBytes bounds what --client-ca-file may hold. A bundle of a
// few CAs is a few KiB; a path pointed at the wrong file (a log, /dev/zero)
// is refused rather than read whole.
const maxClientCAFileBytes = 1 << 20

// ReloadInterval is how often the client CA file is checked for
// changes: the interval at which controller-runtime's certwatcher polls the
// serving certificate too.
const ReloadInterval = 10 * time.Second

// clientCABundle is a parsed --client-ca-file.
type clientCABundle struct {
	pool    *x509.CertPool
	certs   []*x509.Certificate
	digest  string // first 12 hex digits of the file's SHA-256, for the logs
	subject string // "CN=a (until 2036-11-29), CN=b (until ...)" for the logs
}

// maxLoggedCAs bounds the CAs named in a log line; a bundle of 1 MiB may
// hold thousands.
const maxLoggedCAs = 5

// ParseBundle reads a PEM file of CA certificates. Everything in it
// must be a currently valid CA certificate: a private key means the
// operator mounted the wrong Secret key (the webhook must never hold the
// CA's key), and a leaf certificate would make that one certificate a
// trust anchor, so whoever holds its key could call the webhook.
func ParseBundle(path string, now time.Time) (*clientCABundle, error) {
	const fix = "; give the path of the CA certificate file, for a mounted Secret DIR/ca.crt"
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w%s", err, fix)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxClientCAFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w%s", err, fix)
	}
	if len(data) > maxClientCAFileBytes {
		return nil, fmt.Errorf("%s is larger than %d bytes; it should hold only the PEM certificates of the CA that signs the apiservers' client certificates", path, maxClientCAFileBytes)
	}
	b := &clientCABundle{pool: x509.NewCertPool()}
	var subjects []string
	rest := data
	for i := 1; ; i++ {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if strings.Contains(block.Type, "PRIVATE KEY") {
			return nil, fmt.Errorf("%s: PEM block %d is a %s; the file must hold only CA certificates: mount ca.crt, never the CA's key", path, i, block.Type)
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("%s: PEM block %d is a %q, not a CERTIFICATE; the file must hold only CA certificates", path, i, block.Type)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s: certificate %d: %w", path, i, err)
		}
		name := c.Subject.String()
		if !c.BasicConstraintsValid || !c.IsCA {
			return nil, fmt.Errorf("%s: certificate %d (%s) is not a CA certificate; give the CA that signs the apiservers' client certificates, not a client or serving certificate", path, i, name)
		}
		if now.After(c.NotAfter) || now.Before(c.NotBefore) {
			return nil, fmt.Errorf("%s: certificate %d (%s) is valid only from %s to %s; renew the client CA", path, i, name, c.NotBefore.UTC().Format(time.RFC3339), c.NotAfter.UTC().Format(time.RFC3339))
		}
		b.pool.AddCert(c)
		b.certs = append(b.certs, c)
		if len(subjects) < maxLoggedCAs {
			subjects = append(subjects, fmt.Sprintf("%s (until %s)", name, c.NotAfter.UTC().Format(time.DateOnly)))
		}
	}
	if len(b.certs) == 0 {
		return nil, fmt.Errorf("%s holds no PEM certificate; it should hold the CA certificate (-----BEGIN CERTIFICATE-----) that signs the apiservers' client certificates", path)
	}
	if len(bytes.TrimSpace(rest)) > 0 {
		return nil, fmt.Errorf("%s: text after certificate %d is not PEM; the file must hold only CA certificates", path, len(b.certs))
	}
	sum := sha256.Sum256(data)
	b.digest = hex.EncodeToString(sum[:])[:12]
	b.subject = strings.Join(subjects, ", ")
	if n := len(b.certs) - len(subjects); n > 0 {
		b.subject += fmt.Sprintf(" and %d more", n)
	}
	return b, nil
}

// ClientCAs is the CA bundle client certificates are verified against,
// re-read when --client-ca-file changes (a Secret or ConfigMap mounted as a
// directory changes by an atomic symlink swap, which polling sees). A file
// that fails to load is refused and logged; the last good bundle stays, as
// with the policy.
type ClientCAs struct {
	path  string
	log   logr.Logger
	probe *selfProbe
	cur   atomic.Pointer[clientCABundle]
}

// NewClientCAs loads path once; an error means the webhook must not start.
func NewClientCAs(path string, log logr.Logger) (*ClientCAs, error) {
	probe, err := newSelfProbe()
	if err != nil {
		return nil, err
	}
	s := &ClientCAs{path: path, log: log, probe: probe}
	b, err := s.parse(time.Now())
	if err != nil {
		return nil, err
	}
	s.cur.Store(b)
	return s, nil
}

// parse reads the file and adds the readiness probe's CA to its pool.
func (s *ClientCAs) parse(now time.Time) (*clientCABundle, error) {
	b, err := ParseBundle(s.path, now)
	if err != nil {
		return nil, err
	}
	b.pool.AddCert(s.probe.ca)
	return b, nil
}

// Pool is the CA pool in force.
func (s *ClientCAs) Pool() *x509.CertPool { return s.cur.Load().pool }

// reload re-reads the file and reports whether a new bundle took effect.
func (s *ClientCAs) reload(now time.Time) (bool, error) {
	b, err := s.parse(now)
	if err != nil {
		return false, err
	}
	if b.digest == s.cur.Load().digest {
		return false, nil
	}
	s.cur.Store(b)
	return true, nil
}

// Watch re-reads the file every interval until ctx ends. A bad file is
// logged once, not at every interval while it stays bad (poll.Reread).
func (s *ClientCAs) Watch(ctx context.Context, interval time.Duration) {
	changed := false
	poll.Reread(ctx, interval, func() (err error) {
		changed, err = s.reload(time.Now())
		return err
	}, func(err error) {
		cur := s.cur.Load()
		switch {
		case err != nil:
			s.log.Error(err, "refused the client CA file; the last good one stays in force", "path", s.path, "digest", cur.digest)
		case changed:
			s.log.Info("client CA loaded", "path", s.path, "digest", cur.digest, "cas", cur.subject)
		}
	})
}

// aeadSuitesTLS12 are the TLS 1.2 cipher suites the admission port accepts,
// for an ECDSA (gencerts, the cert-manager overlay) or an RSA serving key.
var aeadSuitesTLS12 = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
	tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
}

// Options configures the TLS of the admission port, on top of
// controller-runtime's server (which adds the reloading serving
// certificate):
//
//   - TLS 1.2 at least, and for TLS 1.2 only ECDHE with AES-GCM or
//     ChaCha20-Poly1305 (aeadSuitesTLS12). Go's defaults (Go 1.26) still
//     include ECDHE with AES-CBC-SHA; every client that speaks TLS 1.2 to a
//     webhook (Go's, in the apiserver) has the AEAD suites. TLS 1.3 suites
//     are all AEAD and not configurable.
//   - HTTP/1.1 only. controller-runtime's server offers h2 by ALPN unless
//     told otherwise; HTTP/2 brings the rapid-reset class of
//     denial-of-service bugs (CVE-2023-44487, CVE-2023-39325) and nothing
//     the apiserver needs: it calls webhooks behind a Service (and any URL
//     not on loopback) over HTTP/1.1 (k8s.io/apiserver/pkg/util/webhook,
//     hookClientConfig, kubernetes issue 75791).
//   - With cas: a client certificate is required and verified against the
//     CA bundle in force at each handshake, so a replaced CA file takes
//     effect for new connections without a restart.
func Options(cas *ClientCAs) []func(*tls.Config) {
	return []func(*tls.Config){func(cfg *tls.Config) {
		cfg.MinVersion = tls.VersionTLS12
		cfg.CipherSuites = aeadSuitesTLS12
		cfg.NextProtos = []string{"http/1.1"}
		if cas == nil {
			return
		}
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
		// controller-runtime sets cfg.GetCertificate after the options run;
		// the clone is taken per handshake, so it carries it.
		cfg.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
			c := cfg.Clone()
			c.GetConfigForClient = nil
			c.ClientCAs = cas.Pool()
			return c, nil
		}
	}}
}

// selfProbe lets /readyz check the admission port the way
// controller-runtime's StartedChecker does (a TLS handshake) once client
// certificates are required. StartedChecker presents none: under TLS 1.3
// it still passes, but the server logs "TLS handshake error ... client
// didn't provide a certificate" at every probe, and under TLS 1.2 it would
// fail. The probe's CA and key are made at start and exist only in this
// process's memory; nothing outside it can present a certificate they sign.
type selfProbe struct {
	ca   *x509.Certificate
	cert tls.Certificate
}

func newSelfProbe() (*selfProbe, error) {
	// As long as the process may run; a restart makes a new pair.
	const validity = 10 * 365 * 24 * time.Hour
	ca, err := certs.NewCA("clusterip-policy readiness probe (in memory)", validity)
	if err != nil {
		return nil, err
	}
	kp, err := ca.Sign(certs.Options{CommonName: "clusterip-policy-readiness-probe", Validity: validity, Client: true})
	if err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
	if err != nil {
		return nil, err
	}
	return &selfProbe{ca: ca.Cert, cert: cert}, nil
}

// checker completes a TLS handshake with the admission port at addr,
// presenting the probe's certificate.
func (p *selfProbe) checker(addr string) healthz.Checker {
	return func(*http.Request) error {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, &tls.Config{
			InsecureSkipVerify: true, // only whether it serves; the apiservers check the name
			MinVersion:         tls.VersionTLS12,
			Certificates:       []tls.Certificate{p.cert},
		})
		if err != nil {
			return fmt.Errorf("webhook server is not reachable: %w", err)
		}
		return conn.Close()
	}
}

// ReadyChecker is the "webhook" readiness check: controller-runtime's
// StartedChecker, or the probe above when client certificates are required.
func ReadyChecker(server webhook.Server, cas *ClientCAs, host string, port int) healthz.Checker {
	if cas == nil {
		return server.StartedChecker()
	}
	return cas.probe.checker(net.JoinHostPort(host, strconv.Itoa(port)))
}

// Digest is the first 12 hex digits of the bundle in force's SHA-256.
func (s *ClientCAs) Digest() string { return s.cur.Load().digest }

// Subject names the CAs of the bundle in force, for the logs.
func (s *ClientCAs) Subject() string { return s.cur.Load().subject }
