package admission

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"clusterip-policy/internal/logging"

	"github.com/go-logr/logr/funcr"

	"clusterip-policy/pkg/policy"
)

// The decision log line's lists are written by hand (auditencode.go) instead of
// through encoding/json; a reader must see the same JSON values.
func TestDecisionLineJSONIsWhatEncodingJSONWrites(t *testing.T) {
	odd := "a\"b\\c<d>&e\u2028f\tg\x01h é"
	line := decisionLine{
		Stage: policy.StageMutate, Decision: policy.Denied,
		RequestedIPs: []string{"10.96.0.10", odd}, FinalIPs: []string{"fd00::1"},
		Rules: []policy.RuleID{policy.RuleReservedForOther, "static-ip-in-dynamic-band"},
		Violations: []policy.Violation{
			{Rule: policy.RuleReservedForOther, Action: "deny", Field: "spec.clusterIP", IP: "10.96.0.10", Message: odd},
			{Rule: "invalid-ip", Action: "warn"},
		},
		Mutations: []string{"assigned 10.96.0.10"},
		Patch: []policy.PatchOp{
			{Op: "add", Path: "/spec/clusterIP", Value: "10.96.0.10"},
			{Op: "add", Path: "/spec/clusterIPs", Value: []string{"10.96.0.10", odd}},
			{Op: "remove", Path: "/spec/x"},
			{Op: "add", Path: "/spec/y", Value: map[string]int{"n": 1}},
		},
		Warnings: []string{odd},
	}
	var buf bytes.Buffer
	writeDecisionLine(logging.New(&buf), line)
	var got map[string]any
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatalf("%v: %s", err, buf.Bytes())
	}
	want := map[string]any{
		"stage": line.Stage, "decision": line.Decision,
		"requestedIPs": line.RequestedIPs, "finalIPs": line.FinalIPs, "rules": line.Rules,
		"violations": line.Violations, "mutations": line.Mutations, "patch": line.Patch, "warnings": line.Warnings,
	}
	for key, v := range want {
		raw, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var w any
		if err := json.Unmarshal(raw, &w); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got[key], w) {
			t.Errorf("%s: the decision log line has\n %#v\nencoding/json writes\n %#v", key, got[key], w)
		}
	}

	// Empty lists are [] (never null), as before.
	buf.Reset()
	writeDecisionLine(logging.New(&buf), decisionLine{})
	var empty map[string]any
	if err := json.Unmarshal(buf.Bytes(), &empty); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"requestedIPs", "finalIPs", "rules", "violations", "mutations", "patch", "warnings"} {
		if l, ok := empty[key].([]any); !ok || len(l) != 0 {
			t.Errorf("%s of an empty line: %#v, want []", key, empty[key])
		}
	}
}

// A logger that is not zap's gets the same keys and values.
func TestAuditLineThroughAnotherLogrSink(t *testing.T) {
	line := decisionLine{
		UID: "u", Stage: policy.StageValidate, Decision: policy.Denied, DryRun: true, PolicyGeneration: 3, ViewStale: 1500 * time.Millisecond,
		RequestedIPs: []string{"10.96.0.10"},
		Violations:   []policy.Violation{{Rule: policy.RuleReservedForOther, Action: "deny", Field: "spec.clusterIP", IP: "10.96.0.10", Message: "m"}},
		Patch:        []policy.PatchOp{{Op: "add", Path: "/spec/clusterIPs", Value: []string{"10.96.0.10"}}},
	}
	var zapBuf bytes.Buffer
	writeDecisionLine(logging.New(&zapBuf), line)
	var viaZap map[string]any
	if err := json.Unmarshal(zapBuf.Bytes(), &viaZap); err != nil {
		t.Fatal(err)
	}
	var out string
	writeDecisionLine(funcr.NewJSON(func(obj string) { out = obj }, funcr.Options{}), line)
	var viaFuncr map[string]any
	if err := json.Unmarshal([]byte(out), &viaFuncr); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for _, f := range line.fields() {
		if !reflect.DeepEqual(viaFuncr[f.Key], viaZap[f.Key]) {
			t.Errorf("%s: funcr %#v, zap %#v", f.Key, viaFuncr[f.Key], viaZap[f.Key])
		}
	}
}
