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
	"time"

	"clusterip-policy/certs"
)

// Registry is Debian's docker-registry (the CNCF distribution server, the
// registry Docker Hub and most private registries run) on loopback, over
// plain HTTP (StartRegistry) or HTTPS (StartRegistryTLS), its storage in the
// test's directory. The image and the chart
// are pushed to it and installed from it, as users install from theirs.
type Registry struct {
	*Process
	Port int
	Dir  string // storage root
}

// RegistryBinary is docker-registry from $E2E_REGISTRY or the PATH.
func RegistryBinary() (string, error) {
	if p := os.Getenv("E2E_REGISTRY"); p != "" {
		return p, nil
	}
	if p, err := exec.LookPath("docker-registry"); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("docker-registry is missing: install it (`apt-get install docker-registry`; .ci/run does; do not enable its service) or set $E2E_REGISTRY")
}

// registryConfig listens on 127.0.0.1 only; deletes are allowed so a test
// can show what `helm uninstall` does not touch (the registry's content).
func registryConfig(port int, storage string, tlsDir string) string {
	tls := ""
	if tlsDir != "" {
		tls = fmt.Sprintf("  tls:\n    certificate: %s\n    key: %s\n", filepath.Join(tlsDir, certs.CertFile), filepath.Join(tlsDir, certs.KeyFile))
	}
	return fmt.Sprintf(`version: 0.1
log:
  level: info
  accesslog:
    disabled: false
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
http:
  addr: 127.0.0.1:%d
  headers:
    X-Content-Type-Options: [nosniff]
%s`, storage, port, tls)
}

// StartRegistry writes a configuration into dir, starts the registry and
// waits until GET /v2/ answers.
func StartRegistry(ctx context.Context, dir string, po ProcessOptions) (*Registry, error) {
	return startRegistry(ctx, dir, nil, po)
}

// StartRegistryTLS is StartRegistry serving HTTPS with a certificate for
// 127.0.0.1 from ca, as a registry a cluster pulls from does: clients that
// trust ca (SSL_CERT_FILE for skopeo and helm, a hosts.toml for containerd)
// use it without any insecure flag.
func StartRegistryTLS(ctx context.Context, dir string, ca *certs.CA, po ProcessOptions) (*Registry, error) {
	return startRegistry(ctx, dir, ca, po)
}

func startRegistry(ctx context.Context, dir string, ca *certs.CA, po ProcessOptions) (*Registry, error) {
	binary, err := RegistryBinary()
	if err != nil {
		return nil, err
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	storage := filepath.Join(dir, "registry")
	for _, d := range []string{storage, filepath.Join(dir, "logs")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	tlsDir, scheme, client := "", "http", &http.Client{Timeout: time.Second}
	if ca != nil {
		tlsDir, scheme = filepath.Join(dir, "registry-tls"), "https"
		kp, err := ca.Sign(certs.Options{CommonName: "127.0.0.1", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Validity: 24 * time.Hour})
		if err != nil {
			return nil, err
		}
		if err := certs.WriteServing(tlsDir, ca, kp); err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		pool.AddCert(ca.Cert)
		client.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	}
	cfg := filepath.Join(dir, "registry.yml")
	if err := os.WriteFile(cfg, []byte(registryConfig(port, storage, tlsDir)), 0o644); err != nil {
		return nil, err
	}
	p, err := StartProcess("registry", filepath.Join(dir, "logs", "registry.log"), []string{binary, "serve", cfg}, po)
	if err != nil {
		return nil, err
	}
	r := &Registry{Process: p, Port: port, Dir: storage}
	err = poll(ctx, "registry answering /v2/", 15*time.Second, 50*time.Millisecond, []*Process{p},
		getOK(client, scheme+"://"+r.Addr()+"/v2/"))
	if err != nil {
		p.Stop(5 * time.Second)
		return nil, err
	}
	return r, nil
}

// Addr is the registry's host:port, the prefix of its image references.
func (r *Registry) Addr() string { return hostPort(r.Port) }

// ManifestDigest asks the registry which digest repo:tag names now, as a
// container runtime resolving the tag would (HEAD with the OCI index and
// manifest media types accepted).
func (r *Registry) ManifestDigest(ctx context.Context, repo, tag string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, "http://"+r.Addr()+"/v2/"+repo+"/manifests/"+tag, nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Accept", "application/vnd.oci.image.index.v1+json, application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.list.v2+json, application/vnd.docker.distribution.manifest.v2+json")
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return "", err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("HEAD %s/%s:%s: %s", r.Addr(), repo, tag, resp.Status)
	}
	d := resp.Header.Get("Docker-Content-Digest")
	if d == "" {
		return "", fmt.Errorf("HEAD %s/%s:%s: no Docker-Content-Digest header", r.Addr(), repo, tag)
	}
	return d, nil
}
