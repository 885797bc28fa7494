//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"clusterip-policy/test/e2e/framework"
	"clusterip-policy/test/fixtures"
)

// auditPolicy is the policy an operator means to enforce: kube-dns's
// address reserved, only 10.96.0.0/16 approved, one legacy namespace exempt.
var auditPolicy = fixtures.Policy("allowedCIDRs: [10.96.0.0/16]\n" + fixtures.KubeDNSSpec + "exemptions:\n  namespaces: [audit-legacy]\n")

// auditOutput mirrors `webhook audit -o json`; decoding it strictly pins
// the public keys.
type auditOutput struct {
	Policy            string         `json:"policy"`
	Ranges            string         `json:"ranges"`
	Services          int            `json:"services"`
	Checked           int            `json:"checked"`
	Exempt            int            `json:"exempt"`
	NotJudgedDynamic  int            `json:"notJudgedDynamic"`
	TracksAllocations bool           `json:"tracksAllocations"`
	Counts            map[string]int `json:"counts"`
	Findings          []struct {
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
		Rule      string `json:"rule"`
		Action    string `json:"action"`
		Field     string `json:"field"`
		IP        string `json:"ip"`
		Reserved  string `json:"reservedIP"`
		Problem   string `json:"problem"`
		Fix       string `json:"fix"`
	} `json:"findings"`
	Omitted     map[string]int `json:"omitted"`
	CannotJudge string         `json:"cannotJudge"`
}

// runAudit runs the real `bin/clusterip-policy audit` with args, with HOME in a
// directory of its own (no ~/.kube/config) and extraEnv, and returns its
// exit status, stdout and stderr.
func runAudit(t *testing.T, c *framework.Cluster, extraEnv []string, args ...string) (int, string, string) {
	t.Helper()
	env := append([]string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH")}, extraEnv...)
	return runForExit(t, env, c.Bin.Webhook, append([]string{"audit"}, args...)...)
}

// runForExit runs binary with args and env for at most a minute and
// returns its exit code, stdout and stderr; a binary that cannot be run
// fails the test.
func runForExit(t *testing.T, env []string, binary string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String(), errb.String()
	case errors.As(err, &exit):
		return exit.ExitCode(), out.String(), errb.String()
	}
	t.Fatalf("run %s %s: %v", binary, strings.Join(args, " "), err)
	return 0, "", ""
}

