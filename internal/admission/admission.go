// Package admission answers the admission reviews: one handler per path
// (the mutating and validating Service webhooks, the ServiceCIDR webhook,
// the ClusterIPPolicy object check), the one decorator that records each
// answer as sent (the decision log line, the decision counters, the
// auditAnnotations), and the limits on what a review may carry. It asks
// internal/readiness for what to decide on and pkg/policy for the
// decision; it reaches the holds' release only through AllocationHook.
package admission

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"clusterip-policy/internal/names"
	"clusterip-policy/internal/readiness"
	"clusterip-policy/pkg/policy"
)

// A request's path through the webhook, top to bottom:
//
//	admissionEndpoint   body budget and response cap (boundedResponse), then
//	                    controller-runtime's webhook.Admission decodes the review
//	recording           the one decorator (reviewer.recorded, applied once in
//	                    Endpoints): times the request, has the handler answer
//	                    it, adds the apiserver's auditAnnotations
//	                    (auditannotations.go), records the answer
//	mutatingHandler, validatingHandler, serviceCIDRHandler  one per path: the
//	                    handler's type is its stage
//	reviewer.answer     parse, check readiness, decide, respond:
//	  prologue            shared with the ServiceCIDR handler:
//	    malformed           a review no apiserver sends: 400
//	    policy.OperationSkip  DELETE, CONNECT: allowed, nothing to allocate
//	    (kind check)        anything but the endpoint's kind (serviceKind): 400
//	  decodeServiceFields the fields a decision reads (servicefields.go)
//	  policy.TooMany      more IPs than the apiserver allows: one short denial
//	  oldObject           the stored Service (decodeOldService), on UPDATE
//	  reviewer.ready      readiness.Gate.Check: policy loaded, view synced and
//	                      fresh, or 503
//	  policy.Mutate, policy.Validate  the decision (pkg/policy)
//	  answerProbe         the leader's reachability probe: a warning added (probe.go)
//	  respond             the decision as an admission response
//	AllocationHook      mutating only: the holds' release, before recording
//	newDecisionLine, reviewer.record  one decision log line and the metrics, from the answer

// Config is what the handlers need from serve.
type Config struct {
	// Gate answers whether a review may be decided, and on what.
	Gate *readiness.Gate
	// DecisionLog writes one decision log line per review (the logger
	// serve names "audit": the lines' "logger" value is public).
	DecisionLog logr.Logger
	// Registry gets clusterip_policy_decisions_total.
	Registry prometheus.Registerer
	// Hook runs on an allowed mutating decision before it is recorded (the
	// holds' release); nil when reservation holds are off.
	Hook AllocationHook
}

// Endpoints are the admission handlers by path (internal/names), each
// behind the body budget and the response cap (admissionEndpoint), as
// serve registers them on the webhook server.
func Endpoints(c Config) map[string]http.Handler {
	r := &reviewer{gate: c.Gate, decisionLog: c.DecisionLog, metrics: newMetrics(c.Registry), hook: c.Hook}
	return map[string]http.Handler{
		names.MutatePath:               admissionEndpoint(r.recorded(mutatingHandler{r})),
		names.ValidatePath:             admissionEndpoint(r.recorded(validatingHandler{r})),
		names.ValidateServiceCIDRPath:  admissionEndpoint(r.recorded(serviceCIDRHandler{r})),
		names.ValidatePolicyObjectPath: admissionEndpoint(policyObjectHandler{view: c.Gate.View}),
	}
}

// reviewer is what the admission handlers share: it turns an
// AdmissionReview into a pkg/policy request, asks pkg/policy for the
// decision, writes the decision log line and counts the decision.
type reviewer struct {
	gate        *readiness.Gate
	decisionLog logr.Logger
	metrics     *metrics
	// hook runs on an allowed mutating decision, before it is recorded
	// (the holds' release); nil when reservation holds are off.
	hook AllocationHook
}

// AllocationHook is what the mutating stage calls with an allowed
// decision, before the apiserver allocates and before the answer is
// recorded: the holds' release (internal/controllers/holds.Releaser),
// which this package never imports. It gets the Service the decision read,
// the decision and what it was made against, and returns "" to let the
// answer stand, else the message of the 503 that replaces it.
type AllocationHook interface {
	BeforeAllocation(ctx context.Context, req admission.Request, svc *corev1.Service, d *policy.Decision, env policy.Env) (refusal string)
}

var (
	_ handler = mutatingHandler{}
	_ handler = validatingHandler{}
)

