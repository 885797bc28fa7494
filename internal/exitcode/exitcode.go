// Package exitcode holds the exit codes of every clusterip-policy command:
// public API (scripts and CI read them), one definition for main, the
// offline commands and the server.
package exitcode

const (
	// OK: the command did its job, and nothing was denied or found.
	OK = 0
	// Denied: review denied some Service, audit found some Service that
	// breaks the policy, or serve stopped on an error.
	Denied = 1
	// BadData: a flag, an argument, an input or the policy cannot be used.
	BadData = 2
	// Unreadable: audit could not read the cluster (unreachable, timed
	// out, or not allowed to list what it needs).
	Unreadable = 3
)
