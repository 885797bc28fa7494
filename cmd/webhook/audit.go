package main

import (
	"slices"
	"time"

	"clusterip-policy/pkg/policy"
)

// auditLine is one admission decision in the audit log. Its keys are
// documented in README.md ("Reading the audit log"); change them on purpose.
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

// fill copies the decision into the line. A decision is already bounded
// (policy.Decision's lists and messages are capped); the caps here hold the
// line bounded on their own, since a line is written for every request.
func (l *auditLine) fill(d policy.Decision) {
	l.RequestedIPs, l.FinalIPs = d.RequestedIPs, d.FinalIPs
	l.Decision, l.Rules, l.Violations = d.Outcome, d.Rules(), d.Violations
	l.Mutations, l.Patch, l.Warnings = d.Mutations, d.Patch, d.Warnings
	l.Skipped, l.Message = d.Skipped, d.Message
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
		"stage", l.Stage,
		"operation", policy.Echo(l.Operation),
		"namespace", policy.Echo(l.Namespace),
		"name", policy.Echo(l.Name),
		"user", policy.Echo(l.User),
		"dryRun", l.DryRun,
		"requestedIPs", orEmpty(policy.ClipList(l.RequestedIPs, policy.MaxListed)),
		"finalIPs", orEmpty(policy.ClipList(l.FinalIPs, policy.MaxListed)),
		"decision", l.Decision,
		"rules", orEmpty(capped(l.Rules)),
		"violations", orEmpty(violations),
		"mutations", orEmpty(capped(l.Mutations)),
		"patch", orEmpty(patch),
		"warnings", orEmpty(warnings),
		"skipped", policy.Clip(l.Skipped, policy.MaxMessageBytes),
		"message", policy.Clip(l.Message, policy.MaxMessageBytes),
		"policyGeneration", l.PolicyGeneration,
		"policyDigest", l.PolicyDigest,
		"viewGeneration", l.ViewGeneration,
		"viewStaleSeconds", l.ViewStale.Seconds(),
		"durationSeconds", l.Took.Seconds(),
	}
}
