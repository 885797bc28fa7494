//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"clusterip-policy/certs"
	"clusterip-policy/test/e2e/framework"
	"clusterip-policy/test/fixtures"
)

// exclusionsPolicy starts without the test's reservations: they are added
// once the leader has read the selector, so the first hold pass that sees
// them sees the exclusion too. warn, so that a Service on an address
// reserved for another is admitted and left to the audit.
const exclusionsSpec = "allowedCIDRs: [10.96.0.0/16]\nenforcement:\n  default: warn\n" + fixtures.KubeDNSSpec

const excludedLabel = "clusterip-policy.io/excluded"

// A namespace the webhooks' namespaceSelector leaves out by label is left
// out by the leader too: a reservation whose owner lives there is not held
// (nothing would ever release it) and its Services are not audited, while
// a namespace still selected is held for and audited. The label removed,
// the same owner is audited: the label is what decided.
func TestExclusionByLabelReachesHoldsAndAudit(t *testing.T) {
	c := own(t, framework.Options{Policy: fixtures.Policy(exclusionsSpec), Webhooks: 1, WebhookArgs: []string{"--hold-reservations", "--audit-interval=1s"}})
	cs := c.Client(0)
	ctx := testContext(t, 4*time.Minute)
	const out, in = "exclusions-out", "exclusions-in"
	for _, ns := range []string{out, in} {
		if err := framework.EnsureNamespace(ctx, cs, ns); err != nil {
			t.Fatal(err)
		}
	}
	labelNamespace(t, ctx, c, out, true)

	// The selector the chart renders for webhook.namespaceSelector
	// {matchExpressions: [{key: clusterip-policy.io/excluded, operator:
	// DoesNotExist}]}, added to both Service webhooks of the stored
	// configurations.
	req := metav1.LabelSelectorRequirement{Key: excludedLabel, Operator: metav1.LabelSelectorOpDoesNotExist}
	adm := cs.AdmissionregistrationV1()
	m, err := adm.MutatingWebhookConfigurations().Get(ctx, "clusterip-policy", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range m.Webhooks {
		if m.Webhooks[i].Name == framework.MutatingWebhookName {
			m.Webhooks[i].NamespaceSelector.MatchExpressions = append(m.Webhooks[i].NamespaceSelector.MatchExpressions, req)
		}
	}
	if _, err := adm.MutatingWebhookConfigurations().Update(ctx, m, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	v, err := adm.ValidatingWebhookConfigurations().Get(ctx, "clusterip-policy", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range v.Webhooks {
		if v.Webhooks[i].Name == framework.ValidatingWebhookName {
			v.Webhooks[i].NamespaceSelector.MatchExpressions = append(v.Webhooks[i].NamespaceSelector.MatchExpressions, req)
		}
	}
	if _, err := adm.ValidatingWebhookConfigurations().Update(ctx, v, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The leader logs the selector it reads (every 5 s), under the lock
	// that the holds and the audit read it through: from that line on,
	// every pass skips the labelled namespace.
	waitLog(t, ctx, c, "the leader reading the changed namespaceSelector", func(log string) bool {
		return strings.Contains(log, "namespaces judged here") && strings.Contains(log, excludedLabel)
	})

	policy := fixtures.Policy(exclusionsSpec + `- ip: 10.96.0.61
  service: exclusions-out/owner
- ip: 10.96.0.62
  service: exclusions-in/owner
`)
	if err := certs.WriteFileAtomic(c.PolicyFile, []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}

	t.Run("the owner in the selected namespace is held for, the one in the excluded namespace is not", func(t *testing.T) {
		fixtures.Eventually(t, "a hold on 10.96.0.62 for exclusions-in/owner", time.Minute, func() bool { return ipAddressExists(t, ctx, cs, "10.96.0.62") })
		// The pass that held 10.96.0.62 decided 10.96.0.61 too, with the
		// exclusion known (read before the policy named either).
		if ipAddressExists(t, ctx, cs, "10.96.0.61") {
			t.Errorf("10.96.0.61 is held for exclusions-out/owner, whose namespace the webhooks are not called for")
		}
		if n := metricSum(t, ctx, c, "clusterip_policy_holds", `state="not-applied"`); n != 1 {
			t.Errorf("clusterip_policy_holds{state=\"not-applied\"} = %v, want 1 (exclusions-out/owner)", n)
		}
		t.Logf("e2e: exclusions: 10.96.0.62 held for %s/owner, 10.96.0.61 not held for %s/owner", in, out)
	})

	if t.Failed() {
		return
	}
	t.Run("the excluded namespace's Services are not audited, the selected one's are", func(t *testing.T) {
		// The excluded owner first, without its address (the webhook is not
		// called: nothing assigns it): audited, it would be
		// reservation-not-held. Then a Service in the selected namespace on
		// that address (reserved-for-other, admitted by warn): any pass
		// that lists it lists the owner too.
		owner := mustCreate(t, ctx, cs, fixtures.Service(out, "owner"))
		if owner.Spec.ClusterIP == "10.96.0.61" {
			t.Fatalf("%s/owner got its reserved address although the webhook is not called there", out)
		}
		mustCreate(t, ctx, cs, fixtures.Service(in, "squatter", fixtures.WithClusterIP("10.96.0.61")))
		fixtures.Eventually(t, "an audit Event on exclusions-in/squatter", time.Minute, func() bool { return policyEvents(t, ctx, cs)[in+"/squatter"] > 0 })
		if ev := policyEvents(t, ctx, cs); ev[out+"/owner"] != 0 {
			t.Errorf("audit Events %v: the excluded namespace's owner was audited", ev)
		}
		if n := metricSum(t, ctx, c, "clusterip_policy_existing_violations", `rule="reservation-not-held"`); n != 0 {
			t.Errorf("existing_violations{reservation-not-held} = %v, want 0: the excluded owner counted", n)
		}
	})

	t.Run("the label removed, the same owner is audited", func(t *testing.T) {
		labelNamespace(t, ctx, c, out, false)
		fixtures.Eventually(t, "an audit Event on exclusions-out/owner once its namespace is selected", time.Minute, func() bool { return policyEvents(t, ctx, cs)[out+"/owner"] > 0 })
		t.Logf("e2e: exclusions: label removed, %s/owner audited (reservation-not-held)", out)
	})
}

func labelNamespace(t *testing.T, ctx context.Context, c *framework.Cluster, ns string, on bool) {
	t.Helper()
	arg := excludedLabel + "=true"
	if !on {
		arg = excludedLabel + "-"
	}
	if out, errOut, err := c.Kubectl(ctx, "", "label", "namespace", ns, arg, "--overwrite"); err != nil {
		t.Fatalf("kubectl label namespace %s %s: %v\n%s%s", ns, arg, err, out, errOut)
	}
}

// waitLog waits until the webhooks' logs satisfy cond.
func waitLog(t *testing.T, ctx context.Context, c *framework.Cluster, what string, cond func(string) bool) {
	t.Helper()
	fixtures.Eventually(t, what, time.Minute, func() bool {
		var all strings.Builder
		for _, w := range c.Webhooks {
			l, _ := w.Log()
			all.WriteString(l)
		}
		return cond(all.String())
	})
}
