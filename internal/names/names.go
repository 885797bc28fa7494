// Package names holds the names the binary shares with the manifests: the
// paths of the admission endpoints and the names of the Service webhooks in
// the webhook configurations (and the periodic audit's Event reason, which
// alerts and the ClusterIPPolicy status name). The binary serves and edits them by these
// names, manifests/base/webhook-configurations.yaml sends the apiservers to
// them (manifests/safety_test.go holds the two equal), and the e2e harness
// calls and finds them by them. The manifests package re-exports the paths;
// the binary never imports manifests.
package names

import "os"

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

// Paths lists every admission endpoint, as serve's --port help names them
// (internal/server's test holds it equal to what the server registers).
var Paths = []string{MutatePath, ValidatePath, ValidateServiceCIDRPath, ValidatePolicyObjectPath}

// The Service webhooks' names in the webhook configurations: the managed
// matchCondition is written into these entries, and the kube-apiserver
// prefixes each auditAnnotation with them.
const (
	MutatingServiceWebhook   = "mutate-services.clusterip-policy.io"
	ValidatingServiceWebhook = "validate-services.clusterip-policy.io"
)

// AppName is the app.kubernetes.io/name label of every object the
// manifests and the leader make: the break-glass command of
// docs/emergency.md selects the webhook configurations and the backstop's
// bindings by it.
const AppName = "clusterip-policy-webhook"

// AuditEventReason is the reason of the periodic audit's Warning Events;
// public API: alerts and `kubectl get events --field-selector` use it, and
// the ClusterIPPolicy status names it.
const AuditEventReason = "ClusterIPPolicyViolation"

// The reachability probe (internal/controllers/arming): the leader sends a
// server-side dry-run create of a headless Service in namespace default
// carrying ProbeAnnotation, whose value is a fresh id; each Service webhook
// that reviews it and allows it adds ProbeWarning(stage, id) to its answer,
// and the apiserver hands the leader those warnings. Seeing them is the
// proof that the apiserver reaches a ready replica through each webhook
// configuration. The answer is the policy's own (a headless Service is
// always allowed, unchanged): the annotation only adds the warning, and
// only to a dry run (internal/admission, probe.go).
const (
	ProbeAnnotation = "clusterip-policy.io/reachability-probe"
	// ProbeNamespace is where the probe is sent: a namespace every cluster
	// has and the webhook configurations may never exclude.
	ProbeNamespace = "default"
	// ProbeGenerateName prefixes the probe Service's generated name.
	ProbeGenerateName = "clusterip-policy-reachability-probe-"
	// MaxProbeIDBytes bounds the id: longer values are not a probe.
	MaxProbeIDBytes = 32
)

// ProbeWarning is the warning a Service webhook's stage ("mutate",
// "validate") adds to its answer to the probe with this id.
func ProbeWarning(stage, id string) string {
	return "clusterip-policy reachability probe " + id + " answered by the " + stage + " stage"
}

// ValidProbeID reports whether id may be a probe's: 1 to MaxProbeIDBytes
// lowercase letters and digits, as the leader makes them.
func ValidProbeID(id string) bool {
	if id == "" || len(id) > MaxProbeIDBytes {
		return false
	}
	for _, c := range []byte(id) {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// WebhookNamespace is the webhook's own namespace, the default of
// --cert-namespace and --leader-election-namespace: $POD_NAMESPACE (the
// downward API), else clusterip-policy.
func WebhookNamespace() string {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	return "clusterip-policy"
}
