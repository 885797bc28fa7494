// Package admissiontest holds what the tests of the admission path share
// with the server's: the recorded AdmissionReviews
// (internal/admission/testdata/admissionreviews), tweaks to their Service,
// a post through an endpoint and the parse of the one decision log line written.
// Imported by tests only.
package admissiontest

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
)

// reviewsDir is internal/admission/testdata/admissionreviews of the module
// whose package is under test (go test runs in the package's directory), so
// tests of any package read the same recordings. It is found from the
// working directory, not from this file's path: make builds with -trimpath,
// which leaves only module-relative file names.
func reviewsDir(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatalf("cannot locate the recorded reviews: %v", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "internal", "admission", "testdata", "admissionreviews")
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("cannot locate the recorded reviews: no go.mod above the working directory")
		}
		dir = parent
	}
}

// LoadReview reads a recorded AdmissionReview and applies tweaks to its
// Service object (as a generic map, to keep the recording's exact shape).
func LoadReview(t testing.TB, name string, tweaks ...func(obj map[string]any)) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(reviewsDir(t), name))
	if err != nil {
		t.Fatal(err)
	}
	var review map[string]any
	if err := json.Unmarshal(raw, &review); err != nil {
		t.Fatal(err)
	}
	req := review["request"].(map[string]any)
	obj := req["object"].(map[string]any)
	for _, tw := range tweaks {
		tw(obj)
	}
	if md, ok := obj["metadata"].(map[string]any); ok {
		req["name"], req["namespace"] = md["name"], md["namespace"]
	}
	out, err := json.Marshal(review)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Named sets the Service's namespace and name.
func Named(ns, name string) func(map[string]any) {
	return func(obj map[string]any) {
		md := obj["metadata"].(map[string]any)
		md["namespace"], md["name"] = ns, name
	}
}

// WithClusterIP sets spec.clusterIP (and clusterIPs, if the recording has them).
func WithClusterIP(ip string) func(map[string]any) {
	return func(obj map[string]any) {
		spec := obj["spec"].(map[string]any)
		spec["clusterIP"] = ip
		if _, ok := spec["clusterIPs"]; ok {
			spec["clusterIPs"] = []string{ip}
		}
	}
}

// Serve posts body to h (an endpoint, or controller-runtime's
// webhook.Admission around a handler) as the apiserver would, and returns
// the answer's bytes; anything but HTTP 200 fails the test.
func Serve(t testing.TB, h http.Handler, body []byte) []byte {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/review", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("HTTP %d: %.300s", rec.Code, rec.Body)
	}
	return rec.Body.Bytes()
}

// Post is Serve with the answer decoded.
func Post(t testing.TB, h http.Handler, body []byte) *admissionv1.AdmissionResponse {
	t.Helper()
	raw := Serve(t, h, body)
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("decode response: %v\n%s", err, raw)
	}
	return out.Response
}

// DecisionLineOf returns the single decision log line written to buf.
func DecisionLineOf(t testing.TB, buf *bytes.Buffer) map[string]any {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("want one decision log line, got %d:\n%s", len(lines), buf)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &m); err != nil {
		t.Fatalf("decision log line is not JSON: %v\n%s", err, lines[0])
	}
	return m
}
