package admission

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"golang.org/x/sync/semaphore"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// A review waits for room in the body budget, and is refused with 429
// when none frees up in time; once room is free it is answered.
func TestReviewsWaitForRoomInTheBodyBudget(t *testing.T) {
	r := newTestReviewer(t, testPolicy, true)
	budget := semaphore.NewWeighted(1 << 20)
	if !budget.TryAcquire(1 << 20) {
		t.Fatal("fresh budget is not free")
	}
	h := boundedResponse{next: &webhook.Admission{Handler: r.recorded(mutatingHandler{r.reviewer})}, bodies: budget, wait: 50 * time.Millisecond, bodyTime: maxBodyTime}
	body := loadReview(t, "mutate-003-create-wh-static.json")
	send := func() *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/review", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		h.ServeHTTP(rec, req)
		return rec
	}
	start := time.Now()
	rec := send()
	want := "clusterip-policy is busy: more than 33554432 bytes of reviews in flight for 50ms; retry\n"
	if rec.Code != http.StatusTooManyRequests || rec.Body.String() != want || rec.Header().Get("Retry-After") != "1" {
		t.Fatalf("HTTP %d %q, want 429 %q", rec.Code, rec.Body, want)
	}
	if waited := time.Since(start); waited < 50*time.Millisecond || waited > 2*time.Second {
		t.Fatalf("refused after %s, want after the 50ms wait", waited)
	}
	if r.decisionLogBuf.Len() != 0 {
		t.Fatalf("a refused review reached the handler: %s", r.decisionLogBuf)
	}
	budget.Release(1 << 20)
	if rec := send(); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"allowed":true`) {
		t.Fatalf("HTTP %d %.300s", rec.Code, rec.Body)
	}
	if !budget.TryAcquire(1 << 20) {
		t.Fatal("the answered review did not give its room back")
	}
}
