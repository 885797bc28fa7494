package main

import (
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

func (l auditLine) keysAndValues() []any {
	return []any{
		"uid", l.UID,
		"stage", l.Stage,
		"operation", l.Operation,
		"namespace", l.Namespace,
		"name", l.Name,
		"user", l.User,
		"dryRun", l.DryRun,
		"requestedIPs", orEmpty(l.RequestedIPs),
		"finalIPs", orEmpty(l.FinalIPs),
		"decision", l.Decision,
		"rules", orEmpty(l.Rules),
		"violations", orEmpty(l.Violations),
		"mutations", orEmpty(l.Mutations),
		"patch", orEmpty(l.Patch),
		"warnings", orEmpty(l.Warnings),
		"skipped", l.Skipped,
		"message", l.Message,
		"policyGeneration", l.PolicyGeneration,
		"policyDigest", l.PolicyDigest,
		"viewGeneration", l.ViewGeneration,
		"viewStaleSeconds", l.ViewStale.Seconds(),
		"durationSeconds", l.Took.Seconds(),
	}
}
