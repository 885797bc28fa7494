package framework

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	admissionv1 "k8s.io/api/admission/v1"

	"clusterip-policy/certs"
)

// WebhookOptions configure one webhook process.
type WebhookOptions struct {
	Name         string // also the log file name; default webhook
	Kubeconfig   string
	Policy       string   // policy file; the webhook re-reads it on change; empty: no --policy
	ServiceCIDRs []string // --service-cidr fallbacks
	ExtraArgs    []string
	// ManagedCerts runs the webhook with --certificate-source=managed: no
	// --cert-dir; the elected replica makes the CA and the certificate in
	// Secrets of namespace clusterip-policy (for 127.0.0.1 and localhost)
	// and writes the caBundle itself. CA stays nil.
	ManagedCerts bool
}

// Webhook is a running `clusterip-policy serve` with its own serving certificate.
type Webhook struct {
	*Process
	Port        int // HTTPS port of the admission endpoints
	HealthAddr  string
	MetricsAddr string
	CertDir     string
	CA          *certs.CA
	Client      *Identity // presented by Review; nil: no client certificate
}

// StartWebhook writes a serving certificate for 127.0.0.1 signed by ca into
// dir/<name>-certs, starts the webhook and waits until its /readyz is ok,
// which it is only once its view of the cluster has synced and the policy
// has loaded.
func StartWebhook(ctx context.Context, binary, dir string, ca *certs.CA, o WebhookOptions, po ProcessOptions) (*Webhook, error) {
	w, err := StartWebhookUnready(binary, dir, ca, o, po)
	if err != nil {
		return nil, err
	}
	if err := w.WaitReady(ctx, 60*time.Second); err != nil {
		w.Stop(5 * time.Second)
		return nil, err
	}
	return w, nil
}

// StartWebhookUnready starts the webhook like StartWebhook but returns
// without waiting for it to get ready.
func StartWebhookUnready(binary, dir string, ca *certs.CA, o WebhookOptions, po ProcessOptions) (*Webhook, error) {
	if o.Name == "" {
		o.Name = "webhook"
	}
	w := &Webhook{CertDir: filepath.Join(dir, o.Name+"-certs"), CA: ca}
	if o.ManagedCerts {
		w.CertDir, w.CA = "", nil
	} else if _, err := w.RotateCert(); err != nil {
		return nil, err
	}
	ports := make([]int, 3)
	for i := range ports {
		p, err := FreePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	w.Port, w.HealthAddr, w.MetricsAddr = ports[0], hostPort(ports[1]), hostPort(ports[2])
	argv := []string{binary, "serve",
		"--kubeconfig=" + o.Kubeconfig,
		"--bind-address=127.0.0.1",
		"--port=" + strconv.Itoa(w.Port),
		"--health-probe-bind-address=" + w.HealthAddr,
		"--metrics-bind-address=" + w.MetricsAddr,
		"--shutdown-delay=0s",
	}
	if o.ManagedCerts {
		argv = append(argv, "--certificate-source=managed", "--cert-namespace="+ManagedCertsNamespace, "--cert-extra-san=127.0.0.1", "--cert-extra-san=localhost")
	} else {
		argv = append(argv, "--cert-dir="+w.CertDir)
	}
	if o.Policy != "" { // empty: the policy comes from elsewhere (--policy-source=crd)
		argv = append(argv, "--policy="+o.Policy)
	}
	for _, c := range o.ServiceCIDRs {
		argv = append(argv, "--service-cidr="+c)
	}
	argv = append(argv, o.ExtraArgs...)
	p, err := StartProcess(o.Name, filepath.Join(dir, "logs", o.Name+".log"), argv, po)
	if err != nil {
		return nil, err
	}
	w.Process = p
	return w, nil
}

// ManagedCertsNamespace holds the Secrets of webhooks started with
// ManagedCerts (the namespace of the Lease and of manifests/base's Role).
const ManagedCertsNamespace = "clusterip-policy"

// Review posts an AdmissionReview to the webhook's path (MutatePath or
// ValidatePath) over a new TLS connection that trusts only the webhook CA,
// and returns the response.
func (w *Webhook) Review(ctx context.Context, path string, review *admissionv1.AdmissionReview) (*admissionv1.AdmissionResponse, error) {
	body, err := json.Marshal(review)
	if err != nil {
		return nil, err
	}
	hc, err := httpsClient(w.CA.CertPEM, w.Client)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+w.Addr()+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("POST %s: %s: %s", path, resp.Status, data)
	}
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("POST %s: %w: %s", path, err, data)
	}
	if out.Response == nil {
		return nil, fmt.Errorf("POST %s: no response in %s", path, data)
	}
	return out.Response, nil
}

// WaitReady polls /readyz until it answers 200.
func (w *Webhook) WaitReady(ctx context.Context, timeout time.Duration) error {
	hc := &http.Client{Timeout: 2 * time.Second}
	return poll(ctx, w.Name+" ready", timeout, 100*time.Millisecond, []*Process{w.Process}, getOK(hc, "http://"+w.HealthAddr+"/readyz"))
}

// Addr is the host:port of the admission endpoints.
func (w *Webhook) Addr() string { return hostPort(w.Port) }

// RotateCert replaces the serving certificate on disk by a new one from the
// same CA (so the caBundle stays valid) and returns its serial number.
func (w *Webhook) RotateCert() (*big.Int, error) {
	kp, err := w.CA.Sign(certs.Options{
		CommonName: "clusterip-policy-webhook",
		DNSNames:   []string{"localhost"},
		IPs:        []net.IP{net.ParseIP("127.0.0.1")},
		Validity:   certValidity,
	})
	if err != nil {
		return nil, err
	}
	if err := certs.WriteServing(w.CertDir, w.CA, kp); err != nil {
		return nil, err
	}
	block, _ := pem.Decode(kp.CertPEM)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, err
	}
	return cert.SerialNumber, nil
}

// ServedSerial connects to the webhook port and returns the serial number of
// the certificate it presents, verified against the CA.
func (w *Webhook) ServedSerial() (*big.Int, error) {
	pool := x509.NewCertPool()
	pool.AddCert(w.CA.Cert)
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", w.Addr(), &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber, nil
}

// Metrics returns the Prometheus text of /metrics.
func (w *Webhook) Metrics() (string, error) {
	resp, err := http.Get("http://" + w.MetricsAddr + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// Log returns the webhook's log so far (JSON lines on stderr).
func (w *Webhook) Log() (string, error) {
	b, err := os.ReadFile(w.LogPath)
	return string(b), err
}
