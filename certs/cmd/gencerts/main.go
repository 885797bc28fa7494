// Command gencerts creates the certificate authority and the serving
// certificate of the webhook for the self-signed overlay, and the caBundle
// patch that makes the kube-apiservers trust it.
//
// From the repository root (`make certs` runs exactly this):
//
//	go run ./certs/cmd/gencerts
//
// writes manifests/overlays/self-signed/tls/{ca.crt,ca.key,tls.crt,tls.key}
// and manifests/overlays/self-signed/cabundle-patch.yaml, after which
// `kubectl apply --server-side -k manifests/overlays/self-signed` installs the
// webhook. The serving certificate covers every DNS name of the webhook
// Service (name, name.ns, name.ns.svc, name.ns.svc.cluster.local).
//
// Rotation without downtime:
//
//	go run ./certs/cmd/gencerts --reuse-ca   # new serving certificate, same CA
//	go run ./certs/cmd/gencerts --new-ca     # new CA; the caBundle trusts old and new
//
// A serving-certificate rotation leaves the caBundle unchanged, so apiservers
// accept the old and the new certificate while the kubelet refreshes the
// mounted Secret and the webhook reloads it. A CA rotation writes a caBundle
// holding both CAs; once every pod serves the new certificate, a later
// --reuse-ca run drops the old CA. Without either flag gencerts refuses to
// replace an existing CA, because a sudden new CA would make apiservers
// reject the pods' old certificates until they reload.
//
// A local harness that runs the webhook outside the cluster passes its own
// --out-dir, --extra-san=127.0.0.1 and --cabundle-patch="".
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"clusterip-policy/certs"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

type config struct {
	outDir         string
	service        string
	namespace      string
	validity       time.Duration
	caValidity     time.Duration
	reuseCA        bool
	newCA          bool
	extraSANs      sanList
	patchPath      string
	webhookConfigs string
}

// sanList collects --extra-san values; each may hold several, comma-separated.
type sanList []string

func (s *sanList) String() string { return strings.Join(*s, ",") }

func (s *sanList) Set(v string) error {
	for _, san := range strings.Split(v, ",") {
		if san = strings.TrimSpace(san); san != "" {
			*s = append(*s, san)
		}
	}
	return nil
}

func parseFlags(args []string, stderr io.Writer) (*config, error) {
	c := &config{}
	fl := flag.NewFlagSet("gencerts", flag.ContinueOnError)
	fl.SetOutput(stderr)
	fl.StringVar(&c.outDir, "out-dir", "manifests/overlays/self-signed/tls",
		"directory for ca.crt, ca.key, tls.crt and tls.key; the self-signed overlay's secretGenerator reads tls.crt and tls.key from the default")
	fl.StringVar(&c.service, "service", "clusterip-policy-webhook", "name of the webhook Service, for the certificate's DNS names")
	fl.StringVar(&c.namespace, "namespace", "clusterip-policy", "namespace of the webhook Service, for the certificate's DNS names")
	fl.DurationVar(&c.validity, "validity", 365*24*time.Hour, "validity of the serving certificate; rotate it before it ends")
	fl.DurationVar(&c.caValidity, "ca-validity", 10*365*24*time.Hour, "validity of a new CA")
	fl.BoolVar(&c.reuseCA, "reuse-ca", false, "sign a new serving certificate with the CA already in --out-dir (rotation; the caBundle stays the same)")
	fl.BoolVar(&c.newCA, "new-ca", false, "replace the CA in --out-dir; the caBundle trusts the old and the new CA until the next --reuse-ca run")
	fl.Var(&c.extraSANs, "extra-san", "additional DNS name or IP address for the serving certificate (repeatable, or comma-separated), e.g. 127.0.0.1 for a webhook run outside the cluster")
	fl.StringVar(&c.patchPath, "cabundle-patch", "manifests/overlays/self-signed/cabundle-patch.yaml",
		`kustomize patch to write that sets caBundle on every webhook of --webhook-configurations; "" writes none`)
	fl.StringVar(&c.webhookConfigs, "webhook-configurations", "manifests/base/webhook-configurations.yaml",
		"the webhook configurations the caBundle patch is for")
	if err := fl.Parse(args); err != nil {
		return nil, err
	}
	if fl.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fl.Args())
	}
	if c.reuseCA && c.newCA {
		return nil, errors.New("--reuse-ca and --new-ca exclude each other")
	}
	if c.validity <= 0 || c.caValidity <= 0 {
		return nil, errors.New("--validity and --ca-validity must be positive")
	}
	if c.service == "" || c.namespace == "" {
		return nil, errors.New("--service and --namespace must not be empty")
	}
	return c, nil
}

func run(args []string, stdout, stderr io.Writer) int {
	c, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "gencerts:", err)
		return 2
	}
	if err := generate(c, stdout); err != nil {
		fmt.Fprintln(stderr, "gencerts:", err)
		return 1
	}
	return 0
}

