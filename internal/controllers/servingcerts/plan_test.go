package servingcerts

import (
	"crypto/x509"
	"encoding/pem"
	"net"
	"strings"
	"testing"
	"time"

	"clusterip-policy/certs"
)

func newCA(t *testing.T, validity time.Duration) *certs.CA {
	t.Helper()
	ca, err := certs.NewCA("test-ca", validity)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func leafOf(t *testing.T, ca *certs.CA, validity time.Duration, dns ...string) *x509.Certificate {
	t.Helper()
	kp, err := ca.Sign(certs.Options{CommonName: "leaf", DNSNames: dns, IPs: []net.IP{net.ParseIP("127.0.0.1")}, Validity: validity})
	if err != nil {
		t.Fatal(err)
	}
	c, err := parseCerts(kp.CertPEM, "leaf")
	if err != nil {
		t.Fatal(err)
	}
	return c[0]
}

func TestRenewAtIsTwoThirdsOfTheLifetimeIssued(t *testing.T) {
	issued := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name      string
		notBefore time.Time
		notAfter  time.Time
		want      time.Time
	}{
		{"30 minutes, backdated 1 hour", issued.Add(-time.Hour), issued.Add(30 * time.Minute), issued.Add(20 * time.Minute)},
		{"30 seconds, backdated 1 hour: not renewed at once", issued.Add(-time.Hour), issued.Add(30 * time.Second), issued.Add(20 * time.Second)},
		{"90 days", issued.Add(-time.Hour), issued.Add(90 * 24 * time.Hour), issued.Add(60 * 24 * time.Hour)},
		{"not backdated, shorter than the backdate: divided whole", issued, issued.Add(30 * time.Second), issued.Add(20 * time.Second)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := renewAt(&x509.Certificate{NotBefore: tc.notBefore, NotAfter: tc.notAfter})
			if !got.Equal(tc.want) {
				t.Errorf("renewAt = %s, want %s", got, tc.want)
			}
		})
	}
}

