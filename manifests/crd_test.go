package manifests

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"clusterip-policy/pkg/policy"
)

// The ClusterIPPolicy CRD is the policy file's fields under the project's
// API group: a field the file gains must appear in the schema (or the
// apiserver would prune it), and the schema must not accept one the loader
// would refuse.
func TestPolicyCRDMatchesThePolicyFile(t *testing.T) {
	o := loadBase(t)
	if len(o.CRDs) != 1 {
		t.Fatalf("base has %d CustomResourceDefinitions, want the ClusterIPPolicy one", len(o.CRDs))
	}
	crd := o.CRDs[0]
	if want := policy.ObjectResource + "." + policy.ObjectGroup; crd.Name != want || crd.Spec.Group != policy.ObjectGroup || crd.Spec.Names.Plural != policy.ObjectResource || crd.Spec.Names.Kind != policy.Kind {
		t.Fatalf("CRD %s (group %s, plural %s, kind %s), want %s of kind %s", crd.Name, crd.Spec.Group, crd.Spec.Names.Plural, crd.Spec.Names.Kind, want, policy.Kind)
	}
	if crd.Spec.Scope != "Cluster" {
		t.Errorf("scope %s, want Cluster: the policy is the cluster's", crd.Spec.Scope)
	}
	if len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Name != policy.ObjectVersion || crd.Spec.Versions[0].Subresources == nil || crd.Spec.Versions[0].Subresources.Status == nil {
		t.Fatalf("want one version %s with a status subresource (the webhook writes only status)", policy.ObjectVersion)
	}
	schema := crd.Spec.Versions[0].Schema.OpenAPIV3Schema
	spec := schema.Properties["spec"]
	var fileFields []string
	ft := reflect.TypeFor[policy.File]()
	for i := range ft.NumField() {
		name, _, _ := strings.Cut(ft.Field(i).Tag.Get("yaml"), ",")
		if name != "apiVersion" && name != "kind" {
			fileFields = append(fileFields, name)
		}
	}
	var schemaFields []string
	for name := range spec.Properties {
		schemaFields = append(schemaFields, name)
	}
	slices.Sort(fileFields)
	slices.Sort(schemaFields)
	// The retired file format is frozen and translated into the spec
	// (policy.Parse): each of its fields must still be one of the spec's.
	// The spec may grow fields the retired format never gets.
	for _, f := range fileFields {
		if !slices.Contains(schemaFields, f) {
			t.Errorf("the retired policy file's field %s is not a spec field (spec fields %v): its translation into the spec would lose it", f, schemaFields)
		}
	}
	if spec.XPreserveUnknownFields != nil && *spec.XPreserveUnknownFields {
		t.Error("spec preserves unknown fields: a misspelt field would be kept and then refused only by the webhook")
	}
	var nameRule bool
	for _, r := range schema.XValidations {
		nameRule = nameRule || strings.Contains(r.Rule, "self.metadata.name == '"+policy.ObjectName+"'")
	}
	if !nameRule {
		t.Errorf("the schema does not refuse a ClusterIPPolicy not named %s, the only one the webhook reads", policy.ObjectName)
	}
	actions := spec.Properties["enforcement"].Properties["default"].Enum
	var got []string
	for _, a := range actions {
		got = append(got, strings.Trim(string(a.Raw), `"`))
	}
	if want := []string{string(policy.ActionDeny), string(policy.ActionWarn), string(policy.ActionAudit)}; !slices.Equal(got, want) {
		t.Errorf("enforcement.default enum %v, want %v", got, want)
	}
}
