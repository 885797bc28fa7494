package admission

import (
	"go.uber.org/zap/zapcore"

	"clusterip-policy/pkg/policy"
)

// The decision log line's lists, as zap encodes them without reflection. zap
// writes a value it has no encoder for through encoding/json (a buffer, a
// reflect walk and allocations per field, for every request); these types
// write the same JSON straight into zap's encoder: the same keys, in the
// same order, the same omitempty. TestDecisionLineJSONIsWhatEncodingJSONWrites
// holds them to encoding/json's output.

// decisionStrings is a list of strings or of a string type (rule IDs).
type decisionStrings[T ~string] []T

func (l decisionStrings[T]) MarshalLogArray(enc zapcore.ArrayEncoder) error {
	for _, s := range l {
		enc.AppendString(string(s))
	}
	return nil
}

// decisionViolations encodes policy.Violation as its json tags say.
type decisionViolations []policy.Violation

func (l decisionViolations) MarshalLogArray(enc zapcore.ArrayEncoder) error {
	for _, v := range l {
		if err := enc.AppendObject(decisionViolation(v)); err != nil {
			return err
		}
	}
	return nil
}

type decisionViolation policy.Violation

func (v decisionViolation) MarshalLogObject(enc zapcore.ObjectEncoder) error {
	enc.AddString("rule", string(v.Rule))
	enc.AddString("action", string(v.Action))
	enc.AddString("field", v.Field)
	enc.AddString("ip", v.IP)
	enc.AddString("message", v.Message)
	return nil
}

// decisionPatch encodes policy.PatchOp as its json tags say (value omitted
// when nil).
type decisionPatch []policy.PatchOp

func (l decisionPatch) MarshalLogArray(enc zapcore.ArrayEncoder) error {
	for _, op := range l {
		if err := enc.AppendObject(decisionPatchOp(op)); err != nil {
			return err
		}
	}
	return nil
}

type decisionPatchOp policy.PatchOp

func (op decisionPatchOp) MarshalLogObject(enc zapcore.ObjectEncoder) error {
	enc.AddString("op", op.Op)
	enc.AddString("path", op.Path)
	switch v := op.Value.(type) {
	case nil:
	case string:
		enc.AddString("value", v)
	case []string:
		return enc.AddArray("value", decisionStrings[string](v))
	default: // no decision patches anything else today; encoding/json will do
		return enc.AddReflected("value", v)
	}
	return nil
}
