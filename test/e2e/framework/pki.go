package framework

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"clusterip-policy/certs"
)

const certValidity = 7 * 24 * time.Hour

// PKI holds the cluster's certificates: one CA for the apiservers' serving
// certificates and every client certificate, and a service-account key pair.
// The webhooks have a CA of their own (see Webhook).
type PKI struct {
	Dir string
	CA  *certs.CA

	APIServerCert, APIServerKey string // files
	CAFile                      string
	SAPublicKey, SAPrivateKey   string
}

// NewPKI writes a fresh PKI into dir. The apiservers' serving certificate
// names 127.0.0.1 and the extra addresses given (a real node's pods dial the
// apiserver on its bridge address).
func NewPKI(dir string, extraIPs ...net.IP) (*PKI, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	ca, err := certs.NewCA("clusterip-policy-e2e-cluster-ca", certValidity)
	if err != nil {
		return nil, err
	}
	serving, err := ca.Sign(certs.Options{
		CommonName: "kube-apiserver",
		DNSNames:   []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		IPs:        append([]net.IP{net.ParseIP("127.0.0.1")}, extraIPs...),
		Validity:   certValidity,
	})
	if err != nil {
		return nil, err
	}
	p := &PKI{
		Dir:           dir,
		CA:            ca,
		CAFile:        filepath.Join(dir, "ca.crt"),
		APIServerCert: filepath.Join(dir, "apiserver.crt"),
		APIServerKey:  filepath.Join(dir, "apiserver.key"),
		SAPublicKey:   filepath.Join(dir, "sa.pub"),
		SAPrivateKey:  filepath.Join(dir, "sa.key"),
	}
	saPub, saKey, err := newSigningKey()
	if err != nil {
		return nil, err
	}
	for _, f := range []struct {
		path string
		data []byte
	}{
		{p.CAFile, ca.CertPEM},
		{filepath.Join(dir, "ca.key"), ca.KeyPEM},
		{p.APIServerCert, serving.CertPEM},
		{p.APIServerKey, serving.KeyPEM},
		{p.SAPublicKey, saPub},
		{p.SAPrivateKey, saKey},
	} {
		if err := certs.WriteFileAtomic(f.path, f.data, 0o600); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// ClientCert signs a client certificate: Kubernetes takes the user name from
// the common name and the groups from the organizations.
func (p *PKI) ClientCert(user string, groups ...string) (*certs.KeyPair, error) {
	return p.CA.Sign(certs.Options{CommonName: user, Organization: groups, Validity: certValidity, Client: true})
}

// newSigningKey makes the key pair the apiserver signs service-account
// tokens with (ES256).
func newSigningKey() (pub, priv []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate service-account key: %w", err)
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

// Identity is a user of the cluster, authenticated by a client certificate.
type Identity struct {
	User   string
	Groups []string
	Cert   *certs.KeyPair
}

// RESTConfig is a client configuration for server with this identity.
func (id *Identity) RESTConfig(server string, caPEM []byte) *rest.Config {
	return &rest.Config{
		Host: server,
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   caPEM,
			CertData: id.Cert.CertPEM,
			KeyData:  id.Cert.KeyPEM,
		},
		QPS:   200,
		Burst: 400,
	}
}

// WriteKubeconfig writes a kubeconfig with the certificates embedded, so the
// file can be copied elsewhere.
func (id *Identity) WriteKubeconfig(path, server string, caPEM []byte) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["e2e"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos[id.User] = &clientcmdapi.AuthInfo{ClientCertificateData: id.Cert.CertPEM, ClientKeyData: id.Cert.KeyPEM}
	cfg.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: id.User, Namespace: "default"}
	cfg.CurrentContext = "e2e"
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return fmt.Errorf("encode kubeconfig: %w", err)
	}
	return certs.WriteFileAtomic(path, data, 0o600)
}
