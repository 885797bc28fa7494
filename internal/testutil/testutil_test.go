package testutil

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// The helper is run in a child test process so that its Fatal and Skip can
// be seen from outside.
func TestMissingToolSkipsOutsideCIAndFailsInCI(t *testing.T) {
	if os.Getenv("TESTUTIL_CHILD") == "1" {
		MissingTool(t, "no helm at %s", "/nowhere/helm")
		return
	}
	for _, tc := range []struct {
		ci       string
		wantFail bool
		wantText string
	}{
		{ci: "", wantFail: false, wantText: "--- SKIP"},
		{ci: "false", wantFail: false, wantText: "--- SKIP"},
		{ci: "true", wantFail: true, wantText: "no helm at /nowhere/helm (CI=true: a missing tool fails instead of skipping)"},
	} {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestMissingToolSkipsOutsideCIAndFailsInCI$", "-test.v")
		cmd.Env = append(os.Environ(), "TESTUTIL_CHILD=1", "CI="+tc.ci)
		out, err := cmd.CombinedOutput()
		if failed := err != nil; failed != tc.wantFail {
			t.Errorf("CI=%q: failed=%v, want %v; output:\n%s", tc.ci, failed, tc.wantFail, out)
		}
		if !strings.Contains(string(out), tc.wantText) {
			t.Errorf("CI=%q: output lacks %q:\n%s", tc.ci, tc.wantText, out)
		}
	}
}
