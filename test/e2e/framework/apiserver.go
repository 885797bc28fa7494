package framework

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"
)

// APIServerOptions configure one kube-apiserver.
type APIServerOptions struct {
	Name                  string // also the log file name; default kube-apiserver
	ServiceClusterIPRange string // --service-cluster-ip-range, for example 10.96.0.0/16
	// Hostname, when set, runs the apiserver in a UTS namespace of its own
	// with this host name. Apiservers on one host otherwise share one
	// identity lease (named from the host name) and fight over it.
	Hostname string
	// BindAddress is the address it listens on; 127.0.0.1 when empty. A real
	// node's pods reach the apiserver on its bridge address (node.go).
	BindAddress string
	ExtraArgs   []string
}

// APIServer is a running kube-apiserver.
type APIServer struct {
	*Process
	URL                   string
	ServiceClusterIPRange string
}

// StartAPIServer starts a kube-apiserver on etcdURL and waits until /readyz
// answers ok to admin.
func StartAPIServer(ctx context.Context, binary, dir string, pki *PKI, admin *Identity, etcdURL string, o APIServerOptions, po ProcessOptions) (*APIServer, error) {
	if o.Name == "" {
		o.Name = "kube-apiserver"
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	bind := o.BindAddress
	if bind == "" {
		bind = "127.0.0.1"
	}
	args := []string{
		"--bind-address=" + bind,
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		// The endpoint reconciler refuses a loopback advertise address, and
		// nothing here needs the kubernetes Endpoints.
		"--endpoint-reconciler-type=none",
		"--etcd-servers=" + etcdURL,
		"--service-cluster-ip-range=" + o.ServiceClusterIPRange,
		"--authorization-mode=RBAC",
		"--client-ca-file=" + pki.CAFile,
		"--tls-cert-file=" + pki.APIServerCert,
		"--tls-private-key-file=" + pki.APIServerKey,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + pki.SAPublicKey,
		"--service-account-signing-key-file=" + pki.SAPrivateKey,
		"--cert-dir=" + filepath.Join(dir, o.Name+"-certs"),
		"--profiling=false",
	}
	args = append(args, o.ExtraArgs...)
	argv := append([]string{binary}, args...)
	if o.Hostname != "" {
		unshare, err := exec.LookPath("unshare")
		if err != nil {
			return nil, fmt.Errorf("a second apiserver needs unshare(1) for its own UTS namespace: %w", err)
		}
		// unshare execs sh, which sets the host name and execs the
		// apiserver: one pid, one process group, killed as one. Without
		// root, a user namespace grants the right to a UTS namespace.
		ns := []string{unshare, "--uts"}
		if os.Geteuid() != 0 {
			ns = []string{unshare, "--user", "--map-root-user", "--uts"}
		}
		argv = append(append(ns, "--", "sh", "-c", `hostname "$0" && exec "$@"`, o.Hostname), argv...)
	}
	p, err := StartProcess(o.Name, filepath.Join(dir, "logs", o.Name+".log"), argv, po)
	if err != nil {
		return nil, err
	}
	a := &APIServer{Process: p, URL: "https://" + net.JoinHostPort(bind, strconv.Itoa(port)), ServiceClusterIPRange: o.ServiceClusterIPRange}
	hc, err := httpsClient(pki.CA.CertPEM, admin)
	if err != nil {
		p.Stop(5 * time.Second)
		return nil, err
	}
	err = poll(ctx, o.Name+" ready", 90*time.Second, 250*time.Millisecond, []*Process{p}, getOK(hc, a.URL+"/readyz"))
	if err != nil {
		p.Stop(5 * time.Second)
		return nil, err
	}
	return a, nil
}

// httpsClient trusts caPEM and presents id's certificate (when id is set).
func httpsClient(caPEM []byte, id *Identity) (*http.Client, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("no certificate in CA bundle")
	}
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if id != nil {
		pair, err := tls.X509KeyPair(id.Cert.CertPEM, id.Cert.KeyPEM)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}, nil
}
