package admission

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"clusterip-policy/internal/logging"

	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// benchReviews are the recorded reviews the load generator sends (test/load,
// hack/cpu-compare.sh): a dynamic create at both stages, a static create,
// and the reservation owner kube-system/kube-dns created without an IP
// (answered with a patch).
func benchReviews(b *testing.B) []struct {
	name  string
	stage string
	body  []byte
} {
	return []struct {
		name  string
		stage string
		body  []byte
	}{
		{"mutate-dynamic", "mutate", loadReview(b, "mutate-001-create-wh-auto.json")},
		{"validate-dynamic", "validate", loadReview(b, "validate-002-create-wh-auto.json")},
		{"mutate-static", "mutate", loadReview(b, "mutate-003-create-wh-static.json")},
		{"mutate-reservation-owner", "mutate", loadReview(b, "mutate-001-create-wh-auto.json", named("kube-system", "kube-dns"))},
	}
}

// BenchmarkEndpoint is one review through the endpoint the server registers
// (admissionEndpoint: body budget, controller-runtime's decoding, our
// handler, the decision log line, the metrics, the bounded response), beside the
// do-nothing handler of test/nopwebhook behind the same webhook.Admission.
// TLS and the HTTP server cost both the same and are left out, so the
// ratio ours/nop here is an upper bound of the ratio over the wire.
//
//	go test ./internal/admission -run '^$' -bench Endpoint -benchmem
func BenchmarkEndpoint(b *testing.B) {
	tr := newTestReviewer(b, testPolicy, true)
	tr.decisionLog = logging.New(io.Discard).WithName("audit")
	nop := &webhook.Admission{Handler: admission.HandlerFunc(func(context.Context, admission.Request) admission.Response {
		return admission.Allowed("")
	})}
	for _, rv := range benchReviews(b) {
		ours := admissionEndpoint(tr.recorded(validatingHandler{tr.reviewer}))
		if rv.stage == "mutate" {
			ours = admissionEndpoint(tr.recorded(mutatingHandler{tr.reviewer}))
		}
		for _, h := range []struct {
			name string
			h    http.Handler
		}{{"ours", ours}, {"nop", nop}} {
			b.Run(rv.name+"/"+h.name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					rec := httptest.NewRecorder()
					req := httptest.NewRequest(http.MethodPost, "/review", bytes.NewReader(rv.body))
					req.Header.Set("Content-Type", "application/json")
					h.h.ServeHTTP(rec, req)
					if rec.Code != http.StatusOK {
						b.Fatalf("HTTP %d: %s", rec.Code, rec.Body)
					}
				}
			})
		}
	}
}