func generate(c *config, stdout io.Writer) error {
	// Read the webhook configurations first: nothing is written if the
	// patch cannot be made.
	var configs []byte
	if c.patchPath != "" {
		var err error
		if configs, err = os.ReadFile(c.webhookConfigs); err != nil {
			return fmt.Errorf("read webhook configurations (run from the repository root, or pass --webhook-configurations): %w", err)
		}
	}

	ca, bundle, err := chooseCA(c, stdout)
	if err != nil {
		return err
	}
	if leafEnd := time.Now().Add(c.validity); leafEnd.After(ca.Cert.NotAfter) {
		return fmt.Errorf("the CA expires on %s, before a serving certificate valid for %s would; rotate the CA with --new-ca or shorten --validity",
			ca.Cert.NotAfter.UTC().Format(time.DateOnly), c.validity)
	}

	opts := certs.Options{
		CommonName: c.service + "." + c.namespace + ".svc",
		DNSNames:   certs.ServiceDNSNames(c.service, c.namespace),
		Validity:   c.validity,
	}
	for _, san := range c.extraSANs {
		if ip := net.ParseIP(san); ip != nil {
			opts.IPs = append(opts.IPs, ip)
		} else {
			opts.DNSNames = append(opts.DNSNames, san)
		}
	}
	kp, err := ca.Sign(opts)
	if err != nil {
		return err
	}

	var patch []byte
	if c.patchPath != "" {
		if patch, err = caBundlePatch(configs, bundle, c.webhookConfigs); err != nil {
			return err
		}
	}
	if err := certs.WriteServing(c.outDir, ca, kp); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s/{%s,%s,%s,%s}\n", c.outDir, certs.CACertFile, certs.CAKeyFile, certs.CertFile, certs.KeyFile)
	fmt.Fprintf(stdout, "serving certificate for %s, %s; valid until %s\n",
		strings.Join(opts.DNSNames, ", "), ipList(opts.IPs), time.Now().Add(c.validity).UTC().Format(time.DateOnly))
	if c.patchPath != "" {
		if err := certs.WriteFileAtomic(c.patchPath, patch, 0o644); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "wrote %s (caBundle: %d CA certificate(s))\n", c.patchPath, countCerts(bundle))
	}
	return nil
}

// chooseCA returns the CA that signs the serving certificate and the PEM
// caBundle the apiservers should trust.
func chooseCA(c *config, stdout io.Writer) (*certs.CA, []byte, error) {
	_, statErr := os.Stat(filepath.Join(c.outDir, certs.CACertFile))
	haveCA := statErr == nil
	if statErr != nil && !errors.Is(statErr, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("look for an existing CA: %w", statErr)
	}
	switch {
	case c.reuseCA:
		if !haveCA {
			return nil, nil, fmt.Errorf("--reuse-ca: %s holds no CA; run without --reuse-ca to create one", c.outDir)
		}
		ca, err := certs.LoadCA(c.outDir)
		if err != nil {
			return nil, nil, err
		}
		fmt.Fprintf(stdout, "reusing CA %q (valid until %s)\n", ca.Cert.Subject.CommonName, ca.Cert.NotAfter.UTC().Format(time.DateOnly))
		return ca, ca.CertPEM, nil
	case haveCA && !c.newCA:
		return nil, nil, fmt.Errorf("%s already holds a CA: pass --reuse-ca to sign a new serving certificate with it (rotation), or --new-ca to replace it (see docs/operations.md#certificates-and-rotation before you do)", c.outDir)
	}
	ca, err := certs.NewCA(fmt.Sprintf("%s%d", certs.CANamePrefix, time.Now().Unix()), c.caValidity)
	if err != nil {
		return nil, nil, err
	}
	bundle := append([]byte(nil), ca.CertPEM...)
	if haveCA { // --new-ca: keep trusting the old CA until the pods serve the new certificate
		old, err := certs.LoadCA(c.outDir)
		if err != nil {
			return nil, nil, fmt.Errorf("--new-ca: the old CA is needed in the caBundle during the rotation: %w", err)
		}
		if time.Now().Before(old.Cert.NotAfter) {
			bundle = append(bundle, old.CertPEM...)
			fmt.Fprintf(stdout, "new CA %q; the caBundle also trusts the old CA %q until the next --reuse-ca run\n",
				ca.Cert.Subject.CommonName, old.Cert.Subject.CommonName)
			return ca, bundle, nil
		}
		fmt.Fprintf(stdout, "the old CA %q has expired; it is left out of the caBundle\n", old.Cert.Subject.CommonName)
	}
	fmt.Fprintf(stdout, "new CA %q (valid until %s)\n", ca.Cert.Subject.CommonName, ca.Cert.NotAfter.UTC().Format(time.DateOnly))
	return ca, bundle, nil
}

func ipList(ips []net.IP) string {
	if len(ips) == 0 {
		return "no IP addresses"
	}
	s := make([]string, len(ips))
	for i, ip := range ips {
		s[i] = ip.String()
	}
	return strings.Join(s, ", ")
}

func countCerts(pemData []byte) int {
	return strings.Count(string(pemData), "-----BEGIN CERTIFICATE-----")
}
