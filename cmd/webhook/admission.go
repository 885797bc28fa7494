package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"time"

	"github.com/go-logr/logr"
	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"clusterip-policy/pkg/allocview"
	"clusterip-policy/pkg/policy"
)

// Paths the webhook server serves; the webhook configurations name them.
const (
	mutatePath   = "/mutate-v1-service"
	validatePath = "/validate-v1-service"
)

// reviewer is what both admission handlers share: it turns an
// AdmissionReview into a policy.Request, asks pkg/policy for the decision,
// writes the audit line and counts the decision.
type reviewer struct {
	policies    *policyStore
	view        *allocview.View
	staticCIDRs []netip.Prefix
	audit       logr.Logger
	metrics     *metrics
	// staleFor reports how long the view may have been missing changes
	// (a failed watch), and which resource; nil when nothing watches.
	staleFor func(time.Time) (time.Duration, string)
	// maxStaleness is how long a failed watch is tolerated (and flagged in
	// the audit log) before reviews are denied as not ready.
	maxStaleness time.Duration
	// releaser runs after a mutating decision (holds.go); nil when
	// reservation holds are off.
	releaser allocationHook
}

var (
	_ admission.Handler = mutatingHandler{}
	_ admission.Handler = validatingHandler{}
)

// notReadyMessage is what every request gets until the view has synced:
// deciding on an empty view would allow what the policy forbids.
const notReadyMessage = "clusterip-policy is not ready: its view of the cluster's ServiceCIDRs and IPAddresses has not synced yet (or no policy is loaded); retry in a few seconds"

func (r *reviewer) review(stage policy.Stage, req admission.Request) admission.Response {
	start := time.Now()
	line := auditLine{
		UID: policy.Echo(string(req.UID)), Stage: stage, Operation: policy.Echo(string(req.Operation)),
		Namespace: policy.Echo(req.Namespace), Name: policy.Echo(req.Name), User: policy.Echo(req.UserInfo.Username),
		DryRun: req.DryRun != nil && *req.DryRun,
	}
	resp, d := r.decide(stage, req, &line)
	if line.Decision == "" {
		line.Decision = policy.Denied // a malformed request is refused, never waved through
	}
	line.Took = time.Since(start)
	r.record(line, d)
	return resp
}

// decide builds the response; d is nil when no policy decision was made
// (a malformed request, or not ready).
func (r *reviewer) decide(stage policy.Stage, req admission.Request, line *auditLine) (admission.Response, *policy.Decision) {
	if resp, bad := malformed(req, line); bad {
		return resp, nil
	}
	switch req.Operation {
	case admissionv1.Create, admissionv1.Update:
	case admissionv1.Delete, admissionv1.Connect:
		// Only CREATE and UPDATE allocate; a configuration that also sends
		// DELETE must not make every delete fail on a missing object.
		line.Decision, line.Skipped = policy.Allowed, fmt.Sprintf("operation %s allocates no IP", req.Operation)
		return admission.Allowed(line.Skipped), nil
	}
	if req.Kind.Kind != "Service" || req.Kind.Group != "" {
		kind := policy.Echo(req.Kind.String())
		line.Message = fmt.Sprintf("expected a core/v1 Service, got %s", kind)
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("clusterip-policy only reviews Services, got %s; check the webhook configuration's rules", kind)), nil
	}
	var lists serviceLists
	if json.Unmarshal(req.Object.Raw, &lists) == nil {
		if lists.Spec == nil {
			err := fmt.Errorf("the Service in the admission request has no spec; the apiserver always sends one")
			line.Message = err.Error()
			return admission.Errored(http.StatusBadRequest, err), nil
		}
		d, tooMany := policy.TooMany(stage, lists.Spec.ClusterIPs.n, lists.Spec.IPFamilies.n, lists.Spec.ClusterIPs.head)
		if tooMany {
			if line.Name = policy.Echo(lists.Metadata.Name); line.Name == "" {
				line.Name = policy.Echo(req.Name)
			}
			line.fill(d)
			return respond(d), &d
		}
	}
	svc, err := decodeService(req.Object.Raw)
	if err != nil {
		line.Message = err.Error()
		return admission.Errored(http.StatusBadRequest, err), nil
	}
	if svc.Namespace == "" {
		svc.Namespace = req.Namespace // the apiserver may send it only beside the object
	}
	if svc.Name == "" {
		svc.Name = req.Name
	}
	line.Name = policy.Echo(svc.Name)
	var old *corev1.Service
	if req.Operation == admissionv1.Update && len(req.OldObject.Raw) > 0 {
		if old, err = decodeService(req.OldObject.Raw); err != nil {
			line.Message = err.Error()
			return admission.Errored(http.StatusBadRequest, err), nil
		}
	}
	pol := r.policies.Current()
	snap := r.view.Snapshot()
	line.ViewGeneration = snap.Generation
	if pol == nil || !snap.Synced {
		line.Decision = policy.Denied
		line.Message = notReadyMessage
		return notReady(line.Message), nil
	}
	line.PolicyGeneration, line.PolicyDigest = pol.generation, pol.policy.Digest
	if r.staleFor != nil {
		stale, which := r.staleFor(time.Now())
		line.ViewStale = stale
		if stale > r.maxStaleness {
			line.Decision = policy.Denied
			line.Message = staleMessage(which, stale)
			return notReady(line.Message), nil
		}
	}

	env := policy.Env{Policy: pol.policy, Snapshot: snap, StaticCIDRs: r.staticCIDRs}
	preq := policy.Request{
		Operation: policy.Operation(req.Operation), Service: svc, OldService: old,
		User: req.UserInfo.Username, Groups: req.UserInfo.Groups, DryRun: line.DryRun,
	}
	var d policy.Decision
	if stage == policy.StageMutate {
		d = policy.Mutate(env, preq)
	} else {
		d = policy.Validate(env, preq)
	}
	line.fill(d)
	return respond(d), &d
}

