package webhookconfig

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// The two names are one value, bound by their own flags, defaulting to the
// manifests' configurations, and refused empty naming both flags.
func TestNamesAreBoundByTheirFlagsAndRefusedEmpty(t *testing.T) {
	parse := func(args ...string) Names {
		t.Helper()
		var n Names
		fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
		n.AddFlags(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := parse(); n != (Names{Mutating: "clusterip-policy", Validating: "clusterip-policy"}) || n.Validate() != nil {
		t.Errorf("the defaults are %+v (Validate: %v), want manifests/base's clusterip-policy twice", n, n.Validate())
	}
	if n := parse("--mutating-webhook-configuration=m", "--validating-webhook-configuration=v"); n != (Names{Mutating: "m", Validating: "v"}) {
		t.Errorf("the flags bound %+v, want m and v", n)
	}
	for _, args := range [][]string{{"--mutating-webhook-configuration="}, {"--validating-webhook-configuration="}} {
		err := parse(args...).Validate()
		if err == nil || !strings.Contains(err.Error(), "--mutating-webhook-configuration and --validating-webhook-configuration must name the configurations") {
			t.Errorf("%v: Validate() = %v, want the refusal naming both flags", args, err)
		}
	}
}
