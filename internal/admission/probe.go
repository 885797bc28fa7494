package admission

import (
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"clusterip-policy/internal/names"
	"clusterip-policy/pkg/policy"
)

// answerProbe adds the reachability probe's warning (names.ProbeWarning) to
// the decision d when the request is the leader's probe: a server-side dry
// run of a CREATE of a headless Service carrying names.ProbeAnnotation with
// a well-formed id, which the policy allowed unchanged. Nothing else about
// the answer changes: the probe is decided as any request is (readiness
// checked first, so only a ready replica answers it; a headless Service is
// always allowed, unchanged, by every rule), and the warning is the only
// difference the annotation makes. A user who copies the annotation gets a
// warning on a dry run and nothing at all on a real create, so the marker
// is no way around the policy, and the work is bounded: the id is checked
// for at most names.MaxProbeIDBytes bytes before it is echoed.
func answerProbe(stage policy.Stage, req admission.Request, id string, svc *corev1.Service, d *policy.Decision) {
	if id == "" || !isDryRun(req) || req.Operation != admissionv1.Create || svc.Spec.ClusterIP != corev1.ClusterIPNone {
		return
	}
	if d.Outcome != policy.Allowed || len(d.Patch) > 0 || !names.ValidProbeID(id) {
		return
	}
	d.Warnings = append(d.Warnings, names.ProbeWarning(string(stage), id))
}
