package main

import (
	"slices"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"clusterip-policy/pkg/policy"
)

// auditLine is one admission decision in the audit log. Its keys, defined
// by keysAndValues alone, are public API: README.md documents them
// ("Reading the audit log") and the e2e harness parses them
// (framework.Decision); TestAuditKeysAreTheDocumentedOnes holds both to
// keysAndValues. Change them on purpose.
type auditLine struct {
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

// newAuditLine builds the line for one request from how it was answered:
// the request's own fields, then the decision (or what stood in for one),
// then what it was decided against. A decision is already bounded
// (policy.Decision's lists and messages are capped); keysAndValues caps the
// line again on its own, since a line is written for every request.
func newAuditLine(stage policy.Stage, req admission.Request, a answered, took time.Duration) auditLine {
	l := auditLine{
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
	if a.state.snap != nil {
		l.ViewGeneration = a.state.snap.Generation
	}
	if p := a.state.policy; p != nil {
		l.PolicyGeneration, l.PolicyDigest = p.generation, p.policy.Digest
	}
	l.ViewStale = a.state.stale
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

func (l auditLine) keysAndValues() []any {
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
	return []any{
		"uid", policy.Echo(l.UID),
		"stage", string(l.Stage),
		"operation", policy.Echo(l.Operation),
		"namespace", policy.Echo(l.Namespace),
		"name", policy.Echo(l.Name),
		"user", policy.Echo(l.User),
		"dryRun", l.DryRun,
		"requestedIPs", auditStrings[string](orEmpty(policy.ClipList(l.RequestedIPs, policy.MaxListed))),
		"finalIPs", auditStrings[string](orEmpty(policy.ClipList(l.FinalIPs, policy.MaxListed))),
		"decision", string(l.Decision),
		"rules", auditStrings[policy.RuleID](orEmpty(capped(l.Rules))),
		"violations", auditViolations(orEmpty(violations)),
		"mutations", auditStrings[string](orEmpty(capped(l.Mutations))),
		"patch", auditPatch(orEmpty(patch)),
		"warnings", auditStrings[string](orEmpty(warnings)),
		"skipped", policy.Clip(l.Skipped, policy.MaxMessageBytes),
		"message", policy.Clip(l.Message, policy.MaxMessageBytes),
		"policyGeneration", l.PolicyGeneration,
		"policyDigest", l.PolicyDigest,
		"viewGeneration", l.ViewGeneration,
		"viewStaleSeconds", l.ViewStale.Seconds(),
		"durationSeconds", l.Took.Seconds(),
	}
}
