package matchconditions

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	k8sversion "k8s.io/apimachinery/pkg/util/version"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	"k8s.io/apiserver/pkg/cel/environment"

	"clusterip-policy/pkg/allocview"
	mc "clusterip-policy/pkg/matchconditions"
	"clusterip-policy/pkg/policy"
	"clusterip-policy/test/fixtures"
)

// olderApiserverRefusal is the error a kube-apiserver 1.30 returns for an
// update carrying expr: its validation compiles a new expression with the
// CEL environment of 1.29 (k8s.io/apiserver, NewExpressions) and reports
// the failure as field.Invalid with the whole expression as the value.
func olderApiserverRefusal(t *testing.T, expr string) error {
	t.Helper()
	c := plugincel.NewCompiler(environment.MustBaseEnvSet(k8sversion.MajorMinor(1, 29)))
	res := c.CompileCELExpression(&matchconditions.MatchCondition{Name: mc.Name, Expression: expr},
		plugincel.OptionalVariableDeclarations{HasAuthorizer: true}, environment.NewExpressions)
	if res.Error == nil {
		t.Fatal("the CEL environment of 1.29 compiled the expression; this test no longer shows a refusal")
	}
	path := field.NewPath("webhooks").Index(0).Child("matchConditions").Index(2).Child("expression")
	return apierrors.NewInvalid(schema.GroupKind{Group: "admissionregistration.k8s.io", Kind: "ValidatingWebhookConfiguration"}, "clusterip-policy",
		field.ErrorList{field.Invalid(path, expr, res.Error.Detail)})
}

// An older apiserver's refusal quotes the whole expression; what the
// leader logs and hands the ClusterIPPolicy status (Reporter.ConditionsWriteFailed;
// internal/controllers/policystatus shows it there) keeps the reason at its end and
// says what to do, within a fixed size.
func TestARefusedConditionsWriteKeepsTheReasonAndTheFix(t *testing.T) {
	p := fixtures.MustPolicy(t, policy.ParseDocument, fixtures.KubeDNSSpec)
	rs := policy.Env{Policy: p, Snapshot: allocview.NewView().Update(func(tx *allocview.Tx) {
		tx.SetServiceCIDR(allocview.ServiceCIDR{Name: "kubernetes", Ready: true, CIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16"), netip.MustParsePrefix("fd00:10:96::/108")}})
		tx.MarkSynced(true)
	})}.Ranges()
	// Padded to the size bound the generator allows, as the largest
	// policies make it.
	expr := mc.Compute(p, rs).Validating
	expr += strings.Repeat(" || false", (mc.MaxExpressionBytes-len(expr))/len(" || false"))
	refused := olderApiserverRefusal(t, expr)
	if len(refused.Error()) < mc.MaxExpressionBytes {
		t.Fatalf("the apiserver's error is %d bytes; it was expected to quote the whole expression", len(refused.Error()))
	}

	// Wrapped as update wraps it.
	got := refusal(fmt.Errorf("ValidatingWebhookConfiguration clusterip-policy: %w", refused))
	t.Logf("%d bytes: %s", len(got), got)
	if len(got) > 1400 {
		t.Errorf("refusal is %d bytes, want at most 1,400", len(got))
	}
	for _, want := range []string{`ValidatingWebhookConfiguration.admissionregistration.k8s.io "clusterip-policy" is invalid`, "undeclared reference to 'isIP'", "older than 1.31", "--manage-match-conditions off"} {
		if !strings.Contains(got, want) {
			t.Errorf("refusal lacks %q", want)
		}
	}
	if got := refusal(apierrors.NewForbidden(schema.GroupResource{Group: "admissionregistration.k8s.io", Resource: "validatingwebhookconfigurations"}, "clusterip-policy", errors.New("RBAC"))); strings.Contains(got, "1.31") {
		t.Errorf("a forbidden write is blamed on the apiserver's version: %s", got)
	}
}