// respond turns a decision into the admission response.
func respond(d policy.Decision) admission.Response {
	var resp admission.Response
	if d.Allowed {
		resp = admission.Allowed(d.Message)
	} else {
		resp = admission.Denied(d.Message)
		resp.Result.Reason = metav1.StatusReasonInvalid
	}
	resp.Warnings = d.Warnings
	for _, op := range d.Patch {
		resp.Patches = append(resp.Patches, jsonpatch.JsonPatchOperation{Operation: op.Op, Path: op.Path, Value: op.Value})
	}
	return resp
}

func staleMessage(resource string, d time.Duration) string {
	return fmt.Sprintf("clusterip-policy is not ready: its watch of %s has failed for %s, so its view of allocated addresses may be out of date; retry once it recovers", resource, d.Round(time.Second))
}

// notReady is a denial with 503, which tells the client to retry.
func notReady(message string) admission.Response {
	resp := admission.Denied(message)
	resp.Result.Code = http.StatusServiceUnavailable
	resp.Result.Reason = metav1.StatusReasonServiceUnavailable
	return resp
}

func decodeService(raw []byte) (*corev1.Service, error) {
	if len(raw) == 0 {
		return nil, fmt.Errorf("the admission request carries no object")
	}
	svc := &corev1.Service{}
	if err := json.Unmarshal(raw, svc); err != nil {
		// A decoding error quotes at most a type and a field path, but clip
		// it anyway: it goes into the response and the audit line.
		return nil, fmt.Errorf("decode the Service in the admission request: %s", policy.Clip(err.Error(), policy.MaxMessageBytes))
	}
	return svc, nil
}

// record writes the audit line and counts the decision.
func (r *reviewer) record(line auditLine, d *policy.Decision) {
	r.audit.Info("admission decision", line.keysAndValues()...)
	decision := string(line.Decision)
	if d == nil || len(d.Rules()) == 0 {
		r.metrics.decisions.WithLabelValues(string(line.Stage), decision, "").Inc()
		return
	}
	for _, rule := range d.Rules() {
		r.metrics.decisions.WithLabelValues(string(line.Stage), decision, string(rule)).Inc()
	}
}

// mutatingHandler serves the MutatingWebhookConfiguration.
type mutatingHandler struct{ *reviewer }

func (h mutatingHandler) Handle(ctx context.Context, req admission.Request) admission.Response {
	resp := h.review(policy.StageMutate, req)
	if h.releaser != nil {
		resp = h.releaser.beforeAllocation(ctx, req, resp)
	}
	return resp
}

// validatingHandler serves the ValidatingWebhookConfiguration.
type validatingHandler struct{ *reviewer }

func (h validatingHandler) Handle(_ context.Context, req admission.Request) admission.Response {
	return h.review(policy.StageValidate, req)
}
