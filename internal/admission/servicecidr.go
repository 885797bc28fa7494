package admission

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"clusterip-policy/pkg/policy"
)

// serviceCIDRHandler serves the validating webhook for ServiceCIDR objects
// (names.ValidateServiceCIDRPath): a range is checked at the door, not
// one allocation at a time once the apiserver hands out its addresses.
type serviceCIDRHandler struct{ *reviewer }

var _ admission.Handler = serviceCIDRHandler{}

var _ handler = serviceCIDRHandler{}

func (h serviceCIDRHandler) Handle(ctx context.Context, req admission.Request) admission.Response {
	return h.recorded(ctx, h, req)
}

func (serviceCIDRHandler) stage() policy.Stage { return policy.StageServiceCIDR }

func (h serviceCIDRHandler) answerReview(_ context.Context, req admission.Request) (admission.Response, answered) {
	return h.answerServiceCIDR(req)
}

// answerServiceCIDR is reviewer.answer for a ServiceCIDR: parse, check
// readiness (the overlap rule needs the view's ServiceCIDRs), decide,
// respond.
func (r *reviewer) answerServiceCIDR(req admission.Request) (admission.Response, answered) {
	if err := malformed(req); err != nil {
		return admission.Errored(http.StatusBadRequest, err), refused(err.Error())
	}
	if skip := policy.OperationSkip(policy.Operation(req.Operation)); skip != "" {
		return admission.Allowed(skip), answered{outcome: policy.Allowed, skipped: skip}
	}
	if req.Kind.Kind != "ServiceCIDR" || req.Kind.Group != networkingv1.GroupName {
		kind := policy.Echo(req.Kind.String())
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("this endpoint only reviews networking.k8s.io ServiceCIDRs, got %s; check the webhook configuration's rules", kind)),
			refused(fmt.Sprintf("expected a networking.k8s.io ServiceCIDR, got %s", kind))
	}
	cidr, err := decodeServiceCIDR(req.Object.Raw)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, err), refused(err.Error())
	}
	if cidr.Name == "" {
		cidr.Name = req.Name
	}
	var old *networkingv1.ServiceCIDR
	if req.Operation == admissionv1.Update && len(req.OldObject.Raw) > 0 {
		if old, err = decodeServiceCIDR(req.OldObject.Raw); err != nil {
			a := refused(err.Error())
			a.name = cidr.Name
			return admission.Errored(http.StatusBadRequest, err), a
		}
	}
	state, err := r.gate.Check(time.Now())
	if err != nil {
		return notReady(err.Error()), answered{outcome: policy.Denied, message: err.Error(), name: cidr.Name, state: state}
	}
	creq := policy.ServiceCIDRRequest{
		Operation: policy.Operation(req.Operation), Name: cidr.Name, CIDRs: cidr.Spec.CIDRs,
		User: req.UserInfo.Username, Groups: req.UserInfo.Groups,
	}
	if old != nil {
		creq.OldCIDRs = old.Spec.CIDRs
	}
	d := policy.ReviewServiceCIDR(state.Env, creq)
	return respond(d), answered{decision: &d, name: cidr.Name, state: state}
}

func decodeServiceCIDR(raw []byte) (*networkingv1.ServiceCIDR, error) {
	if len(raw) == 0 {
		return nil, fmt.Errorf("the admission request carries no object")
	}
	c := &networkingv1.ServiceCIDR{}
	if err := json.Unmarshal(raw, c); err != nil {
		return nil, fmt.Errorf("decode the ServiceCIDR in the admission request: %s", policy.Clip(err.Error(), policy.MaxMessageBytes))
	}
	return c, nil
}
