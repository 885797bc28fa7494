//go:build e2e

package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"clusterip-policy/pkg/policy"
	"clusterip-policy/test/e2e/framework"
	"clusterip-policy/test/fixtures"
)

// apiserverAuditPolicy records Services and ServiceCIDRs at level Metadata, the
// lowest level that carries admission annotations.
const apiserverAuditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  resources:
  - group: ""
    resources: ["services"]
  - group: networking.k8s.io
    resources: ["servicecidrs"]
- level: None
`

// auditEvent is the part of a kube-apiserver audit event the test reads.
type auditEvent struct {
	Stage     string `json:"stage"`
	Verb      string `json:"verb"`
	ObjectRef struct {
		Resource  string `json:"resource"`
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	} `json:"objectRef"`
	ResponseStatus struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"responseStatus"`
	Annotations map[string]string `json:"annotations"`
}

// The webhook's auditAnnotations land in the kube-apiserver's own audit
// log, next to the request, prefixed with the webhook's name. The backstop
// (on by default) refuses an unapproved ServiceCIDR before the validating
// webhooks run, so that event carries the backstop's message and none of
// the webhook's annotations; the test waits until the apiserver enforces
// the backstop so that it does not depend on which came first.
func TestAuditAnnotationsInAPIServerAuditLog(t *testing.T) {
	dir := t.TempDir()
	policyFile, logFile := filepath.Join(dir, "audit-policy.yaml"), filepath.Join(dir, "audit.log")
	if err := os.WriteFile(policyFile, []byte(apiserverAuditPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	c := own(t, framework.Options{
		APIServers: []framework.APIServerOptions{{ServiceClusterIPRange: "10.96.0.0/16",
			ExtraArgs: []string{"--audit-policy-file=" + policyFile, "--audit-log-path=" + logFile}}},
		Policy: sharedPolicy, Webhooks: 1,
	})
	cs := c.Client(0)
	ctx := testContext(t, 2*60e9)
	ns := namespace(t, c, "auditlog")
	p, err := policy.ParseDocument([]byte(sharedPolicy))
	if err != nil {
		t.Fatal(err)
	}

	waitBackstopPolicy(t, ctx, c, p.Digest)

	mustCreate(t, ctx, cs, fixtures.Service(ns, "allowed"))
	mustCreate(t, ctx, cs, fixtures.Service("kube-system", "kube-dns"))
	t.Cleanup(func() { deleteServices(t, cs, "kube-system") })
	_, err = create(ctx, cs, fixtures.Service(ns, "denied", fixtures.WithClusterIP("10.96.0.10")))
	requireDenied(t, err, mutating, "is reserved for Service kube-system/kube-dns")
	if _, _, err := c.Kubectl(ctx, serviceCIDRYAML("e2e-rogue", "10.200.0.0/24"), "apply", "-f", "-"); err == nil {
		t.Fatal("the unapproved ServiceCIDR was created")
	}

	const (
		m = framework.MutatingWebhookName + "/"
		v = framework.ValidatingWebhookName + "/"
		r = "validate-servicecidrs.clusterip-policy.io/"
	)
	want := []struct {
		what                      string
		resource, namespace, name string
		code                      int
		annotations               map[string]string
		message                   string // a part of the response's message, when not empty
	}{
		{"an allowed create", "services", ns, "allowed", 201, map[string]string{
			m + "decision": "allowed", m + "policy-digest": p.Digest, v + "decision": "allowed", v + "policy-digest": p.Digest}, ""},
		{"a patched create", "services", "kube-system", "kube-dns", 201, map[string]string{
			m + "decision": "patched", m + "policy-digest": p.Digest, v + "decision": "allowed", v + "policy-digest": p.Digest}, ""},
		{"a denied create", "services", ns, "denied", 403, map[string]string{
			m + "decision": "denied", m + "rules": "reserved-for-other", m + "policy-digest": p.Digest}, ""},
		// An admission policy's refusal is a 422 (reason Invalid).
		{"a ServiceCIDR the backstop denied", "servicecidrs", "", "e2e-rogue", 422, map[string]string{},
			"(clusterip-policy backstop, rule outside-service-cidrs)"},
	}
	// The apiserver writes its audit log asynchronously: the first
	// subtest may wait for it, the later ones share what is left of 10s.
	deadline := time.Now().Add(10 * time.Second)
	for _, w := range want {
		t.Run(fmt.Sprintf("the audit log holds the annotations of %s", w.what), func(t *testing.T) {
			var found *auditEvent
			fixtures.EventuallyNil(t, fmt.Sprintf("a ResponseComplete create of %s %s/%s in %s", w.resource, w.namespace, w.name, logFile), time.Until(deadline), func() error {
				events := readAuditLog(t, logFile)
				for i := range events {
					e := &events[i]
					if e.Verb == "create" && e.Stage == "ResponseComplete" && e.ObjectRef.Resource == w.resource && e.ObjectRef.Namespace == w.namespace && e.ObjectRef.Name == w.name {
						found = e
					}
				}
				if found == nil {
					return fmt.Errorf("not among its %d events", len(events))
				}
				return nil
			})
			if found.ResponseStatus.Code != w.code {
				t.Errorf("response code %d, want %d", found.ResponseStatus.Code, w.code)
			}
			if !strings.Contains(found.ResponseStatus.Message, w.message) {
				t.Errorf("response message %q, want it to hold %q", found.ResponseStatus.Message, w.message)
			}
			ours := map[string]string{}
			for k, val := range found.Annotations {
				if strings.HasPrefix(k, m) || strings.HasPrefix(k, v) || strings.HasPrefix(k, r) {
					ours[k] = val
				}
			}
			if fmt.Sprint(ours) != fmt.Sprint(w.annotations) {
				t.Errorf("annotations of the webhook\n%v\nwant\n%v", ours, w.annotations)
			}
			t.Logf("e2e: kube-apiserver audit event for %s: %v", w.what, ours)
		})
	}
}

func readAuditLog(t *testing.T, path string) []auditEvent {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("the apiserver wrote no audit log: %v", err)
	}
	defer f.Close()
	var out []auditEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e auditEvent
		if json.Unmarshal(sc.Bytes(), &e) == nil {
			out = append(out, e)
		}
	}
	return out
}