// answered is how one request was answered: all its decision log line and metrics
// need. decision is nil when no policy decision was made (a malformed
// request, an operation that allocates nothing, not ready); outcome,
// skipped and message then stand in for it.
type answered struct {
	decision *policy.Decision
	outcome  policy.Outcome
	skipped  string
	message  string
	// name is the Service's name as decoded (the request may not carry it).
	name string
	// service is the Service the decision was made on; nil without one.
	service *corev1.Service
	// state is what the decision was made against, as far as it was checked.
	state readiness.State
}

// refused answers a request without deciding it: a malformed one is
// refused, never waved through.
func refused(message string) answered { return answered{outcome: policy.Denied, message: message} }

// handler is what each Service and ServiceCIDR handler is: its stage
// (the handler's type says it; nothing branches on it) and its answer to
// one request. It is served through recorded, which records the answer.
type handler interface {
	stage() policy.Stage
	answerReview(ctx context.Context, req admission.Request) (admission.Response, answered)
}

// recorded is the one decorator every Service and ServiceCIDR handler is
// served through, applied once in Endpoints: the admission.Handler that
// times h's answer, adds the auditAnnotations and records the answer it
// returns, once, as sent: the decision log line and the counters.
func (r *reviewer) recorded(h handler) admission.Handler { return recording{h: h, r: r} }

type recording struct {
	h handler
	r *reviewer
}

func (rec recording) Handle(ctx context.Context, req admission.Request) admission.Response {
	start := time.Now()
	resp, a := rec.h.answerReview(ctx, req)
	resp.AuditAnnotations = auditAnnotations(a)
	rec.r.record(newDecisionLine(rec.h.stage(), req, a, time.Since(start)), a.decision)
	return resp
}

// reviewedKind is the kind an endpoint reviews, and what its refusals of
// any other kind say.
type reviewedKind struct {
	group, kind string
	// only and expected complete the refusals: "<only>, got <kind>; check
	// the webhook configuration's rules" (the response) and "expected
	// <expected>, got <kind>" (the decision log).
	only, expected string
}

var (
	serviceKind     = reviewedKind{group: "", kind: "Service", only: "clusterip-policy only reviews Services", expected: "a core/v1 Service"}
	serviceCIDRKind = reviewedKind{group: networkingv1.GroupName, kind: "ServiceCIDR", only: "this endpoint only reviews networking.k8s.io ServiceCIDRs", expected: "a networking.k8s.io ServiceCIDR"}
)

// prologue is what every Service and ServiceCIDR review goes through
// before its object is decoded: a review no apiserver sends (malformed) is
// refused, an operation that allocates nothing is allowed, and a kind the
// endpoint does not review is refused. done says the review is answered.
func prologue(req admission.Request, k reviewedKind) (resp admission.Response, a answered, done bool) {
	if err := malformed(req); err != nil {
		return admission.Errored(http.StatusBadRequest, err), refused(err.Error()), true
	}
	if skip := policy.OperationSkip(policy.Operation(req.Operation)); skip != "" {
		return admission.Allowed(skip), answered{outcome: policy.Allowed, skipped: skip}, true
	}
	if req.Kind.Kind != k.kind || req.Kind.Group != k.group {
		kind := policy.Echo(req.Kind.String())
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("%s, got %s; check the webhook configuration's rules", k.only, kind)),
			refused(fmt.Sprintf("expected %s, got %s", k.expected, kind)), true
	}
	return admission.Response{}, answered{}, false
}

// oldObject decodes the stored object of an UPDATE with decode; nil on
// any other operation. A failure is refused, naming the object.
func oldObject[T any](req admission.Request, name string, decode func([]byte) (*T, error)) (*T, admission.Response, answered, error) {
	if req.Operation != admissionv1.Update || len(req.OldObject.Raw) == 0 {
		return nil, admission.Response{}, answered{}, nil
	}
	old, err := decode(req.OldObject.Raw)
	if err != nil {
		a := refused(err.Error())
		a.name = name
		return nil, admission.Errored(http.StatusBadRequest, err), a, err
	}
	return old, admission.Response{}, answered{}, nil
}

// ready asks the gate whether the review of name may be decided now, and
// on what; not ready, it answers with 503.
func (r *reviewer) ready(name string) (readiness.State, admission.Response, answered, error) {
	state, err := r.gate.Check(time.Now())
	if err != nil {
		return state, notReady(err.Error()), answered{outcome: policy.Denied, message: err.Error(), name: name, state: state}, err
	}
	return state, admission.Response{}, answered{}, nil
}

