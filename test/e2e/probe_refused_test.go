//go:build e2e

package e2e

import (
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"clusterip-policy/test/e2e/framework"
	"clusterip-policy/test/fixtures"
)

// requireTeamLabel is a policy many clusters have: every Service in
// default needs a label team. The leader's probe (a headless Service
// without labels) is refused by it before the validating webhook is called
// (the apiserver runs admission policies before validating webhooks), after
// the mutating one answered.
const requireTeamLabel = `apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: require-team-label
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      resources: ["services"]
      operations: ["CREATE"]
  validations:
  - expression: "has(object.metadata.labels) && 'team' in object.metadata.labels"
    message: every Service needs the label team
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: require-team-label
spec:
  policyName: require-team-label
  validationActions: [Deny]
  matchResources:
    namespaceSelector:
      matchLabels:
        kubernetes.io/metadata.name: default
`

// TestAProbeRefusedByAnotherPolicyIsNamedAndArmsOnceLetThrough: with a
// cluster policy that refuses the label-less probe, the status says so
// (ProbeRefused, quoting the policy) instead of calling the webhook
// unreachable, the reachability gauge of the webhook the probe did not
// reach is -1 (so ClusterIPPolicyWebhookUnreachable stays silent) and the
// refused probes are counted (ClusterIPPolicyReachabilityProbeRefused);
// the mutating webhook, which answered, is armed, the validating one is
// not. With the match condition docs/operations.md gives, the next probes
// reach both and the validating webhook is armed.
func TestAProbeRefusedByAnotherPolicyIsNamedAndArmsOnceLetThrough(t *testing.T) {
	c := own(t, framework.Options{Webhooks: 0, ArmByLeader: true, NoRegister: true, NoBackstop: true,
		WebhookArgs: []string{"--policy-source=crd", "--arm-failure-policy", "--audit-interval=10m"}})
	cs := c.Client(0)
	ctx := testContext(t, 3*time.Minute)
	installPolicyObject(t, ctx, c, policyObject(""))
	if out, _, err := c.Kubectl(ctx, requireTeamLabel, "apply", "-f", "-"); err != nil {
		t.Fatalf("apply the cluster's label policy: %v\n%s", err, out)
	}
	fixtures.EventuallyNil(t, "the label policy in force", 30*time.Second, func() error {
		_, err := cs.CoreV1().Services("default").Create(ctx, fixtures.Service("default", "unlabelled"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil {
			return errors.New("a label-less dry run was admitted")
		}
		if !strings.Contains(err.Error(), "every Service needs the label team") {
			return fmt.Errorf("a label-less dry run: %w", err)
		}
		return nil
	})
	if err := c.StartWebhooks(ctx, 1); err != nil {
		t.Fatal(err)
	}
	registerAsShipped(t, ctx, c, c.Webhooks[0].Addr())

	fixtures.EventuallyNil(t, "WebhookReachable False ProbeRefused quoting the policy", 60*time.Second, func() error {
		if got := reachableCondition(ctx, c); !strings.HasPrefix(got, "False ProbeRefused: ") || !strings.Contains(got, "ValidatingAdmissionPolicy 'require-team-label'") {
			return fmt.Errorf("WebhookReachable %q", got)
		}
		return nil
	})
	t.Logf("e2e: probe refused: %s", reachableCondition(ctx, c))
	fixtures.EventuallyNil(t, "the mutating webhook armed, the validating one not", 30*time.Second, func() error {
		return failurePoliciesAre(ctx, cs, "Fail", "Ignore")
	})
	if v, err := c.WebhookMetric(ctx, 0, "clusterip_policy_webhook_reachable", `stage="validate"`); err != nil || v != -1 {
		t.Errorf("clusterip_policy_webhook_reachable{stage=validate} %v (%v), want -1: the probe never reached it", v, err)
	}
	if n, err := c.WebhookMetric(ctx, 0, "clusterip_policy_webhook_probes_total", `result="refused"`); err != nil || n < 1 {
		t.Errorf("clusterip_policy_webhook_probes_total{result=refused} %v (%v), want at least 1", n, err)
	}

	// The fix the docs give: a match condition exempting the webhook's
	// service account (whose Service writes in default the shipped policy
	// bounds to dry runs).
	doc := readText(t, filepath.Join(c.Root, "docs", "operations.md"))
	m := regexp.MustCompile(`expression: "(request\.userInfo\.username != '[^']+')"`).FindStringSubmatch(doc)
	if m == nil {
		t.Fatal("docs/operations.md no longer shows the match condition that lets the probe through")
	}
	patch := fmt.Sprintf(`{"spec":{"matchConditions":[{"name":"not-the-clusterip-policy-probe","expression":%q}]}}`, m[1])
	if _, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Patch(ctx, "require-team-label", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	fixed := time.Now()
	fixtures.EventuallyNil(t, "both webhooks armed once the probe is let through", 60*time.Second, func() error {
		return failurePoliciesAre(ctx, cs, "Fail", "Fail")
	})
	t.Logf("e2e: probe let through by the documented match condition: validating webhook armed %s later", time.Since(fixed).Round(100*time.Millisecond))
	fixtures.EventuallyNil(t, "WebhookReachable True", 30*time.Second, func() error {
		if got := reachableCondition(ctx, c); !strings.HasPrefix(got, "True Reachable: ") {
			return fmt.Errorf("WebhookReachable %q", got)
		}
		return nil
	})
	// The cluster's policy still holds for everyone else.
	if _, err := cs.CoreV1().Services("default").Create(ctx, fixtures.Service("default", "unlabelled"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err == nil || !strings.Contains(err.Error(), "every Service needs the label team") {
		t.Fatalf("the label policy no longer holds for the admin: %v", err)
	}
}
