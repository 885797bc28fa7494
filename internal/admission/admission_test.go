package admission

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"clusterip-policy/internal/admission/admissiontest"
	"clusterip-policy/internal/logging"
	"clusterip-policy/internal/readiness"
	"clusterip-policy/internal/readiness/readinesstest"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admission/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

const testPolicy = readinesstest.Spec

// testReviewer is a reviewer over readinesstest's gate (a synced view of
// 10.96.0.0/16 with 10.96.0.1 held by default/kubernetes and the
// static-band 10.96.0.40 by team-a/db), whose audit log goes to a buffer.
type testReviewer struct {
	*reviewer
	readinesstest.Fixture
	decisionLogBuf *bytes.Buffer
	reg            *prometheus.Registry
}

func newTestReviewer(t testing.TB, policyYAML string, synced bool) testReviewer {
	t.Helper()
	var buf bytes.Buffer
	log := logging.New(&buf)
	f := readinesstest.New(t, policyYAML, synced, log)
	buf.Reset()
	reg := prometheus.NewRegistry()
	return testReviewer{&reviewer{gate: f.Gate, decisionLog: log.WithName("audit"), metrics: newMetrics(reg)}, f, &buf, reg}
}

// The recorded reviews and what reads the answers, shared with the
// server's tests (admissiontest).
var (
	loadReview     = admissiontest.LoadReview
	named          = admissiontest.Named
	withClusterIP  = admissiontest.WithClusterIP
	decisionLineOf = admissiontest.DecisionLineOf
)

// post sends an AdmissionReview body through controller-runtime's webhook
// handler, as the apiserver would, and returns the decoded response.
func post(t *testing.T, h webhook.AdmissionHandler, body []byte) *admissionv1.AdmissionResponse {
	t.Helper()
	return admissiontest.Post(t, &webhook.Admission{Handler: h}, body)
}

