package policy

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// Created is what a create of one Service comes to once both stages have
// seen it: what `clusterip-policy review` reports.
type Created struct {
	Allowed bool
	// Outcome is the mutating stage's, unless the validating stage denied
	// or warned where the mutating stage simply allowed.
	Outcome Outcome
	// Rules matched at either stage, once each, mutating stage first.
	Rules     []RuleID
	Mutations []string
	Patch     []PatchOp
	// ClusterIPs the Service ends with: the addresses asked for or assigned,
	// "None" for a headless Service; empty when the apiserver would allocate
	// them dynamically, or when the create is denied.
	ClusterIPs []string
	Message    string
}

// ReplayCreate replays a create in the apiserver's order (see "Admission
// order" in docs/apiserver-facts.md): the mutating stage on the manifest as
// written; then the allocation, which offline can only take the addresses
// already known (asked for, or assigned by the mutating stage: a dynamic
// address is the apiserver's random pick); then the validating stage on the
// Service as it would be stored. It is the only code outside the apiserver
// that knows that order, so an offline review and the webhook cannot drift.
func ReplayCreate(env Env, svc *corev1.Service) Created {
	m := Mutate(env, Request{Operation: Create, Service: svc})
	res := Created{Allowed: m.Allowed(), Outcome: m.Outcome, Rules: m.Rules(), Mutations: m.Mutations,
		ClusterIPs: m.FinalIPs, Message: m.Message, Patch: m.Patch}
	if svc.Spec.ClusterIP == corev1.ClusterIPNone {
		res.ClusterIPs = []string{corev1.ClusterIPNone} // headless: what the Service ends with
	}
	if !m.Allowed() || len(m.FinalIPs) == 0 || m.Skipped != "" {
		return res // denied, dynamic (nothing known to validate) or not reviewed
	}
	allocated := svc.DeepCopy()
	allocated.Spec.ClusterIP, allocated.Spec.ClusterIPs = m.FinalIPs[0], m.FinalIPs
	v := Validate(env, Request{Operation: Create, Service: allocated})
	for _, r := range v.Rules() {
		if !slices.Contains(res.Rules, r) {
			res.Rules = append(res.Rules, r)
		}
	}
	switch {
	case !v.Allowed():
		res.Allowed, res.Outcome, res.Message = false, v.Outcome, v.Message
		res.ClusterIPs, res.Patch, res.Mutations = nil, nil, nil
	case v.Outcome == Warned && res.Outcome == Allowed:
		res.Outcome, res.Message = v.Outcome, v.Message
	}
	return res
}
