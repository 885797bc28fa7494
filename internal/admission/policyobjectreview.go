package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"clusterip-policy/internal/version"
	"clusterip-policy/pkg/allocview"
	"clusterip-policy/pkg/policy"
)

// policyObjectHandler checks a ClusterIPPolicy at kubectl apply with the
// same loader the webhook enforces it with, so what the CRD's schema cannot
// express (one owner per address, one address per family per owner,
// reservations inside allowedCIDRs, rule names) is refused with the
// loader's message instead of showing up later only in the status.
//
// It also checks allowedCIDRs against the apiserver's default ServiceCIDR
// in the view (policy.FitDefaultServiceCIDR): a policy that leaves that
// range nothing would fail every dynamic create. Until the view has synced
// that check is skipped with a warning, not turned into a refusal: this
// entry is failurePolicy Ignore so that a policy can be fixed while the
// webhook is unwell, and a webhook whose view cannot sync (RBAC, a cut
// watch) must not be the one thing that blocks the fix.
type policyObjectHandler struct {
	// view is the webhook's view of ServiceCIDRs; nil checks the object
	// alone.
	view *allocview.View
}

var _ admission.Handler = policyObjectHandler{}

// newerFieldsWarning is the warning of a policy that uses fields this
// replica's version (the first %s) does not know (the second).
const newerFieldsWarning = "this clusterip-policy replica (%s) does not know %s: the CRD installed is newer; replicas of the newer version enforce it once they run (until then this replica keeps the policy it last loaded); finish the upgrade with `kubectl -n <namespace> rollout status deployment/clusterip-policy-webhook`"

// viewNotSyncedWarning is the warning of a policy accepted without the
// ServiceCIDR check.
const viewNotSyncedWarning = "allowedCIDRs and reservedRanges were not checked against the cluster's ServiceCIDRs: clusterip-policy's view of the cluster has not synced; compare them with `kubectl get servicecidr kubernetes` (a policy that leaves that range out makes every Service created without a clusterIP fail)"

func (h policyObjectHandler) Handle(_ context.Context, req admission.Request) admission.Response {
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
	// A field this version does not know came through the installed CRD,
	// so the chart being installed is newer than this replica: refusing it
	// would fail a one-step upgrade that starts using the field while old
	// pods still answer (a denial, which failurePolicy Ignore does not
	// excuse). The rest is judged as usual, and the warning says who
	// enforces the field.
	spec, newer, err := policy.SplitNewerFields(obj.Spec)
	if err != nil {
		return h.denied(req, err)
	}
	var warnings []string
	if len(newer) > 0 {
		warnings = append(warnings, policy.Clip(fmt.Sprintf(newerFieldsWarning, version.Version(), strings.Join(newer, ", ")), policy.MaxMessageBytes))
	}
	p, err := policy.ParseObjectSpec(spec)
	if err != nil {
		return h.denied(req, err)
	}
	if h.view == nil || (len(p.AllowedCIDRs) == 0 && len(p.ReservedRanges) == 0) {
		return admission.Allowed("").WithWarnings(warnings...)
	}
	snap := h.view.Snapshot()
	if !snap.Synced {
		return admission.Allowed("").WithWarnings(append(warnings, viewNotSyncedWarning)...)
	}
	// Reserved ranges must lie in the cluster's active ranges; a cluster
	// without ServiceCIDR objects is judged by the spec's serviceCIDRs at
	// review time instead (Env.Ranges), so nothing is refused here.
	if len(snap.ServiceCIDRs()) > 0 {
		if err := policy.FitReservedRanges(p, snap.ActiveRanges(p.AllowedCIDRs)); err != nil {
			return h.denied(req, err)
		}
	}
	fit, err := policy.FitDefaultServiceCIDR(p, snap.ServiceCIDRs())
	if err != nil {
		return h.denied(req, err)
	}
	for _, w := range fit {
		warnings = append(warnings, policy.Clip(w, policy.MaxMessageBytes))
	}
	return admission.Allowed("").WithWarnings(warnings...)
}

func (policyObjectHandler) denied(req admission.Request, err error) admission.Response {
	where := "spec: "
	var field *policy.FieldError
	var list *policy.ErrorList
	if errors.As(err, &field) || errors.As(err, &list) {
		where = "" // the refusal names its field from spec on
	}
	return admission.Denied(policy.Clip(fmt.Sprintf("%s %s: %s%s", policy.Kind, policy.Echo(req.Name), where, err), policy.MaxMessageBytes))
}
