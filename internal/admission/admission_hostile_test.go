package admission

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"clusterip-policy/pkg/policy"
)

// serveRaw sends body with contentType through the endpoint serve registers
// (controller-runtime's webhook.Admission behind the response cap) and
// returns the raw response and the decoded AdmissionResponse.
func serveRaw(t *testing.T, h admission.Handler, body []byte, contentType string) ([]byte, *admissionv1.AdmissionResponse) {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/review", bytes.NewReader(body))
	req.Header.Set("Content-Type", contentType)
	admissionEndpoint(h).ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("HTTP %d: %s", rec.Code, rec.Body)
	}
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil {
		t.Fatalf("response is not an AdmissionReview (%v): %.300s", err, rec.Body)
	}
	return rec.Body.Bytes(), out.Response
}

func withSpec(key string, value any) func(map[string]any) {
	return func(obj map[string]any) { obj["spec"].(map[string]any)[key] = value }
}

func repeated(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// setRequest edits the request of a recorded review outside its object.
func setRequest(t testing.TB, body []byte, edit func(req map[string]any)) []byte {
	t.Helper()
	var review map[string]any
	if err := json.Unmarshal(body, &review); err != nil {
		t.Fatal(err)
	}
	edit(review["request"].(map[string]any))
	out, err := json.Marshal(review)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Each malformed or hostile review gets one exact, short answer; none is
// allowed, none panics, and every answer and decision log line stays small.
func TestHostileAndMalformedReviews(t *testing.T) {
	static := "mutate-003-create-wh-static.json" // clusterIP 10.96.0.20, no clusterIPs
	tooMany := `spec.clusterIPs: Too many: 50000: must have at most 2 items (one per IP family); ask for at most one IPv4 and one IPv6 address, or leave clusterIPs empty to get them allocated`
	tests := []struct {
		name        string
		body        func(t *testing.T) []byte
		contentType string // default application/json
		validate    bool   // send to the validating stage instead of the mutating one
		policy      string // default testPolicy
		code        int32  // result code of the denial
		message     string // exact message; prefix when it ends in "*"
		rule        string // rule in the decision log line; "" when the request never reached a decision
		noAudit     bool   // refused by controller-runtime before the handler
	}{
		{
			name: "refuses a body that is not JSON", noAudit: true, code: http.StatusBadRequest,
			body:    func(*testing.T) []byte { return []byte("{not json") },
			message: "couldn't get version/kind; json parse error: invalid character 'n' looking for beginning of object key string",
		},
		{
			name: "refuses a wrong Content-Type", noAudit: true, code: http.StatusBadRequest, contentType: "text/plain",
			body:    func(t *testing.T) []byte { return loadReview(t, static) },
			message: "contentType=text/plain, expected application/json",
		},
		{
			name: "refuses a body over controller-runtime's 7 MiB limit", noAudit: true, code: http.StatusRequestEntityTooLarge,
			body: func(t *testing.T) []byte {
				return loadReview(t, static, withSpec("clusterIPs", repeated("10.96.200.5", 7<<20/14+1)))
			},
			message: "request entity is too large; limit is 7340032 bytes",
		},
		{
			name: "refuses an object over the apiserver's 3 MiB request limit", code: http.StatusBadRequest,
			body: func(t *testing.T) []byte {
				return loadReview(t, static, withSpec("externalName", strings.Repeat("x", 3<<20)))
			},
			message: "the object in the admission request is 3146478 bytes, more than the apiserver's request limit of 3145728 (3 MiB)",
		},
		{
			name: "refuses a review without a request", code: http.StatusBadRequest,
			body: func(*testing.T) []byte {
				return []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`)
			},
			message: "the AdmissionReview carries no request; send an admission.k8s.io/v1 AdmissionReview with request.uid, request.operation and request.object",
		},
		{
			name: "refuses a CREATE without an object", code: http.StatusBadRequest,
			body: func(t *testing.T) []byte {
				return setRequest(t, loadReview(t, static), func(req map[string]any) { delete(req, "object") })
			},
			message: "the admission request carries no object",
		},
		{
			name: "refuses a Service without a spec, which the reserved-IP patch could not add to", code: http.StatusBadRequest,
			body: func(*testing.T) []byte {
				return []byte(`{"request":{"uid":"u","kind":{"kind":"Service"},"name":"kube-dns","namespace":"kube-system","object":{},"operation":"CREATE"}}`)
			},
			message: "the Service in the admission request has no spec; the apiserver always sends one",
		},
		{
			name: "refuses a kind other than Service", code: http.StatusBadRequest,
			body: func(t *testing.T) []byte {
				return setRequest(t, loadReview(t, static), func(req map[string]any) {
					req["kind"] = map[string]any{"group": "", "version": "v1", "kind": strings.Repeat("ConfigMap", 1000)}
				})
			},
			message: "clusterip-policy only reviews Services, got /v1, Kind=ConfigMapConfigMap*",
		},
		{
			name: "refuses an unknown operation", code: http.StatusBadRequest,
			body: func(t *testing.T) []byte {
				return setRequest(t, loadReview(t, static), func(req map[string]any) { req["operation"] = "PATCH" })
			},
			message: `the admission request has the unknown operation "PATCH"; expected CREATE, UPDATE, DELETE or CONNECT`,
		},
		{
			name: "refuses a uid no apiserver sends", code: http.StatusBadRequest,
			body: func(t *testing.T) []byte {
				return setRequest(t, loadReview(t, static), func(req map[string]any) { req["uid"] = strings.Repeat("u", 1<<20) })
			},
			message: "clusterip-policy refused to send a response larger than 16384 bytes: *",
			noAudit: false,
		},
		{
			name: "denies 50,000 clusterIPs at the mutating stage with one short message", code: http.StatusForbidden, rule: "invalid-ip",
			body: func(t *testing.T) []byte {
				return loadReview(t, static, withSpec("clusterIPs", repeated("10.96.200.5", 50000)))
			},
			message: tooMany,
		},
		{
			name: "denies 50,000 clusterIPs at the validating stage too", code: http.StatusForbidden, rule: "invalid-ip", validate: true,
			body: func(t *testing.T) []byte {
				return loadReview(t, "validate-004-create-wh-static.json", withSpec("clusterIPs", repeated("10.96.200.5", 50000)))
			},
			message: tooMany,
		},
		{
			name: "denies 50,000 clusterIPs even where the policy only audits", code: http.StatusForbidden, rule: "invalid-ip",
			policy: testPolicy + "enforcement: {default: audit}\n",
			body: func(t *testing.T) []byte {
				return loadReview(t, static, withSpec("clusterIPs", repeated("10.96.200.5", 50000)))
			},
			message: tooMany,
		},
		{
			name: "denies 50,000 clusterIPs in an exempt namespace", code: http.StatusForbidden, rule: "invalid-ip",
			policy: testPolicy + "exemptions: {namespaces: [default]}\n",
			body: func(t *testing.T) []byte {
				return loadReview(t, static, withSpec("clusterIPs", repeated("10.96.200.5", 50000)))
			},
			message: tooMany,
		},
		{
			name: "denies 50,000 ipFamilies for a Service that owns a reservation", code: http.StatusForbidden, rule: "invalid-ip",
			body: func(t *testing.T) []byte {
				return loadReview(t, "mutate-001-create-wh-auto.json", named("kube-system", "kube-dns"), withSpec("ipFamilies", repeated("IPv4", 50000)))
			},
			message: "spec.ipFamilies: Too many: 50000: must have at most 2 items (IPv4, IPv6 in the order wanted)",
		},
		{
			name: "denies a reservation owner whose ipFamilies repeat a family, rather than patching two equal IPs", code: http.StatusForbidden, rule: "invalid-ip",
			body: func(t *testing.T) []byte {
				return loadReview(t, "mutate-001-create-wh-auto.json", named("kube-system", "kube-dns"), withSpec("ipFamilies", []string{"IPv4", "IPv4"}))
			},
			message: `spec.ipFamilies[1]: Duplicate value: "IPv4": a Service has one IP per family`,
		},
		{
			name: "denies clusterIP and clusterIPs[0] that disagree", code: http.StatusForbidden, rule: "invalid-ip",
			body: func(t *testing.T) []byte {
				return loadReview(t, static, withSpec("clusterIP", "10.96.200.5"), withSpec("clusterIPs", []string{"10.96.0.20"}))
			},
			message: `spec.clusterIPs: Invalid value: ["10.96.0.20"]: first value must match clusterIP "10.96.200.5"; set both to the same address, or clusterIP alone`,
		},
		{
			name: "denies None mixed with an address", code: http.StatusForbidden, rule: "invalid-ip",
			body: func(t *testing.T) []byte {
				return loadReview(t, static, withSpec("clusterIP", "None"), withSpec("clusterIPs", []string{"None", "10.96.200.5"}))
			},
			message: `spec.clusterIPs: Invalid value: ["None","10.96.200.5"]: 'None' must be the first and only value`,
		},
		{
			name: "denies a headless clusterIP beside an address in clusterIPs", code: http.StatusForbidden, rule: "invalid-ip",
			body: func(t *testing.T) []byte {
				return loadReview(t, static, withSpec("clusterIP", "None"), withSpec("clusterIPs", []string{"10.96.200.5"}))
			},
			message: `spec.clusterIPs: Invalid value: ["10.96.200.5"]: first value must match clusterIP "None"; set both to the same address, or clusterIP alone`,
		},
		{
			name: "denies two addresses of one family", code: http.StatusForbidden, rule: "invalid-ip",
			body: func(t *testing.T) []byte {
				return loadReview(t, static, withSpec("clusterIPs", []string{"10.96.0.20", "10.96.0.21"}), withSpec("ipFamilyPolicy", "RequireDualStack"))
			},
			message: `spec.clusterIPs: Invalid value: ["10.96.0.20","10.96.0.21"]: may specify no more than one IP for each IP family`,
		},
		{
			name: "denies ipFamilies that contradict the address", code: http.StatusForbidden, rule: "invalid-ip",
			body: func(t *testing.T) []byte {
				return loadReview(t, static, withSpec("clusterIPs", []string{"10.96.0.20"}), withSpec("ipFamilies", []string{"IPv6"}))
			},
			message: "spec.clusterIPs[0]: Invalid value: \"10.96.0.20\": expected an IPv6 value as indicated by `ipFamilies[0]`",
		},
		{
			name: "clips a megabyte-long requested IP in the message", code: http.StatusForbidden, rule: "invalid-ip",
			body: func(t *testing.T) []byte {
				return loadReview(t, static, withSpec("clusterIP", strings.Repeat("1", 1<<20)))
			},
			message: `spec.clusterIP: Invalid value: "` + strings.Repeat("1", 128) + `... (1048448 more bytes)": is not an IP address; use an address from 10.96.0.0/16 (ServiceCIDR "kubernetes"), or leave clusterIP empty to get one allocated`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pol := tt.policy
			if pol == "" {
				pol = testPolicy
			}
			r := newTestReviewer(t, pol, true)
			h := r.recorded(mutatingHandler{r.reviewer})
			if tt.validate {
				h = r.recorded(validatingHandler{r.reviewer})
			}
			ct := tt.contentType
			if ct == "" {
				ct = "application/json"
			}
			raw, resp := serveRaw(t, h, tt.body(t), ct)
			if resp.Allowed || resp.Result == nil || resp.Result.Code != tt.code {
				t.Fatalf("want a denial with code %d, got allowed=%v %+v", tt.code, resp.Allowed, resp.Result)
			}
			if want, ok := strings.CutSuffix(tt.message, "*"); ok {
				if !strings.HasPrefix(resp.Result.Message, want) {
					t.Fatalf("message %.400q\ndoes not start with %q", resp.Result.Message, want)
				}
			} else if resp.Result.Message != tt.message {
				t.Fatalf("message %.400q\nwant    %q", resp.Result.Message, tt.message)
			}
			if len(resp.Patch) != 0 || len(resp.Warnings) != 0 {
				t.Fatalf("a refusal carries patch %s and warnings %q", resp.Patch, resp.Warnings)
			}
			if len(raw) > 1024 {
				t.Fatalf("response is %d bytes, want under 1 KiB: %.300s", len(raw), raw)
			}
			if tt.noAudit {
				if r.decisionLogBuf.Len() != 0 {
					t.Fatalf("audit written for a request refused before the handler: %s", r.decisionLogBuf)
				}
				return
			}
			if n := r.decisionLogBuf.Len(); n > 4096 {
				t.Fatalf("decision log line is %d bytes, want at most 4 KiB: %.300s", n, r.decisionLogBuf)
			}
			line := decisionLineOf(t, r.decisionLogBuf)
			if line["decision"] != "denied" {
				t.Fatalf("audit decision %v", line["decision"])
			}
			rules, _ := line["rules"].([]any)
			if (tt.rule == "") != (len(rules) == 0) || (tt.rule != "" && (len(rules) != 1 || rules[0] != tt.rule)) {
				t.Fatalf("audit rules %v, want %q", rules, tt.rule)
			}
			assertMetricLabelsAreFixed(t, r)
		})
	}
}

// The 50,000-entry request's decision log line lists two IPs and how many more.
func TestAuditLineListsAFewRequestedIPsAndHowManyMore(t *testing.T) {
	r := newTestReviewer(t, testPolicy, true)
	serveRaw(t, r.recorded(mutatingHandler{r.reviewer}), loadReview(t, "mutate-003-create-wh-static.json", withSpec("clusterIPs", repeated("10.96.200.5", 50000))), "application/json")
	got, _ := json.Marshal(decisionLineOf(t, r.decisionLogBuf)["requestedIPs"])
	if want := `["10.96.200.5","10.96.200.5","... (49998 more)"]`; string(got) != want {
		t.Fatalf("requestedIPs %s, want %s", got, want)
	}
}

// A megabyte-long name, user and namespace are clipped in the decision log line
// and in the message that names the Service.
func TestLongNamesAreClippedInMessagesAndTheAuditLine(t *testing.T) {
	r := newTestReviewer(t, testPolicy+"- ip: 10.96.0.30\n  service: default/owner\n", true)
	long := strings.Repeat("n", 1<<20)
	body := setRequest(t, loadReview(t, "mutate-001-create-wh-auto.json", named("kube-system", long)), func(req map[string]any) {
		req["userInfo"] = map[string]any{"username": long, "groups": repeated("g", 100000)}
	})
	raw, resp := serveRaw(t, r.recorded(mutatingHandler{r.reviewer}), body, "application/json")
	if !resp.Allowed || len(raw) > 1024 {
		t.Fatalf("allowed=%v, %d bytes: %.300s", resp.Allowed, len(raw), raw)
	}
	if n := r.decisionLogBuf.Len(); n > 2048 {
		t.Fatalf("decision log line is %d bytes: %.300s", n, r.decisionLogBuf)
	}
	line := decisionLineOf(t, r.decisionLogBuf)
	for _, k := range []string{"name", "user"} {
		if want := strings.Repeat("n", 128) + "... (1048448 more bytes)"; line[k] != want {
			t.Fatalf("audit %s = %.200v, want %.200s", k, line[k], want)
		}
	}
}

// Metrics carry only fixed label values, whatever the requests were.
func assertMetricLabelsAreFixed(t *testing.T, r testReviewer) {
	t.Helper()
	families, err := r.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	allowed := map[string]bool{"": true, "mutate": true, "validate": true, "servicecidr": true, "allowed": true, "denied": true, "warned": true, "patched": true, "success": true, "failure": true}
	for _, id := range policy.Rules {
		allowed[string(id)] = true
	}
	for _, f := range families {
		for _, m := range f.Metric {
			for _, l := range m.Label {
				if !allowed[l.GetValue()] {
					t.Fatalf("metric %s has label %s=%.100q", f.GetName(), l.GetName(), l.GetValue())
				}
			}
		}
	}
}
