//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	admv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"clusterip-policy/manifests"
	"clusterip-policy/test/e2e/framework"
	"clusterip-policy/test/fixtures"
)

const policyObjectWebhook = "validate-clusterippolicies.clusterip-policy.io"

// policyObject is a ClusterIPPolicy named default with the shared policy's
// fields plus the given reservation lines.
func policyObject(extraReservations string) string {
	return `apiVersion: clusterip-policy.io/v1alpha1
kind: ClusterIPPolicy
metadata:
  name: default
spec:
  allowedCIDRs: [10.96.0.0/12]
  reserveKubernetesService: true
  reservations:
  - ip: 10.96.0.10
    service: kube-system/kube-dns
    note: cluster DNS
` + extraReservations + `  enforcement:
    default: deny
`
}

// TestPolicyObject runs the webhook with --policy-source=crd: the policy is
// the ClusterIPPolicy object, applied with kubectl, and its status says
// which generation is in force and why a refused one is not.
func TestPolicyObject(t *testing.T) {
	c := own(t, framework.Options{Webhooks: 0, WebhookArgs: []string{"--policy-source=crd"}})
	cs := c.Client(0)
	ctx := testContext(t, 3*60e9)
	kubectl := func(t *testing.T, stdin string, args ...string) (string, error) {
		t.Helper()
		out, errOut, err := c.Kubectl(ctx, stdin, args...)
		return out + errOut, err
	}
	// readyOf is the object's Ready status, generation, generation in force
	// and Ready message, as `kubectl get` shows them.
	readyOf := func(t *testing.T) string {
		t.Helper()
		out, _ := kubectl(t, "", "get", "clusterippolicy", "default", "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status} {.status.observedGeneration} {.status.generationInForce} {.status.conditions[?(@.type=="Ready")].message}`)
		return out
	}
	waitStatus := func(t *testing.T, prefix string) string {
		t.Helper()
		var got string
		fixtures.EventuallyNil(t, "the status to start with "+strconv.Quote(prefix), 15*time.Second, func() error {
			if got = readyOf(t); !strings.HasPrefix(got, prefix) {
				return fmt.Errorf("status %q", got)
			}
			return nil
		})
		return got
	}

	if out, err := kubectl(t, "", "apply", "-f", filepath.Join(c.Root, "manifests", "base", "crd.yaml")); err != nil {
		t.Fatalf("apply the CRD: %v\n%s", err, out)
	}
	if out, err := kubectl(t, "", "wait", "--for=condition=Established", "crd/clusterippolicies.clusterip-policy.io", "--timeout=30s"); err != nil {
		t.Fatalf("the CRD is not established: %v\n%s", err, out)
	}

	t.Run("the schema refuses at apply time what it can express", func(t *testing.T) {
		cases := map[string]struct{ object, want string }{
			"a second policy object":              {strings.Replace(policyObject(""), "name: default", "name: extra", 1), "the webhook reads exactly one ClusterIPPolicy, named default"},
			"an address that is not one":          {policyObject("  - ip: 10.96.0.300\n    service: default/x\n"), "is not an IP address such as 10.96.0.10"},
			"a CIDR that is not one":              {strings.Replace(policyObject(""), "[10.96.0.0/12]", "[10.96.0.0/33]", 1), "is not a CIDR such as 10.96.0.0/16"},
			"an unknown action":                   {strings.Replace(policyObject(""), "default: deny", "default: block", 1), `Unsupported value: "block"`},
			"an owner that is not namespace/name": {policyObject("  - ip: 10.96.0.11\n    service: just-a-name\n"), "spec.reservations[1].service"},
			// Without spec the built-in default would be put in force and every
			// reservation dropped: an empty policy is spec: {}.
			"no spec at all": {"apiVersion: clusterip-policy.io/v1alpha1\nkind: ClusterIPPolicy\nmetadata:\n  name: default\n", "spec: Required value"},
		}
		for name, tc := range cases {
			out, err := kubectl(t, tc.object, "apply", "-f", "-")
			if err == nil || !strings.Contains(out, tc.want) {
				t.Errorf("%s: kubectl apply: %v\n%s\nwant a refusal containing %q", name, err, out, tc.want)
			}
		}
	})

	if out, err := kubectl(t, policyObject(""), "apply", "-f", "-"); err != nil {
		t.Fatalf("apply the policy: %v\n%s", err, out)
	}
	if err := c.StartWebhooks(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := c.RegisterWebhooks(ctx); err != nil {
		t.Fatal(err)
	}
	ns := namespace(t, c, "policy-object")

	t.Run("the webhook enforces the object and kubectl get shows Ready=True with the generation in use", func(t *testing.T) {
		waitStatus(t, "True 1 1 generation 1 is in force")
		_, err := create(ctx, cs, fixtures.Service(ns, "not-dns", fixtures.WithClusterIP("10.96.0.10")))
		requireDenied(t, err, mutating, "is reserved for Service kube-system/kube-dns")
		out, _ := kubectl(t, "", "get", "clusterippolicy", "default")
		t.Logf("kubectl get clusterippolicy default:\n%s", out)
		if f := strings.Fields(strings.Split(out, "\n")[1]); len(f) < 5 || f[0] != "default" || f[1] != "True" || f[2] != "1" || f[3] != "1" || f[4] != "Loaded" {
			t.Errorf("kubectl get columns %q, want default True 1 1 Loaded", f)
		}
		// Every spelling a user may type names the same object.
		// Every spelling a user may type names the same object: the
		// plural, the singular (the kind in lower case), the short name and
		// the fully qualified resource.
		for _, name := range []string{"clusterippolicies", "clusterippolicy", "cipp", "clusterippolicies.clusterip-policy.io"} {
			if got, err := kubectl(t, "", "get", name, "default", "-o", "name"); err != nil || strings.TrimSpace(got) != "clusterippolicy.clusterip-policy.io/default" {
				t.Errorf("kubectl get %s default: %q, %v", name, got, err)
			}
		}
		// The category lists it with the project's other resources.
		if got, err := kubectl(t, "", "get", "clusterip-policy", "-o", "name"); err != nil || strings.TrimSpace(got) != "clusterippolicy.clusterip-policy.io/default" {
			t.Errorf("kubectl get clusterip-policy (the category): %q, %v", got, err)
		}
		// kubectl explain documents every field from the Go types' comments.
		explain, err := kubectl(t, "", "explain", "clusterippolicy.spec.reservations")
		if err != nil {
			t.Fatalf("kubectl explain clusterippolicy.spec.reservations: %v\n%s", err, explain)
		}
		t.Logf("kubectl explain clusterippolicy.spec.reservations:\n%s", explain)
		for _, want := range []string{"reservations bind an address to the one Service", "ip\t<string> -required-", "service\t<string> -required-", "note\t<string>", "is the owner, as namespace/name"} {
			if !strings.Contains(explain, want) {
				t.Errorf("kubectl explain clusterippolicy.spec.reservations lacks %q", want)
			}
		}
	})

	// How soon is a figure (the e2e: line), not an assertion: a loaded
	// 2-core machine stretches it; 30 s catches an edit that never lands.
	t.Run("an edit takes effect, the time it took logged", func(t *testing.T) {
		before := time.Now() // kubectl's own start-up counts against the 2s too
		if out, err := kubectl(t, policyObject("  - ip: 10.96.0.77\n    service: "+ns+"/payments\n    note: added by an edit\n"), "apply", "-f", "-"); err != nil {
			t.Fatalf("apply the edit: %v\n%s", err, out)
		}
		start := time.Now()
		// Probed every 20ms, not with fixtures.Wait (which backs off to
		// 200ms): the figure is to the 20ms.
		for {
			_, err := dryRunCreate(ctx, cs, fixtures.Service(ns, "squatter", fixtures.WithClusterIP("10.96.0.77")))
			if deniedBy(err, mutating) {
				requireDenied(t, err, mutating, `"10.96.0.77": is reserved for Service `+ns+"/payments (added by an edit)")
				break
			}
			if time.Since(start) > 30*time.Second {
				t.Fatalf("the edit is not in force 30s after kubectl apply returned (last answer: %v)", err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Logf("e2e: policy object: the edit was enforced %s after kubectl apply returned, %s after it started", time.Since(start).Round(time.Millisecond), time.Since(before).Round(time.Millisecond))
		waitStatus(t, "True 2 2 generation 2 is in force")
	})

	t.Run("audit and bands --usage without --policy judge against the cluster's object", func(t *testing.T) {
		digest, _, _ := c.Kubectl(ctx, "", "get", "clusterippolicy", "default", "-o", "jsonpath={.status.policyDigest}")
		kubeconfig := "--kubeconfig=" + c.AdminKubeconfig
		for _, args := range [][]string{{"audit", kubeconfig}, {"bands", "--usage", kubeconfig}} {
			code, _, stderr := runForExit(t, []string{"HOME=" + t.TempDir()}, c.Bin.Webhook, args...)
			want := fmt.Sprintf("%s: judging against the cluster's ClusterIPPolicy default, generation 2 (policy digest %s)", args[0], digest)
			if code != 0 || !strings.Contains(stderr, want) {
				t.Errorf("%v: exit %d, stderr %q; want 0 and %q", args, code, stderr, want)
			}
		}
		file := filepath.Join(t.TempDir(), "policy.yaml")
		if err := os.WriteFile(file, []byte(policyObject("")), 0o644); err != nil {
			t.Fatal(err)
		}
		if code, _, stderr := runForExit(t, []string{"HOME=" + t.TempDir()}, c.Bin.Webhook, "audit", kubeconfig, "--policy", file); code != 0 || strings.Contains(stderr, "judging against the cluster's") {
			t.Errorf("audit --policy: exit %d, stderr %q; want the file, not the cluster's object", code, stderr)
		}
	})

	dupOwner := policyObject("  - ip: 10.96.0.77\n    service: " + ns + "/payments\n    note: added by an edit\n  - ip: 10.96.0.10\n    service: default/impostor\n")

	t.Run("through the manifests' registration, kubectl apply refuses a duplicate owner with the message naming both entries", func(t *testing.T) {
		// RegisterWebhooks applied manifests/base/webhook-configurations.yaml
		// with only clientConfig replaced: the policy-object check is one of
		// its webhooks.
		i := slices.IndexFunc(c.Configs.Validating.Webhooks, func(w admv1.ValidatingWebhook) bool { return w.Name == policyObjectWebhook })
		if i < 0 {
			t.Fatalf("%s registers no webhook %s", c.Configs.Source, policyObjectWebhook)
		}
		if w := c.Configs.Validating.Webhooks[i]; w.FailurePolicy == nil || *w.FailurePolicy != admv1.Ignore || !strings.HasSuffix(*w.ClientConfig.URL, manifests.ValidatePolicyObjectPath) {
			t.Fatalf("%s: %s is not the fail-open check on %s: %+v", c.Configs.Source, policyObjectWebhook, manifests.ValidatePolicyObjectPath, w)
		}
		out, err := kubectl(t, dupOwner, "apply", "-f", "-")
		if err == nil {
			t.Fatalf("kubectl apply accepted a policy with a duplicate owner:\n%s", out)
		}
		t.Logf("kubectl apply: %v: %s", err, strings.TrimSpace(out))
		for _, part := range []string{`admission webhook "validate-clusterippolicies.clusterip-policy.io" denied the request`, "spec.reservations[2]: 10.96.0.10 is reserved for both kube-system/kube-dns (spec.reservations[0]) and default/impostor; an IP has one owner"} {
			if !strings.Contains(out, part) {
				t.Errorf("kubectl apply's refusal lacks %q", part)
			}
		}
		waitStatus(t, "True 2 2 generation 2 is in force")
	})

	t.Run("kubectl apply refuses allowedCIDRs that leave the default ServiceCIDR nothing, and warns about a part of it", func(t *testing.T) {
		// The loader alone accepts this policy; on this cluster (default
		// ServiceCIDR 10.96.0.0/16) it would make every dynamic create fail.
		narrowing := "apiVersion: clusterip-policy.io/v1alpha1\nkind: ClusterIPPolicy\nmetadata:\n  name: default\nspec:\n  allowedCIDRs: [10.69.0.0/16]\n"
		out, err := kubectl(t, narrowing, "apply", "-f", "-")
		if err == nil {
			t.Fatalf("kubectl apply accepted allowedCIDRs [10.69.0.0/16] on a 10.96.0.0/16 cluster:\n%s", out)
		}
		t.Logf("kubectl apply: %v: %s", err, strings.TrimSpace(out))
		for _, part := range []string{`admission webhook "validate-clusterippolicies.clusterip-policy.io" denied the request`,
			`allowedCIDRs [10.69.0.0/16] leave no usable address of 10.96.0.0/16, the primary range of ServiceCIDR "kubernetes"`,
			"add 10.96.0.0/16 (or the part of it Services may use) to allowedCIDRs"} {
			if !strings.Contains(out, part) {
				t.Errorf("kubectl apply's refusal lacks %q", part)
			}
		}
		partial := strings.Replace(narrowing, "[10.69.0.0/16]", "[10.96.0.0/20]", 1)
		out, err = kubectl(t, partial, "apply", "--dry-run=server", "-f", "-")
		if err != nil || !strings.Contains(out, "Warning: allowedCIDRs keep only [10.96.0.0/20] of 10.96.0.0/16") {
			t.Errorf("kubectl apply --dry-run=server of a part of the range: %v\n%s\nwant it accepted with a warning", err, out)
		}
		waitStatus(t, "True 2 2 generation 2 is in force")
		// And the dynamic creates the refusal protects still work.
		if _, err := create(ctx, cs, fixtures.Service(ns, "dynamic-after-refusal")); err != nil {
			t.Fatalf("a dynamic create after the refused policy: %v", err)
		}
	})

	t.Run("a field of a newer CRD this replica does not know is accepted with a warning, not refused (a one-step helm upgrade)", func(t *testing.T) {
		// A chart upgrade applies the newer CRD first, then the policy that
		// uses its new field while the old replicas still answer the check.
		// Here the cluster's CRD is made newer than this binary instead.
		const prop = "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/futureSetting"
		if out, err := kubectl(t, "", "patch", "crd", "clusterippolicies.clusterip-policy.io", "--type=json", "-p",
			`[{"op":"add","path":"`+prop+`","value":{"type":"string"}}]`); err != nil {
			t.Fatalf("make the CRD newer: %v\n%s", err, out)
		}
		defer func() {
			if out, err := kubectl(t, "", "patch", "crd", "clusterippolicies.clusterip-policy.io", "--type=json", "-p", `[{"op":"remove","path":"`+prop+`"}]`); err != nil {
				t.Errorf("put the CRD back: %v\n%s", err, out)
			}
		}()
		newer := strings.Replace(policyObject(""), "spec:\n", "spec:\n  futureSetting: \"on\"\n", 1)
		fixtures.EventuallyNil(t, "kubectl apply --dry-run=server of the newer field to pass with the webhook's warning", 15*time.Second, func() error {
			out, err := kubectl(t, newer, "apply", "--dry-run=server", "-f", "-")
			if err != nil {
				return fmt.Errorf("%w\n%s", err, out)
			}
			if !strings.Contains(out, "does not know spec.futureSetting: the CRD installed is newer") {
				return fmt.Errorf("no warning about spec.futureSetting:\n%s", out)
			}
			t.Logf("kubectl apply --dry-run=server: %s", strings.TrimSpace(out))
			return nil
		})
		// What this version knows is still judged beside the newer field.
		bad := strings.Replace(dupOwner, "spec:\n", "spec:\n  futureSetting: \"on\"\n", 1)
		if out, err := kubectl(t, bad, "apply", "--dry-run=server", "-f", "-"); err == nil || !strings.Contains(out, "an IP has one owner") {
			t.Errorf("a duplicate owner beside a newer field: %v\n%s\nwant refused", err, out)
		}
	})

	t.Run("status writes and updates that keep the spec are not sent to the check", func(t *testing.T) {
		calls := func() float64 {
			return metricValue(t, c.Webhooks[0], `controller_runtime_webhook_requests_total{code="200",webhook="`+manifests.ValidatePolicyObjectPath+`"}`)
		}
		before := calls()
		// A forged status (the webhook writes it back: a second status
		// write), a label and an annotation: none changes the spec.
		if out, err := kubectl(t, "", "patch", "clusterippolicy", "default", "--subresource=status", "--type=merge", "-p",
			`{"status":{"generationInForce":98}}`); err != nil {
			t.Fatalf("patch the status: %v\n%s", err, out)
		}
		waitStatus(t, "True 2 2 generation 2 is in force")
		for _, args := range [][]string{{"label", "clusterippolicy", "default", "e2e=label-only"}, {"annotate", "clusterippolicy", "default", "e2e=annotation-only"}} {
			if out, err := kubectl(t, "", args...); err != nil {
				t.Fatalf("kubectl %v: %v\n%s", args, err, out)
			}
		}
		// The marker: a spec change (server-side dry run), sent after those
		// three returned, is one review. Once it is counted, any review
		// of the three would be too: the count is then exactly 1.
		if out, err := kubectl(t, policyObject("  - ip: 10.96.0.77\n    service: "+ns+"/payments\n    note: reworded\n"), "apply", "--dry-run=server", "-f", "-"); err != nil {
			t.Fatalf("dry-run apply of a spec change: %v\n%s", err, out)
		}
		fixtures.Eventually(t, "the spec change's review to be counted", 10*time.Second, func() bool { return calls()-before >= 1 })
		if n := calls() - before; n != 1 {
			t.Errorf("%v reviews reached %s for status, label and annotation updates and one spec change, want 1 (the spec change's)", n, manifests.ValidatePolicyObjectPath)
		}
	})

	t.Run("with the check unreachable, failurePolicy Ignore lets the policy be edited (the webhook's loader still refuses a bad one)", func(t *testing.T) {
		// The webhook keeps running (it writes the status); only the
		// apiserver's way to the check is cut, as when no replica is ready.
		// It stays cut for the rest of this test, which needs bad edits
		// accepted.
		cfg, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, c.Configs.Validating.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(cfg.Webhooks, func(w admv1.ValidatingWebhook) bool { return w.Name == policyObjectWebhook })
		dead := "https://127.0.0.1:1" + manifests.ValidatePolicyObjectPath
		cfg.Webhooks[i].ClientConfig.URL = &dead
		if _, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(ctx, cfg, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		// The apiserver picks the change up asynchronously.
		fixtures.EventuallyNil(t, "kubectl apply --dry-run=server to pass with the check cut off", 10*time.Second, func() error {
			if out, err := kubectl(t, dupOwner, "apply", "--dry-run=server", "-f", "-"); err != nil {
				return fmt.Errorf("%w\n%s", err, out)
			}
			return nil
		})
	})

	// The refused generation is counted once: not again for the update
	// events of the status writes it causes. Checked in the next subtest,
	// once the webhook has loaded the good generation that follows: its
	// watch delivers an object's events in order, so by then it has
	// handled every status write of the refused one.
	const failures = `clusterip_policy_policy_reloads_total{result="failure"}`
	failedBefore := metricValue(t, c.Webhooks[0], failures)
	t.Run("without the check (as while the webhook is down: failurePolicy Ignore), a duplicate owner is accepted, refused by the webhook, the last good generation stays in force and kubectl get says so", func(t *testing.T) {
		if out, err := kubectl(t, dupOwner, "apply", "-f", "-"); err != nil {
			t.Fatalf("apply the bad edit: %v\n%s", err, out)
		}
		got := waitStatus(t, "False 3 2 generation 3 refused: ")
		// The webhook counts a refusal before it tells the status writer.
		if n := metricValue(t, c.Webhooks[0], failures) - failedBefore; n != 1 {
			t.Errorf("%s went up by %v for one refused generation, want 1", failures, n)
		}
		t.Logf("status (Ready, observedGeneration, generationInForce, message): %s", got)
		for _, part := range []string{"spec.reservations[2]: 10.96.0.10 is reserved for both kube-system/kube-dns (spec.reservations[0]) and default/impostor; an IP has one owner", "generation 2 stays in force"} {
			if !strings.Contains(got, part) {
				t.Errorf("Ready message %q lacks %q", got, part)
			}
		}
		out, _ := kubectl(t, "", "get", "clusterippolicy", "default")
		t.Logf("kubectl get clusterippolicy default:\n%s", out)
		if f := strings.Fields(strings.Split(out, "\n")[1]); len(f) < 5 || f[1] != "False" || f[2] != "3" || f[3] != "2" || f[4] != "Refused" {
			t.Errorf("kubectl get columns %q, want default False 3 2 Refused", f)
		}
		_, err := dryRunCreate(ctx, cs, fixtures.Service(ns, "squatter", fixtures.WithClusterIP("10.96.0.77")))
		requireDenied(t, err, mutating, "is reserved for Service "+ns+"/payments")
		if exited, err := c.Webhooks[0].Exited(); exited {
			t.Fatalf("the webhook exited on a refused policy: %v", err)
		}
	})

	t.Run("a good edit brings Ready=True with the new generation", func(t *testing.T) {
		if out, err := kubectl(t, policyObject(""), "apply", "-f", "-"); err != nil {
			t.Fatalf("apply: %v\n%s", err, out)
		}
		waitStatus(t, "True 4 4 generation 4 is in force")
		if n := metricValue(t, c.Webhooks[0], failures) - failedBefore; n != 1 {
			t.Errorf("%s went up by %v for one refused generation, its status writes and a good one, want 1: a status write was loaded and refused again", failures, n)
		}
		waitBackstopPolicy(t, ctx, c, "")
		if _, err := dryRunCreate(ctx, cs, fixtures.Service(ns, "squatter", fixtures.WithClusterIP("10.96.0.77"))); err != nil {
			t.Fatalf("10.96.0.77 is still reserved after the reservation was removed: %v", err)
		}
	})

	t.Run("deleting the object keeps the last good policy; a webhook that starts without one is not ready until it exists", func(t *testing.T) {
		if out, err := kubectl(t, "", "delete", "clusterippolicy", "default"); err != nil {
			t.Fatalf("delete: %v\n%s", err, out)
		}
		// The watch delivered the delete once the webhook logs it.
		fixtures.EventuallyNil(t, "the webhook to log the object's deletion", 10*time.Second, func() error {
			if log, _ := c.Webhooks[0].Log(); !strings.Contains(log, "was deleted; the last good policy stays in force") {
				return fmt.Errorf("not logged; last lines:\n%s", lastLines(log, 5))
			}
			return nil
		})
		_, err := dryRunCreate(ctx, cs, fixtures.Service(ns, "not-dns", fixtures.WithClusterIP("10.96.0.10")))
		requireDenied(t, err, mutating, "is reserved for Service kube-system/kube-dns")
		w, err := c.StartWebhookUnready(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// Its view synced, only the policy keeps it not ready. That the
		// replica found no object is not observable (it logs and counts
		// nothing for an absent one), so this stays a window: 3 s of not
		// ready once the view has synced.
		waitViewSynced(t, w)
		if err := w.WaitReady(ctx, 3*time.Second); err == nil {
			t.Fatal("a webhook with no policy object got ready")
		}
		if out, err := kubectl(t, policyObject(""), "apply", "-f", "-"); err != nil {
			t.Fatalf("apply: %v\n%s", err, out)
		}
		if err := w.WaitReady(ctx, 15*time.Second); err != nil {
			t.Fatalf("the webhook did not get ready once the object existed: %v", err)
		}
		waitStatus(t, "True 1 1 generation 1 is in force")
	})

	t.Run("a status written by someone else is put right", func(t *testing.T) {
		if out, err := kubectl(t, "", "patch", "clusterippolicy", "default", "--subresource=status", "--type=merge", "-p",
			`{"status":{"generationInForce":99,"conditions":[{"type":"Ready","status":"True","reason":"Loaded","message":"forged","lastTransitionTime":"2020-01-01T00:00:00Z"}]}}`); err != nil {
			t.Fatalf("patch the status: %v\n%s", err, out)
		}
		waitStatus(t, "True 1 1 generation 1 is in force")
	})

	t.Run("replicas agree on the status, also one that started while the object was refused", func(t *testing.T) {
		if out, err := kubectl(t, dupOwner, "apply", "-f", "-"); err != nil {
			t.Fatalf("apply the bad edit: %v\n%s", err, out)
		}
		waitStatus(t, "False 2 1 generation 2 refused: ")
		w, err := c.StartWebhookUnready(ctx) // a third replica: nothing good to load
		if err != nil {
			t.Fatal(err)
		}
		// The replica has read the object and refused it (it logs that
		// before it tells its status writer), and its view has synced:
		// only the refused policy can keep it not ready now.
		fixtures.EventuallyNil(t, "the third replica to refuse generation 2", 15*time.Second, func() error {
			if log, _ := w.Log(); !strings.Contains(log, "refused the ClusterIPPolicy; no policy is in force") {
				return fmt.Errorf("not logged; last lines:\n%s", lastLines(log, 5))
			}
			return nil
		})
		waitViewSynced(t, w)
		if code := readyzCode(w); code == http.StatusOK {
			t.Fatal("a webhook that never loaded a good policy got ready")
		}
		// Were the replicas to disagree, each would rewrite the status on
		// the other's update, without end. Such a loop has no last event
		// to wait for: it shows only as writes that go on, so this stays a
		// window, from the moment the third replica had its say (above).
		rv := func() string {
			out, _ := kubectl(t, "", "get", "clusterippolicy", "default", "-o", "jsonpath={.metadata.resourceVersion}")
			return out
		}
		before := rv()
		time.Sleep(2 * time.Second)
		if after := rv(); after != before {
			t.Errorf("the status keeps changing (resourceVersion %s, then %s): the replicas disagree", before, after)
		}
		got := waitStatus(t, "False 2 1 generation 2 refused: ")
		if !strings.Contains(got, "generation 1 stays in force") {
			t.Errorf("status %q", got)
		}
		if out, err := kubectl(t, policyObject(""), "apply", "-f", "-"); err != nil {
			t.Fatalf("apply: %v\n%s", err, out)
		}
		waitStatus(t, "True 3 3 generation 3 is in force")
		if err := w.WaitReady(ctx, 15*time.Second); err != nil {
			t.Fatalf("the third replica did not get ready once the object was fixed: %v", err)
		}
	})
}

// installPolicyObject installs as the manifests do before the webhook
// starts: the CRD of manifests/base, established, then the policy object.
func installPolicyObject(t *testing.T, ctx context.Context, c *framework.Cluster, object string) {
	t.Helper()
	if out, _, err := c.Kubectl(ctx, "", "apply", "-f", filepath.Join(c.Root, "manifests", "base", "crd.yaml")); err != nil {
		t.Fatalf("apply the CRD: %v\n%s", err, out)
	}
	if out, _, err := c.Kubectl(ctx, "", "wait", "--for=condition=Established", "crd/clusterippolicies.clusterip-policy.io", "--timeout=30s"); err != nil {
		t.Fatalf("the CRD is not established: %v\n%s", err, out)
	}
	if out, _, err := c.Kubectl(ctx, object, "apply", "-f", "-"); err != nil {
		t.Fatalf("apply the policy object: %v\n%s", err, out)
	}
}

// waitViewSynced waits until w's view of the cluster has synced
// (clusterip_policy_view_synced 1): from then on only the policy decides
// whether it is ready.
func waitViewSynced(t *testing.T, w *framework.Webhook) {
	t.Helper()
	fixtures.EventuallyNil(t, w.Name+"'s view to sync", 30*time.Second, func() error {
		text, err := w.Metrics() // refused until the metrics server listens
		if err != nil {
			return err
		}
		v, err := framework.SumMetric(strings.NewReader(text), "clusterip_policy_view_synced")
		if err != nil {
			return fmt.Errorf("clusterip_policy_view_synced: %w", err)
		}
		if v != 1 {
			return fmt.Errorf("clusterip_policy_view_synced %v", v)
		}
		return nil
	})
}
