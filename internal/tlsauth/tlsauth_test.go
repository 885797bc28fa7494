package tlsauth

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"clusterip-policy/internal/logging"
	"clusterip-policy/test/fixtures"

	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"clusterip-policy/certs"
)

func newTestCA(t *testing.T, name string, validity time.Duration) *certs.CA {
	t.Helper()
	ca, err := certs.NewCA(name, validity)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func writeTestFile(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := certs.WriteFileAtomic(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestClientCAFileRefusesWhatIsNotACABundle(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, "client-ca", time.Hour)
	other := newTestCA(t, "other-ca", time.Hour)
	leaf, err := ca.Sign(certs.Options{CommonName: "kube-apiserver", Validity: time.Hour, Client: true})
	if err != nil {
		t.Fatal(err)
	}
	expired := newTestCA(t, "old-ca", time.Nanosecond) // NotAfter is now: expired by the time it is checked
	tests := []struct {
		name, data, want string
	}{
		{"empty", "", "holds no PEM certificate; it should hold the CA certificate"},
		{"not PEM", "hello\n", "holds no PEM certificate"},
		{"the CA's key", string(ca.CertPEM) + string(ca.KeyPEM), "PEM block 2 is a EC PRIVATE KEY; the file must hold only CA certificates: mount ca.crt, never the CA's key"},
		{"a leaf", string(leaf.CertPEM), "certificate 1 (CN=kube-apiserver) is not a CA certificate"},
		{"an expired CA", string(expired.CertPEM), "certificate 1 (CN=old-ca) is valid only from"},
		{"trailing garbage", string(ca.CertPEM) + "oops", "text after certificate 1 is not PEM"},
		{"another block type", "-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n", `PEM block 1 is a "CERTIFICATE REQUEST", not a CERTIFICATE`},
		{"too large", strings.Repeat("x", maxClientCAFileBytes+1), "is larger than 1048576 bytes"},
	}
	fixtures.Eventually(t, "old-ca past its NotAfter", 10*time.Second, func() bool { return time.Now().After(expired.Cert.NotAfter) })
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := writeTestFile(t, dir, strings.ReplaceAll(tt.name, " ", "-")+".crt", []byte(tt.data))
			_, err := ParseBundle(p, time.Now())
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), p) {
				t.Fatalf("got %v, want an error naming %s and %q", err, p, tt.want)
			}
		})
	}
	if _, err := ParseBundle(filepath.Join(dir, "missing.crt"), time.Now()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: got %v", err)
	}
	b, err := ParseBundle(writeTestFile(t, dir, "two.crt", append(append([]byte{}, ca.CertPEM...), other.CertPEM...)), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(b.certs) != 2 || !strings.Contains(b.subject, "CN=client-ca (until ") || !strings.Contains(b.subject, "CN=other-ca (until ") || len(b.digest) != 12 {
		t.Fatalf("bundle of two CAs: %d certs, subject %q, digest %q", len(b.certs), b.subject, b.digest)
	}
	var many []byte
	for range maxLoggedCAs + 3 {
		many = append(many, newTestCA(t, "ca", time.Hour).CertPEM...)
	}
	b, err = ParseBundle(writeTestFile(t, dir, "many.crt", many), time.Now())
	if err != nil || len(b.certs) != maxLoggedCAs+3 || strings.Count(b.subject, "CN=ca (until ") != maxLoggedCAs || !strings.HasSuffix(b.subject, " and 3 more") {
		t.Fatalf("bundle of %d CAs: %v, subject %q", maxLoggedCAs+3, err, b.subject)
	}
}

type tlsTestServer struct {
	addr   string
	server webhook.Server
	ca     *certs.CA // serving CA
}

func startTLSTestServer(t *testing.T, cas *ClientCAs) *tlsTestServer {
	t.Helper()
	dir := t.TempDir()
	ca := newTestCA(t, "serving-ca", time.Hour)
	kp, err := ca.Sign(certs.Options{CommonName: "webhook", IPs: []net.IP{net.ParseIP("127.0.0.1")}, Validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := certs.WriteServing(dir, ca, kp); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	srv := webhook.NewServer(webhook.Options{Host: "127.0.0.1", Port: port, CertDir: dir, TLSOpts: Options(cas)})
	srv.Register("/ok", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.Proto)
	}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server: %v", err)
		}
	})
	s := &tlsTestServer{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), server: srv, ca: ca}
	fixtures.EventuallyNil(t, "the test server listening on "+s.addr, 30*time.Second, func() error {
		c, err := net.DialTimeout("tcp", s.addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err
	})
	return s
}

