package manifests

import (
	"strings"
	"testing"
)

// unregisterOnUninstall: the pre-delete Job deletes the webhook
// configurations; cleanUpOnUninstall: the post-delete Job deletes the holds,
// the Lease and the leader's Secrets. helm template (GitOps) must never render it: `kubectl
// apply` of a rendered Job would run it at once and take the webhook out of
// the path. It is rendered only where lookup reads the cluster (helm
// install, helm upgrade; the real node's lifecycle test runs it).
func TestChartUninstallHookIsNeverRenderedByTemplate(t *testing.T) {
	for _, args := range [][]string{nil, {"--is-upgrade"}, {"--set", "unregisterOnUninstall=true,cleanUpOnUninstall=true"}} {
		out, err := helmTemplate(t, args...)
		if err != nil {
			t.Fatalf("helm template %s: %v", strings.Join(args, " "), err)
		}
		if strings.Contains(string(out), "clusterip-policy-unregister") || strings.Contains(string(out), `"unregister"`) ||
			strings.Contains(string(out), "clusterip-policy-cleanup") || strings.Contains(string(out), `"cleanup"`) {
			t.Errorf("helm template %s renders the uninstall hook:\n%s", strings.Join(args, " "), out)
		}
	}
	if _, err := helmTemplate(t, "--set", "unregisterOnUninstall=yes"); err == nil || !strings.Contains(err.Error(), "unregisterOnUninstall") {
		t.Errorf("unregisterOnUninstall=yes (a string) was not refused by the schema: %v", err)
	}
	if _, err := helmTemplate(t, "--set", "cleanUpOnUninstall=yes"); err == nil || !strings.Contains(err.Error(), "cleanUpOnUninstall") {
		t.Errorf("cleanUpOnUninstall=yes (a string) was not refused by the schema: %v", err)
	}
}
