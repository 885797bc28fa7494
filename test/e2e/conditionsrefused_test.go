//go:build e2e

package e2e

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"clusterip-policy/test/e2e/framework"
	"clusterip-policy/test/fixtures"
)

// TestARefusedConditionsWriteIsReported shows what an operator sees when
// the apiserver refuses the leader's write of the managed matchConditions.
// A kube-apiserver older than 1.31 refuses their CEL as invalid (422; the
// error is pinned by pkg/matchconditions
// TestTheOldestApiserverThatAcceptsTheConditions, and its rendering by
// cmd/webhook TestARefusedConditionsWriteIsNamedInTheStatus). No apiserver
// that old can be built here (the oldest Kubernetes module served is
// v1.34.0, which accepts them), so here the apiserver refuses the write
// for want of RBAC (403), which takes the same path in the leader: the
// error log line, clusterip_policy_match_conditions_updates_total
// {result="failed"}, clusterip_policy_match_conditions_synced 0, and the
// ClusterIPPolicy's MatchConditionsInForce condition, False/WriteFailed
// with the apiserver's reason, until a write succeeds again.
func TestARefusedConditionsWriteIsReported(t *testing.T) {
	c := own(t, framework.Options{Webhooks: 0, WebhookArgs: []string{"--policy-source=crd", "--manage-match-conditions"}})
	cs := c.Client(0)
	ctx := testContext(t, 3*time.Minute)
	kubectl := func(t *testing.T, stdin string, args ...string) string {
		t.Helper()
		out, errOut, err := c.Kubectl(ctx, stdin, args...)
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s%s", strings.Join(args, " "), err, out, errOut)
		}
		return out
	}
	installPolicyObject(t, ctx, c, policyObject(""))
	if err := c.StartWebhooks(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := c.RegisterWebhooks(ctx); err != nil {
		t.Fatal(err)
	}
	// conditionOf is MatchConditionsInForce as `kubectl get -o jsonpath`
	// shows it: status, reason, message.
	conditionOf := func() string {
		out, _, _ := c.Kubectl(ctx, "", "get", "clusterippolicy", "default", "-o",
			`jsonpath={.status.conditions[?(@.type=="MatchConditionsInForce")].status} {.status.conditions[?(@.type=="MatchConditionsInForce")].reason} {.status.conditions[?(@.type=="MatchConditionsInForce")].message}`)
		return out
	}
	waitCondition := func(t *testing.T, prefix string, timeout time.Duration) (string, time.Duration) {
		t.Helper()
		start := time.Now()
		var got string
		fixtures.EventuallyNil(t, "MatchConditionsInForce to start with "+strconv.Quote(prefix), timeout, func() error {
			if got = conditionOf(); !strings.HasPrefix(got, prefix) {
				return fmt.Errorf("it is %q", got)
			}
			return nil
		})
		return got, time.Since(start)
	}
	waitCondition(t, "True InForce", 30*time.Second)

	// The manifests' rule that lets the leader update the two
	// configurations, without its update verb.
	var role *rbacv1.ClusterRole
	for _, r := range c.RBAC.ClusterRoles {
		for _, rule := range r.Rules {
			if slices.Contains(rule.Resources, "validatingwebhookconfigurations") && slices.Contains(rule.Verbs, "update") {
				role = r
			}
		}
	}
	if role == nil {
		t.Fatal("no ClusterRole of manifests/base lets the webhook update validatingwebhookconfigurations; this test no longer takes the right away")
	}
	setUpdate := func(t *testing.T, allowed bool) {
		t.Helper()
		cur, err := cs.RbacV1().ClusterRoles().Get(ctx, role.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i, rule := range cur.Rules {
			if !slices.Contains(rule.Resources, "validatingwebhookconfigurations") {
				continue
			}
			verbs := slices.DeleteFunc(slices.Clone(rule.Verbs), func(v string) bool { return v == "update" })
			if allowed {
				verbs = append(verbs, "update")
			}
			cur.Rules[i].Verbs = verbs
		}
		if _, err := cs.RbacV1().ClusterRoles().Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("a refused write is logged, counted, and named in the policy's MatchConditionsInForce condition", func(t *testing.T) {
		failedBefore := metricSum(t, ctx, c, "clusterip_policy_match_conditions_updates_total", `result="failed"`)
		setUpdate(t, false)
		// A new reservation: the leader must write new conditions.
		kubectl(t, policyObject("  - ip: 10.96.0.78\n    service: default/refused\n"), "apply", "-f", "-")
		got, took := waitCondition(t, "False WriteFailed", 20*time.Second)
		t.Logf("e2e: conditions refused: MatchConditionsInForce %s after the edit: %s", took.Round(100*time.Millisecond), got)
		if !strings.Contains(got, "forbidden") || !strings.Contains(got, "validatingwebhookconfigurations") {
			t.Errorf("the condition does not carry the apiserver's reason: %s", got)
		}
		if strings.Contains(got, "older than 1.31") {
			t.Errorf("a forbidden write is blamed on the apiserver's version: %s", got)
		}
		if n := metricSum(t, ctx, c, "clusterip_policy_match_conditions_updates_total", `result="failed"`); n <= failedBefore {
			t.Errorf("failed writes counted %v -> %v, want more", failedBefore, n)
		}
		if n := metricSum(t, ctx, c, "clusterip_policy_match_conditions_synced"); n != 0 {
			t.Errorf("clusterip_policy_match_conditions_synced %v while writes fail, want 0", n)
		}
		log, err := c.Webhooks[0].Log()
		if err != nil {
			t.Fatal(err)
		}
		i := strings.LastIndex(log, "cannot write the managed matchConditions")
		if i < 0 {
			t.Fatal("no log line \"cannot write the managed matchConditions\"")
		}
		line, _, _ := strings.Cut(log[max(0, strings.LastIndex(log[:i], "\n")+1):], "\n")
		t.Logf("e2e: conditions refused: the leader logged: %s", line)
	})

	t.Run("once the write goes through, the condition is True again", func(t *testing.T) {
		setUpdate(t, true)
		got, took := waitCondition(t, "True InForce", 30*time.Second)
		t.Logf("e2e: conditions refused: MatchConditionsInForce back %s after update was granted again: %s", took.Round(100*time.Millisecond), got)
		if got := metricSum(t, ctx, c, "clusterip_policy_match_conditions_synced"); got != 1 {
			t.Errorf("clusterip_policy_match_conditions_synced %v once in force, want 1", got)
		}
	})
}