// get does one GET /ok over a new connection and returns the protocol the
// handler saw.
func (s *tlsTestServer) get(cfg *tls.Config) (string, error) {
	pool := x509.NewCertPool()
	pool.AddCert(s.ca.Cert)
	cfg.RootCAs = pool
	tr := &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	resp, err := hc.Get("https://" + s.addr + "/ok")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// handshake runs the TLS handshake alone and, for TLS 1.3 where the client
// finishes before the server has checked its certificate, reads once so the
// server's verdict arrives.
func (s *tlsTestServer) handshake(cfg *tls.Config) error {
	pool := x509.NewCertPool()
	pool.AddCert(s.ca.Cert)
	cfg.RootCAs = pool
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", s.addr, cfg)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(conn, "GET /ok HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		return err
	}
	_, err = conn.Read(make([]byte, 1))
	return err
}

// presenting always sends pair, whatever CAs the server names as
// acceptable, as client-go does; Go's default would send nothing when the
// server does not name the certificate's issuer.
func presenting(pair tls.Certificate, v uint16) *tls.Config {
	return &tls.Config{MinVersion: v, MaxVersion: v, GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &pair, nil }}
}

func clientCert(t *testing.T, ca *certs.CA) tls.Certificate {
	t.Helper()
	kp, err := ca.Sign(certs.Options{CommonName: "kube-apiserver", Validity: time.Hour, Client: true})
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return pair
}

func TestAdmissionPortSpeaksTLS12OrNewerAndHTTP1Only(t *testing.T) {
	s := startTLSTestServer(t, nil)
	proto, err := s.get(&tls.Config{})
	if err != nil || proto != "HTTP/1.1" {
		t.Fatalf("a client offering h2 and http/1.1 got %q, %v; want HTTP/1.1", proto, err)
	}
	if err := s.handshake(&tls.Config{MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11}); err == nil || !strings.Contains(err.Error(), "protocol version") {
		t.Fatalf("a TLS 1.1 client got %v; want a protocol version alert", err)
	}
	if err := s.handshake(&tls.Config{MinVersion: tls.VersionTLS12, MaxVersion: tls.VersionTLS12}); err != nil {
		t.Fatalf("a TLS 1.2 client: %v", err)
	}
	// TLS 1.2: AEAD suites only; Go's default would also take AES-CBC-SHA.
	for _, cs := range tls.CipherSuites() {
		if !slices.Contains(cs.SupportedVersions, tls.VersionTLS12) {
			continue
		}
		err := s.handshake(&tls.Config{MinVersion: tls.VersionTLS12, MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{cs.ID}})
		aead := strings.Contains(cs.Name, "_GCM_") || strings.Contains(cs.Name, "_CHACHA20_POLY1305")
		switch {
		case aead && strings.Contains(cs.Name, "ECDSA") && err != nil: // the test server's key is ECDSA
			t.Errorf("TLS 1.2 with %s: %v", cs.Name, err)
		case !aead && (err == nil || !strings.Contains(err.Error(), "handshake failure")):
			t.Errorf("TLS 1.2 with %s: %v; want a handshake failure", cs.Name, err)
		}
	}
	// Without --client-ca-file any client is served, as before, and a
	// client certificate offered anyway is not asked for.
	if err := s.handshake(&tls.Config{}); err != nil {
		t.Fatalf("a client without a certificate: %v", err)
	}
	if proto, err := s.get(presenting(clientCert(t, newTestCA(t, "any", time.Hour)), tls.VersionTLS13)); err != nil || proto != "HTTP/1.1" {
		t.Fatalf("a client with a certificate: %q, %v", proto, err)
	}
}

