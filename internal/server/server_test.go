package server

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"

	"clusterip-policy/certs"
	"clusterip-policy/internal/admission"
	"clusterip-policy/internal/exitcode"
	"clusterip-policy/internal/names"
	"clusterip-policy/internal/readiness/readinesstest"
	"clusterip-policy/test/fixtures"
)

// runCLI runs `clusterip-policy serve ARGS...` through serve's command,
// the one main puts in its tree; only flags that fail their checks are
// given, so it returns before starting.
func runCLI(stdin string, args ...string) (int, string, string) {
	if args[0] != "serve" {
		panic("runCLI: the server runs serve only, not " + args[0])
	}
	var errb bytes.Buffer
	cmd := Command(&errb)
	cmd.SetArgs(args[1:])
	cmd.SetIn(strings.NewReader(stdin))
	cmd.SilenceErrors, cmd.SilenceUsage = true, true
	return exitcode.Of(cmd.Execute()), "", errb.String()
}

// flagFixture writes, under dir, a good policy file, a bad one and a
// certificate directory whose files are only checked for presence: what
// serve's flags name before they are refused.
func flagFixture(t *testing.T, dir string) (good, bad, certDir string) {
	t.Helper()
	good, bad = filepath.Join(dir, "good.yaml"), filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(good, []byte(fixtures.KubeDNSPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte(fixtures.Policy("reservation: []\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	certDir = filepath.Join(dir, "tls")
	if err := os.Mkdir(certDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"tls.crt", "tls.key"} {
		if err := os.WriteFile(filepath.Join(certDir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return good, bad, certDir
}

func TestServeRefusesBadFlagsBeforeStarting(t *testing.T) {
	dir := t.TempDir()
	good, bad, certDir := flagFixture(t, dir)
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"serve"}, "--policy is required"},
		{[]string{"serve", "--policy-source", "configmap"}, `--policy-source \"configmap\" is not a policy source; use file or crd`},
		{[]string{"serve", "--policy-source", "crd", "--policy", good}, "--policy " + good + " and --policy-source=crd exclude each other"},
		{[]string{"serve", "--policy-source", "crd", "--port", "70000"}, "--port 70000 is not a TCP port"},
		{[]string{"serve", "--policy", "nope.yaml"}, "--policy: read policy: open nope.yaml: no such file or directory"},
		{[]string{"serve", "--policy", bad}, `--policy: policy object ` + bad + `: `},
		{[]string{"serve", "--policy", good, "--cert-dir", dir}, "tls.crt: no such file or directory; mount the serving certificate there, or use --certificate-source=managed"},
		// Managed certificates: the flags are checked before anything starts.
		{[]string{"serve", "--policy", good, "--certificate-source", "selfSigned"}, `--certificate-source \"selfSigned\" is not a certificate source; use managed`},
		{[]string{"serve", "--policy", good, "--certificate-source", "managed", "--cert-dir", certDir}, "--cert-dir and --certificate-source=managed exclude each other"},
		{[]string{"serve", "--policy", good, "--certificate-source", "managed", "--cert-validity", "1s"}, "--cert-validity 1s is outside 10s-"},
		{[]string{"serve", "--policy", good, "--certificate-source", "managed", "--ca-secret", "clusterip-policy-webhook-tls"}, "the CA's key must not be in the Secret every replica reads"},
		{[]string{"serve", "--policy", good, "--certificate-source", "managed", "--leader-election-lease", ""},
			"--leader-election-lease is empty, and the Lease elects the replica that runs --certificate-source=managed"},
		{[]string{"serve", "--policy", good, "--port", "70000"}, "--port 70000 is not a TCP port"},
		{[]string{"serve", "--policy", good, "--cert-dir", certDir, "--hold-reservations", "--hold-grace", "0s"}, "--hold-grace 0s is outside 100ms-1m"},
		{[]string{"serve", "--policy", good, "--cert-dir", certDir, "--hold-reservations", "--leader-election-namespace", ""}, "--leader-election-namespace is empty"},
		{[]string{"serve", "--policy", good, "--cert-dir", certDir, "--hold-reservations", "--leader-election-lease", ""}, "--leader-election-lease is empty"},
		{[]string{"serve", "--policy", good, "--cert-dir", certDir, "--manage-match-conditions", "--leader-election-lease", ""}, "--leader-election-lease is empty"},
		{[]string{"serve", "--policy", good, "--cert-dir", certDir, "--manage-match-conditions", "--validating-webhook-configuration", ""}, "--validating-webhook-configuration must name the configurations"},
		{[]string{"serve", "--policy", good, "--cert-dir", certDir, "--match-conditions-settle", "2m"}, "--match-conditions-settle 2m0s is outside 0-1m"},
		{[]string{"serve", "--policy", good, "--cert-dir", certDir, "--metrics-secure", "--metrics-bind-address", "0"}, "--metrics-secure and --metrics-bind-address=0 contradict each other"},
		{[]string{"serve", "--policy", good, "--cert-dir", certDir, "--metrics-cert-dir", certDir}, "--metrics-cert-dir " + certDir + " without --metrics-secure"},
		{[]string{"serve", "--policy", good, "--cert-dir", certDir, "--metrics-secure", "--metrics-cert-dir", dir}, "--metrics-cert-dir " + dir + ": open " + dir + "/tls.crt: no such file or directory; mount a kubernetes.io/tls Secret there"},
		{[]string{"serve", "--policy", good, "--cert-dir", certDir, "--arm-failure-policy"}, "--arm-failure-policy needs --audit-interval: while the Service webhooks are not armed"},
		{[]string{"serve", "--policy", good, "--cert-dir", certDir, "--arm-failure-policy", "--audit-interval", "5m", "--reachability-probe-interval", "1s"}, "--reachability-probe-interval 1s is outside 2s-5m"},
		{[]string{"serve", "--policy", good, "--cert-dir", certDir, "--arm-failure-policy", "--audit-interval", "5m", "--leader-election-lease", ""}, "the Lease elects the replica that runs --audit-interval, --arm-failure-policy"},
		// In CRD mode the ClusterIPPolicy status alone needs the Lease:
		// its flags are checked then too, naming why.
		{[]string{"serve", "--policy-source", "crd", "--cert-dir", certDir, "--leader-election-lease", ""},
			"--leader-election-lease is empty, and the Lease elects the replica that runs the ClusterIPPolicy status (--policy-source=crd); leave the flag out (clusterip-policy-leader) or give the Lease name"},
		{[]string{"serve", "--policy-source", "crd", "--cert-dir", certDir, "--leader-election-namespace", "Kube_System"},
			`--leader-election-namespace \"Kube_System\" is not a namespace name`},
		{[]string{"serve", "--policy", good, "--cert-dir", certDir, "--hold-reservations", "--audit-interval", "5m", "--leader-election-identity", ""},
			"--leader-election-identity is empty, and the Lease elects the replica that runs --hold-reservations, --audit-interval; leave the flag out"},
	}
	for _, tt := range tests {
		code, _, stderr := runCLI("", tt.args...)
		if code != exitcode.BadData || !strings.Contains(stderr, tt.want) {
			t.Errorf("%v: exit %d stderr %s; want 2 and %q", tt.args, code, stderr, tt.want)
		}
	}
}

// pflag shows the first `quoted` word of a flag's help as its type, so a
// help text may quote nothing: --audit-interval once showed "webhook audit"
// where "duration" belongs.
func TestFlagHelpShowsTheFlagsOwnType(t *testing.T) {
	var so serveOptions
	fs := serveFlags(&so)
	fs.VisitAll(func(f *pflag.Flag) {
		if strings.Contains(f.Usage, "`") {
			t.Errorf("--%s: its help quotes a word with backticks, which pflag would show as the flag's type: %q", f.Name, f.Usage)
		}
	})
	if typ, _ := pflag.UnquoteUsage(fs.Lookup("audit-interval")); typ != "duration" {
		t.Errorf("--audit-interval shows the type %q, want duration", typ)
	}
}

func TestServeRefusesABadClientCAFileBeforeStarting(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(good, []byte(fixtures.KubeDNSPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	ca, err := certs.NewCA("client-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	kp, err := ca.Sign(certs.Options{CommonName: "x", DNSNames: []string{"localhost"}, Validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := certs.WriteServing(dir, ca, kp); err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(dir, certs.CAKeyFile)
	for _, tt := range []struct{ file, want string }{
		{filepath.Join(dir, "nope.crt"), "--client-ca-file: open " + filepath.Join(dir, "nope.crt") + ": no such file or directory"},
		{keyFile, "--client-ca-file: " + keyFile + ": PEM block 1 is a EC PRIVATE KEY"},
		{filepath.Join(dir, certs.CertFile), "is not a CA certificate"},
	} {
		code, _, stderr := runCLI("", "serve", "--policy", good, "--cert-dir", dir, "--client-ca-file", tt.file)
		if code != exitcode.BadData || !strings.Contains(stderr, tt.want) {
			t.Errorf("--client-ca-file %s: exit %d stderr %s; want 2 and %q", tt.file, code, stderr, tt.want)
		}
	}
}

func TestServeRefusesABadAuditInterval(t *testing.T) {
	good, _, certDir := flagFixture(t, t.TempDir())
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--audit-interval", "500ms"}, "--audit-interval 500ms is outside 1s-24h; 0 turns the periodic audit off"},
		{[]string{"--audit-interval", "48h"}, "--audit-interval 48h0m0s is outside 1s-24h"},
		{[]string{"--audit-interval", "-1s"}, "--audit-interval -1s is outside 1s-24h"},
		// The audit needs the Lease even without --hold-reservations.
		{[]string{"--audit-interval", "5m", "--leader-election-lease", ""}, "--leader-election-lease is empty"},
	} {
		args := append([]string{"serve", "--policy", good, "--cert-dir", certDir}, tt.args...)
		code, _, stderr := runCLI("", args...)
		if code != exitcode.BadData || !strings.Contains(stderr, tt.want) {
			t.Errorf("%v: exit %d stderr %s; want 2 and %q", tt.args, code, stderr, tt.want)
		}
	}
}

// The --port help names every endpoint the server registers on that port.
func TestPortHelpNamesEveryEndpoint(t *testing.T) {
	registered := admission.Endpoints(admission.Config{Gate: readinesstest.New(t, readinesstest.Spec, true, logr.Discard()).Gate, Registry: prometheus.NewRegistry()})
	if len(registered) != len(names.Paths) {
		t.Errorf("the server registers %d endpoints, names.Paths (the --port help) lists %d", len(registered), len(names.Paths))
	}
	for _, p := range names.Paths {
		if _, ok := registered[p]; !ok {
			t.Errorf("names.Paths lists %s, which the server does not register", p)
		}
	}
}
