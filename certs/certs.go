// Package certs creates the certificate authority and the serving certificate
// the webhook presents to kube-apiservers. The same code serves the `certs`
// command (self-signed deployments), and the local end-to-end harness, so the
// certificates the tests trust are made exactly as operators make theirs.
package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// File names inside a certificate directory. tls.crt and tls.key are what
// controller-runtime's webhook server reads from --cert-dir and what a
// kubernetes.io/tls Secret holds; ca.crt is the caBundle of the webhook
// configurations.
const (
	CACertFile = "ca.crt"
	CAKeyFile  = "ca.key"
	CertFile   = "tls.crt"
	KeyFile    = "tls.key"
)

// CA is a certificate authority able to sign serving and client certificates.
type CA struct {
	Cert    *x509.Certificate
	Key     *ecdsa.PrivateKey
	CertPEM []byte
	KeyPEM  []byte
}

// KeyPair is a signed certificate with its private key, both PEM-encoded.
type KeyPair struct {
	CertPEM []byte
	KeyPEM  []byte
}

// NewCA creates a self-signed CA valid for validity from now.
func NewCA(commonName string, validity time.Duration) (*CA, error) {
	return NewCAAt(commonName, time.Now(), validity)
}

// CANamePrefix begins the common name of every CA clusterip-policy makes
// ("clusterip-policy-ca@UNIX-TIME..."): the leader keeps such CAs first
// when it must choose which trusted CAs to keep.
const CANamePrefix = "clusterip-policy-ca@"

// Backdate is how long before its issue a certificate made here starts to
// be valid: an apiserver whose clock runs behind the issuer's must accept
// a certificate issued a moment ago. An hour, as cert-manager's
// cert-controller backdates; a minute failed every review after a renewal
// on an apiserver a minute and a half behind.
const Backdate = time.Hour

// NewCAAt creates a self-signed CA valid for validity from now (a clock
// of the caller's; valid from Backdate before it).
func NewCAAt(commonName string, now time.Time, validity time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-Backdate),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("sign CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse CA certificate: %w", err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, CertPEM: encodeCert(der), KeyPEM: keyPEM}, nil
}

// LoadCA reads ca.crt and ca.key from dir, so that a rotation can re-sign a
// serving certificate without changing the caBundle the apiservers trust.
func LoadCA(dir string) (*CA, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, CACertFile))
	if err != nil {
		return nil, fmt.Errorf("read CA certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, CAKeyFile))
	if err != nil {
		return nil, fmt.Errorf("read CA key: %w", err)
	}
	return ParseCA(certPEM, keyPEM, filepath.Join(dir, CACertFile), filepath.Join(dir, CAKeyFile))
}

// ParseCA parses a PEM CA certificate and its PEM EC key (as NewCA writes
// them); certName and keyName name where they came from, for the errors.
// The key must be the certificate's: a CA whose key does not match would
// sign certificates nobody can verify.
func ParseCA(certPEM, keyPEM []byte, certName, keyName string) (*CA, error) {
	cb, _ := pem.Decode(certPEM)
	if cb == nil {
		return nil, fmt.Errorf("%s holds no PEM certificate", certName)
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", certName, err)
	}
	if !cert.BasicConstraintsValid || !cert.IsCA {
		return nil, fmt.Errorf("%s (%s) is not a CA certificate", certName, cert.Subject)
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil {
		return nil, fmt.Errorf("%s holds no PEM key", keyName)
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", keyName, err)
	}
	if pub, ok := cert.PublicKey.(*ecdsa.PublicKey); !ok || !pub.Equal(&key.PublicKey) {
		return nil, fmt.Errorf("%s is not the key of the CA certificate %s (%s)", keyName, certName, cert.Subject)
	}
	return &CA{Cert: cert, Key: key, CertPEM: certPEM, KeyPEM: keyPEM}, nil
}

// Options describe a leaf certificate.
type Options struct {
	CommonName   string
	Organization []string // for client certificates: Kubernetes reads groups from O
	DNSNames     []string
	IPs          []net.IP
	Validity     time.Duration
	Client       bool // client authentication instead of server authentication
	// Now is when the certificate is issued (valid from Backdate before);
	// zero: time.Now().
	Now time.Time
}

// Sign issues a leaf certificate from the CA.
func (ca *CA) Sign(o Options) (*KeyPair, error) {
	if o.CommonName == "" {
		return nil, errors.New("certificate needs a common name")
	}
	if o.Validity <= 0 {
		return nil, fmt.Errorf("certificate validity %s must be positive", o.Validity)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate key: %w", err)
	}
	usage := x509.ExtKeyUsageServerAuth
	if o.Client {
		usage = x509.ExtKeyUsageClientAuth
	}
	now := o.Now
	if now.IsZero() {
		now = time.Now()
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: o.CommonName, Organization: o.Organization},
		NotBefore:    now.Add(-Backdate),
		NotAfter:     now.Add(o.Validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		DNSNames:     o.DNSNames,
		IPAddresses:  o.IPs,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("sign certificate for %q: %w", o.CommonName, err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	return &KeyPair{CertPEM: encodeCert(der), KeyPEM: keyPEM}, nil
}

// ServiceDNSNames are the names an apiserver may use to reach a webhook
// behind the Service name in namespace ns.
func ServiceDNSNames(name, ns string) []string {
	return []string{
		name,
		name + "." + ns,
		name + "." + ns + ".svc",
		name + "." + ns + ".svc.cluster.local",
	}
}

// WriteServing writes ca.crt, ca.key, tls.crt and tls.key into dir. The leaf
// files are replaced atomically (write then rename), so a server that reloads
// them on change never reads half a file.
func WriteServing(dir string, ca *CA, kp *KeyPair) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	files := []struct {
		name string
		data []byte
		mode os.FileMode
	}{
		{CACertFile, ca.CertPEM, 0o644},
		{CAKeyFile, ca.KeyPEM, 0o600},
		{KeyFile, kp.KeyPEM, 0o600},
		{CertFile, kp.CertPEM, 0o644},
	}
	for _, f := range files {
		if err := WriteFileAtomic(filepath.Join(dir, f.name), f.data, f.mode); err != nil {
			return err
		}
	}
	return nil
}

// WriteFileAtomic writes data to a temporary file beside path and renames it
// over path.
func WriteFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // no-op after a successful rename
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		// crypto/rand does not fail on supported platforms; a fixed serial
		// would still yield a valid certificate.
		return big.NewInt(time.Now().UnixNano())
	}
	return n
}

func encodeCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}
