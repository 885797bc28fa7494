//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"clusterip-policy/test/e2e/framework"
	"clusterip-policy/test/fixtures"
)

// Every matchCondition must evaluate on every request the apiserver can
// send: with failurePolicy Fail, an expression that fails (an unguarded
// field, "no such key: name") rejects the request. Each kind of request is
// sent here as users and their tools send it, in namespace default (where
// the default/kubernetes condition reads request.name) and in another one.
func TestMatchConditionsEvaluateOnEveryRequest(t *testing.T) {
	sendEveryRequestKind(t, shared(t), true)
}

// sendEveryRequestKind sends each kind of request; dynamicCalled says
// whether a plain dynamic create must reach the validating webhook (not
// under the managed conditions of --manage-match-conditions, which skip it).
func sendEveryRequestKind(t *testing.T, c *framework.Cluster, dynamicCalled bool) {
	cs := c.Client(0)
	ctx := testContext(t, 2*60e9)
	other := namespace(t, c, "match-conditions")
	const generated = `apiVersion: v1
kind: Service
metadata:
  generateName: e2e-generated-
  namespace: %s
spec:
  selector: {app: generated}
  ports: [{port: 80}]
`
	noEvalError := func(t *testing.T, what string, err error) {
		t.Helper()
		if err != nil {
			if strings.Contains(err.Error(), "resulted in error") || strings.Contains(err.Error(), "no such key") {
				t.Fatalf("%s: a matchCondition failed to evaluate: %v", what, err)
			}
			t.Fatalf("%s: %v", what, err)
		}
	}
	for _, ns := range []string{"default", other} {
		t.Run("in namespace "+strings.SplitN(ns, "-", 2)[0], func(t *testing.T) {
			var created []string
			t.Cleanup(func() {
				for _, n := range created {
					_ = cs.CoreV1().Services(ns).Delete(context.Background(), n, metav1.DeleteOptions{})
				}
			})
			_, _, err := c.Kubectl(ctx, fmt.Sprintf(generated, ns), "-n", ns, "create", "-f", "-", "--dry-run=server", "-o", "name")
			noEvalError(t, "kubectl create -f (generateName) --dry-run=server", err)
			out, _, err := c.Kubectl(ctx, fmt.Sprintf(generated, ns), "-n", ns, "create", "-f", "-", "-o", "name")
			noEvalError(t, "kubectl create -f (generateName)", err)
			name := strings.TrimPrefix(strings.TrimSpace(out), "service/")
			created = append(created, name)
			if !strings.HasPrefix(name, "e2e-generated-") {
				t.Fatalf("created %q", out)
			}
			if dynamicCalled {
				fixtures.Eventually(t, fmt.Sprintf("the validating webhook to see the generateName create of %s/%s", ns, name), 5*time.Second, func() bool {
					return len(decisionsFor(c, ns, name)) > 0
				})
			}
			_, _, err = c.Kubectl(ctx, "", "-n", ns, "label", "service", name, "e2e=labelled")
			noEvalError(t, "kubectl label (UPDATE by merge patch)", err)
			_, _, err = c.Kubectl(ctx, "", "-n", ns, "patch", "service", name, "--type=json", `-p=[{"op":"add","path":"/metadata/annotations","value":{"e2e":"patched"}}]`)
			noEvalError(t, "kubectl patch --type=json", err)
			_, _, err = c.Kubectl(ctx, "", "-n", ns, "patch", "service", name, "--subresource=status", "--type=merge", `-p={"status":{"loadBalancer":{}}}`)
			noEvalError(t, "kubectl patch --subresource=status", err)
			applied := fmt.Sprintf("apiVersion: v1\nkind: Service\nmetadata:\n  name: e2e-applied\n  namespace: %s\nspec:\n  selector: {app: applied}\n  ports: [{port: 80}]\n", ns)
			created = append(created, "e2e-applied")
			_, _, err = c.Kubectl(ctx, applied, "apply", "--server-side", "-f", "-")
			noEvalError(t, "kubectl apply --server-side (CREATE)", err)
			_, _, err = c.Kubectl(ctx, strings.Replace(applied, "port: 80", "port: 81", 1), "apply", "--server-side", "-f", "-")
			noEvalError(t, "kubectl apply --server-side (UPDATE)", err)
			_, _, err = c.Kubectl(ctx, strings.Replace(applied, "port: 80", "port: 82", 1), "apply", "--server-side", "--dry-run=server", "-f", "-")
			noEvalError(t, "kubectl apply --server-side --dry-run=server", err)
			_, err = cs.CoreV1().Services(ns).Patch(ctx, name, types.StrategicMergePatchType, []byte(`{"metadata":{"labels":{"e2e":"again"}}}`), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
			noEvalError(t, "strategic merge patch, dry run", err)
		})
	}
}

// A label-only update of an ExternalName Service allocates nothing. The
// mutating webhook's static conditions send it every UPDATE (so that a
// later mutating webhook's change reinvokes it; the managed condition
// narrows them again), and it answers this one allowed, skipped; a change
// away from ExternalName it acts on.
func TestExternalNameLabelUpdatesAllocateNothing(t *testing.T) {
	c := shared(t)
	cs := c.Client(0)
	ctx := testContext(t, 60e9)
	ns := namespace(t, c, "external-name")
	mustCreate(t, ctx, cs, fixtures.Service(ns, "ext", fixtures.WithExternalName("example.com")))
	mark := c.Webhooks[0].LogSize()
	if _, _, err := c.Kubectl(ctx, "", "-n", ns, "label", "service", "ext", "e2e=labelled"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Kubectl(ctx, "", "-n", ns, "patch", "service", "ext", "--type=merge", `-p={"spec":{"type":"ClusterIP","externalName":null,"ports":[{"port":80}]}}`); err != nil {
		t.Fatal(err)
	}
	mutatingUpdates := func() []framework.Decision {
		var out []framework.Decision
		for _, d := range c.Webhooks[0].DecisionsFrom(mark) {
			if d.Namespace == ns && d.Name == "ext" && d.Stage == "mutate" && d.Operation == "UPDATE" {
				out = append(out, d)
			}
		}
		return out
	}
	// The webhook writes a decision's line before it answers, and both
	// kubectl calls returned: every line of both updates (a reinvocation
	// included) is in the log already, so it is read once, without a wait.
	updates := mutatingUpdates()
	// The first (label-only) update is skipped as allocating nothing, the
	// second is not.
	var lines []string
	for _, d := range updates {
		lines = append(lines, d.Raw)
	}
	if len(updates) != 2 || !strings.Contains(updates[0].Raw, `"skipped":"ExternalName Service: no ClusterIP"`) || !strings.Contains(updates[1].Raw, `"skipped":""`) {
		t.Fatalf("the mutating webhook saw %d UPDATEs of ExternalName Service %s/ext, want 2: the label-only one skipped, the change to ClusterIP decided:\n%s", len(updates), ns, strings.Join(lines, "\n"))
	}
}
