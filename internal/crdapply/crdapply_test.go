package crdapply

import (
	"context"
	"strings"
	"testing"
	"time"

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

// Two builds of one release (both VERSION-dev) cannot be ordered by the
// version: the schema tells them apart, so an older -dev build's hook does
// not drop a field a newer -dev build's CRD added.
func TestApplyKeepsACRDWithFieldsThisBuildLacksWhenTheVersionsCannotBeOrdered(t *testing.T) {
	withField := func(version, field string) *unstructured.Unstructured {
		t.Helper()
		u, err := Embedded(version)
		if err != nil {
			t.Fatal(err)
		}
		versions, _, _ := unstructured.NestedSlice(u.Object, "spec", "versions")
		props, _, _ := unstructured.NestedMap(versions[0].(map[string]any), "schema", "openAPIV3Schema", "properties", "spec", "properties")
		props[field] = map[string]any{"type": "string"}
		if err := unstructured.SetNestedMap(versions[0].(map[string]any), props, "schema", "openAPIV3Schema", "properties", "spec", "properties"); err != nil {
			t.Fatal(err)
		}
		if err := unstructured.SetNestedSlice(u.Object, versions, "spec", "versions"); err != nil {
			t.Fatal(err)
		}
		return u
	}
	for _, tt := range []struct {
		name, live, ours string
		applied          bool
	}{
		{"both -dev of one release", "v0.1.0-dev", "v0.1.0-dev", false},
		{"the live CRD without a version", "", "v0.1.0-dev", false},
		{"a hostile annotation", "not a version\x07", "v0.1.0", false},
		{"a newer release drops a field on purpose", "v0.1.0", "v0.2.0", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			live := withField(tt.live, "newerField")
			if tt.live == "" {
				ann := live.GetAnnotations()
				delete(ann, VersionAnnotation)
				live.SetAnnotations(ann)
			}
			c := newClient(live)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			// The fake client takes no apply patch: what counts is whether
			// Apply tried one.
			res, _ := Apply(ctx, c, tt.ours)
			if patched := patchedCRD(c); patched != tt.applied {
				t.Fatalf("patched %v (%s), want %v", patched, res.Reason, tt.applied)
			}
			if !tt.applied && (!strings.Contains(res.Reason, "v1alpha1:spec.newerField") || strings.Contains(res.Reason, "\x07")) {
				t.Errorf("reason %q does not name the field it would drop, or echoes a control character", res.Reason)
			}
		})
	}
	// The same fields: a rebuild of one -dev applies as before.
	live, err := Embedded("v0.1.0-dev")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	c := newClient(live)
	if res, _ := Apply(ctx, c, "v0.1.0-dev"); !patchedCRD(c) {
		t.Errorf("the same CRD of the same -dev was not applied: %s", res.Reason)
	}
}

func patchedCRD(c *dynamicfake.FakeDynamicClient) bool {
	for _, a := range c.Actions() {
		if a.GetVerb() == "patch" {
			return true
		}
	}
	return false
}