// Offending Services created before the webhook is registered are what an
// operator who installs the policy into a running cluster finds: the audit
// reports each with its rule, address and fix, leaves out what it cannot
// judge, and exits 1; once fixed as it says, it exits 0.
func TestAuditReportsExistingServicesThatBreakThePolicy(t *testing.T) {
	c := own(t, framework.Options{Policy: auditPolicy, Webhooks: 0})
	if _, err := os.Stat(c.Bin.Webhook); err != nil {
		t.Fatalf("%s is missing (run `make build`): %v", c.Bin.Webhook, err)
	}
	cs := c.Client(0)
	ctx := testContext(t, 4*time.Minute)
	policyFile := filepath.Join(c.Dir, "audit-policy.yaml")
	if err := os.WriteFile(policyFile, []byte(auditPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"audit-legacy"} {
		if err := framework.EnsureNamespace(ctx, cs, ns); err != nil {
			t.Fatal(err)
		}
	}

	// No webhook is registered: the apiserver takes all of these.
	for _, s := range []*corev1.Service{
		fixtures.Service("default", "dynamic-1"),
		fixtures.Service("default", "dynamic-2"),
		fixtures.Service("default", "static", fixtures.WithClusterIP("10.96.0.53")),
		fixtures.Service("default", "legacy-db", fixtures.WithClusterIP("10.96.200.5")), // asked for in the dynamic band: not judged
		fixtures.Service("default", "headless", fixtures.WithClusterIP("None")),
		fixtures.Service("default", "early-bird", fixtures.WithClusterIP("10.96.0.10")),
		fixtures.Service("kube-system", "kube-dns", fixtures.WithClusterIP("10.96.0.11")),
	} {
		mustCreate(t, ctx, cs, s)
	}
	// An unapproved ServiceCIDR, created after the dynamic Services so that
	// none of them lands there by chance.
	if _, err := cs.NetworkingV1().ServiceCIDRs().Create(ctx, fixtures.ServiceCIDR("audit-unapproved", "10.97.0.0/24"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create ServiceCIDR: %v", err)
	}
	for _, s := range []*corev1.Service{
		fixtures.Service("default", "spilled-1", fixtures.WithClusterIP("10.97.0.31")),
		fixtures.Service("default", "spilled-2", fixtures.WithClusterIP("10.97.0.32")),
		fixtures.Service("default", "spilled-3", fixtures.WithClusterIP("10.97.0.33")),
		fixtures.Service("audit-legacy", "old", fixtures.WithClusterIP("10.97.0.40")), // exempt namespace: not audited
	} {
		// The apiserver allocates from the new ServiceCIDR once its own
		// informer has it.
		if err := retryUntil(ctx, 15*time.Second, func() error { _, err := create(ctx, cs, s); return err }); err != nil {
			t.Fatalf("create %s/%s at %s: %v", s.Namespace, s.Name, s.Spec.ClusterIP, err)
		}
	}
	adminKubeconfig := "--kubeconfig=" + c.AdminKubeconfig

	t.Run("the text report names each finding's Service, rule, address and fix, and exits 1", func(t *testing.T) {
		start := time.Now()
		code, out, stderr := runAudit(t, c, nil, adminKubeconfig, "--policy", policyFile)
		t.Logf("e2e: webhook audit of 12 Services took %s (exit %d)", time.Since(start).Round(time.Millisecond), code)
		if code != 1 {
			t.Fatalf("exit %d, want 1; stderr %s\n%s", code, stderr, out)
		}
		for _, row := range []string{
			`default/early-bird\s+reserved-for-other\s+10\.96\.0\.10\s+deny\s+is reserved for Service kube-system/kube-dns \(cluster DNS\)\s+delete default/early-bird and create it again without clusterIP`,
			`kube-system/kube-dns\s+reservation-not-held\s+10\.96\.0\.11\s+-\s+kube-system/kube-dns holds 10\.96\.0\.11, but 10\.96\.0\.10 is reserved for it \(cluster DNS\)\s+first move default/early-bird off 10\.96\.0\.10`,
			`default/spilled-1\s+outside-service-cidrs\s+10\.97\.0\.31\s+deny\s+comes from 10\.97\.0\.0/24 \(ServiceCIDR "audit-unapproved"\), which is not inside the policy's allowedCIDRs\s+add 10\.97\.0\.0/24 to allowedCIDRs if it is approved`,
			`default/spilled-3\s+outside-service-cidrs\s+10\.97\.0\.33`,
			`(?m)^12 Services, 10 with a ClusterIP checked, 1 in exempt namespaces not checked: 5 findings \(3 outside-service-cidrs, 1 reserved-for-other, 1 reservation-not-held\)\.$`,
			`(?m)^Not judged: 3 addresses in a dynamic band not reserved for their Service\. A stored address does not say whether it was asked for or allocated`,
		} {
			if !regexp.MustCompile(row).MatchString(out) {
				t.Errorf("the report lacks %s:\n%s", row, out)
			}
		}
		for _, absent := range []string{"audit-legacy/old", "default/legacy-db", "default/static", "default/dynamic-1", "default/kubernetes"} {
			if strings.Contains(out, absent) {
				t.Errorf("the report names %s, which breaks nothing it can judge:\n%s", absent, out)
			}
		}
		t.Logf("e2e: the audit's report:\n%s", out)
	})

	t.Run("-o json, with the kubeconfig from $KUBECONFIG, keeps the counts complete when the list is capped", func(t *testing.T) {
		code, out, stderr := runAudit(t, c, []string{"KUBECONFIG=" + c.AdminKubeconfig}, "--policy", policyFile, "-o", "json", "--max-per-rule", "2")
		if code != 1 {
			t.Fatalf("exit %d, want 1; stderr %s\n%s", code, stderr, out)
		}
		var got auditOutput
		dec := json.NewDecoder(strings.NewReader(out))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&got); err != nil {
			t.Fatalf("decode: %v\n%s", err, out)
		}
		wantCounts := map[string]int{"invalid-ip": 0, "outside-service-cidrs": 3, "reserved-for-other": 1, "reserved-range-for-other": 0, "already-allocated": 0, "reservation-not-held": 1}
		if len(got.Counts) != len(wantCounts) {
			t.Errorf("counts %v, want %v", got.Counts, wantCounts)
		}
		for rule, n := range wantCounts {
			if got.Counts[rule] != n {
				t.Errorf("counts[%s] %d, want %d", rule, got.Counts[rule], n)
			}
		}
		if got.Services != 12 || got.Checked != 10 || got.Exempt != 1 || got.NotJudgedDynamic != 3 || !got.TracksAllocations {
			t.Errorf("services %d checked %d exempt %d notJudged %d tracks %v, want 12 10 1 3 true", got.Services, got.Checked, got.Exempt, got.NotJudgedDynamic, got.TracksAllocations)
		}
		if len(got.Findings) != 4 || got.Omitted["outside-service-cidrs"] != 1 {
			t.Errorf("%d findings listed, omitted %v; want 4 (2 of 3 outside-service-cidrs) and 1 omitted", len(got.Findings), got.Omitted)
		}
		for _, f := range got.Findings {
			if f.Rule == "reservation-not-held" && (f.Name != "kube-dns" || f.IP != "10.96.0.11" || f.Reserved != "10.96.0.10" || f.Action != "") {
				t.Errorf("reservation-not-held finding %+v", f)
			}
			if f.Problem == "" || f.Fix == "" || f.Field != "spec.clusterIP" {
				t.Errorf("finding without problem, fix or field: %+v", f)
			}
		}
		if !strings.Contains(got.Ranges, `10.96.0.0/16 (ServiceCIDR "kubernetes")`) || strings.Contains(got.Ranges, "10.97.0.0/24") {
			t.Errorf("ranges %q, want only the approved one", got.Ranges)
		}
	})

	t.Run("the text list is capped per rule with a count of the rest", func(t *testing.T) {
		code, out, _ := runAudit(t, c, nil, adminKubeconfig, "--policy", policyFile, "--max-per-rule", "1")
		if code != 1 || !regexp.MustCompile(`(?m)^\.\.\. and 2 more outside-service-cidrs\s*$`).MatchString(out) || strings.Contains(out, "spilled-2") {
			t.Fatalf("exit %d, want 1 and one outside-service-cidrs row followed by \"... and 2 more\":\n%s", code, out)
		}
	})

	t.Run("as the kubectl plugin the release ships, `kubectl clusterip-policy audit` prints the same report and exit", func(t *testing.T) {
		// The release's kubectl-clusterip_policy archive holds this binary
		// under that name (TestReleaseArtefacts); kubectl finds it on the PATH.
		pluginDir := t.TempDir()
		plugin := filepath.Join(pluginDir, "kubectl-clusterip_policy")
		bin, err := os.ReadFile(c.Bin.Webhook)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(plugin, bin, 0o755); err != nil {
			t.Fatal(err)
		}
		kubectl := func(args ...string) (int, string, string) {
			t.Helper()
			return runForExit(t, []string{"HOME=" + t.TempDir(), "PATH=" + pluginDir + string(os.PathListSeparator) + os.Getenv("PATH")}, c.Bin.Kubectl, args...)
		}
		if code, out, stderr := kubectl("plugin", "list"); code != 0 || !strings.Contains(out, plugin) {
			t.Fatalf("kubectl plugin list: exit %d, want 0 and %s listed:\n%s%s", code, plugin, out, stderr)
		}
		if code, out, stderr := kubectl("clusterip-policy", "--help"); code != 0 || !strings.Contains(out, "kubectl clusterip-policy audit") {
			t.Errorf("kubectl clusterip-policy --help: exit %d, want 0 and the commands named as the plugin's (kubectl clusterip-policy audit):\n%s%s", code, out, stderr)
		}
		args := []string{adminKubeconfig, "--policy", policyFile, "--max-per-rule", "1"}
		wantCode, wantOut, _ := runAudit(t, c, nil, args...)
		code, out, stderr := kubectl(append([]string{"clusterip-policy", "audit"}, args...)...)
		if code != wantCode || out != wantOut {
			t.Fatalf("kubectl clusterip-policy audit: exit %d (want %d, as the binary run directly); stderr %s\nstdout:\n%s\nthe binary's stdout:\n%s", code, wantCode, stderr, out, wantOut)
		}
	})

	t.Run("a user who may not list Services gets exit 3 and what the audit needs; list alone is enough", func(t *testing.T) {
		cert, err := c.PKI.ClientCert("e2e-auditor")
		if err != nil {
			t.Fatal(err)
		}
		auditor := &framework.Identity{User: "e2e-auditor", Cert: cert}
		kubeconfig := filepath.Join(c.Dir, "auditor.kubeconfig")
		if err := auditor.WriteKubeconfig(kubeconfig, c.APIServers[0].URL, c.PKI.CA.CertPEM); err != nil {
			t.Fatal(err)
		}
		code, out, stderr := runAudit(t, c, nil, "--kubeconfig", kubeconfig, "--policy", policyFile)
		if code != 3 || out != "" || !strings.Contains(stderr, "forbidden") || !strings.Contains(stderr, "the audit needs list on services (all namespaces), servicecidrs and ipaddresses") {
			t.Fatalf("exit %d, want 3 with what the audit needs; stderr %s; stdout %s", code, stderr, out)
		}
		role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "e2e-auditor"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"list"}},
			{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"servicecidrs", "ipaddresses"}, Verbs: []string{"list"}},
		}}
		if _, err := cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "e2e-auditor"},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "e2e-auditor"},
			Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: "e2e-auditor"}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// The authorizer sees the new binding through its informer.
		_ = fixtures.Wait(10*time.Second, func() bool {
			if code == 3 {
				code, out, stderr = runAudit(t, c, nil, "--kubeconfig", kubeconfig, "--policy", policyFile)
			}
			return code != 3
		})
		if code != 1 || !strings.Contains(out, "5 findings") {
			t.Fatalf("with list on the three resources: exit %d, want 1 and 5 findings; stderr %s\n%s", code, stderr, out)
		}
	})

	t.Run("fixed as the report says, the cluster audits clean and exits 0", func(t *testing.T) {
		// The unapproved range is approved after all; early-bird and
		// kube-dns are recreated, kube-dns without clusterIP under the
		// webhook, which assigns its reserved address.
		fixed := strings.Replace(auditPolicy, "allowedCIDRs: [10.96.0.0/16]", "allowedCIDRs: [10.96.0.0/16, 10.97.0.0/24]", 1)
		fixedFile := filepath.Join(c.Dir, "audit-policy-fixed.yaml")
		if err := os.WriteFile(fixedFile, []byte(fixed), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, s := range []struct{ ns, name string }{{"default", "early-bird"}, {"kube-system", "kube-dns"}} {
			if err := cs.CoreV1().Services(s.ns).Delete(ctx, s.name, metav1.DeleteOptions{}); err != nil {
				t.Fatalf("delete %s/%s: %v", s.ns, s.name, err)
			}
		}
		if err := c.StartWebhooks(ctx, 1); err != nil {
			t.Fatal(err)
		}
		if err := c.RegisterWebhooks(ctx); err != nil {
			t.Fatal(err)
		}
		// Static, in the static band: a dynamic address might come from
		// 10.97.0.0/24, which the running webhook's policy does not approve.
		mustCreate(t, ctx, cs, fixtures.Service("default", "early-bird", fixtures.WithClusterIP("10.96.0.54")))
		// The IPAddress of the deleted early-bird may outlive it for a moment.
		var dns *corev1.Service
		if err := retryUntil(ctx, 15*time.Second, func() (err error) {
			dns, err = create(ctx, cs, fixtures.Service("kube-system", "kube-dns"))
			return err
		}); err != nil {
			t.Fatalf("create kube-system/kube-dns without clusterIP: %v", err)
		}
		if dns.Spec.ClusterIP != "10.96.0.10" {
			t.Fatalf("kube-dns got %s, want its reserved 10.96.0.10", dns.Spec.ClusterIP)
		}
		code, out, stderr := runAudit(t, c, nil, adminKubeconfig, "--policy", fixedFile)
		if code != 0 || !regexp.MustCompile(`(?m)^12 Services, 10 with a ClusterIP checked, 1 in exempt namespaces not checked: no findings\.$`).MatchString(out) {
			t.Fatalf("exit %d, want 0 and no findings; stderr %s\n%s", code, stderr, out)
		}
		if strings.Contains(out, "SERVICE") {
			t.Errorf("a clean report prints a table header:\n%s", out)
		}
	})
}
