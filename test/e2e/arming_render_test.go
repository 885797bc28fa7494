//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"clusterip-policy/certs"
	"clusterip-policy/manifests"
	"clusterip-policy/test/e2e/framework"
	"clusterip-policy/test/fixtures"
)

// fieldDiff lists the paths where a and b differ: maps by key, lists of
// objects with a name by that name (webhooks[x], matchConditions[y]),
// other lists by index.
func fieldDiff(path string, a, b any, out *[]string) {
	switch av := a.(type) {
	case map[string]any:
		bv, ok := b.(map[string]any)
		if !ok {
			*out = append(*out, path)
			return
		}
		keys := map[string]bool{}
		for k := range av {
			keys[k] = true
		}
		for k := range bv {
			keys[k] = true
		}
		for k := range keys {
			p := k
			if path != "" {
				p = path + "." + k
			}
			fieldDiff(p, av[k], bv[k], out)
		}
	case []any:
		bv, ok := b.([]any)
		if !ok {
			*out = append(*out, path)
			return
		}
		named := func(l []any) map[string]any {
			m := map[string]any{}
			for _, e := range l {
				o, ok := e.(map[string]any)
				if !ok {
					return nil
				}
				n, ok := o["name"].(string)
				if !ok {
					return nil
				}
				m[n] = o
			}
			return m
		}
		an, bn := named(av), named(bv)
		if an == nil || bn == nil {
			if !reflect.DeepEqual(a, b) {
				*out = append(*out, path)
			}
			return
		}
		keys := map[string]bool{}
		for k := range an {
			keys[k] = true
		}
		for k := range bn {
			keys[k] = true
		}
		for k := range keys {
			if an[k] == nil || bn[k] == nil {
				*out = append(*out, path+"["+k+"]")
				continue
			}
			fieldDiff(path+"["+k+"]", an[k], bn[k], out)
		}
	default:
		if !reflect.DeepEqual(a, b) {
			*out = append(*out, path)
		}
	}
}

