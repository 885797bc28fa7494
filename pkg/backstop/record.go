package backstop

import (
	"fmt"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The record: a MutatingAdmissionPolicy that writes, before the apiserver
// allocates, which addresses the request names (RecordAnnotation). The
// validating side sees only the final object, where a named address and
// an allocated one look the same; the record tells them apart. It runs on
// every request that can allocate, so whatever a client wrote there is
// replaced (or removed when the request names no address): a client cannot
// forge it. reinvocationPolicy IfNeeded runs it again after a later
// mutating admission (our webhook's assignment of a reserved address, or
// another's) changed the object, so the record holds what reaches the
// allocator.

// RecordCondition is the record's one matchCondition: at most two
// addresses, naming one or carrying the record, on a request that can
// allocate.
const RecordCondition = "may-need-recording"

// recordPath is RecordAnnotation as a JSON Pointer token (RFC 6901: "/" is
// written "~1").
var recordPath = "/metadata/annotations/" + strings.ReplaceAll(strings.ReplaceAll(RecordAnnotation, "~", "~0"), "/", "~1")

// recordShape leaves out a request with more than two addresses: the
// apiserver refuses it after admission, and the record would only walk it.
const recordShape = `!has(object.spec) || !has(object.spec.clusterIPs) || size(object.spec.clusterIPs) <= 2`

// recordMatch sends the record only the requests that can allocate: every
// CREATE, and an UPDATE that changes the addresses (the validating
// webhook's allocating-requests-only) or leaves ExternalName.
const recordMatch = `request.operation != 'UPDATE' || !has(object.spec) || !has(oldObject.spec) || ` +
	`has(object.spec.clusterIPs) != has(oldObject.spec.clusterIPs) || ` +
	`(has(object.spec.clusterIPs) && object.spec.clusterIPs != oldObject.spec.clusterIPs) || ` +
	`(has(oldObject.spec.type) && oldObject.spec.type == 'ExternalName')`

// recordNeeded leaves out a request with nothing to write: it names no
// address and carries no record (a dynamic create, most of the traffic).
var recordNeeded = `(has(object.spec.clusterIP) && object.spec.clusterIP != '' && object.spec.clusterIP != 'None') || ` +
	`(has(object.spec.clusterIPs) && object.spec.clusterIPs.exists(i, i != '' && i != 'None')) || ` +
	`(has(object.metadata.annotations) && ` + quote(RecordAnnotation) + ` in object.metadata.annotations)`

// recordPatch is the JSON Patch: set the annotation to the named
// addresses (at most two: the apiserver refuses more), or remove it.
var recordPatch = fmt.Sprintf(`size(variables.named) > 0 ? `+
	`(has(object.metadata.annotations) ? `+
	`[JSONPatch{op: 'add', path: %[1]s, value: variables.named.join(',')}] : `+
	`[JSONPatch{op: 'add', path: '/metadata/annotations', value: {%[2]s: variables.named.join(',')}}]) : `+
	`(has(object.metadata.annotations) && %[2]s in object.metadata.annotations ? `+
	`[JSONPatch{op: 'remove', path: %[1]s}] : [])`, quote(recordPath), quote(RecordAnnotation))

// varNamed is what the request names (pkg/policy requestedIPs), at most
// two entries (recordShape); one longer than any address is not recorded.
const varNamed = `(has(object.spec.clusterIPs) && size(object.spec.clusterIPs) > 0 ? object.spec.clusterIPs : ` +
	`(has(object.spec.clusterIP) && object.spec.clusterIP != '' ? [object.spec.clusterIP] : [])).filter(i, i != 'None' && i != '' && size(i) <= 64)`

func (c compiler) recordPolicy() admissionregistrationv1.MutatingAdmissionPolicy {
	fail := admissionregistrationv1.Fail
	equivalent := admissionregistrationv1.Equivalent
	return admissionregistrationv1.MutatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: "MutatingAdmissionPolicy"},
		ObjectMeta: c.objectMeta(RecordName),
		Spec: admissionregistrationv1.MutatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionregistrationv1.MatchResources{
				MatchPolicy: &equivalent,
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{Services}},
				}}},
			},
			// One condition (oneCondition): the shape first, costing
			// one size(), so a hostile list of 50,000 addresses (which
			// the apiserver's validation refuses after admission) is
			// never walked; then what a dynamic create fails at once.
			MatchConditions: oneCondition(RecordCondition, []admissionregistrationv1.MatchCondition{
				{Name: "at-most-two-addresses", Expression: recordShape},
				{Name: "names-an-address-or-carries-the-record", Expression: recordNeeded},
				{Name: "allocating-requests-only", Expression: recordMatch},
			}),
			Variables: []admissionregistrationv1.Variable{
				{Name: "named", Expression: varNamed},
			},
			Mutations: []admissionregistrationv1.Mutation{{
				PatchType: admissionregistrationv1.PatchTypeJSONPatch,
				JSONPatch: &admissionregistrationv1.JSONPatch{Expression: recordPatch},
			}},
			ReinvocationPolicy: admissionregistrationv1.IfNeededReinvocationPolicy,
		},
	}
}

func (c compiler) recordBinding() admissionregistrationv1.MutatingAdmissionPolicyBinding {
	b := admissionregistrationv1.MutatingAdmissionPolicyBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: "MutatingAdmissionPolicyBinding"},
		ObjectMeta: c.objectMeta(RecordName),
		Spec:       admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{PolicyName: RecordName},
	}
	if c.in.NamespaceSelector != nil {
		b.Spec.MatchResources = &admissionregistrationv1.MatchResources{NamespaceSelector: c.in.NamespaceSelector.DeepCopy()}
	}
	return b
}
