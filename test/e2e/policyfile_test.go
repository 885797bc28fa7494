//go:build e2e

package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"clusterip-policy/manifests"
	"clusterip-policy/test/e2e/framework"
)

// An operator who keeps the policy in a file builds the layout
// docs/policy.md gives ("The policy as a file") with the real kubectl:
// the component switches the Deployment to --policy and the ConfigMap, the
// operator's policy.yaml replaces the component's one layer up, and the
// policy object is left out. In one layer kustomize refuses, as the
// document says. No cluster: kubectl kustomize only.
func TestPolicyFileComponentBuilds(t *testing.T) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	kubectl := framework.DefaultBinaries(root).Kubectl
	tmp := t.TempDir()
	copyDir(t, filepath.Join(root, "manifests", "base"), filepath.Join(tmp, "manifests", "base"))
	copyDir(t, filepath.Join(root, "manifests", "components", "policy-file"), filepath.Join(tmp, "manifests", "components", "policy-file"))
	write := func(rel, data string) {
		t.Helper()
		p := filepath.Join(tmp, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The base stands in for the self-signed overlay, which needs make certs.
	write("my-cluster/file-source/kustomization.yaml", "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- ../../manifests/base\ncomponents:\n- ../../manifests/components/policy-file\n")
	generator := "configMapGenerator:\n- name: clusterip-policy\n  namespace: clusterip-policy\n  behavior: replace\n  files:\n  - policy.yaml\n  options:\n    disableNameSuffixHash: true\n"
	write("my-cluster/kustomization.yaml", "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- file-source\n"+generator)
	const mine = "apiVersion: clusterip-policy/v1alpha1\nkind: ClusterIPPolicy\nreservations:\n- ip: 10.96.0.53\n  service: kube-system/coredns\n"
	write("my-cluster/policy.yaml", mine)
	write("one-layer/policy.yaml", mine)
	write("one-layer/kustomization.yaml", "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- ../manifests/base\ncomponents:\n- ../manifests/components/policy-file\n"+generator)

	build := func(dir string) ([]byte, string, error) {
		cmd := exec.Command(kubectl, "kustomize", filepath.Join(tmp, dir))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		return out, stderr.String(), err
	}
	out, stderr, err := build("my-cluster")
	if err != nil {
		t.Fatalf("kubectl kustomize my-cluster: %v\n%s", err, stderr)
	}
	docs, err := manifests.SplitYAML(out)
	if err != nil {
		t.Fatal(err)
	}
	var args []string
	var policy string
	for _, doc := range docs {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &u.Object); err != nil {
			t.Fatal(err)
		}
		switch u.GetKind() {
		case "ClusterIPPolicy":
			t.Errorf("the file source still renders ClusterIPPolicy %s, which nothing would read", u.GetName())
		case "ConfigMap":
			policy, _, _ = unstructured.NestedString(u.Object, "data", "policy.yaml")
		case "Deployment":
			ctrs, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
			args, _, _ = unstructured.NestedStringSlice(ctrs[0].(map[string]any), "args")
		}
	}
	if !slices.Contains(args, "--policy=/etc/clusterip-policy/policy.yaml") || slices.Contains(args, "--policy-source=crd") {
		t.Errorf("the Deployment runs %v; want --policy in the ConfigMap mount and no --policy-source=crd", args)
	}
	if policy != mine {
		t.Errorf("the ConfigMap holds %q; want the operator's policy.yaml", policy)
	}
	if _, stderr, err := build("one-layer"); err == nil || !strings.Contains(stderr, "cannot merge or replace") {
		t.Errorf("one layer: kubectl kustomize: %v %s; docs/policy.md says it fails with \"cannot merge or replace\"", err, stderr)
	}
}

// The object's overlay of docs/policy.md ("The policy"): a patch with
// the whole ClusterIPPolicy. kustomize merges it as a JSON merge patch: a
// list replaces the base's whole, a field left out keeps the base's value,
// as the document warns.
func TestPolicyObjectOverlayBuilds(t *testing.T) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	copyDir(t, filepath.Join(root, "manifests", "base"), filepath.Join(tmp, "manifests", "base"))
	dir := filepath.Join(tmp, "my-cluster")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"kustomization.yaml": "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- ../manifests/base\npatches:\n- path: clusterippolicy.yaml\n",
		// No enforcement: it stays the base's.
		"clusterippolicy.yaml": "apiVersion: clusterip-policy.io/v1alpha1\nkind: ClusterIPPolicy\nmetadata:\n  name: default\nspec:\n  reservations:\n  - ip: 10.96.0.53\n    service: kube-system/coredns\n",
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(framework.DefaultBinaries(root).Kubectl, "kustomize", dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl kustomize: %v\n%s", err, stderr.String())
	}
	docs, err := manifests.SplitYAML(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range docs {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &u.Object); err != nil {
			t.Fatal(err)
		}
		if u.GetKind() != "ClusterIPPolicy" {
			continue
		}
		reservations, _, _ := unstructured.NestedSlice(u.Object, "spec", "reservations")
		enforcement, _, _ := unstructured.NestedString(u.Object, "spec", "enforcement", "default")
		if len(reservations) != 1 || reservations[0].(map[string]any)["ip"] != "10.96.0.53" {
			t.Errorf("reservations %v: want the overlay's one, the base's replaced", reservations)
		}
		if enforcement != "warn" {
			t.Errorf("enforcement.default %q: want the base's warn kept, as the install docs say", enforcement)
		}
		return
	}
	t.Fatal("no ClusterIPPolicy rendered")
}
