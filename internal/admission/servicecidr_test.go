package admission

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// serviceCIDRReview builds the AdmissionReview an apiserver sends for a
// ServiceCIDR write by user (in groups); old, when not empty, makes it an
// UPDATE from those CIDRs.
func serviceCIDRReview(t *testing.T, name, user string, groups []string, cidrs []string, old ...string) []byte {
	t.Helper()
	obj := func(cidrs []string) map[string]any {
		return map[string]any{"apiVersion": "networking.k8s.io/v1", "kind": "ServiceCIDR",
			"metadata": map[string]any{"name": name}, "spec": map[string]any{"cidrs": cidrs}}
	}
	gvk := map[string]any{"group": "networking.k8s.io", "version": "v1", "kind": "ServiceCIDR"}
	req := map[string]any{"uid": "6b1f6b53-0d1e-4c55-a8a3-1b7c2c3c9e01", "kind": gvk, "requestKind": gvk,
		"resource": map[string]any{"group": "networking.k8s.io", "version": "v1", "resource": "servicecidrs"},
		"name":     name, "operation": "CREATE", "object": obj(cidrs),
		"userInfo": map[string]any{"username": user, "groups": groups}}
	if len(old) > 0 {
		req["operation"], req["oldObject"] = "UPDATE", obj(old)
	}
	body, err := json.Marshal(map[string]any{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req})
	if err != nil {
		t.Fatal(err)
	}
	return body
}

func TestServiceCIDRHandler(t *testing.T) {
	admin := []string{"system:masters", "system:authenticated"}
	tests := []struct {
		name        string
		body        func(t *testing.T) []byte
		allowed     bool
		code        int32
		message     string
		annotations map[string]string
	}{
		{
			name: "refuses a range outside allowedCIDRs with the policy's message and annotations",
			body: func(t *testing.T) []byte {
				return serviceCIDRReview(t, "rogue", "kubernetes-admin", admin, []string{"10.200.0.0/24"})
			},
			code: 403, message: `spec.cidrs[0]: Invalid value: "10.200.0.0/24": is not inside the policy's allowedCIDRs 10.96.0.0/12`,
			annotations: map[string]string{"decision": "denied", "rules": "outside-service-cidrs"},
		},
		{
			name: "refuses a range whose dynamic band covers the static band of ServiceCIDR kubernetes",
			body: func(t *testing.T) []byte {
				return serviceCIDRReview(t, "inside", "kubernetes-admin", admin, []string{"10.96.0.0/24"})
			},
			code: 403, message: `of the static band 10.96.0.1-10.96.1.0 of ServiceCIDR "kubernetes"`,
			annotations: map[string]string{"decision": "denied", "rules": "static-ip-in-dynamic-band"},
		},
		{
			name: "allows an approved range",
			body: func(t *testing.T) []byte {
				return serviceCIDRReview(t, "extra", "kubernetes-admin", admin, []string{"10.97.0.0/16"})
			},
			allowed: true, code: 200, annotations: map[string]string{"decision": "allowed"},
		},
		{
			name: "allows the apiserver's own default ServiceCIDR",
			body: func(t *testing.T) []byte {
				return serviceCIDRReview(t, "kubernetes", "system:apiserver", []string{"system:masters"}, []string{"192.168.0.0/24"})
			},
			allowed: true, code: 200, message: "the apiserver's default ServiceCIDR", annotations: map[string]string{"decision": "allowed"},
		},
		{
			name: "allows an update that keeps an unapproved range (a finalizer added)",
			body: func(t *testing.T) []byte {
				return serviceCIDRReview(t, "rogue", "system:kube-controller-manager", nil, []string{"10.200.0.0/24"}, "10.200.0.0/24")
			},
			allowed: true, code: 200, message: "spec.cidrs unchanged", annotations: map[string]string{"decision": "allowed"},
		},
		{
			name: "refuses a Service sent to the ServiceCIDR endpoint",
			body: func(t *testing.T) []byte { return loadReview(t, "validate-004-create-wh-static.json") },
			code: 400, message: "only reviews networking.k8s.io ServiceCIDRs, got /v1, Kind=Service",
			annotations: map[string]string{"decision": "denied"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newTestReviewer(t, testPolicy+"allowedCIDRs: [10.96.0.0/12]\n", true)
			resp := post(t, r.recorded(serviceCIDRHandler{r.reviewer}), tt.body(t))
			if resp.Allowed != tt.allowed || resp.Result.Code != tt.code {
				t.Fatalf("allowed %v code %d, want %v %d: %s", resp.Allowed, resp.Result.Code, tt.allowed, tt.code, resp.Result.Message)
			}
			if !strings.Contains(resp.Result.Message, tt.message) {
				t.Errorf("message %q, want it to contain %q", resp.Result.Message, tt.message)
			}
			want := tt.annotations
			if tt.code != 400 {
				want[annotationPolicyDigest] = r.Store.Current().Policy.Digest
			}
			if fmt.Sprint(resp.AuditAnnotations) != fmt.Sprint(want) {
				t.Errorf("auditAnnotations %v, want %v", resp.AuditAnnotations, want)
			}
			line := decisionLineOf(t, r.decisionLogBuf)
			if line["stage"] != "servicecidr" || line["decision"] != want["decision"] {
				t.Errorf("decision log line stage %v decision %v", line["stage"], line["decision"])
			}
		})
	}
	t.Run("counts decisions under the stage servicecidr", func(t *testing.T) {
		r := newTestReviewer(t, testPolicy+"allowedCIDRs: [10.96.0.0/12]\n", true)
		post(t, r.recorded(serviceCIDRHandler{r.reviewer}), serviceCIDRReview(t, "rogue", "kubernetes-admin", admin, []string{"10.200.0.0/24"}))
		if n := testutil.ToFloat64(r.metrics.decisions.WithLabelValues("servicecidr", "denied", "outside-service-cidrs")); n != 1 {
			t.Errorf("decisions{stage=servicecidr,decision=denied,rule=outside-service-cidrs} = %v, want 1", n)
		}
	})
	t.Run("answers 503 before the view is synced", func(t *testing.T) {
		r := newTestReviewer(t, testPolicy, false)
		resp := post(t, r.recorded(serviceCIDRHandler{r.reviewer}), serviceCIDRReview(t, "extra", "kubernetes-admin", admin, []string{"10.97.0.0/16"}))
		if resp.Allowed || resp.Result.Code != 503 || resp.AuditAnnotations["decision"] != "denied" {
			t.Errorf("allowed %v code %d annotations %v, want a 503 denial", resp.Allowed, resp.Result.Code, resp.AuditAnnotations)
		}
	})
}

