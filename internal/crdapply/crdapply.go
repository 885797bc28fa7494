// Package crdapply brings the cluster's ClusterIPPolicy CRD up to the one
// this binary carries (`clusterip-policy apply-crd`, the chart's
// pre-upgrade hook): a server-side apply of the embedded copy, which
// hack/generate-crd.sh writes beside manifests/base/crd.yaml and the chart's
// crds/. helm installs crds/ on the first install only; this runs before
// every helm upgrade applies the release, so a policy object using a field
// the new CRD adds is stored, not pruned.
//
// It never replaces a CRD a newer binary applied (its version is in an
// annotation), so an upgrade to an older chart does not take fields away
// from the stored policies; where the versions cannot be ordered, nor one
// whose schema has a field this binary's lacks. It never creates the CRD: helm install does,
// and RBAC cannot narrow create to one name.
package crdapply

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"clusterip-policy/internal/poll"
	"clusterip-policy/pkg/policy"
)

//go:embed clusterippolicies.yaml
var manifest []byte

// Name is the CRD's name.
const Name = "clusterippolicies.clusterip-policy.io"

// FieldManager owns the fields the apply writes.
const FieldManager = "clusterip-policy-apply-crd"

// VersionAnnotation records the version of the binary that applied the CRD.
const VersionAnnotation = "clusterip-policy.io/applied-by-version"

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// Result says what Apply did.
type Result struct {
	Applied bool
	// Live is the version annotation the CRD carried before ("" if none).
	Live string
	// Reason is why it was not applied, when it was not.
	Reason string
}

// Embedded returns the CRD this binary carries, annotated with version.
func Embedded(version string) (*unstructured.Unstructured, error) {
	var obj map[string]any
	if err := yaml.Unmarshal(manifest, &obj); err != nil {
		return nil, fmt.Errorf("the embedded CRD does not parse: %w", err)
	}
	u := &unstructured.Unstructured{Object: obj}
	if u.GetName() != Name || u.GetKind() != "CustomResourceDefinition" {
		return nil, fmt.Errorf("the embedded manifest is %s %q, not the CustomResourceDefinition %s", u.GetKind(), u.GetName(), Name)
	}
	ann := u.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	ann[VersionAnnotation] = version
	u.SetAnnotations(ann)
	return u, nil
}

// Newer reports whether live (a VersionAnnotation) names a version later
// than ours; either not being a semantic version means no.
func Newer(live, ours string) bool {
	l, err := utilversion.ParseSemantic(live)
	if err != nil {
		return false
	}
	o, err := utilversion.ParseSemantic(ours)
	if err != nil {
		return false
	}
	return l.GreaterThan(o)
}

// Apply applies the embedded CRD as version's, unless the cluster's was
// applied by a newer version, and waits until the apiserver serves it
// (Established) or ctx ends.
func Apply(ctx context.Context, client dynamic.Interface, version string) (Result, error) {
	want, err := Embedded(version)
	if err != nil {
		return Result{}, err
	}
	api := client.Resource(crdResource)
	live, err := api.Get(ctx, Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return Result{}, fmt.Errorf("the CRD %s does not exist: helm install creates it from the chart's crds/, kubectl apply -k from manifests/base; this command only upgrades it (create it with kubectl apply -f charts/clusterip-policy/crds/clusterippolicies.yaml)", Name)
	}
	if err != nil {
		return Result{}, fmt.Errorf("read the CRD %s: %w", Name, err)
	}
	res := Result{Live: live.GetAnnotations()[VersionAnnotation]}
	if Newer(res.Live, version) {
		res.Reason = fmt.Sprintf("the CRD was applied by %s, newer than this binary's %s; an older CRD would drop fields the stored policies may use", res.Live, version)
		return res, nil
	}
	// Two builds the version cannot order (the same release with -dev, or
	// no version at all) are told apart by the schema: ours must not lose a
	// field the cluster's has. A release strictly newer than the live one
	// may drop a field on purpose (v1alpha1), and the version says so.
	if !Newer(version, res.Live) {
		if lost := fieldsLost(live.Object, want.Object); len(lost) > 0 {
			res.Reason = fmt.Sprintf("the CRD was applied by %s, which this binary's %s cannot order against it, and has fields this binary's lacks (%s); applying it would drop them from the stored policies (run the newer build, or apply this build's CRD by hand if dropping them is meant: kubectl apply --server-side --force-conflicts -f charts/clusterip-policy/crds/clusterippolicies.yaml)",
				quoteVersion(res.Live), version, strings.Join(policy.ClipList(lost, maxLostFields), ", "))
			return res, nil
		}
	}
	body, err := json.Marshal(want.Object)
	if err != nil {
		return res, err
	}
	force := true
	if _, err := api.Patch(ctx, Name, types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: FieldManager, Force: &force}); err != nil {
		return res, fmt.Errorf("apply the CRD %s: %w", Name, err)
	}
	res.Applied = true
	return res, waitEstablished(ctx, api)
}

