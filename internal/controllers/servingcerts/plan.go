package servingcerts

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"clusterip-policy/certs"
)

// Keys of the two Secrets. The serving Secret is a kubernetes.io/tls Secret
// (tls.crt, tls.key) whose ca.crt is the caBundle in force, as cert-manager
// writes it; the CA Secret holds the signing CA's key, which only the
// leader reads, and the bundle of every CA still trusted.
const (
	KeyTLSCert  = "tls.crt"
	KeyTLSKey   = "tls.key"
	KeyCACert   = "ca.crt"
	KeyCAKey    = "ca.key"
	KeyCABundle = "bundle.crt"
)

// backdate is how far before its issue a certificate of certs.NewCA and
// certs.CA.Sign starts to be valid (clock skew between the leader and
// the apiservers). It is not part of the lifetime renewAt divides.
const backdate = certs.Backdate

// renewFraction: a certificate is renewed once this share of its lifetime
// has passed (2/3: a 90-day serving certificate at day 60, a 5-year CA after
// 3 years 4 months), leaving a third of it to notice and repair a renewal
// that fails.
const renewNum, renewDen = 2, 3

// maxBundle bounds the CAs in the caBundle: the current one and those it
// replaced that have not expired. A CA is rotated at 2/3 of its lifetime, so
// two are trusted at once in steady state; more come only from lifetimes
// shortened by hand, and the oldest go first.
const maxBundle = 4

// maxPEMBytes bounds what is parsed from a Secret's key: a bundle of
// maxBundle CAs is a few KiB.
const maxPEMBytes = 256 << 10

// renewAt is when c is due for renewal: after 2/3 of the lifetime it was
// issued for. The backdate of our certificates is left out of the lifetime
// (a 30 s certificate backdated by 1 min is renewed 20 s after its issue,
// not at once); a certificate valid for less than the backdate is divided
// whole.
//
// Example: NotBefore 09:59, NotAfter 10:30 (issued at 10:00 for 30 min):
// renewed at 10:20.
func renewAt(c *x509.Certificate) time.Time {
	issued := c.NotBefore.Add(backdate)
	if !issued.Before(c.NotAfter) {
		issued = c.NotBefore
	}
	return issued.Add(c.NotAfter.Sub(issued) / renewDen * renewNum)
}

// caReason says why the CA must be replaced at now, or "" if it serves on.
func caReason(ca *x509.Certificate, now time.Time) string {
	switch {
	case ca == nil:
		return "no CA yet"
	case !now.Before(ca.NotAfter):
		return fmt.Sprintf("the CA expired at %s", ca.NotAfter.UTC().Format(time.RFC3339))
	case !now.Before(renewAt(ca)):
		return fmt.Sprintf("the CA is due for renewal since %s (2/3 of its lifetime; it expires at %s)", renewAt(ca).UTC().Format(time.RFC3339), ca.NotAfter.UTC().Format(time.RFC3339))
	}
	return ""
}

// servingReason says why the serving certificate leaf must be reissued by
// ca at now, or "" if it serves on: it is missing, not signed by ca (a new
// CA), lacks a name or address the apiservers may call, or is due.
func servingReason(leaf, ca *x509.Certificate, dnsNames []string, ips []net.IP, now time.Time) string {
	switch {
	case leaf == nil:
		return "no serving certificate yet"
	case leaf.CheckSignatureFrom(ca) != nil:
		return fmt.Sprintf("the serving certificate is not signed by the current CA %q", ca.Subject.CommonName)
	case !now.Before(leaf.NotAfter):
		return fmt.Sprintf("the serving certificate expired at %s", leaf.NotAfter.UTC().Format(time.RFC3339))
	case !now.Before(renewAt(leaf)):
		return fmt.Sprintf("the serving certificate is due for renewal since %s (2/3 of its lifetime; it expires at %s)", renewAt(leaf).UTC().Format(time.RFC3339), leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	for _, n := range dnsNames {
		if !slices.Contains(leaf.DNSNames, n) {
			return fmt.Sprintf("the serving certificate does not name %s", n)
		}
	}
	for _, ip := range ips {
		if !slices.ContainsFunc(leaf.IPAddresses, ip.Equal) {
			return fmt.Sprintf("the serving certificate does not name %s", ip)
		}
	}
	return ""
}

// mergeBundle is the caBundle to trust with current signing: current
// first, then each CA of previous that has not expired at now (a
// certificate they signed may still be served), without duplicates, at
// most maxBundle.
func mergeBundle(current *x509.Certificate, previous []*x509.Certificate, now time.Time) []*x509.Certificate {
	out := []*x509.Certificate{current}
	for _, c := range previous {
		if len(out) == maxBundle {
			break
		}
		if !now.Before(c.NotAfter) || slices.ContainsFunc(out, c.Equal) {
			continue
		}
		out = append(out, c)
	}
	return out
}

// encodeBundle is the PEM of certs, in order.
func encodeBundle(certs []*x509.Certificate) []byte {
	var b bytes.Buffer
	for _, c := range certs {
		_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	return b.Bytes()
}

// parseCerts parses every PEM CERTIFICATE in data (what names it, for the
// errors). Other block types and text between blocks are refused: these
// keys are written by the leader alone, so anything else is damage.
func parseCerts(data []byte, what string) ([]*x509.Certificate, error) {
	if len(data) > maxPEMBytes {
		return nil, fmt.Errorf("%s is %d bytes, more than the %d a bundle of %d CAs could need", what, len(data), maxPEMBytes, maxBundle)
	}
	var out []*x509.Certificate
	rest := data
	for i := 1; ; i++ {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("%s: PEM block %d is a %q, not a CERTIFICATE", what, i, block.Type)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s: certificate %d: %w", what, i, err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s holds no PEM certificate", what)
	}
	if len(bytes.TrimSpace(rest)) > 0 {
		return nil, fmt.Errorf("%s: text after certificate %d is not PEM", what, len(out))
	}
	return out, nil
}

// subjects names certs for the logs: "CN=a (until 2031-12-02), CN=b (...)".
func subjects(certs []*x509.Certificate) string {
	s := make([]string, len(certs))
	for i, c := range certs {
		s[i] = fmt.Sprintf("%s (until %s)", c.Subject.CommonName, c.NotAfter.UTC().Format(time.RFC3339))
	}
	return strings.Join(s, ", ")
}

// issuerIn returns the CA of bundle that signed leaf, or nil.
func issuerIn(leaf *x509.Certificate, bundle []*x509.Certificate) *x509.Certificate {
	for _, ca := range bundle {
		if leaf.CheckSignatureFrom(ca) == nil {
			return ca
		}
	}
	return nil
}
