package admission

import (
	"bytes"
	"encoding/json"
	"errors"

	"clusterip-policy/internal/logging"

	"testing"

	"github.com/go-logr/logr"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// The deferred request logger writes what controller-runtime's own would:
// the same message, the same keys and values, at the same levels.
func TestRequestLoggerWritesWhatControllerRuntimesWould(t *testing.T) {
	req := &admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID: "7c5c394b", Namespace: "kube-system", Name: "kube-dns",
		Resource: metav1.GroupVersionResource{Version: "v1", Resource: "services"},
		UserInfo: authenticationv1.UserInfo{Username: "kubernetes-admin"},
	}}
	line := func(construct func(base logr.Logger, req *admission.Request) logr.Logger) map[string]any {
		var buf bytes.Buffer
		base := logging.New(&buf).WithName("admission")
		log := construct(base, req).WithValues("extra", 1).WithName("sub")
		log.V(5).Info("received request") // below the level: nothing
		log.Error(errors.New("boom"), "unable to encode", "k", "v")
		var out map[string]any
		if err := json.Unmarshal(buf.Bytes(), &out); err != nil {
			t.Fatalf("%v: %q", err, buf.String())
		}
		delete(out, "ts")
		delete(out, "stacktrace")
		return out
	}
	got, want := line(requestLogConstructor), line(admission.DefaultLogConstructor)
	gotJSON, _ := json.Marshal(got)
	wantJSON, _ := json.Marshal(want)
	if !bytes.Equal(gotJSON, wantJSON) {
		t.Fatalf("deferred:\n %s\ncontroller-runtime:\n %s", gotJSON, wantJSON)
	}
	if want["requestID"] != "7c5c394b" || want["user"] != "kubernetes-admin" {
		t.Fatalf("the line lacks the request's values: %s", wantJSON)
	}
}