func TestAdmissionPortRequiresAClientCertificateFromTheClientCA(t *testing.T) {
	dir := t.TempDir()
	clientCA := newTestCA(t, "apiserver-client-ca", time.Hour)
	other := newTestCA(t, "someone-else", time.Hour)
	caFile := writeTestFile(t, dir, "client-ca.crt", clientCA.CertPEM)
	var logBuf bytes.Buffer
	cas, err := NewClientCAs(caFile, logging.New(&logBuf))
	if err != nil {
		t.Fatal(err)
	}
	s := startTLSTestServer(t, cas)
	good, foreign := clientCert(t, clientCA), clientCert(t, other)

	// The alert for a missing certificate: TLS 1.3 has certificate_required,
	// TLS 1.2 only handshake_failure.
	for _, tt := range []struct {
		name   string
		v      uint16
		noCert string
	}{
		{"TLS 1.2", tls.VersionTLS12, "remote error: tls: handshake failure"},
		{"TLS 1.3", tls.VersionTLS13, "remote error: tls: certificate required"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := s.handshake(&tls.Config{MinVersion: tt.v, MaxVersion: tt.v}); err == nil || err.Error() != tt.noCert {
				t.Errorf("no client certificate: got %v; want %q", err, tt.noCert)
			}
			if err := s.handshake(presenting(foreign, tt.v)); err == nil || err.Error() != "remote error: tls: unknown certificate authority" {
				t.Errorf("a certificate from another CA: got %v; want unknown certificate authority", err)
			}
			proto, err := s.get(presenting(good, tt.v))
			if err != nil || proto != "HTTP/1.1" {
				t.Errorf("a certificate from the client CA: got %q, %v", proto, err)
			}
		})
	}

	// A replaced file takes effect for new connections once reloaded.
	writeTestFile(t, dir, "client-ca.crt", other.CertPEM)
	if changed, err := cas.reload(time.Now()); err != nil || !changed {
		t.Fatalf("reload: changed %v, %v", changed, err)
	}
	if _, err := s.get(presenting(foreign, tls.VersionTLS13)); err != nil {
		t.Errorf("after the switch, a certificate from the new CA: %v", err)
	}
	if err := s.handshake(presenting(good, tls.VersionTLS13)); err == nil || err.Error() != "remote error: tls: unknown certificate authority" {
		t.Errorf("after the switch, a certificate from the old CA: got %v; want unknown certificate authority", err)
	}
	// A broken file is refused and the last good bundle stays.
	writeTestFile(t, dir, "client-ca.crt", []byte("oops"))
	if _, err := cas.reload(time.Now()); err == nil {
		t.Fatal("reload of a broken file succeeded")
	}
	if _, err := s.get(presenting(foreign, tls.VersionTLS13)); err != nil {
		t.Errorf("after a refused reload, a certificate from the CA in force: %v", err)
	}
}

