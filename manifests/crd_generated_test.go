package manifests

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"clusterip-policy/internal/testutil"
	"clusterip-policy/pkg/apis/clusterippolicy/v1alpha1"
	"clusterip-policy/pkg/policy"
)

// The ClusterIPPolicy CRD is generated from the Go types in
// pkg/apis/clusterippolicy/v1alpha1 (hack/generate-crd.sh): the committed
// copies, the base's and the chart's, must be exactly what controller-gen
// makes of the types now, or `kubectl explain` documents (and the apiserver
// validates) something other than the types say.
func TestCRDIsGeneratedFromTheGoTypes(t *testing.T) {
	gen, err := filepath.Abs(filepath.Join("..", ".local", "bin", "controller-gen"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(gen); err != nil {
		testutil.MissingTool(t, "no controller-gen at %s (run make tools): %v", gen, err)
	}
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join("..", "hack", "generate-crd.sh"), out)
	cmd.Env = append(os.Environ(), "CONTROLLER_GEN="+gen)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hack/generate-crd.sh: %v\n%s", err, b)
	}
	for _, f := range []string{"manifests/base/crd.yaml", "charts/clusterip-policy/crds/clusterippolicies.yaml", "internal/crdapply/clusterippolicies.yaml"} {
		want, err := os.ReadFile(filepath.Join(out, f))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join("..", f))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("%s is not what controller-gen makes of pkg/apis/clusterippolicy/v1alpha1; run make generate and commit the result", f)
		}
	}
}

// pkg/policy keeps its own copy of the API's names (it stays free of API
// machinery and does not import the types package); the two must agree.
func TestPolicyPackageNamesTheAPIAsTheTypesDo(t *testing.T) {
	got := []string{policy.ObjectGroup, policy.ObjectVersion, policy.ObjectResource, policy.Kind, policy.ObjectName}
	want := []string{v1alpha1.Group, v1alpha1.Version, v1alpha1.Resource, v1alpha1.Kind, v1alpha1.ObjectName}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("pkg/policy names %v, the API types %v", got, want)
	}
	crd := loadBase(t).CRDs[0]
	n := crd.Spec.Names
	if n.Plural != v1alpha1.Resource || n.Singular != v1alpha1.Singular || !reflect.DeepEqual(n.ShortNames, []string{v1alpha1.ShortName}) || !reflect.DeepEqual(n.Categories, []string{v1alpha1.Category}) {
		t.Errorf("CRD names %+v, want plural %s, singular %s, short name %s, category %s", n, v1alpha1.Resource, v1alpha1.Singular, v1alpha1.ShortName, v1alpha1.Category)
	}
}

