// Package exitcode holds the exit codes of every clusterip-policy command:
// public API (scripts and CI read them), one definition for main, the
// offline commands and the server.
package exitcode

import (
	"errors"
	"fmt"
)

const (
	// OK: the command did its job, and nothing was denied or found.
	OK = 0
	// Denied: review denied some Service, audit found some Service that
	// breaks the policy, or serve stopped on an error.
	Denied = 1
	// BadData: a flag, an argument, an input or the policy cannot be used.
	BadData = 2
	// Unreadable: audit could not read the cluster (unreachable, timed
	// out, or not allowed to list what it needs); apply-crd could not
	// read or apply the CRD.
	Unreadable = 3
)

// Err carries code out of a command run by cobra, whose RunE returns an
// error: nil for OK. The command has already said why on stderr, so the
// error prints nothing more; main exits with Of(err).
func Err(code int) error {
	if code == OK {
		return nil
	}
	return Error(code)
}

// Of is the exit code of a command's error: OK for nil, the code Err
// carried, and BadData for any other error (a flag, an argument or a
// command that cobra refused before the command ran).
func Of(err error) int {
	var c Error
	switch {
	case err == nil:
		return OK
	case errors.As(err, &c):
		return int(c)
	}
	return BadData
}

// Error is an exit code as an error (Err): the command that returned it
// has said why already.
type Error int

func (c Error) Error() string { return fmt.Sprintf("exit status %d", int(c)) }
