// Package testutil holds what the tests of several packages share; only
// _test.go files import it (depguard: testutil-in-tests-only).
package testutil

import (
	"fmt"
	"os"
	"testing"
)

// MissingTool ends a test that needs a tool the machine lacks (helm,
// helm-docs, controller-gen, promtool): it skips, saying how to get the
// tool, except under CI=true, where it fails. In CI a missing tool means
// .ci/run did not install it, and a skip would let the check it guards go
// unrun with the run still green.
func MissingTool(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s (CI=true: a missing tool fails instead of skipping)", msg)
	}
	t.Skip(msg)
}
