package cli

import (
	"strings"
	"testing"

	"clusterip-policy/internal/exitcode"
)

// Each flag unregister cannot use is refused before it reaches a cluster,
// with the value and the fix.
func TestUnregisterRefusesBadFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"unregister", "x.yaml"}, `unexpected argument "x.yaml"`},
		{[]string{"unregister", "--timeout=0s"}, "--timeout 0s: use 1s to 10m"},
		{[]string{"unregister", "--settle=2m"}, "--settle 2m0s: use 0 to 1m"},
		{[]string{"unregister", "--settle=-1s"}, "--settle -1s: use 0 to 1m"},
		{[]string{"unregister", "--mutating-webhook-configuration="}, "must name the configurations"},
		{[]string{"unregister", "-n", "kube-system"}, `--namespace "kube-system": webhook configurations are cluster-scoped`},
	} {
		code, out, stderr := runCLI("", c.args...)
		if code != exitcode.BadData || out != "" || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2 and %q", c.args, code, out, stderr, c.want)
		}
	}
}
