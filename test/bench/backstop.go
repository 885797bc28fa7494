package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"clusterip-policy/pkg/allocview"
	"clusterip-policy/pkg/backstop"
	"clusterip-policy/pkg/policy"
)

// backstopSet is the backstop the leader writes for the benchmark's policy
// and range (pkg/backstop.Compile with the same input), with the record
// (MutatingAdmissionPolicy) where the apiserver serves it.
func backstopSet(mutating bool) (backstop.Set, error) {
	spec, err := yaml.YAMLToJSON([]byte(policySpec()))
	if err != nil {
		return backstop.Set{}, fmt.Errorf("the benchmark's policy: %w", err)
	}
	p, err := policy.ParseObjectSpec(spec)
	if err != nil {
		return backstop.Set{}, fmt.Errorf("the benchmark's policy: %w", err)
	}
	snap := allocview.NewView().Update(func(tx *allocview.Tx) {
		tx.SetServiceCIDR(allocview.ServiceCIDR{Name: "kubernetes", Ready: true, CIDRs: []netip.Prefix{netip.MustParsePrefix(ServiceRange)}})
		tx.MarkSynced(true)
	})
	env := policy.Env{Policy: p, Snapshot: snap}
	return backstop.Compile(backstop.Input{Policy: p, Ranges: env.Ranges(), Mutating: mutating,
		NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
			Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"clusterip-policy"},
		}}},
		Labels: map[string]string{"app.kubernetes.io/name": "clusterip-policy-bench"}})
}

// applyBackstop writes the backstop's policies and bindings, as the leader
// does (server-side apply), and waits until the apiserver enforces them: a
// dry-run create of the DNS address by another Service is refused by the
// backstop, and, with the record, one naming a dynamic-band address too.
func (b *Bench) applyBackstop(ctx context.Context) error {
	res, err := b.cs.Discovery().ServerResourcesForGroupVersion(admissionregistrationv1.SchemeGroupVersion.String())
	if err != nil {
		return err
	}
	mutating := slices.ContainsFunc(res.APIResources, func(r metav1.APIResource) bool { return r.Name == "mutatingadmissionpolicies" })
	set, err := backstopSet(mutating)
	if err != nil {
		return err
	}
	ar := b.cs.AdmissionregistrationV1()
	var errs []error
	for i := range set.Policies {
		errs = append(errs, applyObject(ctx, ar.ValidatingAdmissionPolicies().Patch, set.Policies[i].Name, &set.Policies[i]))
	}
	for i := range set.MutatingPolicies {
		errs = append(errs, applyObject(ctx, ar.MutatingAdmissionPolicies().Patch, set.MutatingPolicies[i].Name, &set.MutatingPolicies[i]))
	}
	for i := range set.Bindings {
		errs = append(errs, applyObject(ctx, ar.ValidatingAdmissionPolicyBindings().Patch, set.Bindings[i].Name, &set.Bindings[i]))
	}
	for i := range set.MutatingBindings {
		errs = append(errs, applyObject(ctx, ar.MutatingAdmissionPolicyBindings().Patch, set.MutatingBindings[i].Name, &set.MutatingBindings[i]))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return waitFor(ctx, "the backstop in force", func() (bool, string, error) {
		for _, c := range []struct{ ip, rule string }{{dnsIP, "reserved-for-other"}, {"10.96.200.5", "static-ip-in-dynamic-band"}} {
			if c.rule == "static-ip-in-dynamic-band" && !mutating {
				continue
			}
			d, err := b.probe(ctx, c.ip)
			if err != nil {
				return false, "", err
			}
			if d.createErr == nil || !strings.Contains(d.createErr.Error(), "(clusterip-policy backstop, rule "+c.rule+")") {
				return false, fmt.Sprintf("a dry-run create of %s got %v, want the backstop's refusal by %s", c.ip, d.createErr, c.rule), nil
			}
		}
		return true, "", nil
	})
}

// deleteBackstop deletes every object of the backstop, bindings first; a
// resource the apiserver does not serve holds nothing to delete.
func (b *Bench) deleteBackstop(ctx context.Context) error {
	ar := b.cs.AdmissionregistrationV1()
	var errs []error
	for _, n := range backstop.Names() {
		dels := []func(context.Context, string, metav1.DeleteOptions) error{ar.ValidatingAdmissionPolicyBindings().Delete, ar.ValidatingAdmissionPolicies().Delete}
		if n == backstop.RecordName {
			dels = []func(context.Context, string, metav1.DeleteOptions) error{ar.MutatingAdmissionPolicyBindings().Delete, ar.MutatingAdmissionPolicies().Delete}
		}
		for _, del := range dels {
			if err := del(ctx, n, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsMethodNotSupported(err) {
				errs = append(errs, fmt.Errorf("delete %s: %w", n, err))
			}
		}
	}
	return errors.Join(errs...)
}

// applyObject server-side applies obj (typed, apiVersion and kind set)
// through a typed client's Patch.
func applyObject[T any](ctx context.Context, patch func(context.Context, string, types.PatchType, []byte, metav1.PatchOptions, ...string) (T, error), name string, obj any) error {
	data, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	force := true
	if _, err := patch(ctx, name, types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: "clusterip-policy-bench", Force: &force}); err != nil {
		return fmt.Errorf("apply %s: %w", name, err)
	}
	return nil
}
