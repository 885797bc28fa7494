package manifests

import (
	"encoding/json"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

const clientCASecret = "clusterip-policy-client-ca"

// component is the part of a kustomize Component these tests read: its
// resources, JSON patches (RFC 6902) written inline, and a `$patch: delete`
// of the ClusterIPPolicy (manifests/components/policy-file).
type component struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
	Patches    []struct {
		Target struct {
			Group string `json:"group"`
			Kind  string `json:"kind"`
			Name  string `json:"name"`
		} `json:"target"`
		Patch string `json:"patch"`
	} `json:"patches"`
}

// withComponent returns the base with the component in dir applied to its
// Deployment, as kustomize applies an inline JSON patch.
func withComponent(t *testing.T, dir string) *objects {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var c component
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		t.Fatalf("%s/kustomization.yaml: %v", dir, err)
	}
	if c.APIVersion != "kustomize.config.k8s.io/v1alpha1" || c.Kind != "Component" {
		t.Fatalf("%s is a %s %s, want a kustomize.config.k8s.io/v1alpha1 Component", dir, c.APIVersion, c.Kind)
	}
	o := loadBase(t)
	for _, res := range c.Resources {
		data, err := os.ReadFile(filepath.Join(dir, res))
		if err != nil {
			t.Fatal(err)
		}
		docs, err := SplitYAML(data)
		if err != nil {
			t.Fatalf("%s/%s: %v", dir, res, err)
		}
		for _, doc := range docs {
			if err := o.decode(doc); err != nil {
				t.Fatalf("%s/%s: %v", dir, res, err)
			}
		}
	}
	for _, p := range c.Patches {
		if p.Target.Kind == "ClusterIPPolicy" && strings.Contains(p.Patch, "$patch: delete") {
			o.Policies = slices.DeleteFunc(o.Policies, func(po *policyObject) bool { return po.Name == p.Target.Name })
			continue
		}
		if (p.Target.Kind == "Role" || p.Target.Kind == "RoleBinding") && strings.Contains(p.Patch, "$patch: delete") {
			o.Roles = slices.DeleteFunc(o.Roles, func(r *rbacv1.Role) bool { return p.Target.Kind == "Role" && r.Name == p.Target.Name })
			o.RoleBindings = slices.DeleteFunc(o.RoleBindings, func(b *rbacv1.RoleBinding) bool { return p.Target.Kind == "RoleBinding" && b.Name == p.Target.Name })
			continue
		}
		if p.Target.Kind != "Deployment" || p.Target.Name != deploymentName {
			t.Fatalf("%s patches %s %s; these tests know only the Deployment", dir, p.Target.Kind, p.Target.Name)
		}
		ops, err := yaml.YAMLToJSON([]byte(p.Patch))
		if err != nil {
			t.Fatal(err)
		}
		patch, err := jsonpatch.DecodePatch(ops)
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		for i, d := range o.Deployments {
			if d.Name != deploymentName {
				continue
			}
			doc, err := withEmptyLists(d)
			if err != nil {
				t.Fatal(err)
			}
			if doc, err = patch.Apply(doc); err != nil {
				t.Fatalf("%s: apply to Deployment %s: %v", dir, d.Name, err)
			}
			var nd appsv1.Deployment
			if err := json.Unmarshal(doc, &nd); err != nil {
				t.Fatal(err)
			}
			o.Deployments[i] = &nd
		}
	}
	return o
}

