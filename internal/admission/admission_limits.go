package admission

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"golang.org/x/sync/semaphore"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"clusterip-policy/pkg/policy"
)

// Limits on what one AdmissionReview may carry and what its answer may be.
//
// The body itself is bounded by controller-runtime's webhook.Admission,
// which reads at most 7 MiB (maxRequestSize in its admission/http.go: two
// objects of up to 3 MiB each, plus 1 MiB for the rest) and answers 413
// beyond that. Each object is bounded here by the apiserver's own request
// limit: the apiserver never sends a larger one.
const (
	// maxObjectBytes is the apiserver's request body limit (3 MiB); a
	// Service larger than that never came from it.
	maxObjectBytes = 3 << 20
	// maxUIDBytes bounds the request UID; the apiserver sends a 36-character
	// UUID, and the response echoes the UID.
	maxUIDBytes = 128
	// maxResponseBytes bounds any response the endpoints write. Every part
	// of the handlers' answers is capped far below it (policy.MaxMessageBytes,
	// policy.MaxListed); this is the last line if one is not.
	maxResponseBytes = 16 << 10
)

// malformed says what is wrong with a review that no apiserver sends: no
// request in it (no operation), an unknown operation, an oversized UID or
// object. It returns nil for a well-formed request.
func malformed(req admission.Request) error {
	switch {
	case req.Operation == "" && req.UID == "":
		return fmt.Errorf("the AdmissionReview carries no request; send an admission.k8s.io/v1 AdmissionReview with request.uid, request.operation and request.object")
	case req.Operation == "":
		return fmt.Errorf("the admission request has no operation; expected CREATE, UPDATE, DELETE or CONNECT")
	case !knownOperation(req.Operation):
		return fmt.Errorf("the admission request has the unknown operation %q; expected CREATE, UPDATE, DELETE or CONNECT", policy.Echo(string(req.Operation)))
	case len(req.UID) > maxUIDBytes:
		return fmt.Errorf("the admission request's uid is %d bytes, more than %d; the apiserver sends a UUID", len(req.UID), maxUIDBytes)
	case len(req.Object.Raw) > maxObjectBytes:
		return fmt.Errorf("the object in the admission request is %d bytes, more than the apiserver's request limit of %d (3 MiB)", len(req.Object.Raw), maxObjectBytes)
	case len(req.OldObject.Raw) > maxObjectBytes:
		return fmt.Errorf("the oldObject in the admission request is %d bytes, more than the apiserver's request limit of %d (3 MiB)", len(req.OldObject.Raw), maxObjectBytes)
	}
	return nil
}

func knownOperation(op admissionv1.Operation) bool {
	switch op {
	case admissionv1.Create, admissionv1.Update, admissionv1.Delete, admissionv1.Connect:
		return true
	}
	return false
}

// admissionEndpoint is what serve registers for a handler: controller-
// runtime's webhook.Admission (body limit, decoding, UID, patch encoding)
// behind a cap on the response size.
func admissionEndpoint(h admission.Handler) http.Handler {
	return boundedResponse{next: &webhook.Admission{Handler: h, LogConstructor: requestLogConstructor}, bodies: bodiesInFlight, wait: maxBodyWait}
}

// Memory for request bodies. controller-runtime reads each body whole (up
// to 7 MiB) and keeps a copy of the object, so a burst of large reviews
// costs about three times their size at once; the deployment's limit is
// 256Mi. Reviews wait for room in a budget of body bytes instead: a real
// review is a few KiB, so only large ones ever wait.
const (
	// maxBodyBytesInFlight is the budget of request body bytes (by
	// Content-Length; a body without one counts as the 7 MiB maximum).
	maxBodyBytesInFlight = 32 << 20
	// maxRequestBytes is controller-runtime's body limit (maxRequestSize in
	// its admission/http.go); larger bodies are refused there unread.
	maxRequestBytes = 7 << 20
	// maxBodyWait is how long a review waits for room before it is refused
	// with 429; the apiserver's timeout for the webhook is 5 s.
	maxBodyWait = 2 * time.Second
)

// bodiesInFlight is shared by both endpoints.
var bodiesInFlight = semaphore.NewWeighted(maxBodyBytesInFlight)

// boundedResponse buffers the response of next and, if it would be larger
// than maxResponseBytes, sends a short error review instead. Only a request
// that no apiserver sends can get there: controller-runtime copies the
// request UID into the response, and nothing else in it grows with the
// request.
//
// It also holds the request until its body fits in the bodies budget.
type boundedResponse struct {
	next   http.Handler
	bodies *semaphore.Weighted
	wait   time.Duration
}

func (b boundedResponse) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	weight := int64(maxRequestBytes)
	if r.ContentLength >= 0 && r.ContentLength < weight {
		weight = max(r.ContentLength, 1)
	}
	// TryAcquire first: it succeeds exactly when Acquire would without
	// waiting (room, and no one queued before us), and costs no timer.
	if !b.bodies.TryAcquire(weight) {
		ctx, cancel := context.WithTimeout(r.Context(), b.wait)
		err := b.bodies.Acquire(ctx, weight)
		cancel()
		if err != nil {
			w.Header().Set("Retry-After", "1")
			http.Error(w, fmt.Sprintf("clusterip-policy is busy: more than %d bytes of reviews in flight for %s; retry", maxBodyBytesInFlight, b.wait), http.StatusTooManyRequests)
			return
		}
	}
	defer b.bodies.Release(weight)

	bw := &boundedWriter{header: http.Header{}, code: http.StatusOK}
	b.next.ServeHTTP(bw, r)
	for k, v := range bw.header {
		w.Header()[k] = v
	}
	if bw.over {
		w.Header().Del("Content-Length")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(oversizedReview())
		return
	}
	w.WriteHeader(bw.code)
	_, _ = w.Write(bw.buf.Bytes())
}

// boundedWriter keeps up to maxResponseBytes of a response.
type boundedWriter struct {
	header http.Header
	code   int
	buf    bytes.Buffer
	over   bool
}

func (w *boundedWriter) Header() http.Header { return w.header }

func (w *boundedWriter) WriteHeader(code int) { w.code = code }

func (w *boundedWriter) Write(p []byte) (int, error) {
	if w.over || w.buf.Len()+len(p) > maxResponseBytes {
		w.over = true
		w.buf.Reset()
		return len(p), nil
	}
	return w.buf.Write(p)
}

// oversizedReview is the answer sent in place of a response over the limit.
func oversizedReview() []byte {
	review := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "AdmissionReview"},
		Response: &admissionv1.AdmissionResponse{Allowed: false, Result: &metav1.Status{
			Code:    http.StatusBadRequest,
			Message: fmt.Sprintf("clusterip-policy refused to send a response larger than %d bytes: the request echoes too much into it (an apiserver's request uid is a 36-character UUID)", maxResponseBytes),
		}},
	}
	out, _ := json.Marshal(review) // a fixed, valid value
	return out
}
