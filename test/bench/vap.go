package bench

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// vapName names the ValidatingAdmissionPolicy and its binding.
const vapName = "bench-clusterip"

// vapExpression is the CEL check of the vap configuration, comparable to a
// minimal policy of ours: on CREATE, a Service's final clusterIP (the
// validating stage sees the allocated one) is empty, None, or inside
// 10.96.0.0/16 and not the DNS address 10.96.0.10 unless the Service is
// kube-system/kube-dns. It does not know the static and dynamic bands, what
// was requested (only the final object), nor other reservations: what it
// costs is a lower bound for an in-process check of one address.
const vapExpression = `!has(object.spec.clusterIP) || object.spec.clusterIP == '' || object.spec.clusterIP == 'None' ||
(cidr('` + ServiceRange + `').containsIP(object.spec.clusterIP) &&
 (object.spec.clusterIP != '` + dnsIP + `' || (request.namespace == 'kube-system' && request.name == 'kube-dns')))`

// vapObjects are the policy and its binding (Deny). The policy matches what
// our webhooks match for a CREATE: Services in every namespace but the
// webhook's own, with failurePolicy Fail.
func vapObjects() (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	fail := admissionregistrationv1.Fail
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: vapName},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionregistrationv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
					Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"clusterip-policy"},
				}}},
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
						Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"services"}},
					},
				}},
			},
			Validations: []admissionregistrationv1.Validation{{
				Expression: vapExpression,
				Message:    "spec.clusterIP must lie in " + ServiceRange + ", and " + dnsIP + " is reserved for kube-system/kube-dns",
			}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: vapName},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        vapName,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}
	return policy, binding
}
