//go:build e2e

package e2e

import (
	"strings"
	"testing"

	"clusterip-policy/test/e2e/framework"
	"clusterip-policy/test/fixtures"
)

// With reserved-for-other at warn, a static request for the DNS address is
// admitted with one warning from the webhook that is true for it: no second
// warning from the validating stage about a denial and a release that never
// happened.
func TestAWarnedStaticRequestIsWarnedOnce(t *testing.T) {
	c := own(t, framework.Options{
		Policy:   fixtures.Policy(strings.Replace(sharedSpec, "  default: deny\n", "  default: deny\n  rules:\n    reserved-for-other: warn\n", 1)),
		Webhooks: 1,
	})
	ctx := testContext(t, 60e9)
	ns := namespace(t, c, "warn-once")
	_, stderr, err := c.Kubectl(ctx, "", "-n", ns, "create", "service", "clusterip", "early-bird", "--tcp=53", "--clusterip=10.96.0.10")
	if err != nil {
		t.Fatalf("with reserved-for-other at warn the create should be admitted: %v", err)
	}
	// Once the leader has written the backstop (a moment after start), its
	// warn binding warns too, in the apiserver's words and its own: true,
	// and not the webhook's stage. The webhook's warnings are counted.
	const backstopWarn = "Warning: Validation failed for ValidatingAdmissionPolicy 'clusterip-policy-backstop-services-warn'"
	var warnings []string
	for _, l := range strings.Split(stderr, "\n") {
		switch {
		case strings.HasPrefix(l, backstopWarn):
			if !strings.Contains(l, `ClusterIP "10.96.0.10" is reserved for Service kube-system/kube-dns`) {
				t.Errorf("the backstop's warning does not say what the webhook's says: %s", l)
			}
		case strings.HasPrefix(l, "Warning: "):
			warnings = append(warnings, l)
		}
	}
	want := `Warning: ClusterIP "10.96.0.10" is reserved for Service kube-system/kube-dns (cluster DNS), which cannot get it while this Service holds it; allowed only because the policy sets reserved-for-other to warn`
	if len(warnings) != 1 || warnings[0] != want {
		t.Fatalf("kubectl printed %d warnings, want exactly\n%s\ngot:\n%s", len(warnings), want, strings.Join(warnings, "\n"))
	}
}
