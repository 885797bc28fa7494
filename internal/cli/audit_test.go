package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"clusterip-policy/internal/exitcode"
	"clusterip-policy/test/fixtures"
)

// The audit's refusals before it reads any cluster, and a cluster it cannot
// reach: each exit status is the documented one and the message names the
// value and the fix. (Its reports against a real apiserver are in
// test/e2e/audit_test.go.)
func TestAuditRefusesBadInputAndAnUnreachableCluster(t *testing.T) {
	dir := t.TempDir()
	unreachable := filepath.Join(dir, "unreachable.kubeconfig")
	// Port 1 on loopback: nothing listens there, the connection is refused at once.
	if err := os.WriteFile(unreachable, []byte(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}
users:
- name: u
  user: {token: not-a-real-token}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
`), 0o600); err != nil {
		t.Fatal(err)
	}
	badPolicy := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(badPolicy, []byte(fixtures.Policy("reservations:\n- ip: 10.96.0.300\n  service: kube-system/kube-dns\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stderr []string
	}{
		{"an unknown output format", []string{"-o", "table", "--kubeconfig", unreachable}, exitcode.BadData, []string{`-o "table": use text, json or yaml`}},
		{"a file argument, as review takes", []string{"--kubeconfig", unreachable, "svc.yaml"}, exitcode.BadData, []string{`unexpected argument "svc.yaml"`, "clusterip-policy review"}},
		{"a cap out of bounds", []string{"--max-per-rule", "0", "--kubeconfig", unreachable}, exitcode.BadData, []string{"--max-per-rule 0: use 1 to 1000"}},
		{"a timeout out of bounds", []string{"--timeout", "10h", "--kubeconfig", unreachable}, exitcode.BadData, []string{"--timeout 10h0m0s: use 1s to 1h"}},
		{"a policy that does not load", []string{"--policy", badPolicy, "--kubeconfig", unreachable}, exitcode.BadData, []string{"10.96.0.300"}},
		{"a kubeconfig that does not exist", []string{"--kubeconfig", filepath.Join(dir, "missing")}, exitcode.BadData, []string{"--kubeconfig " + filepath.Join(dir, "missing"), "name one with --kubeconfig"}},
		{"a cluster that refuses the connection", []string{"--kubeconfig", unreachable, "--timeout", "5s"}, exitcode.Unreadable, []string{"list services", "127.0.0.1:1", "check that the kubeconfig's cluster is reachable"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, stderr := runCLI("", append([]string{"audit"}, tc.args...)...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stderr %s", code, tc.code, stderr)
			}
			if out != "" {
				t.Errorf("stdout %q, want nothing", out)
			}
			for _, part := range tc.stderr {
				if !strings.Contains(stderr, part) {
					t.Errorf("stderr %q lacks %q", stderr, part)
				}
			}
		})
	}
}

func TestAuditHelpNamesTheExitStatusesAndWhatItCannotJudge(t *testing.T) {
	code, _, stderr := runCLI("", "audit", "--help")
	if code != exitcode.OK {
		t.Fatalf("exit %d", code)
	}
	for _, part := range []string{"3 the cluster could not be read", "only reads", "static-ip-in-dynamic-band only if someone named it"} {
		if !strings.Contains(stderr, part) {
			t.Errorf("help lacks %q:\n%s", part, stderr)
		}
	}
}

func TestBandsUsageRefusesBadInputAndAnUnreachableCluster(t *testing.T) {
	dir := t.TempDir()
	unreachable := filepath.Join(dir, "unreachable.kubeconfig")
	if err := os.WriteFile(unreachable, []byte(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}
users:
- name: u
  user: {token: not-a-real-token}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stderr []string
	}{
		{"a CIDR as well", []string{"--usage", "--kubeconfig", unreachable, "10.96.0.0/16"}, exitcode.BadData, []string{`unexpected argument "10.96.0.0/16"`, "drop --usage"}},
		{"a timeout out of bounds", []string{"--usage", "--timeout", "0s", "--kubeconfig", unreachable}, exitcode.BadData, []string{"--timeout 0s: use 1s to 1h"}},
		{"no CIDR and no --usage", nil, exitcode.BadData, []string{"at least one CIDR", "--usage"}},
		{"a cluster that refuses the connection", []string{"--usage", "--kubeconfig", unreachable, "--timeout", "5s"}, exitcode.Unreadable, []string{"list servicecidrs", "127.0.0.1:1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, stderr := runCLI("", append([]string{"bands"}, tc.args...)...)
			if code != tc.code || out != "" {
				t.Fatalf("exit %d, stdout %q; want %d and nothing; stderr %s", code, out, tc.code, stderr)
			}
			for _, part := range tc.stderr {
				if !strings.Contains(stderr, part) {
					t.Errorf("stderr %q lacks %q", stderr, part)
				}
			}
		})
	}
}