func TestClientCAWatchLogsAChangeAndABadFileOnce(t *testing.T) {
	dir := t.TempDir()
	a, b := newTestCA(t, "ca-a", time.Hour), newTestCA(t, "ca-b", time.Hour)
	caFile := writeTestFile(t, dir, "ca.crt", a.CertPEM)
	var mu sync.Mutex
	var logBuf bytes.Buffer
	cas, err := NewClientCAs(caFile, logging.New(lockedWriter{&mu, &logBuf}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { cas.Watch(ctx, 5*time.Millisecond); close(done) }()
	waitLog := func(substr string, n int) {
		t.Helper()
		fixtures.EventuallyNil(t, fmt.Sprintf("%d of %q in the log", n, substr), 30*time.Second, func() error {
			mu.Lock()
			defer mu.Unlock()
			if got := strings.Count(logBuf.String(), substr); got < n {
				return fmt.Errorf("%d so far:\n%s", got, logBuf.String())
			}
			return nil
		})
	}
	opens := fixtures.Opens(t, caFile)
	writeTestFile(t, dir, "ca.crt", []byte("not a certificate"))
	waitLog("refused the client CA file", 1)
	reads := opens()
	fixtures.Eventually(t, "ten more re-reads of the same bad file", 30*time.Second, func() bool { return opens() >= reads+10 })
	writeTestFile(t, dir, "ca.crt", b.CertPEM)
	waitLog(`"msg":"client CA loaded"`, 1)
	cancel()
	<-done
	out := logBuf.String()
	if n := strings.Count(out, "refused the client CA file"); n != 1 {
		t.Errorf("bad file logged %d times, want once:\n%s", n, out)
	}
	if !strings.Contains(out, "CN=ca-b (until ") || cas.Pool().Equal(x509.NewCertPool()) {
		t.Errorf("new CA not in force or not logged:\n%s", out)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// controller-runtime's StartedChecker dials the admission port without a
// client certificate: once one is required, the server logs a handshake
// error at every readiness probe. ReadyChecker presents the in-memory
// probe certificate instead, and the server logs nothing.
func TestReadinessCheckCompletesTheHandshakeWhenClientCertificatesAreRequired(t *testing.T) {
	caFile := writeTestFile(t, t.TempDir(), "ca.crt", newTestCA(t, "ca", time.Hour).CertPEM)
	cas, err := NewClientCAs(caFile, logging.New(io.Discard))
	if err != nil {
		t.Fatal(err)
	}
	s := startTLSTestServer(t, cas)
	host, portStr, _ := net.SplitHostPort(s.addr)
	port, _ := strconv.Atoi(portStr)

	var stdlog bytes.Buffer
	var mu sync.Mutex
	log.SetOutput(lockedWriter{&mu, &stdlog})
	defer log.SetOutput(os.Stderr)
	const handshakeError = "client didn't provide a certificate"
	// The server logs a failed handshake after the client has gone, so
	// wait (bounded) for n such lines rather than sleeping a guess.
	handshakeErrors := func(n int) string {
		logged := func() string {
			mu.Lock()
			defer mu.Unlock()
			return stdlog.String()
		}
		_ = fixtures.Wait(30*time.Second, func() bool { return strings.Count(logged(), handshakeError) >= n })
		return logged()
	}

	if err := s.server.StartedChecker()(nil); err != nil {
		t.Fatalf("StartedChecker: %v", err)
	}
	if out := handshakeErrors(1); strings.Count(out, handshakeError) != 1 {
		t.Fatalf("StartedChecker: server log %q; want the handshake error this test pins", out)
	}
	for range 3 {
		if err := ReadyChecker(s.server, cas, host, port)(nil); err != nil {
			t.Fatalf("ReadyChecker: %v", err)
		}
	}
	// A second StartedChecker is the marker: once its line is logged, a
	// line from the ReadyChecker handshakes before it would have been too,
	// so "nothing logged" is not concluded before the server had its say.
	if err := s.server.StartedChecker()(nil); err != nil {
		t.Fatalf("StartedChecker: %v", err)
	}
	// startTLSTestServer's dial-and-close, to see the port open, is logged
	// as a handshake EOF whenever the server gets to it: not ours to count.
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(handshakeErrors(2)), "\n") {
		if !strings.HasSuffix(l, ": EOF") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 2 || strings.Count(strings.Join(lines, "\n"), handshakeError) != 2 {
		t.Fatalf("ReadyChecker: server log %q; want only the two StartedChecker handshake errors", lines)
	}
	// The probe's certificate opens the port only in this process: a
	// certificate the file's CA signed is still what the apiservers need,
	// and the readiness check of a stopped server fails.
	if err := ReadyChecker(s.server, cas, host, 1)(nil); err == nil || !strings.Contains(err.Error(), "webhook server is not reachable") {
		t.Fatalf("ReadyChecker on a closed port: %v", err)
	}
}

func TestARemovedClientCAIsNotResumedPast(t *testing.T) {
	dir := t.TempDir()
	oldCA, newCA := newTestCA(t, "old-ca", time.Hour), newTestCA(t, "new-ca", time.Hour)
	caFile := writeTestFile(t, dir, "ca.crt", oldCA.CertPEM)
	cas, err := NewClientCAs(caFile, logging.New(io.Discard))
	if err != nil {
		t.Fatal(err)
	}
	s := startTLSTestServer(t, cas)
	cache := tls.NewLRUClientSessionCache(8)
	oldCert := clientCert(t, oldCA)
	// request sends one request on a new connection that may resume a
	// session from cache, and reports whether it did.
	request := func() (resumed bool, err error) {
		cfg := presenting(oldCert, tls.VersionTLS13)
		cfg.ClientSessionCache = cache
		pool := x509.NewCertPool()
		pool.AddCert(s.ca.Cert)
		cfg.RootCAs = pool
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", s.addr, cfg)
		if err != nil {
			return false, err
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := io.WriteString(conn, "GET /ok HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			return false, err
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			return conn.ConnectionState().DidResume, err
		}
		resp.Body.Close()
		return conn.ConnectionState().DidResume, nil
	}
	if _, err := request(); err != nil {
		t.Fatalf("first connection, old CA in force: %v", err)
	}
	if resumed, err := request(); err != nil || !resumed {
		t.Fatalf("second connection, old CA in force: resumed %v, %v; want a resumed session (else this test proves nothing)", resumed, err)
	}
	writeTestFile(t, dir, "ca.crt", newCA.CertPEM)
	if _, err := cas.reload(time.Now()); err != nil {
		t.Fatal(err)
	}
	resumed, err := request()
	if err == nil || err.Error() != "remote error: tls: unknown certificate authority" {
		t.Fatalf("after the old CA was removed: resumed %v, %v; want unknown certificate authority", resumed, err)
	}
}