func TestHandlersWithRecordedRequests(t *testing.T) {
	tests := []struct {
		name     string
		fixture  string
		tweaks   []func(map[string]any)
		mutate   bool
		allowed  bool
		patch    string // exact JSON patch, when one is expected
		message  string // substring of the denial
		decision string
		rules    []any
	}{
		{name: "allows a dynamic create at the mutating stage", fixture: "mutate-001-create-wh-auto.json", mutate: true, allowed: true, decision: "allowed"},
		{name: "allows the IP the apiserver allocated", fixture: "validate-002-create-wh-auto.json", allowed: true, decision: "allowed"},
		{name: "allows a static-band request", fixture: "mutate-003-create-wh-static.json", mutate: true, allowed: true, decision: "allowed"},
		{name: "allows a static-band IP at the validating stage", fixture: "validate-004-create-wh-static.json", allowed: true, decision: "allowed"},
		{name: "allows the dry-run placeholder 10.96.0.0", fixture: "validate-006-create-wh-dryrun.json", allowed: true, decision: "allowed"},
		{
			name: "patches kube-dns to its reserved IP", fixture: "mutate-001-create-wh-auto.json", tweaks: []func(map[string]any){named("kube-system", "kube-dns")},
			mutate: true, allowed: true, decision: "patched",
			patch: `[{"op":"add","path":"/spec/clusterIP","value":"10.96.0.10"},{"op":"add","path":"/spec/clusterIPs","value":["10.96.0.10"]}]`,
		},
		{
			name: "patches kube-dns in a dry run too", fixture: "mutate-005-create-wh-dryrun.json", tweaks: []func(map[string]any){named("kube-system", "kube-dns")},
			mutate: true, allowed: true, decision: "patched",
			patch: `[{"op":"add","path":"/spec/clusterIP","value":"10.96.0.10"},{"op":"add","path":"/spec/clusterIPs","value":["10.96.0.10"]}]`,
		},
		{
			name: "denies another Service asking for the DNS IP", fixture: "mutate-003-create-wh-static.json", tweaks: []func(map[string]any){withClusterIP("10.96.0.10")},
			mutate: true, decision: "denied", rules: []any{"reserved-for-other"},
			message: `spec.clusterIP: Invalid value: "10.96.0.10": is reserved for Service kube-system/kube-dns (cluster DNS)`,
		},
		{
			name: "denies a dynamic-band request", fixture: "mutate-003-create-wh-static.json", tweaks: []func(map[string]any){withClusterIP("10.96.200.5")},
			mutate: true, decision: "denied", rules: []any{"static-ip-in-dynamic-band"},
			message: `spec.clusterIP: Invalid value: "10.96.200.5": lies in the dynamic band 10.96.1.1-10.96.255.254 of ServiceCIDR "kubernetes"; choose a free address in the static band 10.96.0.1-10.96.1.0 or ask for a reservation`,
		},
		{
			name: "denies a dynamic allocation that spilled onto the DNS IP", fixture: "validate-002-create-wh-auto.json", tweaks: []func(map[string]any){withClusterIP("10.96.0.10")},
			decision: "denied", rules: []any{"reserved-for-other"},
			message: `is reserved for Service kube-system/kube-dns`,
		},
		{
			name: "denies the first address, reserved for default/kubernetes", fixture: "mutate-003-create-wh-static.json", tweaks: []func(map[string]any){withClusterIP("10.96.0.1")},
			mutate: true, decision: "denied", rules: []any{"reserved-for-other"},
			message: `is reserved for Service default/kubernetes`,
		},
		{
			name: "denies an allocated IP, naming its holder", fixture: "mutate-003-create-wh-static.json", tweaks: []func(map[string]any){withClusterIP("10.96.0.40")},
			mutate: true, decision: "denied", rules: []any{"already-allocated"},
			message: `spec.clusterIP: Invalid value: "10.96.0.40": is held by IPAddress 10.96.0.40 for Service team-a/db`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newTestReviewer(t, testPolicy, true)
			h := r.recorded(validatingHandler{r.reviewer})
			if tt.mutate {
				h = r.recorded(mutatingHandler{r.reviewer})
			}
			body := loadReview(t, tt.fixture, tt.tweaks...)
			resp := post(t, h, body)
			if resp.Allowed != tt.allowed {
				t.Fatalf("allowed = %v, want %v: %+v", resp.Allowed, tt.allowed, resp.Result)
			}
			if tt.message != "" && !strings.Contains(resp.Result.Message, tt.message) {
				t.Fatalf("message %q does not contain %q", resp.Result.Message, tt.message)
			}
			if tt.patch != "" {
				if resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch || string(resp.Patch) != tt.patch {
					t.Fatalf("patch = %s, want %s", resp.Patch, tt.patch)
				}
			} else if len(resp.Patch) != 0 {
				t.Fatalf("unexpected patch %s", resp.Patch)
			}

			line := decisionLineOf(t, r.decisionLogBuf)
			var review admissionv1.AdmissionReview
			_ = json.Unmarshal(body, &review)
			want := map[string]any{
				"msg": "admission decision", "logger": "audit", "uid": string(review.Request.UID),
				"decision": tt.decision, "namespace": review.Request.Namespace, "name": review.Request.Name,
				"user": "kubernetes-admin", "dryRun": *review.Request.DryRun, "policyGeneration": 1.0, "viewGeneration": 1.0,
			}
			for k, v := range want {
				if line[k] != v {
					t.Errorf("audit %s = %v, want %v", k, line[k], v)
				}
			}
			rules, _ := line["rules"].([]any)
			if len(rules) != len(tt.rules) || (len(rules) > 0 && rules[0] != tt.rules[0]) {
				t.Errorf("audit rules = %v, want %v", rules, tt.rules)
			}
			if tt.patch != "" {
				got, _ := json.Marshal(line["patch"])
				if string(got) != tt.patch {
					t.Errorf("audit patch = %s, want %s", got, tt.patch)
				}
			}
			if _, ok := line["durationSeconds"].(float64); !ok {
				t.Errorf("audit has no durationSeconds: %v", line)
			}
			stage := "validate"
			if tt.mutate {
				stage = "mutate"
			}
			rule := ""
			if len(tt.rules) > 0 {
				rule = tt.rules[0].(string)
			}
			if got := testutil.ToFloat64(r.metrics.decisions.WithLabelValues(stage, tt.decision, rule)); got != 1 {
				t.Errorf("decisions_total{%s,%s,%q} = %v, want 1", stage, tt.decision, rule, got)
			}
		})
	}
}

