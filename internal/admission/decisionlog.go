package admission

import (
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/zapr"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"clusterip-policy/pkg/policy"
)

// decisionLine is one admission decision in the audit log. Its keys, defined
// by fields alone, are public API: README.md documents them
// ("Reading the audit log") and the e2e harness parses them
// (framework.Decision); TestDecisionLogKeysAreTheDocumentedOnes holds both to
// fields. Change them on purpose.
type decisionLine struct {
	UID              string
	Stage            policy.Stage
	Operation        string
	Namespace, Name  string
	User             string
	DryRun           bool
	RequestedIPs     []string
	FinalIPs         []string
	Decision         policy.Outcome
	Rules            []policy.RuleID
	Violations       []policy.Violation
	Mutations        []string
	Patch            []policy.PatchOp
	Warnings         []string
	Skipped          string
	Message          string
	PolicyGeneration uint64
	PolicyDigest     string
	ViewGeneration   uint64
	ViewStale        time.Duration
	Took             time.Duration
}

// newDecisionLine builds the line for one request from how it was answered:
// the request's own fields, then the decision (or what stood in for one),
// then what it was decided against. A decision is already bounded
// (policy.Decision's lists and messages are capped); fields caps the
// line again on its own, since a line is written for every request.
func newDecisionLine(stage policy.Stage, req admission.Request, a answered, took time.Duration) decisionLine {
	l := decisionLine{
		UID: string(req.UID), Stage: stage, Operation: string(req.Operation),
		Namespace: req.Namespace, Name: req.Name, User: req.UserInfo.Username,
		DryRun: isDryRun(req), Took: took,
	}
	if a.name != "" {
		l.Name = a.name
	}
	if d := a.decision; d != nil {
		l.RequestedIPs, l.FinalIPs = d.RequestedIPs, d.FinalIPs
		l.Decision, l.Rules, l.Violations = d.Outcome, d.Rules(), d.Violations
		l.Mutations, l.Patch, l.Warnings = d.Mutations, d.Patch, d.Warnings
		l.Skipped, l.Message = d.Skipped, d.Message
	} else {
		l.Decision, l.Skipped, l.Message = a.outcome, a.skipped, a.message
	}
	if a.state.Snap != nil {
		l.ViewGeneration = a.state.Snap.Generation
	}
	if p := a.state.Policy; p != nil {
		l.PolicyGeneration, l.PolicyDigest = p.Generation, p.Policy.Digest
	}
	l.ViewStale = a.state.Stale
	return l
}

func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// capped returns at most policy.MaxListed items of s.
func capped[T any](s []T) []T {
	return s[:min(len(s), policy.MaxListed)]
}

// fields are the line's keys and values, in order: the one definition of
// the decision log keys. They are zap fields, written by writeDecisionLine straight into
// zap's encoder (no boxing into []any, no encoding/json).
func (l decisionLine) fields() []zap.Field { return l.appendFields(nil) }

// appendFields appends the fields to dst (writeDecisionLine reuses one slice).
func (l decisionLine) appendFields(dst []zap.Field) []zap.Field {
	patch := capped(l.Patch)
	violations := slices.Clone(capped(l.Violations)) // edited below; the decision keeps its own
	for i := range violations {
		v := &violations[i]
		v.Field, v.IP, v.Message = policy.Echo(v.Field), policy.Echo(v.IP), policy.Clip(v.Message, policy.MaxMessageBytes)
	}
	warnings := policy.ClipList(l.Warnings, policy.MaxListed)
	for i, w := range capped(l.Warnings) {
		warnings[i] = policy.Clip(w, policy.MaxMessageBytes)
	}
	return append(dst,
		zap.String("uid", policy.Echo(l.UID)),
		zap.String("stage", string(l.Stage)),
		zap.String("operation", policy.Echo(l.Operation)),
		zap.String("namespace", policy.Echo(l.Namespace)),
		zap.String("name", policy.Echo(l.Name)),
		zap.String("user", policy.Echo(l.User)),
		zap.Bool("dryRun", l.DryRun),
		zap.Array("requestedIPs", decisionStrings[string](orEmpty(policy.ClipList(l.RequestedIPs, policy.MaxListed)))),
		zap.Array("finalIPs", decisionStrings[string](orEmpty(policy.ClipList(l.FinalIPs, policy.MaxListed)))),
		zap.String("decision", string(l.Decision)),
		zap.Array("rules", decisionStrings[policy.RuleID](orEmpty(capped(l.Rules)))),
		zap.Array("violations", decisionViolations(orEmpty(violations))),
		zap.Array("mutations", decisionStrings[string](orEmpty(capped(l.Mutations)))),
		zap.Array("patch", decisionPatch(orEmpty(patch))),
		zap.Array("warnings", decisionStrings[string](orEmpty(warnings))),
		zap.String("skipped", policy.Clip(l.Skipped, policy.MaxMessageBytes)),
		zap.String("message", policy.Clip(l.Message, policy.MaxMessageBytes)),
		zap.Uint64("policyGeneration", l.PolicyGeneration),
		zap.String("policyDigest", l.PolicyDigest),
		zap.Uint64("viewGeneration", l.ViewGeneration),
		zap.Float64("viewStaleSeconds", l.ViewStale.Seconds()),
		zap.Float64("durationSeconds", l.Took.Seconds()),
	)
}

var decisionFieldsPool = sync.Pool{New: func() any { return new([]zap.Field) }}

// decisionMessage is the msg of every decision log line.
const decisionMessage = "admission decision"

// writeDecisionLine writes the line. The webhook's loggers are zap's (newLogger),
// so the fields go to zap directly; any other logr sink gets them as keys
// and values.
func writeDecisionLine(log logr.Logger, l decisionLine) {
	if u, ok := log.GetSink().(zapr.Underlier); ok {
		// zap has encoded and written the line when Info returns, so the
		// slice of fields (1.4 KB) is reused by the next line.
		p := decisionFieldsPool.Get().(*[]zap.Field)
		*p = l.appendFields((*p)[:0])
		u.GetUnderlying().Info(decisionMessage, *p...)
		clear(*p) // drop the references to this line's strings
		decisionFieldsPool.Put(p)
		return
	}
	fields := l.fields()
	kv := make([]any, 0, 2*len(fields))
	for _, f := range fields {
		enc := zapcore.NewMapObjectEncoder()
		f.AddTo(enc)
		kv = append(kv, f.Key, enc.Fields[f.Key])
	}
	log.Info(decisionMessage, kv...)
}