// TestRenderedConfigurationsDifferOnlyInTheLeadersFields renders the
// chart with helm template (as Argo CD and Flux's kustomize path do: no
// lookup), applies its two webhook configurations with server-side apply,
// as a GitOps tool does, lets the leader work (--arm-failure-policy,
// --manage-match-conditions) and lists every field of the live objects
// that differs from what the apiserver stored for the render: exactly the
// fields docs/install.md ("GitOps") says the leader owns. A second apply
// of the same render (a self-healing sync) disarms the Service webhooks;
// the leader arms them again within seconds and the difference is the same.
//
// The one change made to the render: clientConfig.service becomes a URL of
// the local webhook (no pods run here), the same in what is applied and
// what it is compared with; the caBundle is the local webhook's CA, given
// as the chart's values.
func TestRenderedConfigurationsDifferOnlyInTheLeadersFields(t *testing.T) {
	root, helm := repoAndHelm(t)
	c := own(t, framework.Options{Webhooks: 0, ArmByLeader: true, NoRegister: true,
		WebhookArgs: []string{"--policy-source=crd", "--arm-failure-policy", "--audit-interval=10m", "--manage-match-conditions"}})
	ctx := testContext(t, 4*time.Minute)
	installPolicyObject(t, ctx, c, policyObject(""))
	if err := c.StartWebhooks(ctx, 1); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	serving, err := c.WebhookCA.Sign(certs.Options{CommonName: "clusterip-policy-webhook.clusterip-policy.svc",
		DNSNames: certs.ServiceDNSNames("clusterip-policy-webhook", "clusterip-policy"), Validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"ca.crt": c.WebhookCA.CertPEM, "tls.crt": serving.CertPEM, "tls.key": serving.KeyPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.CommandContext(ctx, helm, "template", "clusterip-policy", "charts/clusterip-policy", "--namespace", "clusterip-policy",
		"--set", "dns.clusterIP=10.96.0.10", "--kube-version", "1.37.2",
		// The harness's CA as a certificate of the user's own: the render
		// carries it as the caBundle, so the webhook here (--cert-dir)
		// is called; the managed source would leave it to the leader.
		"--set", "certificate.source=existingSecret", "--set", "certificate.existingSecret=clusterip-policy-webhook-tls",
		"--set-file", "certificate.caBundle="+filepath.Join(dir, "ca.crt"))
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(dir, "cache"), "HELM_CONFIG_HOME="+filepath.Join(dir, "config"), "HELM_DATA_HOME="+filepath.Join(dir, "data"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	rendered, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, stderr.String())
	}
	docs, err := manifests.SplitYAML(rendered)
	if err != nil {
		t.Fatal(err)
	}
	var configs []string
	for _, d := range docs {
		var m map[string]any
		if err := yaml.Unmarshal(d, &m); err != nil {
			t.Fatal(err)
		}
		if k := m["kind"]; k != "MutatingWebhookConfiguration" && k != "ValidatingWebhookConfiguration" {
			continue
		}
		for _, w := range m["webhooks"].([]any) {
			cc := w.(map[string]any)["clientConfig"].(map[string]any)
			path := cc["service"].(map[string]any)["path"].(string)
			delete(cc, "service")
			cc["url"] = "https://" + c.Webhooks[0].Addr() + path
		}
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		configs = append(configs, string(b))
	}
	if len(configs) != 2 {
		t.Fatalf("the render has %d webhook configurations, want 2", len(configs))
	}
	render := strings.Join(configs, "\n")

	// What the apiserver stores for the render, defaults included, before
	// anyone else writes.
	stored := func(out string) map[string]map[string]any {
		t.Helper()
		var list struct {
			Items []map[string]any `json:"items"`
		}
		if err := json.Unmarshal([]byte(out), &list); err != nil || len(list.Items) == 0 {
			var one map[string]any
			if err := json.Unmarshal([]byte(out), &one); err != nil {
				t.Fatalf("decode %q: %v", out, err)
			}
			list.Items = []map[string]any{one}
		}
		m := map[string]map[string]any{}
		for _, o := range list.Items {
			md := o["metadata"].(map[string]any)
			for _, k := range []string{"managedFields", "resourceVersion", "uid", "creationTimestamp", "generation"} {
				delete(md, k)
			}
			m[o["kind"].(string)] = o
		}
		return m
	}
	apply := func(dryRun bool) map[string]map[string]any {
		t.Helper()
		args := []string{"apply", "--server-side", "--force-conflicts", "--field-manager=gitops", "-f", "-", "-o", "json"}
		if dryRun {
			args = append(args, "--dry-run=server")
		}
		out, errOut, err := c.Kubectl(ctx, render, args...)
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, errOut)
		}
		return stored(out)
	}
	live := func() map[string]map[string]any {
		t.Helper()
		out, errOut, err := c.Kubectl(ctx, "", "get", "mutatingwebhookconfiguration,validatingwebhookconfiguration", "clusterip-policy", "-o", "json")
		if err != nil {
			t.Fatalf("kubectl get: %v\n%s", err, errOut)
		}
		return stored(out)
	}
	want := []string{
		"MutatingWebhookConfiguration metadata.annotations.clusterip-policy.io/match-conditions-digest",
		"MutatingWebhookConfiguration metadata.annotations.clusterip-policy.io/match-conditions-policy",
		"MutatingWebhookConfiguration webhooks[mutate-services.clusterip-policy.io].failurePolicy",
		"MutatingWebhookConfiguration webhooks[mutate-services.clusterip-policy.io].matchConditions[policy-may-apply]",
		"ValidatingWebhookConfiguration metadata.annotations.clusterip-policy.io/match-conditions-digest",
		"ValidatingWebhookConfiguration metadata.annotations.clusterip-policy.io/match-conditions-policy",
		"ValidatingWebhookConfiguration webhooks[validate-services.clusterip-policy.io].failurePolicy",
		"ValidatingWebhookConfiguration webhooks[validate-services.clusterip-policy.io].matchConditions[policy-may-apply]",
	}
	differs := func(base map[string]map[string]any) []string {
		cur := live()
		var out []string
		for kind, o := range base {
			var d []string
			fieldDiff("", o, cur[kind], &d)
			for _, p := range d {
				out = append(out, kind+" "+p)
			}
		}
		sort.Strings(out)
		return out
	}
	// The leader has worked when both Service webhooks are armed and carry
	// the managed condition.
	settled := func(base map[string]map[string]any) []string {
		t.Helper()
		var got []string
		fixtures.EventuallyNil(t, "the configurations to differ from the render in the managed fields only", 60*time.Second, func() error {
			if got = differs(base); !slices.Equal(got, want) {
				return fmt.Errorf("fields differing from the render: %q", got)
			}
			return nil
		})
		return got
	}

	base := apply(true)
	for _, kind := range []string{"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"} {
		if base[kind] == nil {
			t.Fatalf("the dry-run apply returned no %s", kind)
		}
	}
	applied := time.Now()
	apply(false)
	got := settled(base)
	t.Logf("e2e: %s after kubectl apply of the render, the live configurations differ from it in exactly:\n  %s", time.Since(applied).Round(100*time.Millisecond), strings.Join(got, "\n  "))

	// A self-healing sync applies the same render again.
	resynced := time.Now()
	if now := apply(false); now["MutatingWebhookConfiguration"] == nil {
		t.Fatal("the second apply returned no MutatingWebhookConfiguration")
	}
	m, v, err := failurePolicies(ctx, c.Client(0))
	t.Logf("e2e: right after the second apply: mutating %s, validating %s (%v)", m, v, err)
	got = settled(base)
	t.Logf("e2e: %s after the second apply (a self-healing sync), armed again and the same fields differ: %d", time.Since(resynced).Round(100*time.Millisecond), len(got))
}