// Every validation the hand-written CRD had before it was generated (and
// every one added since) stays: a marker dropped from the types would
// otherwise pass unnoticed, the loader refusing what the apiserver used to.
func TestCRDKeepsEveryValidation(t *testing.T) {
	crd := loadBase(t).CRDs[0]
	root := crd.Spec.Versions[0].Schema.OpenAPIV3Schema
	spec := root.Properties["spec"]
	status := root.Properties["status"]
	type check struct {
		path string
		got  any
		want any
	}
	checks := []check{
		{"required", root.Required, []string{"spec"}},
		{"x-kubernetes-validations (name)", rulesOf(root.XValidations), []string{"self.metadata.name == 'default'"}},
		{"spec.serviceCIDRs maxItems", deref(spec.Properties["serviceCIDRs"].MaxItems), int64(64)},
		{"spec.serviceCIDRs[] maxLength", deref(spec.Properties["serviceCIDRs"].Items.Schema.MaxLength), int64(64)},
		{"spec.serviceCIDRs[] rule", rulesOf(spec.Properties["serviceCIDRs"].Items.Schema.XValidations), []string{"isCIDR(self)"}},
		{"spec.allowedCIDRs maxItems", deref(spec.Properties["allowedCIDRs"].MaxItems), int64(64)},
		{"spec.allowedCIDRs[] maxLength", deref(spec.Properties["allowedCIDRs"].Items.Schema.MaxLength), int64(64)},
		{"spec.allowedCIDRs[] rule", rulesOf(spec.Properties["allowedCIDRs"].Items.Schema.XValidations), []string{"isCIDR(self)"}},
		{"spec.reserveKubernetesService type", spec.Properties["reserveKubernetesService"].Type, "boolean"},
		{"spec.reservations maxItems", deref(spec.Properties["reservations"].MaxItems), int64(10000)},
		{"spec.reservations[] required", spec.Properties["reservations"].Items.Schema.Required, []string{"ip", "service"}},
		{"spec.reservations[].ip maxLength", deref(spec.Properties["reservations"].Items.Schema.Properties["ip"].MaxLength), int64(64)},
		{"spec.reservations[].ip rule", rulesOf(spec.Properties["reservations"].Items.Schema.Properties["ip"].XValidations), []string{"isIP(self)"}},
		{"spec.reservations[].service maxLength", deref(spec.Properties["reservations"].Items.Schema.Properties["service"].MaxLength), int64(317)},
		{"spec.reservations[].service pattern", spec.Properties["reservations"].Items.Schema.Properties["service"].Pattern, "^[a-z0-9]([-a-z0-9]*[a-z0-9])?/[a-z]([-a-z0-9]*[a-z0-9])?$"},
		{"spec.reservations[].note maxLength", deref(spec.Properties["reservations"].Items.Schema.Properties["note"].MaxLength), int64(1024)},
		{"spec.enforcement.default enum", enumOf(spec.Properties["enforcement"].Properties["default"].Enum), []string{"deny", "warn", "audit"}},
		{"spec.enforcement.rules maxProperties", deref(spec.Properties["enforcement"].Properties["rules"].MaxProperties), int64(64)},
		{"spec.enforcement.rules{} enum", enumOf(spec.Properties["enforcement"].Properties["rules"].AdditionalProperties.Schema.Enum), []string{"deny", "warn", "audit"}},
		{"spec.exemptions.namespaces maxItems", deref(spec.Properties["exemptions"].Properties["namespaces"].MaxItems), int64(1000)},
		{"spec.exemptions.namespaces[] maxLength", deref(spec.Properties["exemptions"].Properties["namespaces"].Items.Schema.MaxLength), int64(63)},
		{"spec.exemptions.users maxItems", deref(spec.Properties["exemptions"].Properties["users"].MaxItems), int64(1000)},
		{"spec.exemptions.users[] maxLength", deref(spec.Properties["exemptions"].Properties["users"].Items.Schema.MaxLength), int64(1024)},
		{"spec.exemptions.groups maxItems", deref(spec.Properties["exemptions"].Properties["groups"].MaxItems), int64(1000)},
		{"spec.exemptions.groups[] maxLength", deref(spec.Properties["exemptions"].Properties["groups"].Items.Schema.MaxLength), int64(1024)},
		{"status.conditions list type", deref(status.Properties["conditions"].XListType), "map"},
		{"status.conditions list map keys", status.Properties["conditions"].XListMapKeys, []string{"type"}},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s: %v, want %v", c.path, c.got, c.want)
		}
	}
	for _, f := range []string{"observedGeneration", "generationInForce", "policyDigest", "conditions", "audit", "matchConditions"} {
		if _, ok := status.Properties[f]; !ok {
			t.Errorf("status has no field %s", f)
		}
	}
	if spec.XPreserveUnknownFields != nil && *spec.XPreserveUnknownFields {
		t.Error("spec preserves unknown fields: a misspelt field would be kept and refused only by the webhook")
	}
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

func rulesOf(rs apiextensionsv1.ValidationRules) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Rule)
	}
	return out
}

func enumOf(vals []apiextensionsv1.JSON) []string {
	var out []string
	for _, v := range vals {
		out = append(out, strings.Trim(string(v.Raw), `"`))
	}
	return out
}
