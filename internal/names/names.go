// Package names holds the names the binary shares with the manifests: the
// paths of the admission endpoints and the names of the Service webhooks in
// the webhook configurations (and the periodic audit's Event reason, which
// alerts and the ClusterIPPolicy status name). The binary serves and edits them by these
// names, manifests/base/webhook-configurations.yaml sends the apiservers to
// them (manifests/safety_test.go holds the two equal), and the e2e harness
// calls and finds them by them. The manifests package re-exports the paths;
// the binary never imports manifests.
package names

// Paths of the admission endpoints.
const (
	MutatePath   = "/mutate-v1-service"
	ValidatePath = "/validate-v1-service"
	// ValidateServiceCIDRPath reviews networking.k8s.io/v1 ServiceCIDRs.
	ValidateServiceCIDRPath = "/validate-v1-servicecidr"
	// ValidatePolicyObjectPath reviews clusterip-policy.io ClusterIPPolicy
	// objects with the policy loader (internal/admission/policyobjectreview.go).
	ValidatePolicyObjectPath = "/validate-v1alpha1-clusterippolicy"
)

// The Service webhooks' names in the webhook configurations: the managed
// matchCondition is written into these entries, and the kube-apiserver
// prefixes each auditAnnotation with them.
const (
	MutatingServiceWebhook   = "mutate-services.clusterip-policy.io"
	ValidatingServiceWebhook = "validate-services.clusterip-policy.io"
)

// AuditEventReason is the reason of the periodic audit's Warning Events;
// public API: alerts and `kubectl get events --field-selector` use it, and
// the ClusterIPPolicy status names it.
const AuditEventReason = "ClusterIPPolicyViolation"
