package matchconditions

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/version"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	"k8s.io/apiserver/pkg/cel/environment"

	"clusterip-policy/pkg/policy"
	"clusterip-policy/test/fixtures"
)

// oldestCompatibility is the lowest CEL compatibility version whose
// environment for new expressions compiles every condition the leader can
// write. A kube-apiserver of minor N compiles a new or changed expression
// with the environment of N-1 (its MinCompatibilityVersion,
// k8s.io/component-base compatibility), so the oldest apiserver that
// accepts the managed conditions is one minor above: 1.31.
// docs/matchconditions.md ("Kubernetes versions") says what an older one does.
var oldestCompatibility = version.MajorMinor(1, 30)

// TestTheOldestApiserverThatAcceptsTheConditions compiles the conditions of
// three policies (the fail-safe ones, a dual-stack policy whose allow-list
// is written as range tests and holes, and one with too many holes, written
// as exact prefixes) as the kube-apiserver validates a webhook configuration, with
// the CEL environment of every compatibility version from 1.27 to the one
// this module's k8s.io/apiserver defaults to. It fails if the oldest
// version that compiles them all moves, and pins the error an older
// apiserver returns: the IP and CIDR libraries (isIP, ip, cidr) came with
// the 1.30 environment.
func TestTheOldestApiserverThatAcceptsTheConditions(t *testing.T) {
	dual := policy.Env{Policy: fixtures.MustPolicy(t, policy.ParseDocument, testPolicy), Snapshot: snapshot(serviceCIDR("kubernetes", "10.96.0.0/16", "fd00:10:96::/108"))}
	// More holes than MaxHoles: the allow-list is written as exact prefixes.
	many := fixtures.MustPolicy(t, policy.ParseDocument, largestPolicy(MaxHoles+1))
	manyEnv := policy.Env{Policy: many, Snapshot: snapshot(serviceCIDR("kubernetes", "10.96.0.0/16", "fd00:10:96::/108"))}
	var exprs []string
	for _, c := range []Conditions{
		Compute(nil, dual.Ranges()),
		Compute(dual.Policy, dual.Ranges()),
		Compute(many, manyEnv.Ranges()),
	} {
		exprs = append(exprs, c.Mutating, c.Validating)
	}
	if c := Compute(many, manyEnv.Ranges()); len(c.Skip.Holes) != 0 || len(c.AllowList) == 0 {
		t.Fatalf("%d holes, %d prefixes: the third policy no longer makes the generator write exact prefixes", len(c.Skip.Holes), len(c.AllowList))
	}
	// Every CEL function the generator writes is among them, or this test
	// says nothing about it.
	all := strings.Join(exprs, "\n")
	for _, fn := range []string{"isIP(", "string(ip(", "cidr(", ".containsIP(", ".startsWith(", "size(", " in ["} {
		if !strings.Contains(all, fn) {
			t.Fatalf("no expression uses %s: add a policy that makes the generator write it", fn)
		}
	}

	newest := environment.DefaultCompatibilityVersion()
	var oldest *version.Version
	var firstErr string
	for minor := uint(27); minor <= newest.Minor(); minor++ {
		v := version.MajorMinor(1, minor)
		c := plugincel.NewCompiler(environment.MustBaseEnvSet(v))
		var errs []string
		for _, e := range exprs {
			res := c.CompileCELExpression(&matchconditions.MatchCondition{Name: Name, Expression: e},
				plugincel.OptionalVariableDeclarations{HasAuthorizer: true}, environment.NewExpressions)
			if res.Error != nil {
				errs = append(errs, res.Error.Error())
			}
		}
		switch {
		case len(errs) == 0 && oldest == nil:
			oldest = v
		case len(errs) > 0 && oldest != nil:
			t.Fatalf("compatibility %s refuses what %s accepts: %s", v, oldest, errs[0])
		case len(errs) > 0 && v.EqualTo(oldestCompatibility.SubtractMinor(1)):
			firstErr = errs[0]
		}
		t.Logf("CEL environment %s (a kube-apiserver %s): %d of %d expressions refused", v, v.AddMinor(1), len(errs), len(exprs))
	}
	if oldest == nil || !oldest.EqualTo(oldestCompatibility) {
		t.Fatalf("the oldest CEL environment that compiles every condition is %v, want %s: update oldestCompatibility, the README's and Chart.yaml's claims if they rest on it, and docs/matchconditions.md", oldest, oldestCompatibility)
	}
	want := "undeclared reference to 'isIP'"
	if !strings.Contains(firstErr, want) {
		t.Fatalf("the error one version older reads %q, want it to contain %q (docs/matchconditions.md quotes it)", firstErr, want)
	}
	t.Logf("a kube-apiserver %s refuses a condition with: %.200s", oldestCompatibility, firstErr)
}
