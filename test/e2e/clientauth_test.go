//go:build e2e

package e2e

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"clusterip-policy/certs"
	"clusterip-policy/test/e2e/framework"
	"clusterip-policy/test/fixtures"
)

// The apiserver authenticates to the webhook: its admission configuration
// gives both webhook admission plugins a kubeconfig with a client
// certificate, and the webhook runs with --client-ca-file. Requests through
// the apiservers are reviewed as before; anyone else calling the admission
// port directly is refused at the TLS handshake. Two apiservers and two
// webhook replicas behind the round-robin: every apiserver presents the
// certificate and every replica requires it (the harness waits until each
// apiserver has had a dry run reviewed).
func TestWebhookRequiresTheAPIServersClientCertificate(t *testing.T) {
	c := own(t, framework.Options{
		APIServers:        []framework.APIServerOptions{{ServiceClusterIPRange: "10.96.0.0/16"}, {ServiceClusterIPRange: "10.96.0.0/16"}},
		Policy:            sharedPolicy,
		Webhooks:          2,
		WebhookClientAuth: true,
	})
	ctx := testContext(t, 2*60e9)
	cs := c.Client(0)
	ns := namespace(t, c, "client-auth")
	w := c.Webhooks[0]
	t.Cleanup(func() { deleteServices(t, cs, "kube-system") })

	t.Run("each webhook says it requires client certificates, and its readiness probes cause no handshake errors", func(t *testing.T) {
		for _, w := range c.Webhooks {
			log, err := w.Log()
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(log, `"msg":"client certificates required on the admission port"`) || !strings.Contains(log, "CN=clusterip-policy-e2e-apiserver-client-ca (until ") {
				t.Errorf("%s: no start-up line naming the client CA", w.Name)
			}
			// The harness polled /readyz until ready, and each apiserver
			// has called the webhooks (registration waits for it):
			// neither may leave a failed handshake behind.
			if n := strings.Count(log, "TLS handshake error"); n != 0 {
				t.Errorf("%s: %d TLS handshake errors before any stranger called it:\n%s", w.Name, n, lastLines(log, 20))
			}
		}
	})

	t.Run("Service creates through either apiserver are reviewed: kube-dns gets 10.96.0.10, another Service asking for it is denied", func(t *testing.T) {
		mustCreate(t, ctx, cs, fixtures.Service("kube-system", "kube-dns", fixtures.WithClusterIP("10.96.0.10")))
		_, err := create(ctx, c.Client(1), fixtures.Service(ns, "grabs-dns-ip", fixtures.WithClusterIP("10.96.0.10")))
		requireDenied(t, err, mutating, `spec.clusterIP: Invalid value: "10.96.0.10"`, "is reserved for Service kube-system/kube-dns")
		stages := map[string]string{}
		for _, d := range decisionsFor(c, "kube-system", "kube-dns") {
			stages[d.Stage] = d.Decision
		}
		if stages["mutate"] != "allowed" || stages["validate"] != "allowed" {
			t.Errorf("audit lines for kube-system/kube-dns: %v; want mutate and validate allowed", stages)
		}
		var denied bool
		for _, d := range decisionsFor(c, ns, "grabs-dns-ip") {
			denied = denied || (d.Stage == "mutate" && d.Decision == "denied" && strings.Join(d.Rules, ",") == "reserved-for-other")
		}
		if !denied {
			t.Errorf("no audit line denying %s/grabs-dns-ip by reserved-for-other", ns)
		}
	})

	pool := x509.NewCertPool()
	pool.AddCert(w.CA.Cert)
	review, err := json.Marshal(serviceReview(t, fixtures.Service(ns, "direct", fixtures.WithClusterIP("10.96.0.10"))))
	if err != nil {
		t.Fatal(err)
	}
	// post sends the AdmissionReview over a new connection with cfg.
	post := func(cfg *tls.Config) (*http.Response, error) {
		cfg.RootCAs = pool
		tr := &http.Transport{TLSClientConfig: cfg}
		defer tr.CloseIdleConnections()
		hc := &http.Client{Transport: tr, Timeout: 5 * time.Second}
		return hc.Post("https://"+w.Addr()+framework.ValidatePath, "application/json", bytes.NewReader(review))
	}
	// handshake dials with cfg and reads once: under TLS 1.3 the client
	// finishes its handshake before the server has judged its
	// certificate, and the server's alert arrives on the first read.
	handshake := func(cfg *tls.Config) error {
		cfg.RootCAs = pool
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", w.Addr(), cfg)
		if err != nil {
			return err
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		_, err = conn.Read(make([]byte, 1))
		return err
	}
	// Send the certificate whatever CAs the server names as acceptable
	// (client-go does the same); Go's default would send none.
	presenting := func(pair tls.Certificate, version uint16) *tls.Config {
		return &tls.Config{MinVersion: version, MaxVersion: version, GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &pair, nil }}
	}

	t.Run("a direct client without a certificate is refused at the TLS handshake", func(t *testing.T) {
		resp, err := post(&tls.Config{})
		if resp != nil {
			resp.Body.Close()
			t.Fatalf("got HTTP %s; want no HTTP exchange at all", resp.Status)
		}
		if err == nil || !strings.HasSuffix(err.Error(), "remote error: tls: certificate required") {
			t.Fatalf("POST without a certificate: %v; want the server's certificate_required alert", err)
		}
		for _, tt := range []struct {
			version uint16
			want    string
		}{
			{tls.VersionTLS13, "remote error: tls: certificate required"},
			{tls.VersionTLS12, "remote error: tls: handshake failure"}, // TLS 1.2 has no certificate_required alert
		} {
			if err := handshake(&tls.Config{MinVersion: tt.version, MaxVersion: tt.version}); err == nil || err.Error() != tt.want {
				t.Errorf("%s handshake without a certificate: %v; want %q", tls.VersionName(tt.version), err, tt.want)
			}
		}
	})

	t.Run("a direct client with a certificate from another CA is refused at the TLS handshake", func(t *testing.T) {
		other, err := certs.NewCA("not-the-apiservers-ca", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		// The same name as the apiserver's certificate: only the issuer differs.
		kp, err := other.Sign(certs.Options{CommonName: c.ClientAuth.Client.User, Validity: time.Hour, Client: true})
		if err != nil {
			t.Fatal(err)
		}
		pair, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range []uint16{tls.VersionTLS13, tls.VersionTLS12} {
			if err := handshake(presenting(pair, v)); err == nil || err.Error() != "remote error: tls: unknown certificate authority" {
				t.Errorf("%s handshake with a foreign certificate: %v; want unknown certificate authority", tls.VersionName(v), err)
			}
		}
		resp, err := post(presenting(pair, tls.VersionTLS13))
		if resp != nil {
			resp.Body.Close()
			t.Fatalf("got HTTP %s; want no HTTP exchange at all", resp.Status)
		}
		if err == nil || !strings.HasSuffix(err.Error(), "remote error: tls: unknown certificate authority") {
			t.Fatalf("POST with a foreign certificate: %v", err)
		}
		// The refusals are logged as JSON lines like everything else.
		log, _ := w.Log()
		var refusals []string
		for _, line := range strings.Split(strings.TrimSpace(log), "\n") {
			if strings.HasPrefix(line, "### ") {
				continue // the harness's header: the command line and start time
			}
			var rec struct{ Msg, Line string }
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Errorf("webhook log line is not JSON: %s", line)
			} else if rec.Msg == "net/http" {
				refusals = append(refusals, rec.Line)
			}
		}
		all := strings.Join(refusals, "\n")
		if !strings.Contains(all, "TLS handshake error from 127.0.0.1:") || !strings.Contains(all, "tls: client didn't provide a certificate") || !strings.Contains(all, "certificate signed by unknown authority") {
			t.Errorf("the webhook log does not show the refused handshakes: %q", refusals)
		}
	})

	t.Run("a client with the apiservers' certificate gets the AdmissionReview answered", func(t *testing.T) {
		pair, err := tls.X509KeyPair(c.ClientAuth.Client.Cert.CertPEM, c.ClientAuth.Client.Cert.KeyPEM)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := post(presenting(pair, tls.VersionTLS12))
		if err != nil {
			t.Fatalf("POST with the apiservers' certificate over TLS 1.2: %v", err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Proto != "HTTP/1.1" || !strings.Contains(string(body), `"allowed":false`) || !strings.Contains(string(body), "is reserved for Service kube-system/kube-dns") {
			t.Fatalf("got %s %s: %s; want 200 over HTTP/1.1 with the reservation's denial", resp.Proto, resp.Status, body)
		}
		// The harness's own helper presents the same certificate.
		r, err := w.Review(ctx, framework.MutatePath, serviceReview(t, fixtures.Service(ns, "static-ok", fixtures.WithClusterIP("10.96.0.30"))))
		if err != nil || !r.Allowed {
			t.Fatalf("Review of a static-band IP: %+v, %v; want allowed", r, err)
		}
	})
}
