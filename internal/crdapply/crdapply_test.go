package crdapply

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
)

func TestEmbeddedIsTheCRDAnnotatedWithTheVersion(t *testing.T) {
	u, err := Embedded("v1.2.3")
	if err != nil {
		t.Fatal(err)
	}
	if u.GetName() != Name || u.GetAnnotations()[VersionAnnotation] != "v1.2.3" {
		t.Errorf("embedded %s %q annotated %v", u.GetKind(), u.GetName(), u.GetAnnotations())
	}
	if _, found, _ := unstructured.NestedMap(u.Object, "spec", "versions"); found {
		t.Error("spec.versions is a map, want the list")
	}
	versions, _, _ := unstructured.NestedSlice(u.Object, "spec", "versions")
	if len(versions) == 0 {
		t.Error("the embedded CRD serves no version")
	}
}

func TestNewer(t *testing.T) {
	for _, c := range []struct {
		live, ours string
		want       bool
	}{
		{"v0.2.0", "v0.1.0", true},
		{"v0.1.0", "v0.1.0", false},
		{"v0.1.0", "v0.2.0-dev", false},
		{"v0.2.0", "v0.2.0-dev", true}, // a release is newer than its dev builds
		{"", "v0.1.0", false},          // applied by crds/ or kubectl: ours
		{"not-a-version", "v0.1.0", false},
		{"v0.2.0", "dev", false},
	} {
		if got := Newer(c.live, c.ours); got != c.want {
			t.Errorf("Newer(%q, %q) = %v, want %v", c.live, c.ours, got, c.want)
		}
	}
}

func newClient(objs ...runtime.Object) *dynamicfake.FakeDynamicClient {
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{crdResource: "CustomResourceDefinitionList"}, objs...)
}

func TestApplyRefusesToCreateTheCRD(t *testing.T) {
	_, err := Apply(context.Background(), newClient(), "v0.1.0")
	if err == nil || !strings.Contains(err.Error(), "does not exist") || !strings.Contains(err.Error(), "kubectl apply -f") {
		t.Errorf("Apply without a CRD: %v, want the refusal naming how it is created", err)
	}
}

func TestApplyKeepsACRDANewerReleaseApplied(t *testing.T) {
	live, err := Embedded("v9.0.0")
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(live)
	res, err := Apply(context.Background(), c, "v0.1.0")
	if err != nil {
		t.Fatal(err)
	}
	if res.Applied || res.Live != "v9.0.0" || !strings.Contains(res.Reason, "newer") {
		t.Errorf("Apply under a CRD of v9.0.0: %+v, want it kept with the reason", res)
	}
	for _, a := range c.Actions() {
		if a.GetVerb() != "get" {
			t.Errorf("Apply under a newer CRD did %s", a.GetVerb())
		}
	}
}
