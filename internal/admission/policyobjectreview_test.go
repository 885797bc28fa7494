package admission

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"clusterip-policy/pkg/allocview"
)

func policyObjectRequest(op admissionv1.Operation, kind, object string) admission.Request {
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Operation: op, Name: "default",
		Kind:   metav1.GroupVersionKind{Group: "clusterip-policy.io", Version: "v1alpha1", Kind: kind},
		Object: runtime.RawExtension{Raw: []byte(object)},
	}}
}

func TestPolicyObjectReview(t *testing.T) {
	const dup = `{"apiVersion":"clusterip-policy.io/v1alpha1","kind":"ClusterIPPolicy","metadata":{"name":"default"},"spec":{"reservations":[{"ip":"10.96.0.10","service":"kube-system/kube-dns"},{"ip":"10.96.0.10","service":"default/web"}]}}`
	tests := []struct {
		name    string
		req     admission.Request
		allowed bool
		code    int32
		want    string
	}{
		{"a good policy", policyObjectRequest(admissionv1.Create, "ClusterIPPolicy", `{"spec":{"reservations":[{"ip":"10.96.0.10","service":"kube-system/kube-dns"}]}}`), true, 200, ""},
		{"an empty spec is the default policy", policyObjectRequest(admissionv1.Update, "ClusterIPPolicy", `{"metadata":{"name":"default"}}`), true, 200, ""},
		{"a duplicate owner names both entries", policyObjectRequest(admissionv1.Create, "ClusterIPPolicy", dup), false, 403,
			"ClusterIPPolicy default: spec.reservations[1]: 10.96.0.10 is reserved for both kube-system/kube-dns (spec.reservations[0]) and default/web; an IP has one owner"},
		{"a reservation outside allowedCIDRs", policyObjectRequest(admissionv1.Update, "ClusterIPPolicy", `{"spec":{"allowedCIDRs":["10.96.0.0/16"],"reservations":[{"ip":"10.0.0.10","service":"a/b"}]}}`), false, 403, "10.0.0.10 is outside allowedCIDRs"},
		{"an unknown rule", policyObjectRequest(admissionv1.Create, "ClusterIPPolicy", `{"spec":{"enforcement":{"rules":{"no-such-rule":"warn"}}}}`), false, 403, "no-such-rule"},
		{"a delete is not reviewed", policyObjectRequest(admissionv1.Delete, "ClusterIPPolicy", ``), true, 200, ""},
		{"another kind is a misconfiguration", policyObjectRequest(admissionv1.Create, "Service", `{}`), false, 400, "only reviews clusterip-policy.io ClusterIPPolicy objects"},
		{"not JSON", policyObjectRequest(admissionv1.Create, "ClusterIPPolicy", `{"spec":`), false, 400, "is not JSON"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := policyObjectHandler{}.Handle(context.Background(), tt.req)
			msg := ""
			if resp.Result != nil {
				msg = resp.Result.Message
			}
			if resp.Allowed != tt.allowed || (resp.Result != nil && resp.Result.Code != tt.code) || !strings.Contains(msg, tt.want) {
				t.Fatalf("allowed %v code %d message %q; want %v %d containing %q", resp.Allowed, resp.Result.Code, msg, tt.allowed, tt.code, tt.want)
			}
		})
	}
	t.Run("the message stays bounded", func(t *testing.T) {
		long := strings.Repeat("x", 5000)
		resp := policyObjectHandler{}.Handle(context.Background(), policyObjectRequest(admissionv1.Create, "ClusterIPPolicy", `{"spec":{"reservations":[{"ip":"10.96.0.10","service":"a/`+long+`"}]}}`))
		if resp.Allowed || len(resp.Result.Message) > 2100 {
			t.Fatalf("allowed %v, message of %d bytes", resp.Allowed, len(resp.Result.Message))
		}
	})
}

