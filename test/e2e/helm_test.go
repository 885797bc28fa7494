//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"clusterip-policy/certs"
	"clusterip-policy/test/e2e/framework"
	"clusterip-policy/test/fixtures"
)

// helmPolicy is the policy the chart installs in TestHelmChart: the
// example's ranges with a reservation of its own, so a denial naming it can
// only come from the policy that went through the chart's values.
const helmPolicy = `apiVersion: clusterip-policy.io/v1alpha1
kind: ClusterIPPolicy
metadata:
  name: default
spec:
  serviceCIDRs: [10.96.0.0/16]
  reserveKubernetesService: true
  reservations:
  - ip: 10.96.0.53
    service: kube-system/helm-dns
    note: installed by helm
  enforcement:
    default: deny
`

// TestHelmChart installs charts/clusterip-policy with the helm built by
// hack/build-tools.sh into the local apiserver and shows the webhook
// enforcing the chart's policy through the chart's webhook configurations.
// The harness runs no pods, so, as TestDeploymentManifests does for the
// kustomize base, a local webhook process stands in for the Deployment: it
// runs as the chart's service account with the chart's RBAC, reads the
// policy from the chart's ClusterIPPolicy object (policySource crd, the
// chart's default, as the base's), and the configurations are re-pointed
// from the Service to its address, clientConfig.service only.
func TestHelmChart(t *testing.T) {
	root, helm := repoAndHelm(t)
	c := own(t, framework.Options{WebhookArgs: []string{"--policy-source=crd"}, NoRBAC: true, NoRegister: true})
	cs := c.Client(0)
	ctx := testContext(t, 3*60e9)

	// The chart's caBundle is the CA the local webhook serves from, given as
	// values: the chart's path for operators who bring their own certificate.
	var err error
	if c.WebhookCA, err = certs.NewCA("clusterip-policy-helm-e2e-ca", time.Hour); err != nil {
		t.Fatal(err)
	}
	serving, err := c.WebhookCA.Sign(certs.Options{CommonName: "clusterip-policy-webhook.clusterip-policy.svc",
		DNSNames: certs.ServiceDNSNames("clusterip-policy-webhook", "clusterip-policy"), Validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files := map[string][]byte{"policy.yaml": []byte(helmPolicy), "ca.crt": c.WebhookCA.CertPEM, "tls.crt": serving.CertPEM, "tls.key": serving.KeyPEM}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	runHelm := helmRunner{bin: helm, root: root, dir: dir, kubeconfig: c.AdminKubeconfig}.run

	t.Run("helm install creates every object of the chart", func(t *testing.T) {
		start := time.Now()
		out, err := runHelm(ctx, "install", "clusterip-policy", "charts/clusterip-policy", "--namespace", "clusterip-policy", "--create-namespace",
			"--set-file", "policy="+filepath.Join(dir, "policy.yaml"),
			"--set", "certificate.source=existingSecret", "--set", "certificate.existingSecret=clusterip-policy-webhook-tls",
			"--set-file", "certificate.caBundle="+filepath.Join(dir, "ca.crt"))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("helm install (%s):\n%s", time.Since(start).Round(time.Millisecond), out)
		// NOTES.txt says what the install does to Service creates: armed
		// by the leader (the default), none fails for want of the webhook.
		if !strings.Contains(out, "Its Service webhooks start with failurePolicy Ignore") || strings.Contains(out, `may fail with "failed calling webhook"`) {
			t.Errorf("helm install's notes do not say the Service webhooks start not armed:\n%s", out)
		}
		// helm install (lookup reads the cluster) stores the pre-delete
		// hook that unregisters the configurations and the post-delete
		// one that cleans up after the pods; helm template never
		// renders it (manifests/helm_uninstallhook_test.go).
		if hooks, err := runHelm(ctx, "get", "hooks", "clusterip-policy", "--namespace", "clusterip-policy"); err != nil || !strings.Contains(hooks, "helm.sh/hook: pre-delete") || !strings.Contains(hooks, `args: ["unregister"`) {
			t.Errorf("helm install stored no pre-delete hook running unregister (%v):\n%s", err, hooks)
		} else if !strings.Contains(hooks, "helm.sh/hook: post-delete") || !strings.Contains(hooks, `args: ["cleanup","--namespace","clusterip-policy",`) || strings.Count(hooks, "priorityClassName:") != 1 {
			// The post-delete Job runs with no priority class: the
			// ResourceQuota that admits critical pods is gone by then.
			t.Errorf("helm install stored no post-delete hook running cleanup in the release namespace without a priority class:\n%s", hooks)
		}
		manifest, err := runHelm(ctx, "get", "manifest", "clusterip-policy", "--namespace", "clusterip-policy")
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, want := range []string{"customresourcedefinition.apiextensions.k8s.io/clusterippolicies.clusterip-policy.io", "clusterippolicies.clusterip-policy.io/default",
			"serviceaccount/clusterip-policy-webhook",
			"service/clusterip-policy-webhook", "deployment.apps/clusterip-policy-webhook", "poddisruptionbudget.policy/clusterip-policy-webhook",
			"role.rbac.authorization.k8s.io/clusterip-policy-webhook-holds", "rolebinding.rbac.authorization.k8s.io/clusterip-policy-webhook-holds",
			"clusterrole.rbac.authorization.k8s.io/clusterip-policy-webhook", "clusterrolebinding.rbac.authorization.k8s.io/clusterip-policy-webhook",
			"mutatingwebhookconfiguration.admissionregistration.k8s.io/clusterip-policy", "validatingwebhookconfiguration.admissionregistration.k8s.io/clusterip-policy"} {
			if _, _, err := c.Kubectl(ctx, "", "get", want, "-n", "clusterip-policy", "-o", "name"); err != nil {
				t.Errorf("%s not found after helm install: %v", want, err)
				continue
			}
			n++
		}
		if !strings.Contains(manifest, "kind: MutatingWebhookConfiguration") {
			t.Error("helm get manifest lists no MutatingWebhookConfiguration")
		}
		t.Logf("e2e: helm: %d objects of the chart installed and found", n)
	})
	if t.Failed() {
		return
	}

	t.Run("the webhook with the chart's RBAC and the chart's policy object gets ready", func(t *testing.T) {
		// The policy file given with --set-file became the object's spec.
		reservations, _, err := c.Kubectl(ctx, "", "get", "clusterippolicy", "default", "-o", "jsonpath={.spec.reservations[*].service}")
		if err != nil {
			t.Fatal(err)
		}
		if reservations != "kube-system/helm-dns" {
			t.Fatalf("the chart's ClusterIPPolicy reserves for %q, want kube-system/helm-dns from the policy given with --set-file", reservations)
		}
		// The identity of the chart's service account, whose RBAC the chart created.
		if c.RBAC, err = framework.LoadRBAC(root); err != nil {
			t.Fatal(err)
		}
		if err := c.StartWebhooks(ctx, 1); err != nil {
			t.Fatalf("a webhook with the chart's RBAC never got ready: %v", err)
		}
	})
	if t.Failed() {
		return
	}

	t.Run("the chart's webhook configurations, re-pointed in clientConfig.service only, enforce the policy", func(t *testing.T) {
		adm := cs.AdmissionregistrationV1()
		m, err := adm.MutatingWebhookConfigurations().Get(ctx, "clusterip-policy", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		v, err := adm.ValidatingWebhookConfigurations().Get(ctx, "clusterip-policy", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// The caBundle the chart set from its values is kept: the local
		// webhook serves from that CA, so a call succeeding proves it.
		for i, w := range m.Webhooks {
			if !bytes.Equal(w.ClientConfig.CABundle, c.WebhookCA.CertPEM) {
				t.Fatalf("mutating webhook %s: caBundle is not the CA given in values", w.Name)
			}
			repoint(ctx, t, c, "mutatingwebhookconfiguration", i, *w.ClientConfig.Service.Path)
		}
		for i, w := range v.Webhooks {
			if !bytes.Equal(w.ClientConfig.CABundle, c.WebhookCA.CertPEM) {
				t.Fatalf("validating webhook %s: caBundle is not the CA given in values", w.Name)
			}
			repoint(ctx, t, c, "validatingwebhookconfiguration", i, *w.ClientConfig.Service.Path)
		}
		if err := c.WaitWebhooksCalled(ctx); err != nil {
			t.Fatal(err)
		}
		ns := namespace(t, c, "helm")
		_, err = create(ctx, cs, fixtures.Service(ns, "squatter", fixtures.WithClusterIP("10.96.0.53")))
		requireDenied(t, err, mutating, "is reserved for Service kube-system/helm-dns")
		_, err = create(ctx, cs, fixtures.Service(ns, "in-dynamic-band", fixtures.WithClusterIP("10.96.200.5")))
		requireDenied(t, err, mutating, "lies in the dynamic band 10.96.1.1-10.96.255.254")
		if s, err := create(ctx, cs, fixtures.Service(ns, "static-band", fixtures.WithClusterIP("10.96.0.60"))); err != nil {
			t.Errorf("a static-band address no one reserved was refused: %v", err)
		} else {
			t.Logf("e2e: helm: %s/%s got %s", ns, s.Name, s.Spec.ClusterIP)
		}
		t.Cleanup(func() { deleteServices(t, cs, ns) })
		// The release namespace is excluded, so the webhook's own Service never depends on it.
		if _, err := create(ctx, cs, fixtures.Service("clusterip-policy", "in-dynamic-band", fixtures.WithClusterIP("10.96.200.6"))); err != nil {
			t.Errorf("a Service in the release namespace was refused: %v", err)
		}
		t.Cleanup(func() { deleteServices(t, cs, "clusterip-policy") })

		// The chart's policy-object check (re-pointed above with the rest)
		// refuses a bad edit; the object in force shows Ready.
		status, _, _ := c.Kubectl(ctx, "", "get", "clusterippolicy", "default", "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status} {.status.generationInForce}`)
		if status != "True 1" {
			t.Errorf("ClusterIPPolicy default: Ready and generation in force %q, want True 1", status)
		}
		bad := strings.Replace(helmPolicy, "  enforcement:", "  - ip: 10.96.0.53\n    service: default/impostor\n  enforcement:", 1)
		// The last re-pointing may reach the apiserver after the Service
		// webhooks answered: server-side dry runs until the check refuses.
		_ = fixtures.Wait(10*time.Second, func() bool {
			_, _, err := c.Kubectl(ctx, bad, "apply", "--server-side", "--force-conflicts", "--dry-run=server", "-f", "-")
			return err != nil
		})
		out, errOut, err := c.Kubectl(ctx, bad, "apply", "--server-side", "--force-conflicts", "-f", "-")
		if err == nil || !strings.Contains(errOut, `admission webhook "validate-clusterippolicies.clusterip-policy.io" denied the request`) || !strings.Contains(errOut, "and default/impostor; an IP has one owner") {
			t.Errorf("kubectl apply of a duplicate owner through the chart's check: %v\n%s%s", err, out, errOut)
		} else {
			t.Logf("kubectl apply of a duplicate owner: %s", strings.TrimSpace(errOut))
		}
	})

	t.Run("helm uninstall removes the webhook configurations", func(t *testing.T) {
		// docs/install.md keeps a copy of the policy object first: helm
		// deletes the object it rendered, so a copy taken after would be
		// empty.
		backup, _, err := c.Kubectl(ctx, "", "get", "clusterippolicy", "default", "-o", "yaml")
		if err != nil || !strings.Contains(backup, "kind: ClusterIPPolicy") || !strings.Contains(backup, "reservations:") {
			t.Fatalf("kubectl get clusterippolicy default -o yaml before the uninstall: %v\n%s", err, backup)
		}
		// --no-hooks: no kubelet here runs the pre-delete Job
		// (unregister); the node tests run it.
		if out, err := runHelm(ctx, "uninstall", "clusterip-policy", "--namespace", "clusterip-policy", "--no-hooks"); err != nil {
			t.Fatal(err)
		} else {
			t.Logf("helm uninstall: %s", strings.TrimSpace(out))
		}
		if out, errOut, err := c.Kubectl(ctx, "", "get", "clusterippolicy", "default", "-o", "yaml"); err == nil || !strings.Contains(errOut, "NotFound") {
			t.Errorf("after helm uninstall the policy object is still there (%v): the docs back it up before the uninstall for nothing\n%s%s", err, out, errOut)
		}
		for _, kind := range []string{"mutatingwebhookconfiguration", "validatingwebhookconfiguration"} {
			if out, _, err := c.Kubectl(ctx, "", "get", kind, "-o", "name"); err != nil || strings.Contains(out, "clusterip-policy") {
				t.Errorf("after helm uninstall: %s: %q, %v", kind, out, err)
			}
		}
	})

	if t.Failed() {
		return
	}

	// With the default (managed) certificates the chart renders no Secret
	// and no caBundle: the leader writes the caBundle. A helm upgrade (a
	// three-way merge: the field is in neither render) must keep what the
	// leader wrote, or every Service create would fail until it wrote it
	// again. The leader's write is made here as the leader makes it (an
	// update of the object as read).
	t.Run("a caBundle written by the leader survives helm upgrade, which changes the policy", func(t *testing.T) {
		// With no DNS address in values and no DNS Service to read it
		// from, the chart refuses rather than reserve a guess.
		out, err := runHelm(ctx, "install", "clusterip-policy", "charts/clusterip-policy", "--namespace", "clusterip-policy")
		if err == nil || !strings.Contains(err.Error()+out, "dns.clusterIP is required") {
			t.Fatalf("helm install with no DNS address and no kube-system/kube-dns: %v\n%s; want the refusal naming dns.clusterIP", err, out)
		}
		t.Logf("e2e: helm: install without a DNS address refused: %s", strings.TrimSpace(lastLines(err.Error(), 1)))
		// With the DNS Service in place, install reads its address and says so.
		if _, _, err := c.Kubectl(ctx, "", "create", "service", "clusterip", "kube-dns", "-n", "kube-system", "--tcp=53", "--clusterip=10.96.0.10"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_, _, _ = c.Kubectl(ctx, "", "delete", "service", "kube-dns", "-n", "kube-system", "--ignore-not-found")
		})
		if out, err = runHelm(ctx, "install", "clusterip-policy", "charts/clusterip-policy", "--namespace", "clusterip-policy"); err != nil {
			t.Fatal(err)
		}
		t.Logf("helm install (generated certificate, DNS address read from the cluster): %s", strings.Fields(out)[1])
		for _, want := range []string{"The policy reserves 10.96.0.10 for kube-system/kube-dns (read from that Service in the cluster at install", "Enforcement is warn", "Except a reserved address: the leader holds it", "--set enforcement=deny"} {
			if !strings.Contains(out, want) {
				t.Errorf("helm install's notes lack %q:\n%s", want, out)
			}
		}
		if mode, _, _ := c.Kubectl(ctx, "", "get", "clusterippolicy", "default", "-o", "jsonpath={.spec.enforcement.default}"); mode != "warn" {
			t.Errorf("a first install's enforcement is %q, want warn", mode)
		}
		t.Cleanup(func() {
			_, _ = runHelm(ctx, "uninstall", "clusterip-policy", "--namespace", "clusterip-policy", "--no-hooks")
		})
		if _, _, err := c.Kubectl(ctx, "", "get", "secret", "clusterip-policy-webhook-tls", "-n", "clusterip-policy"); err == nil {
			t.Error("the chart rendered the Secret clusterip-policy-webhook-tls; with managed certificates the leader makes it")
		}
		leaderCA, err := certs.NewCA("leader-written", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		v, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "clusterip-policy", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range v.Webhooks {
			if len(v.Webhooks[i].ClientConfig.CABundle) != 0 {
				t.Errorf("webhook %s has a caBundle from the chart", v.Webhooks[i].Name)
			}
			v.Webhooks[i].ClientConfig.CABundle = leaderCA.CertPEM
		}
		if _, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(ctx, v, metav1.UpdateOptions{FieldManager: "clusterip-policy-certificates"}); err != nil {
			t.Fatal(err)
		}
		state := func() (secret, bundle, policy string) {
			secret = "none"
			bundle, _, err = c.Kubectl(ctx, "", "get", "validatingwebhookconfiguration", "clusterip-policy", "-o", "jsonpath={.webhooks[*].clientConfig.caBundle}")
			if err != nil {
				t.Fatal(err)
			}
			policy, _, err = c.Kubectl(ctx, "", "get", "clusterippolicy", "default", "-o", "jsonpath={.spec.reservations[*].ip}")
			if err != nil {
				t.Fatal(err)
			}
			return secret, bundle, policy
		}
		secret1, bundle1, policy1 := state()
		if bundle1 == "" || !strings.Contains(policy1, "10.96.0.10") {
			t.Fatalf("after install and the leader's write: caBundle %d bytes, policy %q", len(bundle1), policy1)
		}
		// The install registered the Service webhooks not armed; the leader
		// arms them (no pods run here: the mutating one is armed by hand, as
		// the leader would). The upgrade renders the live failurePolicy of
		// each (lookup): the armed one stays Fail, the other Ignore.
		failurePolicies := func() string {
			m, _, _ := c.Kubectl(ctx, "", "get", "mutatingwebhookconfiguration", "clusterip-policy", "-o", `jsonpath={.webhooks[?(@.name=="mutate-services.clusterip-policy.io")].failurePolicy}`)
			v, _, _ := c.Kubectl(ctx, "", "get", "validatingwebhookconfiguration", "clusterip-policy", "-o", `jsonpath={.webhooks[?(@.name=="validate-services.clusterip-policy.io")].failurePolicy}`)
			return m + " " + v
		}
		if got := failurePolicies(); got != "Ignore Ignore" {
			t.Errorf("helm install registered the Service webhooks with failurePolicy %q, want Ignore Ignore (not armed)", got)
		}
		if _, _, err := c.Kubectl(ctx, "", "patch", "mutatingwebhookconfiguration", "clusterip-policy", "--type=json", "-p", `[{"op":"replace","path":"/webhooks/0/failurePolicy","value":"Fail"}]`); err != nil {
			t.Fatal(err)
		}
		// --no-hooks: no kubelet here runs the CRD hook's Job
		// (TestHelmUpgradeFromThePreviousChart runs its command).
		if _, err := runHelm(ctx, "upgrade", "clusterip-policy", "charts/clusterip-policy", "--namespace", "clusterip-policy", "--reuse-values", "--no-hooks",
			"--set-file", "policy="+filepath.Join(dir, "policy.yaml")); err != nil {
			t.Fatal(err)
		}
		secret2, bundle2, policy2 := state()
		if secret2 != secret1 || bundle2 != bundle1 {
			t.Error("helm upgrade reverted the caBundle the leader wrote")
		}
		if policy2 != "10.96.0.53" {
			t.Errorf("helm upgrade did not change the policy object: reservations %q, want 10.96.0.53", policy2)
		}
		if got := failurePolicies(); got != "Fail Ignore" {
			t.Errorf("after helm upgrade the Service webhooks' failurePolicy is %q, want Fail Ignore: an upgrade must not disarm what the leader armed", got)
		}
	})

	// Non-default values reach the cluster; the CRD is upgraded the way
	// docs/install.md says (helm never upgrades crds/); the documented
	// uninstall leaves nothing of the project behind.
	t.Run("non-default values, a CRD upgrade and an uninstall that leaves nothing", func(t *testing.T) {
		if out, err := runHelm(ctx, "install", "clusterip-policy", "charts/clusterip-policy", "--namespace", "clusterip-policy",
			"--set", "dns.clusterIP=10.96.0.10", "--set", "enforcement=deny", "--set", "imagePullSecrets[0].name=registry-cred",
			"--set", "extraArgs={--max-view-staleness=1m}", "--set", "priorityClassName=system-node-critical",
			"--set", "webhook.timeoutSeconds=3"); err != nil {
			t.Fatal(err)
		} else if !strings.Contains(out, "The policy reserves 10.96.0.10 for kube-system/kube-dns (dns.clusterIP)") || strings.Contains(out, "Enforcement is") {
			t.Errorf("notes with dns.clusterIP and enforcement=deny:\n%s", out)
		}
		dep, _, err := c.Kubectl(ctx, "", "get", "deployment", "clusterip-policy-webhook", "-n", "clusterip-policy", "-o",
			"jsonpath={.spec.template.spec.priorityClassName} {.spec.template.spec.imagePullSecrets[0].name} {.spec.template.spec.containers[0].args}")
		if err != nil || !strings.HasPrefix(dep, "system-node-critical registry-cred ") || !strings.Contains(dep, "--max-view-staleness=1m") {
			t.Errorf("the Deployment the apiserver stored: %q, %v", dep, err)
		}
		if to, _, _ := c.Kubectl(ctx, "", "get", "validatingwebhookconfiguration", "clusterip-policy", "-o", "jsonpath={.webhooks[*].timeoutSeconds}"); to != "3 3 3" {
			t.Errorf("timeoutSeconds %q, want 3 on each validating webhook", to)
		}

		// The CRD upgrade: a new printer column, applied by hand as
		// documented for crdUpgrade=false.
		crd, err := os.ReadFile(filepath.Join(root, "charts", "clusterip-policy", "crds", "clusterippolicies.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		changed := strings.Replace(string(crd), "    - jsonPath: .metadata.creationTimestamp\n", "    - jsonPath: .status.policyDigest\n      name: Digest\n      type: string\n    - jsonPath: .metadata.creationTimestamp\n", 1)
		if changed == string(crd) {
			t.Fatal("the CRD has no creationTimestamp column to insert before")
		}
		if out, errOut, err := c.Kubectl(ctx, changed, "apply", "--server-side", "--force-conflicts", "-f", "-"); err != nil {
			t.Fatalf("kubectl apply --server-side --force-conflicts the changed CRD: %v\n%s%s", err, out, errOut)
		}
		if _, err := runHelm(ctx, "upgrade", "clusterip-policy", "charts/clusterip-policy", "--namespace", "clusterip-policy", "--reuse-values", "--no-hooks"); err != nil {
			t.Fatal(err)
		}
		cols, _, _ := c.Kubectl(ctx, "", "get", "crd", "clusterippolicies.clusterip-policy.io", "-o", "jsonpath={.spec.versions[0].additionalPrinterColumns[*].name}")
		if !strings.Contains(cols, "Digest") {
			t.Errorf("after the CRD upgrade the columns are %q, want Digest among them", cols)
		}
		if spec, _, err := c.Kubectl(ctx, "", "get", "cipp", "default", "-o", "jsonpath={.spec.reservations[*].ip}"); err != nil || spec != "10.96.0.10" {
			t.Errorf("the policy object after the CRD upgrade: %q, %v", spec, err)
		}

		// A pre-upgrade hook that fails (no kubelet here runs its Job, so
		// it times out) leaves none of its cluster-wide RBAC behind: Helm
		// deletes the hooks that had succeeded by their hook-succeeded
		// policy when a later one fails. The Job stays, for its logs.
		if out, err := runHelm(ctx, "upgrade", "clusterip-policy", "charts/clusterip-policy", "--namespace", "clusterip-policy", "--reuse-values", "--timeout", "5s"); err == nil || !strings.Contains(out+err.Error(), "pre-upgrade hooks failed") {
			t.Errorf("helm upgrade whose hook cannot run: %v\n%s; want the pre-upgrade hook to fail", err, out)
		}
		for _, obj := range []string{"clusterrole/clusterip-policy-apply-crd", "clusterrolebinding/clusterip-policy-apply-crd", "-n clusterip-policy serviceaccount/clusterip-policy-apply-crd"} {
			if out, _, err := c.Kubectl(ctx, "", append([]string{"get", "-o", "name", "--ignore-not-found"}, strings.Fields(obj)...)...); err != nil || out != "" {
				t.Errorf("after the failed hook %s is left: %q, %v", obj, out, err)
			}
		}
		if out, _, err := c.Kubectl(ctx, "", "-n", "clusterip-policy", "delete", "job", "clusterip-policy-apply-crd"); err != nil {
			t.Errorf("the failed hook's Job, kept for its logs: %v %s", err, out)
		}

		// Uninstall, as docs/install.md "Uninstalling the chart" says.
		if _, err := runHelm(ctx, "uninstall", "clusterip-policy", "--namespace", "clusterip-policy", "--wait", "--no-hooks"); err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{
			{"delete", "crd", "clusterippolicies.clusterip-policy.io"},
			{"-n", "clusterip-policy", "delete", "lease", "clusterip-policy-leader", "clusterip-policy-holds", "--ignore-not-found"},
			{"delete", "ipaddresses", "-l", "ipaddress.kubernetes.io/managed-by=clusterip-policy.io"},
		} {
			if out, errOut, err := c.Kubectl(ctx, "", args...); err != nil {
				t.Fatalf("kubectl %v: %v\n%s%s", args, err, out, errOut)
			}
		}
		left := map[string][]string{
			"crd":                         {"get", "crd", "-o", "name"},
			"webhook configurations":      {"get", "mutatingwebhookconfiguration,validatingwebhookconfiguration", "-o", "name"},
			"cluster roles and bindings":  {"get", "clusterrole,clusterrolebinding", "-l", "app.kubernetes.io/part-of=clusterip-policy", "-o", "name"},
			"objects in the namespace":    {"get", "deployment,service,serviceaccount,role,rolebinding,secret,configmap,poddisruptionbudget,lease", "-n", "clusterip-policy", "-l", "app.kubernetes.io/part-of=clusterip-policy", "-o", "name"},
			"the Lease":                   {"get", "lease", "-n", "clusterip-policy", "--field-selector", "metadata.name=clusterip-policy-leader", "-o", "name"},
			"the previous Lease":          {"get", "lease", "-n", "clusterip-policy", "--field-selector", "metadata.name=clusterip-policy-holds", "-o", "name"},
			"holds (IPAddresses of ours)": {"get", "ipaddresses", "-l", "ipaddress.kubernetes.io/managed-by=clusterip-policy.io", "-o", "name"},
		}
		for what, args := range left {
			out, errOut, err := c.Kubectl(ctx, "", args...)
			if err != nil || strings.Contains(out, "clusterip") || (what != "crd" && what != "webhook configurations" && strings.TrimSpace(out) != "") {
				t.Errorf("after the documented uninstall, %s: %q %s %v", what, out, errOut, err)
			}
		}
		t.Logf("e2e: helm: non-default values stored, CRD upgraded (columns %s), uninstall left nothing", cols)
	})
}

// repoint replaces clientConfig.service of webhook i of the named
// configuration with the URL of the local webhook process.
func repoint(ctx context.Context, t *testing.T, c *framework.Cluster, kind string, i int, path string) {
	t.Helper()
	patch := fmt.Sprintf(`[{"op":"remove","path":"/webhooks/%d/clientConfig/service"},{"op":"add","path":"/webhooks/%d/clientConfig/url","value":"https://%s%s"}]`, i, i, c.Webhooks[0].Addr(), path)
	if _, _, err := c.Kubectl(ctx, "", "patch", kind, "clusterip-policy", "--type=json", "-p", patch); err != nil {
		t.Fatal(err)
	}
}