func TestHandlersDenyUntilTheViewHasSynced(t *testing.T) {
	r := newTestReviewer(t, testPolicy, false)
	for _, h := range []webhook.AdmissionHandler{r.recorded(mutatingHandler{r.reviewer}), r.recorded(validatingHandler{r.reviewer})} {
		r.decisionLogBuf.Reset()
		resp := post(t, h, loadReview(t, "mutate-001-create-wh-auto.json"))
		if resp.Allowed || resp.Result.Code != http.StatusServiceUnavailable || resp.Result.Message != readiness.NotReadyMessage {
			t.Fatalf("want a not-ready denial, got %+v", resp.Result)
		}
		if line := decisionLineOf(t, r.decisionLogBuf); line["decision"] != "denied" || line["message"] != readiness.NotReadyMessage {
			t.Fatalf("audit = %v", line)
		}
	}
}

func TestHandlersRefuseWhatIsNotAService(t *testing.T) {
	r := newTestReviewer(t, testPolicy, true)
	body := loadReview(t, "mutate-001-create-wh-auto.json")
	body = bytes.Replace(body, []byte(`"kind":{"group":"","kind":"Service","version":"v1"}`), []byte(`"kind":{"group":"","kind":"ConfigMap","version":"v1"}`), 1)
	resp := post(t, r.recorded(mutatingHandler{r.reviewer}), body)
	if resp.Allowed || resp.Result.Code != http.StatusBadRequest || !strings.Contains(resp.Result.Message, "only reviews Services") {
		t.Fatalf("got %+v", resp.Result)
	}
}

func TestWarnModeAllowsWithAnAdmissionWarning(t *testing.T) {
	r := newTestReviewer(t, testPolicy+"enforcement:\n  default: warn\n", true)
	resp := post(t, r.recorded(mutatingHandler{r.reviewer}), loadReview(t, "mutate-003-create-wh-static.json", withClusterIP("10.96.200.5")))
	if !resp.Allowed || len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], "lies in the dynamic band") {
		t.Fatalf("got allowed=%v warnings=%q", resp.Allowed, resp.Warnings)
	}
	if line := decisionLineOf(t, r.decisionLogBuf); line["decision"] != "warned" {
		t.Fatalf("audit decision = %v", line["decision"])
	}
}

func TestHandlersAllowOperationsThatAllocateNothing(t *testing.T) {
	r := newTestReviewer(t, testPolicy, true)
	body := loadReview(t, "mutate-001-create-wh-auto.json")
	body = bytes.Replace(body, []byte(`"operation":"CREATE"`), []byte(`"operation":"DELETE"`), 1)
	body = bytes.Replace(body, []byte(`"object":{`), []byte(`"oldObject":{`), 1)
	resp := post(t, r.recorded(validatingHandler{r.reviewer}), body)
	if !resp.Allowed {
		t.Fatalf("DELETE denied: %+v", resp.Result)
	}
	if line := decisionLineOf(t, r.decisionLogBuf); line["decision"] != "allowed" || line["skipped"] != "operation DELETE allocates no IP" {
		t.Fatalf("audit = %v", line)
	}
}

func TestHandlersDenyOnAViewStaleForTooLong(t *testing.T) {
	r := newTestReviewer(t, testPolicy, true)
	r.Gate.MaxStaleness = 30 * time.Second
	stale := 10 * time.Second
	r.Gate.StaleFor = func(time.Time) (time.Duration, string) { return stale, "ipaddresses" }
	resp := post(t, r.recorded(validatingHandler{r.reviewer}), loadReview(t, "validate-002-create-wh-auto.json"))
	if !resp.Allowed {
		t.Fatalf("denied within the tolerated staleness: %+v", resp.Result)
	}
	if line := decisionLineOf(t, r.decisionLogBuf); line["viewStaleSeconds"] != 10.0 {
		t.Fatalf("audit viewStaleSeconds = %v", line["viewStaleSeconds"])
	}
	r.decisionLogBuf.Reset()
	stale = 45 * time.Second
	resp = post(t, r.recorded(validatingHandler{r.reviewer}), loadReview(t, "validate-002-create-wh-auto.json"))
	want := "clusterip-policy is not ready: its watch of ipaddresses has failed for 45s, so its view of allocated addresses may be out of date; retry once it recovers"
	if resp.Allowed || resp.Result.Code != http.StatusServiceUnavailable || resp.Result.Message != want {
		t.Fatalf("got %+v", resp.Result)
	}
	if line := decisionLineOf(t, r.decisionLogBuf); line["decision"] != "denied" || line["message"] != want {
		t.Fatalf("audit = %v", line)
	}
}