// The apply-time check against the cluster: allowedCIDRs that leave the
// apiserver's default ServiceCIDR nothing are refused (every dynamic create
// would fail), a part of it is accepted with a warning, and before the view
// has synced the policy is accepted with a warning that says it was not
// checked.
func TestPolicyObjectReviewAgainstTheDefaultServiceCIDR(t *testing.T) {
	synced := allocview.NewView()
	synced.Update(func(tx *allocview.Tx) {
		tx.SetServiceCIDR(allocview.ServiceCIDR{Name: "kubernetes", Ready: true, CIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16")}})
		tx.MarkSynced(true)
	})
	narrowing := `{"spec":{"allowedCIDRs":["10.69.0.0/16"]}}`
	tests := []struct {
		name    string
		view    *allocview.View
		spec    string
		allowed bool
		message string
		warning string
	}{
		{"refuses allowedCIDRs that leave out the default ServiceCIDR", synced, narrowing, false,
			`ClusterIPPolicy default: spec: allowedCIDRs [10.69.0.0/16] leave no usable address of 10.96.0.0/16, the primary range of ServiceCIDR "kubernetes", the apiserver's default ServiceCIDR: every Service created without a clusterIP would be refused, and that ServiceCIDR cannot be removed (the apiserver makes it again from its --service-cluster-ip-range); add 10.96.0.0/16 (or the part of it Services may use) to allowedCIDRs`, ""},
		{"accepts allowedCIDRs that cover it", synced, `{"spec":{"allowedCIDRs":["10.69.0.0/16","10.96.0.0/12"]}}`, true, "", ""},
		{"warns about a part of it", synced, `{"spec":{"allowedCIDRs":["10.96.0.0/20"]}}`, true, "", "allowedCIDRs keep only [10.96.0.0/20] of 10.96.0.0/16"},
		{"accepts, with a warning, before the view has synced", allocview.NewView(), narrowing, true, "", viewNotSyncedWarning},
		{"without a view it checks the object alone", nil, narrowing, true, "", ""},
		{"refuses a reserved range outside the cluster's ranges", synced, `{"spec":{"reservedRanges":[{"cidr":"10.96.0.16/28","namespaces":["dns"]},{"cidr":"10.97.0.0/24","namespaces":["team-a"]}]}}`, false,
			`ClusterIPPolicy default: spec.reservedRanges[1]: 10.97.0.0/24 is not wholly inside one active Service range (10.96.0.0/16 (ServiceCIDR "kubernetes")); choose a range inside one of them`, ""},
		{"accepts reserved ranges inside them", synced, `{"spec":{"reservedRanges":[{"cidr":"10.96.0.16/28","namespaces":["dns"]}]}}`, true, "", ""},
		{"refuses overlapping reserved ranges by the loader, with the view or without", nil, `{"spec":{"reservedRanges":[{"cidr":"10.96.0.16/28","namespaces":["dns"]},{"first":"10.96.0.20","last":"10.96.0.40","namespaceSelector":{"matchLabels":{"team":"a"}}}]}}`, false,
			`ClusterIPPolicy default: spec.reservedRanges[1]: 10.96.0.20-10.96.0.40 overlaps spec.reservedRanges[0] 10.96.0.16/28 from 10.96.0.20; an address belongs to one range: shrink or merge them`, ""},
		{"accepts a reserved range before the view has synced, with the warning", allocview.NewView(), `{"spec":{"reservedRanges":[{"cidr":"10.97.0.0/24","namespaces":["team-a"]}]}}`, true, "", viewNotSyncedWarning},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := policyObjectHandler{view: tt.view}.Handle(context.Background(), policyObjectRequest(admissionv1.Update, "ClusterIPPolicy", tt.spec))
			msg := ""
			if resp.Result != nil {
				msg = resp.Result.Message
			}
			if resp.Allowed != tt.allowed || msg != tt.message {
				t.Fatalf("allowed %v message %q; want %v %q", resp.Allowed, msg, tt.allowed, tt.message)
			}
			if tt.warning == "" && len(resp.Warnings) > 0 || tt.warning != "" && (len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], tt.warning)) {
				t.Fatalf("warnings %q; want one containing %q", resp.Warnings, tt.warning)
			}
		})
	}
}

// A field the installed CRD kept but this version does not know comes from
// a newer chart: an old replica answering during a one-step upgrade must
// not refuse it, or the upgrade fails (with --atomic, always).
func TestPolicyObjectFromANewerCRDIsAllowedWithAWarning(t *testing.T) {
	req := policyObjectRequest(admissionv1.Update, "ClusterIPPolicy",
		`{"spec":{"reservations":[{"ip":"10.96.0.10","service":"kube-system/kube-dns","owner2":{"x":1}}],"futureRule":{"on":true}}}`)
	resp := policyObjectHandler{}.Handle(context.Background(), req)
	if !resp.Allowed {
		t.Fatalf("refused: %v", resp.Result.Message)
	}
	if len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], "does not know spec.futureRule, spec.reservations[0].owner2") {
		t.Fatalf("warnings %q; want one naming both newer fields", resp.Warnings)
	}
	// What this version knows is still judged: a known field's bad value
	// beside a newer field is refused as before.
	bad := policyObjectRequest(admissionv1.Update, "ClusterIPPolicy", `{"spec":{"futureRule":true,"reservations":[{"ip":"10.96.0.10","service":"a/b"},{"ip":"10.96.0.10","service":"c/d"}]}}`)
	if resp := (policyObjectHandler{}).Handle(context.Background(), bad); resp.Allowed {
		t.Fatal("a duplicate owner beside a newer field was allowed")
	}
	// A hostile spec with thousands of unknown keys gets a bounded warning.
	var b strings.Builder
	b.WriteString(`{"spec":{`)
	for i := range 5000 {
		fmt.Fprintf(&b, `"k%d\u0007":1,`, i)
	}
	b.WriteString(`"allowedCIDRs":["10.96.0.0/16"]}}`)
	resp = policyObjectHandler{}.Handle(context.Background(), policyObjectRequest(admissionv1.Create, "ClusterIPPolicy", b.String()))
	if !resp.Allowed || len(resp.Warnings) != 1 || len(resp.Warnings[0]) > 600 || strings.Contains(resp.Warnings[0], "\a") {
		t.Fatalf("allowed %v, warnings %q", resp.Allowed, resp.Warnings)
	}
}
