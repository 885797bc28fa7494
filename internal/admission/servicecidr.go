package admission

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	networkingv1 "k8s.io/api/networking/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"clusterip-policy/pkg/policy"
)

// serviceCIDRHandler serves the validating webhook for ServiceCIDR objects
// (names.ValidateServiceCIDRPath): a range is checked at the door, not
// one allocation at a time once the apiserver hands out its addresses.
type serviceCIDRHandler struct{ *reviewer }

var _ handler = serviceCIDRHandler{}

func (serviceCIDRHandler) stage() policy.Stage { return policy.StageServiceCIDR }

func (h serviceCIDRHandler) answerReview(_ context.Context, req admission.Request) (admission.Response, answered) {
	return h.answerServiceCIDR(req)
}

// answerServiceCIDR is reviewer.answer for a ServiceCIDR: parse, check
// readiness (the overlap rule needs the view's ServiceCIDRs), decide,
// respond.
func (r *reviewer) answerServiceCIDR(req admission.Request) (admission.Response, answered) {
	if resp, a, done := prologue(req, serviceCIDRKind); done {
		return resp, a
	}
	cidr, err := decodeServiceCIDR(req.Object.Raw)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, err), refused(err.Error())
	}
	if cidr.Name == "" {
		cidr.Name = req.Name
	}
	old, resp, a, err := oldObject(req, cidr.Name, decodeServiceCIDR)
	if err != nil {
		return resp, a
	}
	state, resp, a, err := r.ready(cidr.Name)
	if err != nil {
		return resp, a
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
