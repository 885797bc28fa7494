package admission

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
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
// behind the body budget, the body's time bound and a cap on the response
// size.
func admissionEndpoint(h admission.Handler) http.Handler {
	return boundedResponse{next: &webhook.Admission{Handler: h, LogConstructor: requestLogConstructor}, bodies: bodiesInFlight, wait: maxBodyWait, bodyTime: maxBodyTime}
}

// Memory and time for request bodies. controller-runtime reads each body
// whole, up to 7 MiB (maxRequestSize in its admission/http.go; it answers
// 413 once that much has arrived), and keeps a copy of the object, so a
// burst of large reviews costs about three times their size at once; the
// deployment's limit is 256Mi. The bytes of a body count against a budget as they
// arrive, at most bodyChunk at a time, and a body waits for room in it: a
// real review is a few KiB, so only large ones ever wait. A client that
// announces a large body and sends little of it holds only what it sent,
// and only until maxBodyTime.
const (
	// maxBodyBytesInFlight is the budget of request body bytes that have
	// arrived and are not yet answered.
	maxBodyBytesInFlight = 32 << 20
	// bodyChunk is the most one read of a body takes from the connection
	// before its bytes are counted.
	bodyChunk = 32 << 10
	// maxBodyWait is how long a review waits, in all, for room in the
	// budget before it is refused with 429; the apiserver's timeout for the
	// webhook is 5 s.
	maxBodyWait = 2 * time.Second
	// maxBodyTime bounds the time from a request's headers to the end of
	// its body (a read deadline on the connection); a body not complete by
	// then is answered 408 and its connection closed. The apiserver writes
	// the body with the headers, and fails the review itself after the
	// webhooks' timeoutSeconds (5 in the manifests): a body still arriving
	// after 5 s belongs to a review nobody waits for. controller-runtime's
	// server sets no read timeout of its own, only one for the headers
	// (ReadHeaderTimeout 32 s, MaxHeaderBytes 1 MiB, in its
	// internal/httpserver), which count against no budget.
	maxBodyTime = 5 * time.Second
)

// bodiesInFlight is shared by both endpoints.
var bodiesInFlight = semaphore.NewWeighted(maxBodyBytesInFlight)

// boundedResponse bounds what one review may take: its body's bytes count
// against the bodies budget as they arrive (budgetedBody), its body must
// be complete within bodyTime, and its response is buffered and, if it
// would be larger than maxResponseBytes, replaced by a short error review.
// Only a request that no apiserver sends can get there: controller-runtime
// copies the request UID into the response, and nothing else in it grows
// with the request.
type boundedResponse struct {
	next     http.Handler
	bodies   *semaphore.Weighted
	wait     time.Duration
	bodyTime time.Duration
}

func (b boundedResponse) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body *budgetedBody
	if r.Body != nil && r.Body != http.NoBody { // controller-runtime answers an empty body
		rc := http.NewResponseController(w)
		// Unsupported only by writers that are not the server's (a test's
		// ResponseRecorder); controller-runtime's metrics wrapper unwraps.
		_ = rc.SetReadDeadline(time.Now().Add(b.bodyTime))
		body = &budgetedBody{body: r.Body, bodies: b.bodies, ctx: r.Context(), waitUntil: time.Now().Add(b.wait), rc: rc}
		defer body.release()
		r = r.WithContext(r.Context()) // a copy, whose Body is ours
		r.Body = body
	}

	bw := &boundedWriter{header: http.Header{}, code: http.StatusOK}
	b.next.ServeHTTP(bw, r)
	switch {
	case body != nil && body.busy:
		w.Header().Set("Retry-After", "1")
		http.Error(w, fmt.Sprintf("clusterip-policy is busy: more than %d bytes of reviews in flight for %s; retry", maxBodyBytesInFlight, b.wait), http.StatusTooManyRequests)
		return
	case body != nil && body.late:
		w.Header().Set("Connection", "close")
		http.Error(w, fmt.Sprintf("clusterip-policy: the request body was not complete within %s of its headers", b.bodyTime), http.StatusRequestTimeout)
		return
	}
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

// errBusy ends a body that found no room in the budget in time.
var errBusy = errors.New("no room in the body budget")

// budgetedBody counts the bytes of a request body against the bodies
// budget as they arrive, and gives them back with release. It notes why a
// read failed: no room in time (busy), or the read deadline (late).
type budgetedBody struct {
	body      io.ReadCloser
	bodies    *semaphore.Weighted
	ctx       context.Context
	waitUntil time.Time
	rc        *http.ResponseController
	held      int64
	busy      bool
	late      bool
}

func (b *budgetedBody) Read(p []byte) (int, error) {
	if b.busy {
		return 0, errBusy
	}
	if len(p) > bodyChunk {
		p = p[:bodyChunk]
	}
	n, err := b.body.Read(p)
	if n > 0 && !b.reserve(int64(n)) {
		b.busy = true
		return 0, errBusy
	}
	switch {
	case err == io.EOF:
		// Complete: the connection is the server's again (keep-alive).
		_ = b.rc.SetReadDeadline(time.Time{})
	case err != nil && errors.Is(err, os.ErrDeadlineExceeded):
		b.late = true
	}
	return n, err
}

// reserve takes n bytes of the budget, waiting until waitUntil at most.
func (b *budgetedBody) reserve(n int64) bool {
	// TryAcquire first: it succeeds exactly when Acquire would without
	// waiting (room, and no one queued before us), and costs no timer.
	if !b.bodies.TryAcquire(n) {
		ctx, cancel := context.WithDeadline(b.ctx, b.waitUntil)
		err := b.bodies.Acquire(ctx, n)
		cancel()
		if err != nil {
			return false
		}
	}
	b.held += n
	return true
}

func (b *budgetedBody) Close() error { return b.body.Close() }

// release gives back what the body took of the budget.
func (b *budgetedBody) release() {
	if b.held > 0 {
		b.bodies.Release(b.held)
		b.held = 0
	}
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
