package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"clusterip-policy/pkg/policy"
)

// policyObjectHandler checks a ClusterIPPolicy at kubectl apply with the
// same loader the webhook enforces it with, so what the CRD's schema cannot
// express (one owner per address, one address per family per owner,
// reservations inside allowedCIDRs, rule names) is refused with the
// loader's message instead of showing up later only in the status. The
// decision depends on the object alone: no view, no readiness.
type policyObjectHandler struct{}

var _ admission.Handler = policyObjectHandler{}

func (policyObjectHandler) Handle(_ context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return admission.Allowed("only CREATE and UPDATE change the policy")
	}
	if req.Kind.Group != policy.ObjectGroup || req.Kind.Kind != policy.Kind {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("this endpoint only reviews %s %s objects, got %s; check the webhook configuration's rules", policy.ObjectGroup, policy.Kind, policy.Echo(req.Kind.String())))
	}
	var obj struct {
		Spec json.RawMessage `json:"spec"`
	}
	if err := json.Unmarshal(req.Object.Raw, &obj); err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("the %s is not JSON: %s", policy.Kind, policy.Clip(err.Error(), policy.MaxEchoBytes)))
	}
	if _, err := policy.ParseObjectSpec(obj.Spec); err != nil {
		return admission.Denied(policy.Clip(fmt.Sprintf("%s %s: spec: %s", policy.Kind, policy.Echo(req.Name), err), policy.MaxMessageBytes))
	}
	return admission.Allowed("")
}
