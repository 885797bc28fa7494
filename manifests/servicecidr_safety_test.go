package manifests

import (
	"slices"
	"strings"

	admv1 "k8s.io/api/admissionregistration/v1"
)

// serviceCIDRWebhook reviews ServiceCIDR objects (ValidateServiceCIDRPath).
const serviceCIDRWebhook = "validate-servicecidrs.clusterip-policy.io"

// serviceCIDRRules holds the ServiceCIDR webhook's scope exact: one rule,
// CREATE and UPDATE of networking.k8s.io/v1 servicecidrs, cluster-scoped.
// Not the status subresource (the apiserver's and the controller manager's
// Ready condition must never wait for the webhook), not IPAddresses, not
// DELETE (removing a range is the apiserver's and the controller manager's
// business, and a webhook down must not pin a range).
func serviceCIDRRules(w webhook) []string {
	want := admv1.RuleWithOperations{
		Operations: []admv1.OperationType{admv1.Create, admv1.Update},
		Rule: admv1.Rule{APIGroups: []string{"networking.k8s.io"}, APIVersions: []string{"v1"},
			Resources: []string{"servicecidrs"}, Scope: ptr(admv1.ClusterScope)},
	}
	if len(w.rules) != 1 || !ruleEqual(w.rules[0], want) {
		return []string{problemf("%s must match exactly CREATE and UPDATE of networking.k8s.io/v1 servicecidrs with scope Cluster, got %+v", w.where, w.rules)}
	}
	if w.mutating {
		return []string{problemf("%s: ServiceCIDRs are only validated, never mutated", w.where)}
	}
	return nil
}

func ruleEqual(a, b admv1.RuleWithOperations) bool {
	return slices.Equal(a.Operations, b.Operations) && slices.Equal(a.APIGroups, b.APIGroups) &&
		slices.Equal(a.APIVersions, b.APIVersions) && slices.Equal(a.Resources, b.Resources) &&
		a.Scope != nil && b.Scope != nil && *a.Scope == *b.Scope
}

// serviceCIDRDefaultExempt holds the exemption of the default ServiceCIDR
// "kubernetes" to the apiserver's own writes: it creates it at start from
// --service-cluster-ip-range and recreates it when it is deleted, and that
// must not wait for the webhook. Anyone else is checked.
func serviceCIDRDefaultExempt(w webhook) []string {
	for _, mc := range w.matchConditions {
		e := strings.Join(strings.Fields(mc.Expression), " ")
		if !strings.HasPrefix(e, "!(") || !strings.Contains(e, "request.name == 'kubernetes'") {
			continue
		}
		var p []string
		if !strings.Contains(e, "has(request.name) && request.name == 'kubernetes'") {
			p = append(p, problemf("%s: matchCondition %s reads request.name without has(request.name); a generateName create has none and would be rejected", w.where, mc.Name))
		}
		if !strings.Contains(e, "request.userInfo.username == 'system:apiserver'") {
			p = append(p, problemf("%s: matchCondition %s exempts the ServiceCIDR kubernetes for every user; exempt only the apiserver's loopback identity system:apiserver", w.where, mc.Name))
		}
		return p
	}
	return []string{problemf("%s has no matchCondition exempting the apiserver's default ServiceCIDR kubernetes, which the apiserver must be able to create and recreate", w.where)}
}

// hasServiceCIDRWebhook says so when the configurations lack the ServiceCIDR
// webhook: without it a range outside allowedCIDRs is created unopposed.
func hasServiceCIDRWebhook(o *objects) []string {
	if slices.ContainsFunc(o.webhooks(), func(w webhook) bool { return w.name == serviceCIDRWebhook }) {
		return nil
	}
	return []string{problemf("no webhook %s: ServiceCIDRs outside allowedCIDRs would be created unopposed", serviceCIDRWebhook)}
}
