//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"sigs.k8s.io/yaml"

	"clusterip-policy/certs"
	"clusterip-policy/manifests"
	"clusterip-policy/pkg/backstop"
	"clusterip-policy/test/e2e/framework"
	"clusterip-policy/test/fixtures"
)

// myPolicyPatch is what a user's overlay adds to the base's policy before
// deny: the DNS address reserved.
const myPolicyPatch = `apiVersion: clusterip-policy.io/v1alpha1
kind: ClusterIPPolicy
metadata:
  name: default
spec:
  reservations:
  - {ip: 10.96.0.10, service: kube-system/kube-dns, note: cluster DNS}
  enforcement:
    default: deny
`

// selfSignedOverlay copies manifests/base, the cert-dir component and the self-signed overlay into a
// temporary tree, runs gencerts there (as `make certs` does in the
// repository) and returns the overlay directory and its rendered objects.
func selfSignedOverlay(t *testing.T, root string) (string, []*unstructured.Unstructured) {
	t.Helper()
	tmp := t.TempDir()
	copyDir(t, filepath.Join(root, "manifests", "base"), filepath.Join(tmp, "manifests", "base"))
	copyDir(t, filepath.Join(root, "manifests", "components", "cert-dir"), filepath.Join(tmp, "manifests", "components", "cert-dir"))
	overlay := filepath.Join(tmp, "manifests", "overlays", "self-signed")
	if err := os.MkdirAll(overlay, 0o755); err != nil {
		t.Fatal(err)
	}
	copyFile(t, filepath.Join(root, "manifests", "overlays", "self-signed", "kustomization.yaml"), filepath.Join(overlay, "kustomization.yaml"))
	// The base states no address and warns; a user's overlay reserves the
	// DNS address and denies, as the install docs show.
	kz, err := os.ReadFile(filepath.Join(overlay, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), append(kz, []byte("- path: my-policy.yaml\n")...), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(overlay, "my-policy.yaml"), []byte(myPolicyPatch), 0o644); err != nil {
		t.Fatal(err)
	}
	gencerts := exec.Command("go", "run", "./certs/cmd/gencerts",
		"--out-dir="+filepath.Join(overlay, "tls"),
		"--cabundle-patch="+filepath.Join(overlay, "cabundle-patch.yaml"),
		"--webhook-configurations="+filepath.Join(tmp, "manifests", "base", "webhook-configurations.yaml"))
	gencerts.Dir = root
	if out, err := gencerts.CombinedOutput(); err != nil {
		t.Fatalf("go run ./certs/cmd/gencerts: %v\n%s", err, out)
	}
	kustomize := exec.Command(framework.DefaultBinaries(root).Kubectl, "kustomize", overlay)
	var stderr bytes.Buffer
	kustomize.Stderr = &stderr
	out, err := kustomize.Output()
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v\n%s", overlay, err, stderr.String())
	}
	docs, err := manifests.SplitYAML(out)
	if err != nil {
		t.Fatalf("parse the rendered overlay: %v", err)
	}
	var objs []*unstructured.Unstructured
	for _, doc := range docs {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &u.Object); err != nil {
			t.Fatalf("parse the rendered overlay: %v", err)
		}
		objs = append(objs, u)
	}
	return overlay, objs
}

