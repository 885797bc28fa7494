package admission

import (
	"go.uber.org/zap/zapcore"

	"clusterip-policy/pkg/policy"
)

// The audit line's lists, as zap encodes them without reflection. zap
// writes a value it has no encoder for through encoding/json (a buffer, a
// reflect walk and allocations per field, for every request); these types
// write the same JSON straight into zap's encoder: the same keys, in the
// same order, the same omitempty. TestAuditLineJSONIsWhatEncodingJSONWrites
// holds them to encoding/json's output.

// auditStrings is a list of strings or of a string type (rule IDs).
type auditStrings[T ~string] []T

func (l auditStrings[T]) MarshalLogArray(enc zapcore.ArrayEncoder) error {
	for _, s := range l {
		enc.AppendString(string(s))
	}
	return nil
}

// auditViolations encodes policy.Violation as its json tags say.
type auditViolations []policy.Violation

func (l auditViolations) MarshalLogArray(enc zapcore.ArrayEncoder) error {
	for _, v := range l {
		if err := enc.AppendObject(auditViolation(v)); err != nil {
			return err
		}
	}
	return nil
}

type auditViolation policy.Violation

func (v auditViolation) MarshalLogObject(enc zapcore.ObjectEncoder) error {
	enc.AddString("rule", string(v.Rule))
	enc.AddString("action", string(v.Action))
	enc.AddString("field", v.Field)
	enc.AddString("ip", v.IP)
	enc.AddString("message", v.Message)
	return nil
}

// auditPatch encodes policy.PatchOp as its json tags say (value omitted
// when nil).
type auditPatch []policy.PatchOp

func (l auditPatch) MarshalLogArray(enc zapcore.ArrayEncoder) error {
	for _, op := range l {
		if err := enc.AppendObject(auditPatchOp(op)); err != nil {
			return err
		}
	}
	return nil
}

type auditPatchOp policy.PatchOp

func (op auditPatchOp) MarshalLogObject(enc zapcore.ObjectEncoder) error {
	enc.AddString("op", op.Op)
	enc.AddString("path", op.Path)
	switch v := op.Value.(type) {
	case nil:
	case string:
		enc.AddString("value", v)
	case []string:
		return enc.AddArray("value", auditStrings[string](v))
	default: // no decision patches anything else today; encoding/json will do
		return enc.AddReflected("value", v)
	}
	return nil
}