// Every answer carries the apiserver's auditAnnotations: the decision, the
// rules and the policy digest, few and short whatever the request.
func TestAuditAnnotations(t *testing.T) {
	r := newTestReviewer(t, testPolicy, true)
	digest := r.Store.Current().Policy.Digest
	tests := []struct {
		name string
		h    func() (resp map[string]string)
		want map[string]string
	}{
		{"an allowed create", func() map[string]string {
			return post(t, r.recorded(validatingHandler{r.reviewer}), loadReview(t, "validate-002-create-wh-auto.json")).AuditAnnotations
		}, map[string]string{"decision": "allowed", "policy-digest": digest}},
		{"a patched create", func() map[string]string {
			return post(t, r.recorded(mutatingHandler{r.reviewer}), loadReview(t, "mutate-001-create-wh-auto.json", named("kube-system", "kube-dns"))).AuditAnnotations
		}, map[string]string{"decision": "patched", "policy-digest": digest}},
		{"a denied create", func() map[string]string {
			return post(t, r.recorded(mutatingHandler{r.reviewer}), loadReview(t, "mutate-003-create-wh-static.json", withClusterIP("10.96.0.10"))).AuditAnnotations
		}, map[string]string{"decision": "denied", "rules": "reserved-for-other", "policy-digest": digest}},
		{"a malformed review", func() map[string]string {
			return post(t, r.recorded(validatingHandler{r.reviewer}), []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x"}}`)).AuditAnnotations
		}, map[string]string{"decision": "denied"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.h()
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("auditAnnotations %v, want %v", got, tt.want)
			}
			for k, v := range got {
				// The apiserver records "<webhook name>/<key>" only when it
				// is a qualified name: lowercase, 63 characters at most.
				if k != strings.ToLower(k) || len(k) > 63 || strings.Contains(k, "/") || len(v) > 256 {
					t.Errorf("annotation %q=%q would be refused or unbounded", k, v)
				}
			}
		})
	}
}

// Hostile ServiceCIDR reviews (sent straight to the webhook; the apiserver
// validates a ServiceCIDR before the validating stage) get bounded answers,
// audit lines and annotations, and fixed metric labels.
func TestServiceCIDRHandlerBoundsHostileRequests(t *testing.T) {
	long := strings.Repeat("n", 1<<20)
	tests := []struct {
		name    string
		body    func(t *testing.T) []byte
		message string
	}{
		{"50,000 CIDRs", func(t *testing.T) []byte {
			return serviceCIDRReview(t, "many", "admin", nil, repeated("10.200.0.0/24", 50000))
		}, "spec.cidrs: Too many: 50000"},
		{"a megabyte name, user and CIDR", func(t *testing.T) []byte {
			return setRequest(t, serviceCIDRReview(t, long, long, repeated("g", 100000), []string{long}), func(req map[string]any) {})
		}, `spec.cidrs[0]: Invalid value: "` + strings.Repeat("n", 128) + `... (1048448 more bytes)": is not a CIDR`},
		{"an update from 50,000 old CIDRs", func(t *testing.T) []byte {
			return serviceCIDRReview(t, "grow", "admin", nil, []string{"10.97.0.0/24", "fd00:99::/112"}, repeated("10.97.0.0/24", 50000)...)
		}, `spec.cidrs[1]: Invalid value: "fd00:99::/112"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newTestReviewer(t, testPolicy+"allowedCIDRs: [10.96.0.0/12]\n", true)
			raw, resp := serveRaw(t, r.recorded(serviceCIDRHandler{r.reviewer}), tt.body(t), "application/json")
			if resp.Allowed || len(raw) > 1024 {
				t.Fatalf("allowed=%v, %d bytes: %.300s", resp.Allowed, len(raw), raw)
			}
			if !strings.Contains(resp.Result.Message, tt.message) {
				t.Errorf("message %.300q lacks %q", resp.Result.Message, tt.message)
			}
			if n := r.decisionLogBuf.Len(); n > 4096 {
				t.Fatalf("decision log line is %d bytes: %.300s", n, r.decisionLogBuf)
			}
			for k, v := range resp.AuditAnnotations {
				if len(v) > 128 {
					t.Errorf("annotation %s is %d bytes", k, len(v))
				}
			}
			assertMetricLabelsAreFixed(t, r)
		})
	}
}