// serviceReview is the AdmissionReview an apiserver sends for a Service
// CREATE.
func serviceReview(t *testing.T, svc *corev1.Service) *admissionv1.AdmissionReview {
	t.Helper()
	svc.APIVersion, svc.Kind = "v1", "Service"
	raw, err := json.Marshal(svc)
	if err != nil {
		t.Fatal(err)
	}
	return &admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:       types.UID("e2e-" + svc.Name),
			Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "Service"},
			Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "services"},
			Namespace: svc.Namespace,
			Name:      svc.Name,
			Operation: admissionv1.Create,
			Object:    runtime.RawExtension{Raw: raw},
		},
	}
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	entries, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(to, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.IsDir() {
			copyFile(t, filepath.Join(from, e.Name()), filepath.Join(to, e.Name()))
		}
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// The deployment manifests, applied as an operator would, on a cluster of
// their own: every object is accepted, the webhook runs as their service
// account with their RBAC and their policy, and their webhook configurations,
// pointed at the local webhook (clientConfig only), guard Services.
func TestDeploymentManifests(t *testing.T) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	overlay, objs := selfSignedOverlay(t, root)
	// The base's Deployment reads the ClusterIPPolicy object; so does the
	// local webhook standing in for it.
	var deployArgs []string
	hasPolicyObject := false
	for _, o := range objs {
		if o.GetKind() == "Deployment" && o.GetName() == "clusterip-policy-webhook" {
			ctrs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
			if len(ctrs) > 0 {
				deployArgs, _, _ = unstructured.NestedStringSlice(ctrs[0].(map[string]any), "args")
			}
		}
		hasPolicyObject = hasPolicyObject || (o.GetKind() == "ClusterIPPolicy" && o.GetName() == "default")
	}
	if !slices.Contains(deployArgs, "--policy-source=crd") || !hasPolicyObject {
		t.Fatalf("the rendered overlay runs %v with a ClusterIPPolicy default: %v; want --policy-source=crd and the object", deployArgs, hasPolicyObject)
	}
	c := own(t, framework.Options{WebhookArgs: []string{"--policy-source=crd"}, NoRBAC: true, NoRegister: true})
	cs := c.Client(0)
	ctx := testContext(t, 3*60e9)

	// The webhook starts before its RBAC exists, as when its pods come up
	// before an operator's RBAC change reached the cluster. It runs as the
	// manifests' service account, with a serving certificate from their CA.
	if c.RBAC, err = framework.LoadRBAC(root); err != nil {
		t.Fatal(err)
	}
	if c.WebhookCA, err = certs.LoadCA(filepath.Join(overlay, "tls")); err != nil {
		t.Fatal(err)
	}
	w, err := c.StartWebhookUnready(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pid := w.Pid()

	t.Run("without its RBAC the webhook is not ready and denies every review as not ready", func(t *testing.T) {
		// Once its list+watch has been refused at least once, it has had
		// its chance to get ready: one look at /readyz is the check.
		fixtures.EventuallyNil(t, "the webhook's list+watch to be refused (forbidden in its log)", 10*time.Second, func() error {
			if log, _ := w.Log(); !strings.Contains(log, "forbidden") {
				return fmt.Errorf("not logged; last lines:\n%s", lastLines(log, 5))
			}
			return nil
		})
		if code := readyzCode(w); code == http.StatusOK {
			t.Fatal("/readyz is ok although the webhook may not list ServiceCIDRs and IPAddresses")
		}
		for _, path := range []string{framework.MutatePath, framework.ValidatePath} {
			resp, err := w.Review(ctx, path, serviceReview(t, fixtures.Service("default", "while-unready", fixtures.WithClusterIP("10.96.0.20"))))
			if err != nil {
				t.Fatal(err)
			}
			if resp.Allowed || resp.Result == nil || !strings.Contains(resp.Result.Message, "not ready") {
				t.Errorf("%s answered allowed=%v %+v, want a not-ready denial", path, resp.Allowed, resp.Result)
			} else {
				t.Logf("%s: %d %s", path, resp.Result.Code, resp.Result.Message)
			}
		}
	})

	// docs/install.md applies the CRD first: kubectl maps each object's
	// kind with the discovery it read before applying, so in one apply the
	// ClusterIPPolicy of a CRD created by that same apply is refused (the
	// rest is applied, and pods reading the object stay not ready until a
	// second apply creates it).
	t.Run("in one step, before its CRD is established, only the ClusterIPPolicy is refused", func(t *testing.T) {
		out, errOut, err := c.Kubectl(ctx, "", "apply", "--server-side", "-k", overlay)
		t.Logf("kubectl apply (one step, no CRD yet): %v\n%s%s", err, out, errOut)
		if err == nil {
			return // a kubectl that waits for the CRD: nothing to warn about
		}
		if !strings.Contains(errOut, "ClusterIPPolicy") || !strings.Contains(out, "customresourcedefinition.apiextensions.k8s.io/clusterippolicies.clusterip-policy.io serverside-applied") {
			t.Errorf("the one-step apply failed otherwise than on the ClusterIPPolicy alone")
		}
	})

	var applied time.Time
	t.Run("kubectl apply --server-side of the CRD, then -k manifests/overlays/self-signed accepts every object", func(t *testing.T) {
		if out, errOut, err := c.Kubectl(ctx, "", "apply", "--server-side", "-f", filepath.Join(overlay, "..", "..", "base", "crd.yaml")); err != nil {
			t.Fatalf("%v\n%s%s", err, out, errOut)
		}
		if out, errOut, err := c.Kubectl(ctx, "", "wait", "--for=condition=Established", "crd/clusterippolicies.clusterip-policy.io", "--timeout=30s"); err != nil {
			t.Fatalf("%v\n%s%s", err, out, errOut)
		}
		out, errOut, err := c.Kubectl(ctx, "", "apply", "--server-side", "-k", overlay)
		applied = time.Now()
		if err != nil {
			t.Fatalf("%v\n%s", err, errOut)
		}
		t.Logf("kubectl apply:\n%s", out)
		for _, o := range objs {
			// By kind in lower case, as a user types it (for the
			// ClusterIPPolicy that is the CRD's singular, clusterippolicy).
			res, _, err := c.Kubectl(ctx, "", "get", strings.ToLower(o.GetKind())+"/"+o.GetName(), "-n", o.GetNamespace(), "-o", "name")
			if err != nil {
				t.Errorf("%s %s/%s not found after apply: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
				continue
			}
			if !strings.Contains(out, strings.TrimSpace(res)+" serverside-applied") {
				t.Errorf("kubectl apply did not report %s as serverside-applied", strings.TrimSpace(res))
			}
		}
		t.Logf("e2e: manifests: %d objects of the self-signed overlay applied and found", len(objs))
	})

	t.Run("with the manifests' RBAC the same webhook process gets ready", func(t *testing.T) {
		if err := w.WaitReady(ctx, 90*time.Second); err != nil {
			t.Fatalf("a webhook with the manifests' RBAC never got ready: %v", err)
		}
		if w.Pid() != pid {
			t.Fatalf("the webhook restarted (pid %d, was %d)", w.Pid(), pid)
		}
		t.Logf("e2e: the webhook got ready %s after its RBAC was applied, without a restart", time.Since(applied).Round(time.Millisecond))
	})
	if t.Failed() {
		return
	}

	t.Run("the applied webhook configurations, patched in clientConfig only, guard Services", func(t *testing.T) {
		adm := cs.AdmissionregistrationV1()
		mBefore, err := adm.MutatingWebhookConfigurations().Get(ctx, "clusterip-policy", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		vBefore, err := adm.ValidatingWebhookConfigurations().Get(ctx, "clusterip-policy", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []struct {
			kind string
			path string
		}{
			{"mutatingwebhookconfiguration", *mBefore.Webhooks[0].ClientConfig.Service.Path},
			{"validatingwebhookconfiguration", *vBefore.Webhooks[0].ClientConfig.Service.Path},
		} {
			patch := fmt.Sprintf(`[{"op":"remove","path":"/webhooks/0/clientConfig/service"},{"op":"add","path":"/webhooks/0/clientConfig/url","value":"https://%s%s"}]`, c.Webhooks[0].Addr(), p.path)
			if _, _, err := c.Kubectl(ctx, "", "patch", p.kind, "clusterip-policy", "--type=json", "-p", patch); err != nil {
				t.Fatal(err)
			}
		}
		mAfter, err := adm.MutatingWebhookConfigurations().Get(ctx, "clusterip-policy", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		vAfter, err := adm.ValidatingWebhookConfigurations().Get(ctx, "clusterip-policy", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// Only clientConfig changed, and the caBundle from gencerts stayed.
		for i := range mAfter.Webhooks {
			if !bytes.Equal(mAfter.Webhooks[i].ClientConfig.CABundle, mBefore.Webhooks[i].ClientConfig.CABundle) {
				t.Error("the mutating webhook's caBundle changed")
			}
			mAfter.Webhooks[i].ClientConfig = mBefore.Webhooks[i].ClientConfig
		}
		for i := range vAfter.Webhooks {
			if !bytes.Equal(vAfter.Webhooks[i].ClientConfig.CABundle, vBefore.Webhooks[i].ClientConfig.CABundle) {
				t.Error("the validating webhook's caBundle changed")
			}
			vAfter.Webhooks[i].ClientConfig = vBefore.Webhooks[i].ClientConfig
		}
		if !reflect.DeepEqual(mAfter.Webhooks, mBefore.Webhooks) || !reflect.DeepEqual(vAfter.Webhooks, vBefore.Webhooks) {
			t.Fatal("the patch changed more than clientConfig")
		}
		if err := c.WaitWebhooksCalled(ctx); err != nil {
			t.Fatal(err)
		}

		ns := namespace(t, c, "manifests")
		_, err = create(ctx, cs, fixtures.Service(ns, "not-dns", fixtures.WithClusterIP("10.96.0.10")))
		requireDenied(t, err, mutating, "is reserved for Service kube-system/kube-dns")
		_, err = create(ctx, cs, fixtures.Service(ns, "in-dynamic-band", fixtures.WithClusterIP("10.96.200.5")))
		requireDenied(t, err, mutating, "lies in the dynamic band 10.96.1.1-10.96.255.254")
		out, _, err := c.Kubectl(ctx, kubeDNSWithoutIP, "create", "-f", "-", "-o", "jsonpath={.spec.clusterIP}")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { deleteServices(t, cs, "kube-system") })
		if out != "10.96.0.10" {
			t.Fatalf("kube-dns got %s, want 10.96.0.10", out)
		}
		// The webhook's own namespace is excluded, so its Service never
		// depends on it.
		if _, err := create(ctx, cs, fixtures.Service("clusterip-policy", "in-dynamic-band", fixtures.WithClusterIP("10.96.200.6"))); err != nil {
			t.Errorf("a Service in the webhook's own namespace was refused: %v", err)
		}
		t.Cleanup(func() { deleteServices(t, cs, "clusterip-policy") })
	})

	t.Run("the applied policy object is in force, and the applied policy-object check refuses a bad edit", func(t *testing.T) {
		fixtures.EventuallyNil(t, "ClusterIPPolicy default Ready with generation 1 in force", 15*time.Second, func() error {
			status, _, _ := c.Kubectl(ctx, "", "get", "clusterippolicy", "default", "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status} {.metadata.generation} {.status.generationInForce}`)
			if status != "True 1 1" {
				return fmt.Errorf("Ready, generation, in force = %q, want True 1 1", status)
			}
			return nil
		})
		v, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "clusterip-policy", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(v.Webhooks, func(w admv1.ValidatingWebhook) bool { return w.Name == policyObjectWebhook })
		if i < 0 {
			t.Fatalf("the overlay registers no %s", policyObjectWebhook)
		}
		repoint(ctx, t, c, "validatingwebhookconfiguration", i, *v.Webhooks[i].ClientConfig.Service.Path)
		bad := `apiVersion: clusterip-policy.io/v1alpha1
kind: ClusterIPPolicy
metadata:
  name: default
spec:
  serviceCIDRs: [10.96.0.0/16]
  reservations:
  - {ip: 10.96.0.10, service: kube-system/kube-dns}
  - {ip: 10.96.0.10, service: default/impostor}
`
		// The apiserver picks up the re-pointed configuration
		// asynchronously: server-side dry runs (which call the check too)
		// until it is refused, then the real apply.
		_ = fixtures.Wait(10*time.Second, func() bool {
			_, _, err := c.Kubectl(ctx, bad, "apply", "--server-side", "--dry-run=server", "-f", "-")
			return err != nil
		})
		out, errOut, err := c.Kubectl(ctx, bad, "apply", "--server-side", "-f", "-")
		if err == nil {
			t.Fatalf("kubectl apply accepted a duplicate owner through the overlay's check:\n%s", out)
		}
		t.Logf("kubectl apply of a duplicate owner: %s", strings.TrimSpace(errOut))
		if !strings.Contains(errOut, `admission webhook "validate-clusterippolicies.clusterip-policy.io" denied the request`) || !strings.Contains(errOut, "and default/impostor; an IP has one owner") {
			t.Errorf("the refusal does not name the check and both entries: %s", errOut)
		}
	})

	t.Run("the webhook's service account may read ServiceCIDRs and IPAddresses and only what the holds, the periodic audit and the managed matchConditions need beyond", func(t *testing.T) {
		sa := c.RBAC.UserName()
		// What every service account may do (discovery, reviewing itself,
		// whatever the Kubernetes release grants all authenticated users):
		// an account no manifest mentions, in a namespace of its own.
		const nobody = "system:serviceaccount:e2e-baseline:nobody"
		everywhere := map[string]canIRow{
			"servicecidrs.networking.k8s.io [] []": {resource: "servicecidrs.networking.k8s.io", nonResource: "[]", names: "[]", verbs: "[get list watch]"},
			// create, delete: the reservation holds; services get: a hold
			// comes back only while its owner does not exist.
			"ipaddresses.networking.k8s.io [] []": {resource: "ipaddresses.networking.k8s.io", nonResource: "[]", names: "[]", verbs: "[get list watch create delete]"},
			// services list, events create: the periodic audit lists the
			// Services and puts an Event on each offending one.
			"services [] []":             {resource: "services", nonResource: "[]", names: "[]", verbs: "[get list]"},
			"events.events.k8s.io [] []": {resource: "events.events.k8s.io", nonResource: "[]", names: "[]", verbs: "[create]"},
			// --policy-reports: the periodic audit's findings as PolicyReports.
			"policyreports.wgpolicyk8s.io [] []": {resource: "policyreports.wgpolicyk8s.io", nonResource: "[]", names: "[]", verbs: "[list create update delete]"},
			// The holds and the audit skip the namespaces the Service
			// webhooks' namespaceSelector leaves out: labels only.
			"namespaces [] []": {resource: "namespaces", nonResource: "[]", names: "[]", verbs: "[list watch]"},
			// The policy object (--policy-source=crd), and only its status
			// to write.
			"clusterippolicies.clusterip-policy.io [] []":        {resource: "clusterippolicies.clusterip-policy.io", nonResource: "[]", names: "[]", verbs: "[get list watch]"},
			"clusterippolicies.clusterip-policy.io/status [] []": {resource: "clusterippolicies.clusterip-policy.io/status", nonResource: "[]", names: "[]", verbs: "[update]"},
			// --manage-match-conditions: its one condition in the two
			// configurations named clusterip-policy, nothing else;
			// --certificate-source=managed: their caBundle, watched by name.
			"mutatingwebhookconfigurations.admissionregistration.k8s.io [] [clusterip-policy]":   {resource: "mutatingwebhookconfigurations.admissionregistration.k8s.io", nonResource: "[]", names: "[clusterip-policy]", verbs: "[get update list watch]"},
			"validatingwebhookconfigurations.admissionregistration.k8s.io [] [clusterip-policy]": {resource: "validatingwebhookconfigurations.admissionregistration.k8s.io", nonResource: "[]", names: "[clusterip-policy]", verbs: "[get update list watch]"},
			// ... and reads the other mutating admission, which may set a
			// ClusterIP after ours.
			"mutatingwebhookconfigurations.admissionregistration.k8s.io [] []": {resource: "mutatingwebhookconfigurations.admissionregistration.k8s.io", nonResource: "[]", names: "[]", verbs: "[list watch]"},
			"mutatingadmissionpolicies.admissionregistration.k8s.io [] []":     {resource: "mutatingadmissionpolicies.admissionregistration.k8s.io", nonResource: "[]", names: "[]", verbs: "[list watch]"},
		}
		// --backstop: the leader's admission policies and bindings, by name.
		for _, n := range backstop.Names() {
			kinds := []string{"validatingadmissionpolicies", "validatingadmissionpolicybindings"}
			if n == backstop.RecordName {
				kinds = []string{"mutatingadmissionpolicies", "mutatingadmissionpolicybindings"}
			}
			for _, k := range kinds {
				verbs := "[get create patch delete]"
				if k == "validatingadmissionpolicybindings" {
					// a binding that exists is updated at the version read
					verbs = "[get create patch update delete]"
				}
				r := canIRow{resource: k + ".admissionregistration.k8s.io", nonResource: "[]", names: "[" + n + "]", verbs: verbs}
				everywhere[r.resource+" [] "+r.names] = r
			}
		}
		// In its own namespace, the Lease electing the leader and the one
		// of builds before v0.1.0 it holds too; no Secret: the self-signed overlay mounts its
		// certificate and deletes the base's Role on the managed Secrets.
		own := maps.Clone(everywhere)
		own["leases.coordination.k8s.io [] []"] = canIRow{resource: "leases.coordination.k8s.io", nonResource: "[]", names: "[]", verbs: "[create]"}
		for _, lease := range []string{"clusterip-policy-leader", "clusterip-policy-holds"} {
			own["leases.coordination.k8s.io [] ["+lease+"]"] = canIRow{resource: "leases.coordination.k8s.io", nonResource: "[]", names: "[" + lease + "]", verbs: "[get update]"}
		}
		// In default, the leader's reachability probe: a dry-run create
		// (--arm-failure-policy; RBAC cannot grant a dry run alone).
		probe := maps.Clone(everywhere)
		probe["services [] []"] = canIRow{resource: "services", nonResource: "[]", names: "[]", verbs: "[get list create]"}
		for _, ns := range []string{"default", "clusterip-policy", "kube-system"} {
			want := everywhere
			switch ns {
			case "clusterip-policy":
				want = own
			case "default":
				want = probe
			}
			out, _, err := c.Kubectl(ctx, "", "auth", "can-i", "--list", "--as="+sa, "-n", ns)
			if err != nil {
				t.Fatal(err)
			}
			baseOut, _, err := c.Kubectl(ctx, "", "auth", "can-i", "--list", "--as="+nobody, "-n", ns)
			if err != nil {
				t.Fatal(err)
			}
			base := map[canIRow]bool{}
			for _, r := range parseCanIList(t, baseOut) {
				base[r] = true
			}
			extra := map[string]canIRow{}
			for _, r := range parseCanIList(t, out) {
				if !base[r] {
					extra[r.resource+" "+r.nonResource+" "+r.names] = r
				}
			}
			if !reflect.DeepEqual(extra, want) {
				t.Errorf("in namespace %s the webhook may, beyond what every account may:\n%v\nwant exactly:\n%v\nfull list:\n%s", ns, extra, want, out)
			}
			for r := range base {
				if r.resource != "" && !strings.HasPrefix(r.resource, "selfsubject") && r.verbs != "[get list watch]" && r.verbs != "[get]" {
					t.Errorf("every service account may %s %s: more than reading", r.verbs, r.resource)
				}
			}
			if ns == "default" {
				t.Logf("kubectl auth can-i --list --as=%s:\n%s", sa, out)
				var granted []string
				for _, r := range extra {
					granted = append(granted, r.resource+" "+r.verbs)
				}
				sort.Strings(granted)
				t.Logf("e2e: the webhook's service account may, beyond what every account may: %s", strings.Join(granted, "; "))
			}
		}
		// The create right in default is bounded to dry runs by the
		// shipped admission policy: a stolen token creates nothing.
		_, stderr, err := c.Kubectl(ctx, "", "--as="+sa, "-n", "default", "create", "service", "clusterip", "probe-stolen", "--tcp=80", "--clusterip=None")
		if err == nil || !strings.Contains(stderr, "clusterip-policy-webhook-probe-dry-run-only") || !strings.Contains(stderr, "may only send dry runs") {
			t.Errorf("a real create by %s in default: %v\n%s; want the dry-run-only policy's refusal", sa, err, stderr)
		}
		if _, stderr, err := c.Kubectl(ctx, "", "--as="+sa, "-n", "default", "create", "service", "clusterip", "probe-dry", "--tcp=80", "--clusterip=None", "--dry-run=server"); err != nil {
			t.Errorf("a dry-run create by %s in default: %v\n%s; want it allowed (the reachability probe)", sa, err, stderr)
		}
	})
}

type canIRow struct{ resource, nonResource, names, verbs string }

// parseCanIList reads the table of `kubectl auth can-i --list`, whose
// columns are aligned under the header and whose cells may hold spaces.
func parseCanIList(t *testing.T, out string) []canIRow {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	header := lines[0]
	cols := []int{0, strings.Index(header, "Non-Resource URLs"), strings.Index(header, "Resource Names"), strings.Index(header, "Verbs")}
	if !strings.HasPrefix(header, "Resources") || cols[1] < 0 || cols[2] < 0 || cols[3] < 0 {
		t.Fatalf("unexpected can-i header %q", header)
	}
	cell := func(line string, i int) string {
		if cols[i] >= len(line) {
			return ""
		}
		end := len(line)
		if i+1 < len(cols) && cols[i+1] < end {
			end = cols[i+1]
		}
		return strings.TrimSpace(line[cols[i]:end])
	}
	var rows []canIRow
	for _, l := range lines[1:] {
		rows = append(rows, canIRow{cell(l, 0), cell(l, 1), cell(l, 2), cell(l, 3)})
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].resource < rows[j].resource })
	return rows
}
