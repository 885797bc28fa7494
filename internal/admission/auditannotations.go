package admission

import (
	"strings"

	"clusterip-policy/pkg/policy"
)

// Keys of the auditAnnotations in every AdmissionResponse; public API
// (README.md, "The apiserver's audit log"). The kube-apiserver prefixes each
// with the webhook's name and records it in its own audit log next to the
// request, at level Metadata and above:
// mutate-services.clusterip-policy.io/decision: patched. A key must make
// "<webhook name>/<key>" a qualified name (checkKeyFormat in
// k8s.io/apiserver/pkg/admission/attributes.go): lowercase, at most 63
// characters, no second slash.
const (
	annotationDecision     = "decision"
	annotationRules        = "rules"
	annotationPolicyDigest = "policy-digest"
)

// auditAnnotations are the apiserver's record of one answer: the decision,
// the rules that matched (comma-separated, at most policy.MaxListed, each
// a short ID) and the digest of the policy it was made against. Bounded
// whatever the request: a one-word outcome, a few rule IDs and 12 hex
// digits; the decision log line (audit.go) keeps everything else.
func auditAnnotations(a answered) map[string]string {
	out := map[string]string{annotationDecision: string(a.outcome)}
	if d := a.decision; d != nil {
		out[annotationDecision] = string(d.Outcome)
		if rules := d.Rules(); len(rules) > 0 {
			ids := make([]string, 0, len(rules))
			for _, id := range capped(rules) {
				ids = append(ids, policy.Echo(string(id)))
			}
			out[annotationRules] = strings.Join(ids, ",")
		}
	}
	if p := a.state.Policy; p != nil && p.Policy != nil {
		out[annotationPolicyDigest] = p.Policy.Digest
	}
	return out
}