// Certificates start an hour before their issue, as cert-manager's
// cert-controller backdates: an apiserver whose clock runs behind the
// leader's by more than a minute accepts a certificate issued a moment
// ago (with a minute, every review failed after a renewal).
func TestCertificatesAreBackdatedAnHour(t *testing.T) {
	now := time.Now()
	ca, err := certs.NewCAAt("test", now, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Sign(certs.Options{CommonName: "webhook", DNSNames: []string{"webhook"}, Validity: time.Hour, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(leaf.CertPEM)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	for what, nb := range map[string]time.Time{"CA": ca.Cert.NotBefore, "serving": cert.NotBefore} {
		if skew := now.Sub(nb); skew < 59*time.Minute || skew > 61*time.Minute {
			t.Errorf("%s certificate valid from %s before its issue, want an hour (an apiserver 90 s behind the leader must accept it)", what, skew)
		}
	}
	// An apiserver whose clock is 90 s behind the leader's at issue.
	if behind := now.Add(-90 * time.Second); behind.Before(cert.NotBefore) {
		t.Errorf("not yet valid on an apiserver 90 s behind: NotBefore %s", cert.NotBefore)
	}
}

func TestRenewAtOfARealCertificate(t *testing.T) {
	before := time.Now()
	ca := newCA(t, 30*time.Second)
	got := renewAt(ca.Cert)
	// Issued between before and now, for 30 s: due 20 s later (to the second).
	if got.Before(before.Add(19*time.Second)) || got.After(time.Now().Add(21*time.Second)) {
		t.Errorf("a 30s CA issued at %s is due at %s, want about 20s after its issue", before, got)
	}
}

func TestCAReason(t *testing.T) {
	ca := newCA(t, time.Hour)
	now := time.Now()
	for _, tc := range []struct {
		name string
		ca   *x509.Certificate
		at   time.Time
		want string // substring; "" means no rotation
	}{
		{"absent", nil, now, "no CA yet"},
		{"fresh", ca.Cert, now, ""},
		{"just before 2/3", ca.Cert, renewAt(ca.Cert).Add(-time.Second), ""},
		{"at 2/3", ca.Cert, renewAt(ca.Cert), "due for renewal"},
		{"expired", ca.Cert, ca.Cert.NotAfter, "expired"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := caReason(tc.ca, tc.at)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("caReason = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestServingReason(t *testing.T) {
	ca, other := newCA(t, time.Hour), newCA(t, time.Hour)
	dns := []string{"svc", "svc.ns", "svc.ns.svc"}
	ips := []net.IP{net.ParseIP("127.0.0.1")}
	leaf := leafOf(t, ca, 30*time.Minute, dns...)
	now := time.Now()
	for _, tc := range []struct {
		name string
		leaf *x509.Certificate
		dns  []string
		ips  []net.IP
		at   time.Time
		want string
	}{
		{"absent", nil, dns, ips, now, "no serving certificate"},
		{"fresh", leaf, dns, ips, now, ""},
		{"signed by another CA (a CA rotation)", leafOf(t, other, 30*time.Minute, dns...), dns, ips, now, "not signed by the current CA"},
		{"due", leaf, dns, ips, renewAt(leaf), "due for renewal"},
		{"expired", leaf, dns, ips, leaf.NotAfter, "expired"},
		{"a DNS name added (--cert-extra-san)", leaf, append(dns, "localhost"), ips, now, "does not name localhost"},
		{"an address added", leaf, dns, append(ips, net.ParseIP("::1")), now, "does not name ::1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := servingReason(tc.leaf, ca.Cert, tc.dns, tc.ips, tc.at)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("servingReason = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestMergeBundle(t *testing.T) {
	now := time.Now()
	a, b, c, d, e := newCA(t, time.Hour), newCA(t, time.Hour), newCA(t, time.Hour), newCA(t, time.Hour), newCA(t, time.Hour)
	expired := newCA(t, 10*time.Second)
	names := func(cs []*x509.Certificate) []*x509.Certificate { return cs }
	for _, tc := range []struct {
		name     string
		current  *x509.Certificate
		previous []*x509.Certificate
		at       time.Time
		want     []*x509.Certificate
	}{
		{"first CA", a.Cert, nil, now, names([]*x509.Certificate{a.Cert})},
		{"rotation: new first, old kept", b.Cert, []*x509.Certificate{a.Cert}, now, []*x509.Certificate{b.Cert, a.Cert}},
		{"current already in the bundle: once", b.Cert, []*x509.Certificate{b.Cert, a.Cert}, now, []*x509.Certificate{b.Cert, a.Cert}},
		{"an expired CA is dropped", b.Cert, []*x509.Certificate{expired.Cert, a.Cert}, now.Add(11 * time.Second), []*x509.Certificate{b.Cert, a.Cert}},
		{"at most 4, the oldest go", e.Cert, []*x509.Certificate{d.Cert, c.Cert, b.Cert, a.Cert}, now, []*x509.Certificate{e.Cert, d.Cert, c.Cert, b.Cert}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := mergeBundle(tc.current, tc.previous, tc.at)
			if len(got) != len(tc.want) {
				t.Fatalf("bundle of %d CAs (%s), want %d", len(got), subjects(got), len(tc.want))
			}
			for i := range got {
				if !got[i].Equal(tc.want[i]) {
					t.Errorf("CA %d differs", i)
				}
			}
			// The PEM round-trips in order.
			back, err := parseCerts(encodeBundle(got), "bundle")
			if err != nil || len(back) != len(got) || !back[0].Equal(got[0]) {
				t.Errorf("encode/parse: %v, %d CAs", err, len(back))
			}
		})
	}
}

func TestParseCertsRefusesDamage(t *testing.T) {
	ca := newCA(t, time.Hour)
	for _, tc := range []struct {
		name string
		data string
		want string
	}{
		{"empty", "", "holds no PEM certificate"},
		{"a key", string(ca.KeyPEM), `is a "EC PRIVATE KEY", not a CERTIFICATE`},
		{"text after", string(ca.CertPEM) + "garbage", "text after certificate 1 is not PEM"},
		{"too large", strings.Repeat("x", maxPEMBytes+1), "more than the"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseCerts([]byte(tc.data), "ca.crt")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestIssuerIn(t *testing.T) {
	a, b := newCA(t, time.Hour), newCA(t, time.Hour)
	leaf := leafOf(t, b, time.Minute)
	if got := issuerIn(leaf, []*x509.Certificate{a.Cert, b.Cert}); got == nil || !got.Equal(b.Cert) {
		t.Errorf("issuerIn found %v, want the CA that signed it", got)
	}
	if got := issuerIn(leaf, []*x509.Certificate{a.Cert}); got != nil {
		t.Errorf("issuerIn found %s in a bundle without the issuer", got.Subject)
	}
}