// maxLostFields bounds the fields a refusal names.
const maxLostFields = 8

// fieldsLost returns the schema property paths (version/spec.x.y) the live
// CRD has and want lacks, sorted.
func fieldsLost(live, want map[string]any) []string {
	have := schemaFields(want)
	var lost []string
	for f := range schemaFields(live) {
		if !have[f] {
			lost = append(lost, f)
		}
	}
	sort.Strings(lost)
	return lost
}

// schemaFields is the set of property paths of every served version's
// schema, as "v1alpha1:spec.reservations.ip" (items of a list are not a
// path element: a field of a list entry is a field of the list).
func schemaFields(crd map[string]any) map[string]bool {
	out := map[string]bool{}
	versions, _, _ := unstructured.NestedSlice(crd, "spec", "versions")
	for _, v := range versions {
		vm, _ := v.(map[string]any)
		name, _ := vm["name"].(string)
		root, _, _ := unstructured.NestedMap(vm, "schema", "openAPIV3Schema")
		walkSchema(root, name+":", out, 0)
	}
	return out
}

// walkSchema adds the properties under s to out, prefixed; depth bounds
// a hostile or cyclic-looking schema.
func walkSchema(s map[string]any, prefix string, out map[string]bool, depth int) {
	if s == nil || depth > 32 {
		return
	}
	if items, ok := s["items"].(map[string]any); ok {
		walkSchema(items, prefix, out, depth+1)
	}
	props, _ := s["properties"].(map[string]any)
	for k, sub := range props {
		p := prefix + k
		out[p] = true
		sm, _ := sub.(map[string]any)
		walkSchema(sm, p+".", out, depth+1)
	}
}

// quoteVersion names a live annotation, which anyone with patch on the CRD
// can write.
func quoteVersion(v string) string {
	if v == "" {
		return "no clusterip-policy version"
	}
	if len(v) > 64 {
		v = v[:64] + "..."
	}
	return fmt.Sprintf("%q", v)
}

// waitEstablished polls the CRD until its Established condition is True,
// until ctx ends.
func waitEstablished(ctx context.Context, api dynamic.NamespaceableResourceInterface) error {
	var last string
	for {
		crd, err := api.Get(ctx, Name, metav1.GetOptions{})
		if err == nil {
			conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
			last = "no Established condition"
			for _, c := range conds {
				m, _ := c.(map[string]any)
				if m["type"] == "Established" {
					if m["status"] == "True" {
						return nil
					}
					last = fmt.Sprintf("Established %v: %v", m["status"], m["message"])
				}
			}
		} else {
			last = err.Error()
		}
		if !poll.Sleep(ctx, 500*time.Millisecond) {
			return errors.Join(fmt.Errorf("the CRD %s was applied but is not served yet (%s)", Name, last), ctx.Err())
		}
	}
}
