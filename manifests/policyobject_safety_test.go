package manifests

import (
	"slices"
	"strings"

	admv1 "k8s.io/api/admissionregistration/v1"

	"clusterip-policy/pkg/policy"
)

// policyObjectWebhook reviews ClusterIPPolicy objects at kubectl apply
// (ValidatePolicyObjectPath) with the webhook's policy loader.
const policyObjectWebhook = "validate-clusterippolicies.clusterip-policy.io"

// clusterScoped says whether a webhook reviews cluster-scoped objects, for
// which a namespaceSelector never applies and default/kubernetes is no
// concern.
func clusterScoped(w webhook) bool {
	return w.name == serviceCIDRWebhook || w.name == policyObjectWebhook
}

// policyObjectRules holds the policy-object webhook's scope exact: one
// rule, CREATE and UPDATE of clusterip-policy.io/v1alpha1
// clusterippolicies, cluster-scoped; not the status subresource (the
// webhook's own status writes must never wait for it), not DELETE.
func policyObjectRules(w webhook) []string {
	want := admv1.RuleWithOperations{
		Operations: []admv1.OperationType{admv1.Create, admv1.Update},
		Rule: admv1.Rule{APIGroups: []string{policy.ObjectGroup}, APIVersions: []string{policy.ObjectVersion},
			Resources: []string{policy.ObjectResource}, Scope: ptr(admv1.ClusterScope)},
	}
	if len(w.rules) != 1 || !ruleEqual(w.rules[0], want) {
		return []string{problemf("%s must match exactly CREATE and UPDATE of %s/%s %s with scope Cluster, got %+v", w.where, policy.ObjectGroup, policy.ObjectVersion, policy.ObjectResource, w.rules)}
	}
	if w.mutating {
		return []string{problemf("%s: the policy object is only validated, never mutated", w.where)}
	}
	return nil
}

// policyObjectFailOpen holds the policy-object webhook at failurePolicy
// Ignore: the webhook enforces only an object its loader accepted (a
// refused generation leaves the last good one in force), while with Fail
// pods running --policy-source=crd, which get ready only once the object
// loads, would wait for a webhook that waits for them.
func policyObjectFailOpen(o *objects) []string {
	var p []string
	for _, w := range o.webhooks() {
		if w.name != policyObjectWebhook {
			continue
		}
		if w.failurePolicy == nil || *w.failurePolicy != admv1.Ignore {
			p = append(p, problemf("%s: failurePolicy must be Ignore: the webhook's loader refuses a bad policy anyway, and with Fail the object the pods need to get ready could not be created or fixed while no pod is ready", w.where))
		}
		if w.namespaceSelector != nil {
			p = append(p, problemf("%s has a namespaceSelector, which never applies to the cluster-scoped ClusterIPPolicy; remove it", w.where))
		}
	}
	return p
}

// hasPolicyObjectWebhook says so when the configurations lack the
// policy-object webhook: a policy the loader refuses would then be accepted
// by kubectl apply and show up only in the status.
func hasPolicyObjectWebhook(o *objects) []string {
	if slices.ContainsFunc(o.webhooks(), func(w webhook) bool { return w.name == policyObjectWebhook }) {
		return nil
	}
	return []string{problemf("no webhook %s: kubectl apply would accept a policy object the webhook then refuses to load", policyObjectWebhook)}
}

// policyObjectSpecChangesOnly holds the condition that sends an UPDATE only
// when the spec changes, passing CREATE whole.
func policyObjectSpecChangesOnly(w webhook) []string {
	i := slices.IndexFunc(w.matchConditions, func(mc admv1.MatchCondition) bool { return mc.Name == "spec-changes-only" })
	if i < 0 {
		return []string{problemf("%s has no matchCondition spec-changes-only", w.where)}
	}
	e := strings.Join(strings.Fields(w.matchConditions[i].Expression), " ")
	if !strings.HasPrefix(e, "request.operation != 'UPDATE' || ") || !strings.Contains(e, "object.spec != oldObject.spec") {
		return []string{problemf("%s: matchCondition spec-changes-only must pass every CREATE and an UPDATE whose spec changes: %s", w.where, e)}
	}
	return nil
}
