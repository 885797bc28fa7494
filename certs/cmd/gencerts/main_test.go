package main

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	admv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/yaml"

	"clusterip-policy/certs"
)

const baseConfigs = "../../../manifests/base/webhook-configurations.yaml"

type env struct {
	dir, outDir, patch string
}

func newEnv(t *testing.T) env {
	dir := t.TempDir()
	return env{dir: dir, outDir: filepath.Join(dir, "tls"), patch: filepath.Join(dir, "cabundle-patch.yaml")}
}

// gencerts runs the command with the environment's paths plus args and
// returns its exit code and output.
func (e env) gencerts(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var out bytes.Buffer
	all := append([]string{"--out-dir=" + e.outDir, "--cabundle-patch=" + e.patch, "--webhook-configurations=" + baseConfigs}, args...)
	code := run(all, &out, &out)
	return code, out.String()
}

func (e env) mustGencerts(t *testing.T, args ...string) {
	t.Helper()
	if code, out := e.gencerts(t, args...); code != 0 {
		t.Fatalf("gencerts %v: exit %d\n%s", args, code, out)
	}
}

func (e env) read(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(e.outDir, name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func parseCerts(t *testing.T, data []byte) []*x509.Certificate {
	t.Helper()
	var out []*x509.Certificate
	for {
		var b *pem.Block
		if b, data = pem.Decode(data); b == nil {
			return out
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
}

// patchBundles returns, per webhook name, the caBundle the patch sets.
func patchBundles(t *testing.T, path string) map[string][]byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var m admv1.MutatingWebhookConfiguration // both kinds share the fields read here
		if err := yaml.UnmarshalStrict([]byte(doc), &m); err != nil {
			t.Fatalf("patch document: %v\n%s", err, doc)
		}
		if m.Name != "clusterip-policy" {
			t.Errorf("the patch targets %s %q, want clusterip-policy", m.Kind, m.Name)
		}
		for _, w := range m.Webhooks {
			out[m.Kind+"/"+w.Name] = w.ClientConfig.CABundle
		}
	}
	return out
}

// verifies reports whether leaf chains to a CA in bundle for dnsName.
func verifies(t *testing.T, leafPEM, bundle []byte, dnsName string) error {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(bundle) {
		t.Fatal("the caBundle holds no certificate")
	}
	leaf := parseCerts(t, leafPEM)[0]
	_, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: dnsName, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	return err
}

func TestCreatesACAAndAServingCertificateForEveryServiceName(t *testing.T) {
	e := newEnv(t)
	e.mustGencerts(t)
	for _, f := range []string{certs.CACertFile, certs.CAKeyFile, certs.CertFile, certs.KeyFile} {
		if _, err := os.Stat(filepath.Join(e.outDir, f)); err != nil {
			t.Errorf("%s was not written: %v", f, err)
		}
	}
	if fi, err := os.Stat(filepath.Join(e.outDir, certs.KeyFile)); err == nil && fi.Mode().Perm() != 0o600 {
		t.Errorf("tls.key has mode %v, want 0600", fi.Mode().Perm())
	}
	for _, name := range certs.ServiceDNSNames("clusterip-policy-webhook", "clusterip-policy") {
		if err := verifies(t, e.read(t, certs.CertFile), e.read(t, certs.CACertFile), name); err != nil {
			t.Errorf("the serving certificate does not verify for %s: %v", name, err)
		}
	}
	leaf := parseCerts(t, e.read(t, certs.CertFile))[0]
	if d := time.Until(leaf.NotAfter); d < 364*24*time.Hour || d > 366*24*time.Hour {
		t.Errorf("the serving certificate is valid for %s, want the default of a year", d)
	}
}

func TestPatchesTheCABundleOfEveryWebhookOfTheBase(t *testing.T) {
	e := newEnv(t)
	e.mustGencerts(t)
	got := patchBundles(t, e.patch)
	want := []string{
		"MutatingWebhookConfiguration/mutate-services.clusterip-policy.io",
		"ValidatingWebhookConfiguration/validate-clusterippolicies.clusterip-policy.io",
		"ValidatingWebhookConfiguration/validate-servicecidrs.clusterip-policy.io",
		"ValidatingWebhookConfiguration/validate-services.clusterip-policy.io",
	}
	var names []string
	for n, bundle := range got {
		names = append(names, n)
		if !bytes.Equal(bundle, e.read(t, certs.CACertFile)) {
			t.Errorf("%s: the caBundle is not ca.crt", n)
		}
	}
	slices.Sort(names)
	if !slices.Equal(names, want) {
		t.Errorf("the patch covers %v, want %v", names, want)
	}
}

func TestRefusesToReplaceAnExistingCAUnasked(t *testing.T) {
	e := newEnv(t)
	e.mustGencerts(t)
	ca := e.read(t, certs.CACertFile)
	code, out := e.gencerts(t)
	if code == 0 || !strings.Contains(out, "--reuse-ca") {
		t.Errorf("exit %d, output %q; want a failure that points at --reuse-ca", code, out)
	}
	if !bytes.Equal(ca, e.read(t, certs.CACertFile)) {
		t.Error("the refused run replaced ca.crt")
	}
}

func TestReuseCAIssuesANewServingCertificateUnderTheSameCA(t *testing.T) {
	e := newEnv(t)
	e.mustGencerts(t)
	ca, leaf := e.read(t, certs.CACertFile), e.read(t, certs.CertFile)
	patch, _ := os.ReadFile(e.patch)
	e.mustGencerts(t, "--reuse-ca")
	if !bytes.Equal(ca, e.read(t, certs.CACertFile)) {
		t.Error("--reuse-ca changed ca.crt")
	}
	if bytes.Equal(leaf, e.read(t, certs.CertFile)) {
		t.Error("--reuse-ca kept the old serving certificate")
	}
	if newPatch, _ := os.ReadFile(e.patch); !bytes.Equal(patch, newPatch) {
		t.Error("--reuse-ca changed the caBundle patch: apiservers would stop trusting the pods' current certificate")
	}
	// The certificate the pods still serve and the new one both verify.
	for _, l := range [][]byte{leaf, e.read(t, certs.CertFile)} {
		if err := verifies(t, l, ca, "clusterip-policy-webhook.clusterip-policy.svc"); err != nil {
			t.Error(err)
		}
	}
}

func TestNewCATrustsBothCAsUntilTheNextReuse(t *testing.T) {
	e := newEnv(t)
	e.mustGencerts(t)
	oldLeaf := e.read(t, certs.CertFile)
	e.mustGencerts(t, "--new-ca")
	newLeaf := e.read(t, certs.CertFile)
	for n, bundle := range patchBundles(t, e.patch) {
		if c := len(parseCerts(t, bundle)); c != 2 {
			t.Fatalf("%s: the caBundle holds %d CAs during the rotation, want 2", n, c)
		}
		for _, l := range [][]byte{oldLeaf, newLeaf} {
			if err := verifies(t, l, bundle, "clusterip-policy-webhook.clusterip-policy.svc"); err != nil {
				t.Errorf("%s: %v", n, err)
			}
		}
	}
	e.mustGencerts(t, "--reuse-ca")
	for n, bundle := range patchBundles(t, e.patch) {
		if c := len(parseCerts(t, bundle)); c != 1 {
			t.Errorf("%s: the caBundle holds %d CAs after the rotation, want 1", n, c)
		}
		if err := verifies(t, oldLeaf, bundle, "clusterip-policy-webhook.clusterip-policy.svc"); err == nil {
			t.Errorf("%s: the old CA is still trusted after the rotation", n)
		}
	}
}

func TestExtraSANsAddIPAddressesAndDNSNames(t *testing.T) {
	e := newEnv(t)
	e.mustGencerts(t, "--extra-san=127.0.0.1,localhost", "--extra-san", "::1")
	leaf := parseCerts(t, e.read(t, certs.CertFile))[0]
	var ips []string
	for _, ip := range leaf.IPAddresses {
		ips = append(ips, ip.String())
	}
	if !slices.Equal(ips, []string{"127.0.0.1", "::1"}) || !slices.Contains(leaf.DNSNames, "localhost") {
		t.Errorf("IPs %v, DNS names %v; want 127.0.0.1 and ::1, and localhost", ips, leaf.DNSNames)
	}
}

func TestWritesNoPatchWhenAskedForNone(t *testing.T) {
	e := newEnv(t)
	var out bytes.Buffer
	if code := run([]string{"--out-dir=" + e.outDir, "--cabundle-patch=", "--webhook-configurations=/nonexistent"}, &out, &out); code != 0 {
		t.Fatalf("exit %d: %s", code, out.String())
	}
	if _, err := os.Stat(e.patch); err == nil {
		t.Error("a patch was written")
	}
}

func TestWritesNothingWhenTheWebhookConfigurationsAreMissing(t *testing.T) {
	e := newEnv(t)
	var out bytes.Buffer
	code := run([]string{"--out-dir=" + e.outDir, "--cabundle-patch=" + e.patch, "--webhook-configurations=" + filepath.Join(e.dir, "missing.yaml")}, &out, &out)
	if code == 0 || !strings.Contains(out.String(), "repository root") {
		t.Errorf("exit %d, output %q; want a failure that says where to run from", code, out.String())
	}
	if _, err := os.Stat(e.outDir); err == nil {
		t.Error("certificates were written although the patch could not be made")
	}
}

func TestRefusesAServingCertificateThatWouldOutliveItsCA(t *testing.T) {
	e := newEnv(t)
	e.mustGencerts(t, "--ca-validity=48h", "--validity=24h")
	code, out := e.gencerts(t, "--reuse-ca", "--validity=72h")
	if code == 0 || !strings.Contains(out, "--new-ca") {
		t.Errorf("exit %d, output %q; want a refusal that points at --new-ca", code, out)
	}
}

func TestRejectsContradictoryFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--reuse-ca", "--new-ca"},
		{"--validity=0s"},
		{"--service="},
		{"stray"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			if code, out := newEnv(t).gencerts(t, args...); code != 2 {
				t.Errorf("exit %d, want 2\n%s", code, out)
			}
		})
	}
	t.Run("--reuse-ca without a CA", func(t *testing.T) {
		if code, out := newEnv(t).gencerts(t, "--reuse-ca"); code != 1 || !strings.Contains(out, "holds no CA") {
			t.Errorf("exit %d, output %q", code, out)
		}
	})
}
