//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"clusterip-policy/test/e2e/framework"
	"clusterip-policy/test/fixtures"
)

// TestOnlyTheNamedGroupsSetTheLabelsThatDecide renders the chart's
// namespace label policy (namespaceLabelGuard, on by default) as helm
// template does, applies it to a real kube-apiserver, and labels
// namespaces as a tenant allowed by RBAC to update namespaces (and their
// status and finalize subresources) but in no allowed group. The apiserver
// refuses every change to a label that decides what is judged: our own
// keys, the keys of the Service webhooks' namespaceSelector, the keys the
// rendered policy's reservedRanges select on and the chart's extraKeys.
// Other labels, and the allowed group and user, pass; the cluster has no
// ClusterIPPolicy CRD, which the policy does not need.
func TestOnlyTheNamedGroupsSetTheLabelsThatDecide(t *testing.T) {
	root, helm := repoAndHelm(t)
	c := own(t, framework.Options{Webhooks: 0, NoRegister: true, NoRBAC: true})
	ctx := testContext(t, 3*time.Minute)
	policyFile := filepath.Join(t.TempDir(), "clusterippolicy.yaml")
	if err := os.WriteFile(policyFile, []byte(policyObject(`  reservedRanges:
  - cidr: 10.96.0.32/28
    namespaceSelector:
      matchLabels: {team: payments}
      matchExpressions: [{key: tier, operator: In, values: [gold]}]
`)), 0o600); err != nil {
		t.Fatal(err)
	}
	runHelm := helmRunner{bin: helm, root: root, dir: t.TempDir(), kubeconfig: c.AdminKubeconfig}.run
	rendered, err := runHelm(ctx, "template", "clusterip-policy", "charts/clusterip-policy", "--namespace", "clusterip-policy",
		"--kube-version", "1.37.2", "--set", "dns.clusterIP=10.96.0.10", "--set-file", "policy="+policyFile,
		"--set-json", `webhook.namespaceSelector={"matchExpressions":[{"key":"zone","operator":"NotIn","values":["lab"]}]}`,
		"--set-json", `namespaceLabelGuard.extraKeys=["cost-center"]`,
		"--set-json", `namespaceLabelGuard.allowedUsers=["system:serviceaccount:gitops:sync"]`,
		"--show-only", "templates/namespacelabels.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if out, stderr, err := c.Kubectl(ctx, rendered, "apply", "--server-side", "-f", "-"); err != nil {
		t.Fatalf("apply the rendered policies: %v\n%s%s", err, out, stderr)
	}
	// The tenant may create, update and patch namespaces: RBAC alone
	// would let it set any label.
	tenantRBAC := `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: namespace-labeller}
rules:
- apiGroups: [""]
  resources: [namespaces, namespaces/status, namespaces/finalize]
  verbs: [get, list, create, update, patch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: namespace-labeller}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: namespace-labeller}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: Group, name: tenants}
- {kind: ServiceAccount, name: sync, namespace: gitops}
`
	if out, stderr, err := c.Kubectl(ctx, tenantRBAC, "apply", "-f", "-"); err != nil {
		t.Fatalf("apply the tenant's RBAC: %v\n%s%s", err, out, stderr)
	}
	tenant := []string{"--as=alice", "--as-group=tenants"}
	gitops := []string{"--as=system:serviceaccount:gitops:sync"}
	label := func(as []string, ns string, labels ...string) (string, error) {
		args := append(append(append([]string{}, as...), "label", "--overwrite", "namespace", ns), labels...)
		out, stderr, err := c.Kubectl(ctx, "", args...)
		return out + stderr, err
	}
	mustRefuse := func(t *testing.T, what, out string, err error, key string) {
		t.Helper()
		if err == nil || !strings.Contains(out, "the namespace label "+key) || !strings.Contains(out, "namespaceLabelGuard.allowedGroups") {
			t.Errorf("%s: %v\n%s\nwant a refusal naming the label %s and the fix", what, err, out, key)
		}
	}
	for _, ns := range []string{"team-a", "team-b"} {
		if out, stderr, err := c.Kubectl(ctx, "", "create", "namespace", ns); err != nil {
			t.Fatalf("create namespace %s: %v\n%s%s", ns, err, out, stderr)
		}
	}
	// The policies load within about a second: wait for the first refusal.
	fixtures.EventuallyNil(t, "the tenant refused an exclusion label", 30*time.Second, func() error {
		out, err := label(tenant, "team-a", "clusterip-policy.io/excluded=true")
		if err == nil {
			return fmt.Errorf("allowed: %s", out)
		}
		return nil
	})

	refused := map[string]string{
		"clusterip-policy.io/excluded=true": "clusterip-policy.io/excluded",
		"zone=lab":                          "zone",
		"cost-center=42":                    "cost-center",
		"team=payments":                     "team",
		"tier=gold":                         "tier",
	}
	for l, key := range refused {
		out, err := label(tenant, "team-a", l)
		mustRefuse(t, "the tenant sets "+l, out, err, key)
	}
	if out, err := label(tenant, "team-a", "app=shop", "owner=alice"); err != nil {
		t.Errorf("the tenant sets labels that decide nothing: %v\n%s", err, out)
	}
	// Several at once: the refusal names the first and counts the rest.
	out, err := label(tenant, "team-a", "team=payments", "tier=gold")
	t.Logf("e2e: the refusal kubectl prints: %s", strings.TrimSpace(out))
	if err == nil || !strings.Contains(out, "(and 1 more)") {
		t.Errorf("the tenant sets two range labels at once: %v\n%s; want one refusal counting the second", err, out)
	}
	// The administrator (system:masters) and the allowed user may.
	if out, err := label(nil, "team-b", "team=payments", "clusterip-policy.io/excluded=true"); err != nil {
		t.Errorf("the administrator labels team-b: %v\n%s", err, out)
	}
	if out, err := label(gitops, "team-b", "zone=lab", "cost-center=42"); err != nil {
		t.Errorf("the allowed user labels team-b: %v\n%s", err, out)
	}
	// A label set by them is the tenant's to keep, not to remove or change;
	// the tenant's other edits of that namespace pass.
	out, err = label(tenant, "team-b", "team-")
	mustRefuse(t, "the tenant removes team", out, err, "team")
	out, err = label(tenant, "team-b", "clusterip-policy.io/excluded=false")
	mustRefuse(t, "the tenant changes the exclusion", out, err, "clusterip-policy.io/excluded")
	if out, err := label(tenant, "team-b", "app=ledger"); err != nil {
		t.Errorf("the tenant adds an unguarded label beside guarded ones: %v\n%s", err, out)
	}
	// The status and finalize subresources store a label change too
	// (finalize takes only a PUT): both are judged.
	nsJSON, stderr, err := c.Kubectl(ctx, "", "get", "namespace", "team-a", "-o", "json")
	if err != nil {
		t.Fatalf("get namespace team-a: %v\n%s", err, stderr)
	}
	// No resourceVersion: the write is unconditional, so it is refused for
	// what it changes, not for a conflict.
	withLabel := regexp.MustCompile(`"resourceVersion": "[0-9]+",`).ReplaceAllString(
		strings.Replace(nsJSON, `"labels": {`, `"labels": {"clusterip-policy.io/excluded": "true", `, 1), "")
	if withLabel == nsJSON {
		t.Fatalf("namespace team-a has no labels map to add to:\n%s", nsJSON)
	}
	for sub, args := range map[string][]string{
		"status":   {"patch", "namespace", "team-a", "--subresource=status", "--type=merge", "-p", `{"metadata":{"labels":{"clusterip-policy.io/excluded":"true"}}}`},
		"finalize": {"replace", "--raw", "/api/v1/namespaces/team-a/finalize", "-f", "-"},
	} {
		o, stderr, err := c.Kubectl(ctx, withLabel, append(append([]string{}, tenant...), args...)...)
		mustRefuse(t, "the tenant sets the exclusion through "+sub, o+stderr, err, "clusterip-policy.io/excluded")
		if got, _, gerr := c.Kubectl(ctx, "", "get", "namespace", "team-a", "-o", `jsonpath={.metadata.labels.clusterip-policy\.io/excluded}`); gerr != nil || got != "" {
			t.Errorf("after the tenant's write of %s the namespace carries clusterip-policy.io/excluded=%q (%v)", sub, got, gerr)
			_, _ = label(nil, "team-a", "clusterip-policy.io/excluded-")
		}
	}
	// A create carrying a guarded label is refused; a plain one is not.
	nsWith := "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: team-c\n  labels: {team: payments}\n"
	o, stderr, err := c.Kubectl(ctx, nsWith, append(tenant, "create", "-f", "-")...)
	mustRefuse(t, "the tenant creates a namespace with team=payments", o+stderr, err, "team")
	if o, stderr, err := c.Kubectl(ctx, "", append(tenant, "create", "namespace", "team-d")...); err != nil {
		t.Errorf("the tenant creates a plain namespace: %v\n%s%s", err, o, stderr)
	}
}
