package admission

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"clusterip-policy/internal/names"
)

// withProbe sets the reachability probe's annotation to id.
func withProbe(id string) func(map[string]any) {
	return func(obj map[string]any) {
		md := obj["metadata"].(map[string]any)
		md["annotations"] = map[string]any{names.ProbeAnnotation: id, "other": "x"}
	}
}

func notDryRun(body []byte) []byte {
	return []byte(strings.Replace(string(body), `"dryRun":true`, `"dryRun":false`, 1))
}

func TestTheProbeGetsItsWarningAndNothingElseChanges(t *testing.T) {
	const id = "0123456789abcdef"
	headless := withClusterIP("None")
	tests := []struct {
		name      string
		fixture   string
		tweaks    []func(map[string]any)
		mutate    bool
		realRun   bool // the request is not a dry run
		allowed   bool
		warning   bool   // the probe's warning is in the answer
		message   string // substring of a denial
		unchanged bool   // the answer has no warning at all
	}{
		{name: "a dry-run headless create with the annotation is answered at the mutating stage", fixture: "mutate-005-create-wh-dryrun.json", tweaks: []func(map[string]any){headless, withProbe(id)}, mutate: true, allowed: true, warning: true},
		{name: "and at the validating stage", fixture: "validate-006-create-wh-dryrun.json", tweaks: []func(map[string]any){headless, withProbe(id)}, allowed: true, warning: true},
		{name: "a real create with the annotation gets no warning", fixture: "mutate-005-create-wh-dryrun.json", tweaks: []func(map[string]any){headless, withProbe(id)}, mutate: true, realRun: true, allowed: true, unchanged: true},
		{name: "a dry run that is not headless gets no warning", fixture: "mutate-005-create-wh-dryrun.json", tweaks: []func(map[string]any){withProbe(id)}, mutate: true, allowed: true, unchanged: true},
		{name: "a forged annotation does not pass a dry run the policy denies", fixture: "mutate-005-create-wh-dryrun.json", tweaks: []func(map[string]any){withClusterIP("10.96.200.5"), withProbe(id)}, mutate: true, message: "lies in the dynamic band"},
		{name: "a forged annotation does not pass a real create the policy denies", fixture: "mutate-003-create-wh-static.json", tweaks: []func(map[string]any){withClusterIP("10.96.0.10"), withProbe(id)}, mutate: true, realRun: true, message: "is reserved for Service kube-system/kube-dns"},
		{name: "an id with capitals is not a probe's", fixture: "mutate-005-create-wh-dryrun.json", tweaks: []func(map[string]any){headless, withProbe("ABC")}, mutate: true, allowed: true, unchanged: true},
		{name: "an id longer than 32 bytes is not a probe's, and is not echoed", fixture: "mutate-005-create-wh-dryrun.json", tweaks: []func(map[string]any){headless, withProbe(strings.Repeat("a", 100000))}, mutate: true, allowed: true, unchanged: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newTestReviewer(t, testPolicy, true)
			h := r.recorded(validatingHandler{r.reviewer})
			stage := "validate"
			if tt.mutate {
				h, stage = r.recorded(mutatingHandler{r.reviewer}), "mutate"
			}
			body := loadReview(t, tt.fixture, tt.tweaks...)
			if tt.realRun {
				body = notDryRun(body)
			}
			resp := post(t, h, body)
			if resp.Allowed != tt.allowed {
				t.Fatalf("allowed = %v, want %v: %+v", resp.Allowed, tt.allowed, resp.Result)
			}
			if tt.message != "" && !strings.Contains(resp.Result.Message, tt.message) {
				t.Fatalf("message %q does not contain %q", resp.Result.Message, tt.message)
			}
			if len(resp.Patch) != 0 {
				t.Fatalf("unexpected patch %s", resp.Patch)
			}
			want := names.ProbeWarning(stage, id)
			if got := slices.Contains(resp.Warnings, want); got != tt.warning {
				t.Fatalf("warnings %q: has %q = %v, want %v", resp.Warnings, want, got, tt.warning)
			}
			if tt.warning && len(resp.Warnings) != 1 {
				t.Fatalf("warnings %q, want only the probe's", resp.Warnings)
			}
			if tt.unchanged && len(resp.Warnings) != 0 {
				t.Fatalf("warnings %q, want none", resp.Warnings)
			}
		})
	}
}

func TestAnUnreadyReplicaDoesNotAnswerTheProbe(t *testing.T) {
	r := newTestReviewer(t, testPolicy, false)
	resp := post(t, r.recorded(mutatingHandler{r.reviewer}), loadReview(t, "mutate-005-create-wh-dryrun.json", withClusterIP("None"), withProbe("abc")))
	if resp.Allowed || resp.Result.Code != http.StatusServiceUnavailable || len(resp.Warnings) != 0 {
		t.Fatalf("want the not-ready denial and no warning, got %+v, warnings %q", resp.Result, resp.Warnings)
	}
}

func TestProbeIDs(t *testing.T) {
	for id, want := range map[string]bool{"": false, "a": true, "0123456789abcdef0123456789abcdef": true, "0123456789abcdef0123456789abcdef0": false, "a-b": false, "A": false, "é": false} {
		if got := names.ValidProbeID(id); got != want {
			t.Errorf("ValidProbeID(%q) = %v, want %v", id, got, want)
		}
	}
}