// withEmptyLists is the Deployment as JSON with its container's
// volumeMounts and the pod's volumes present even when empty: the base
// states them as [] so that the components' "add .../-" applies in
// kustomize, and the typed round trip here drops empty lists
// (TestBaseStatesTheListsTheComponentsAppendTo holds the base to it).
func withEmptyLists(d *appsv1.Deployment) ([]byte, error) {
	doc, err := json.Marshal(d)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(doc, &m); err != nil {
		return nil, err
	}
	pod := m["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
	if _, ok := pod["volumes"]; !ok {
		pod["volumes"] = []any{}
	}
	for _, c := range pod["containers"].([]any) {
		if c := c.(map[string]any); c["volumeMounts"] == nil {
			c["volumeMounts"] = []any{}
		}
	}
	return json.Marshal(m)
}

func TestBaseStatesTheListsTheComponentsAppendTo(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("base", "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"\n        volumeMounts: []\n", "\n      volumes: []\n"} {
		if !strings.Contains(string(data), line) {
			t.Errorf("base/deployment.yaml lacks %q: the components' JSON patches add to it, and kustomize fails on a missing list", strings.TrimSpace(line))
		}
	}
}

// clientCAMount checks that --client-ca-file names ca.crt in a directory
// mount of the client CA Secret (a subPath mount would never see a
// replaced CA), read-only.
func clientCAMount(o *objects) []string {
	d, c, err := o.webhookContainer()
	if err != nil {
		return []string{err.Error()}
	}
	file, ok := flagValue(c, "client-ca-file")
	if !ok {
		return []string{"the webhook container sets no --client-ca-file"}
	}
	v, mounts := mountsOf(d, c, func(v corev1.Volume) bool { return v.Secret != nil && v.Secret.SecretName == clientCASecret })
	if v == nil || len(mounts) != 1 {
		return []string{"the webhook container does not mount Secret " + clientCASecret + " once"}
	}
	m := mounts[0]
	var p []string
	if m.SubPath != "" || m.SubPathExpr != "" {
		p = append(p, problemf("Secret %s is mounted with subPath: a replaced CA would never reach the pod", clientCASecret))
	}
	if !m.ReadOnly {
		p = append(p, problemf("Secret %s is mounted writable", clientCASecret))
	}
	if path.Clean(file) != path.Join(m.MountPath, "ca.crt") {
		p = append(p, problemf("--client-ca-file=%q, but Secret %s (key ca.crt) is mounted at %s", file, clientCASecret, m.MountPath))
	}
	return p
}

func TestClientCAComponentKeepsTheBaseSafeAndMountsTheCAWhereTheFlagPoints(t *testing.T) {
	dir := filepath.Join("components", "client-ca")
	o := withComponent(t, dir)
	for _, sc := range safetyChecks {
		for _, p := range sc.check(o) {
			t.Errorf("with %s: %s: %s", dir, sc.name, p)
		}
	}
	for _, p := range clientCAMount(o) {
		t.Error(p)
	}

	t.Run("the check catches a flag pointing elsewhere, a subPath mount and a writable one", func(t *testing.T) {
		o := withComponent(t, dir)
		_, c, _ := o.webhookContainer()
		for i, a := range c.Args {
			if strings.HasPrefix(a, "--client-ca-file=") {
				c.Args[i] = "--client-ca-file=/tls/ca.crt"
			}
		}
		for i := range c.VolumeMounts {
			if c.VolumeMounts[i].Name == "client-ca" {
				c.VolumeMounts[i].SubPath = "ca.crt"
				c.VolumeMounts[i].ReadOnly = false
			}
		}
		got := strings.Join(clientCAMount(o), "\n")
		for _, want := range []string{"mounted with subPath", "mounted writable", `--client-ca-file="/tls/ca.crt", but Secret clusterip-policy-client-ca (key ca.crt) is mounted at /client-ca`} {
			if !strings.Contains(got, want) {
				t.Errorf("problems %q lack %q", got, want)
			}
		}
		if p := clientCAMount(loadBase(t)); len(p) != 1 || p[0] != "the webhook container sets no --client-ca-file" {
			t.Errorf("on the base: %q", p)
		}
	})
}

// The cert-dir component (the cert-manager and self-signed overlays):
// the base's safety checks hold, the certificate is mounted where
// --cert-dir points, and the webhook is granted no Secret.
func TestCertDirComponentMountsTheCertificateAndDropsTheSecretGrants(t *testing.T) {
	dir := filepath.Join("components", "cert-dir")
	o := withComponent(t, dir)
	for _, sc := range safetyChecks {
		for _, p := range sc.check(o) {
			t.Errorf("with %s: %s: %s", dir, sc.name, p)
		}
	}
	_, c, err := o.webhookContainer()
	if err != nil {
		t.Fatal(err)
	}
	if src, ok := flagValue(c, "certificate-source"); ok && src != "file" {
		t.Errorf("--certificate-source=%s with the component", src)
	}
	if dir, _ := flagValue(c, "cert-dir"); dir != "/tls" {
		t.Errorf("--cert-dir=%q, want /tls", dir)
	}
	for _, r := range o.Roles {
		for _, rule := range r.Rules {
			if slices.Contains(rule.Resources, "secrets") {
				t.Errorf("Role %s still grants Secrets", r.Name)
			}
		}
	}
	for _, b := range o.RoleBindings {
		if !slices.ContainsFunc(o.Roles, func(r *rbacv1.Role) bool { return r.Name == b.RoleRef.Name }) {
			t.Errorf("RoleBinding %s binds the deleted Role %s", b.Name, b.RoleRef.Name)
		}
	}
}