// answer parses the request, checks readiness, asks decide (policy.Mutate
// or policy.Validate: the handler's stage) and builds the response.
func (r *reviewer) answer(stage policy.Stage, decide func(policy.Env, policy.Request) policy.Decision, req admission.Request) (admission.Response, answered) {
	if resp, a, done := prologue(req, serviceKind); done {
		return resp, a
	}
	fields, err := decodeServiceFields(req.Object.Raw)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, err), refused(err.Error())
	}
	if fields.Spec == nil {
		err := fmt.Errorf("the Service in the admission request has no spec; the apiserver always sends one")
		return admission.Errored(http.StatusBadRequest, err), refused(err.Error())
	}
	if d, tooMany := policy.TooMany(stage, fields.Spec.ClusterIPs.n, fields.Spec.IPFamilies.n, fields.Spec.ClusterIPs.head); tooMany {
		return respond(d), answered{decision: &d, name: fields.Metadata.Name}
	}
	svc := fields.service() // complete: TooMany refused longer lists
	if svc.Namespace == "" {
		svc.Namespace = req.Namespace // the apiserver may send it only beside the object
	}
	if svc.Name == "" {
		svc.Name = req.Name
	}
	old, resp, a, err := oldObject(req, svc.Name, decodeOldService)
	if err != nil {
		return resp, a
	}
	state, resp, a, err := r.ready(svc.Name)
	if err != nil {
		return resp, a
	}
	d := decide(state.Env, policy.Request{
		Operation: policy.Operation(req.Operation), Service: svc, OldService: old,
		User: req.UserInfo.Username, Groups: req.UserInfo.Groups, DryRun: isDryRun(req),
	})
	answerProbe(stage, req, fields.Metadata.Annotations.Probe, svc, &d)
	return respond(d), answered{decision: &d, name: svc.Name, service: svc, state: state}
}

func isDryRun(req admission.Request) bool { return req.DryRun != nil && *req.DryRun }

// respond turns a decision into the admission response.
func respond(d policy.Decision) admission.Response {
	var resp admission.Response
	if d.Allowed() {
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

// notReady is a denial with 503, which tells the client to retry.
func notReady(message string) admission.Response {
	resp := admission.Denied(message)
	resp.Result.Code = http.StatusServiceUnavailable
	resp.Result.Reason = metav1.StatusReasonServiceUnavailable
	return resp
}

// decodeOldService decodes the stored Service of an UPDATE. The apiserver
// never stores more than two clusterIPs or ipFamilies; should an old
// object hold more, it is decoded whole, as sent, rather than cut.
func decodeOldService(raw []byte) (*corev1.Service, error) {
	fields, err := decodeServiceFields(raw)
	if err != nil {
		return nil, err
	}
	if fields.complete() {
		return fields.service(), nil
	}
	svc := &corev1.Service{}
	if err := json.Unmarshal(raw, svc); err != nil {
		return nil, fmt.Errorf("decode the Service in the admission request: %s", policy.Clip(err.Error(), policy.MaxMessageBytes))
	}
	return svc, nil
}

// record writes the decision log line and counts the decision.
func (r *reviewer) record(line decisionLine, d *policy.Decision) {
	writeDecisionLine(r.decisionLog, line)
	decision := string(line.Decision)
	if d == nil || len(d.Rules()) == 0 {
		r.metrics.decisionCounters.inc(string(line.Stage), decision, "")
		return
	}
	for _, rule := range d.Rules() {
		r.metrics.decisionCounters.inc(string(line.Stage), decision, string(rule))
	}
}

// mutatingHandler serves the MutatingWebhookConfiguration. An allowed
// decision goes to the hook before it is recorded: if the hook refuses
// (the hold's release failed, or its budget is spent), its 503 is the
// answer, and the decision log line, the counters and the auditAnnotations say so.
type mutatingHandler struct{ *reviewer }

func (mutatingHandler) stage() policy.Stage { return policy.StageMutate }

func (h mutatingHandler) answerReview(ctx context.Context, req admission.Request) (admission.Response, answered) {
	resp, a := h.answer(policy.StageMutate, policy.Mutate, req)
	if h.hook == nil || a.decision == nil || !a.decision.Allowed() || a.service == nil {
		return resp, a
	}
	if refusal := h.hook.BeforeAllocation(ctx, req, a.service, a.decision, a.state.Env); refusal != "" {
		return notReady(refusal), answered{outcome: policy.Denied, message: refusal, name: a.name, state: a.state}
	}
	return resp, a
}

// validatingHandler serves the ValidatingWebhookConfiguration.
type validatingHandler struct{ *reviewer }

func (validatingHandler) stage() policy.Stage { return policy.StageValidate }

func (h validatingHandler) answerReview(_ context.Context, req admission.Request) (admission.Response, answered) {
	return h.answer(policy.StageValidate, policy.Validate, req)
}
