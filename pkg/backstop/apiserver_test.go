package backstop

import (
	"context"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/cel/environment"
)

// The policies are compiled and evaluated here by the kube-apiserver's own
// code for ValidatingAdmissionPolicy (k8s.io/apiserver: the composited CEL
// compiler with the policy's variables, its matchConditions matcher and
// validating.NewValidator, as the plugin's compilePolicy builds them), so
// what these tests see is what an apiserver of this version decides. The
// binding's part (its namespaceSelector and validationActions) is applied
// as the plugin's matcher and dispatcher apply it.

var (
	serviceGVK     = schema.GroupVersionKind{Version: "v1", Kind: "Service"}
	serviceGVR     = schema.GroupVersionResource{Version: "v1", Resource: "services"}
	serviceCIDRGVK = schema.GroupVersionKind{Group: "networking.k8s.io", Version: "v1", Kind: "ServiceCIDR"}
	serviceCIDRGVR = schema.GroupVersionResource{Group: "networking.k8s.io", Version: "v1", Resource: "servicecidrs"}
)

// compiledPolicy is one ValidatingAdmissionPolicy with its binding.
type compiledPolicy struct {
	pol       admissionregistrationv1.ValidatingAdmissionPolicy
	binding   admissionregistrationv1.ValidatingAdmissionPolicyBinding
	validator validating.Validator
	nsSel     labels.Selector
	rules     []string // the rule of each validation, from Carried
}

// compileAsAPIServer compiles every policy of s, failing the test on any
// expression the apiserver would refuse when the policy is created
// (environment.NewExpressions) or fail to compile when it is stored.
func compileAsAPIServer(t testing.TB, s Set) []compiledPolicy {
	t.Helper()
	var out []compiledPolicy
	for i, pol := range s.Policies {
		checkNewExpressions(t, pol)
		cp := compiledPolicy{pol: pol, binding: s.Bindings[i], validator: compileValidating(&s.Policies[i]), nsSel: labels.Everything()}
		if err := cp.validator.CompileError(); err != nil {
			t.Fatalf("policy %s does not compile: %v", pol.Name, err)
		}
		if mr := cp.binding.Spec.MatchResources; mr != nil && mr.NamespaceSelector != nil {
			sel, err := metav1.LabelSelectorAsSelector(mr.NamespaceSelector)
			if err != nil {
				t.Fatal(err)
			}
			cp.nsSel = sel
		}
		for _, k := range s.Carried {
			if k.Name == pol.Name {
				cp.rules = append(cp.rules, string(k.Rule))
			}
		}
		if len(cp.rules) != len(pol.Spec.Validations) {
			t.Fatalf("policy %s: %d validations, %d carried rules", pol.Name, len(pol.Spec.Validations), len(cp.rules))
		}
		out = append(out, cp)
	}
	return out
}

// compileValidating is the plugin's compilePolicy (validating/plugin.go),
// which is not exported: the same compiler, environment and order.
func compileValidating(p *admissionregistrationv1.ValidatingAdmissionPolicy) validating.Validator {
	optionalVars := plugincel.OptionalVariableDeclarations{HasParams: false, HasAuthorizer: true}
	expressionOptionalVars := plugincel.OptionalVariableDeclarations{HasParams: false, HasAuthorizer: false}
	c, err := plugincel.NewCompositedCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	if err != nil {
		return validating.NewValidator(nil, nil, nil, nil, p.Spec.FailurePolicy, err)
	}
	var vars []plugincel.NamedExpressionAccessor
	for _, v := range p.Spec.Variables {
		vars = append(vars, &validating.Variable{Name: v.Name, Expression: v.Expression})
	}
	c.CompileAndStoreVariables(vars, optionalVars, environment.StoredExpressions)
	var matcher matchconditions.Matcher
	if len(p.Spec.MatchConditions) > 0 {
		var acc []plugincel.ExpressionAccessor
		for i := range p.Spec.MatchConditions {
			acc = append(acc, (*matchconditions.MatchCondition)(&p.Spec.MatchConditions[i]))
		}
		matcher = matchconditions.NewMatcher(c.CompileCondition(acc, optionalVars, environment.StoredExpressions), p.Spec.FailurePolicy, "policy", "validate", p.Name)
	}
	var validations, messages []plugincel.ExpressionAccessor
	for _, v := range p.Spec.Validations {
		validations = append(validations, &validating.ValidationCondition{Expression: v.Expression, Message: v.Message, Reason: v.Reason})
		var m plugincel.ExpressionAccessor
		if v.MessageExpression != "" {
			m = &validating.MessageExpressionCondition{MessageExpression: v.MessageExpression}
		}
		messages = append(messages, m)
	}
	return validating.NewValidator(
		c.CompileCondition(validations, optionalVars, environment.StoredExpressions),
		matcher,
		c.CompileCondition(nil, optionalVars, environment.StoredExpressions),
		c.CompileCondition(messages, expressionOptionalVars, environment.StoredExpressions),
		p.Spec.FailurePolicy, nil)
}

// checkNewExpressions compiles every expression as the apiserver's
// validation of a new policy does (the stricter NewExpressions
// environment): what fails here is refused at create.
func checkNewExpressions(t testing.TB, p admissionregistrationv1.ValidatingAdmissionPolicy) {
	t.Helper()
	c, err := plugincel.NewCompositedCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	if err != nil {
		t.Fatal(err)
	}
	opts := plugincel.OptionalVariableDeclarations{HasAuthorizer: true}
	var vars []plugincel.NamedExpressionAccessor
	for _, v := range p.Spec.Variables {
		vars = append(vars, &validating.Variable{Name: v.Name, Expression: v.Expression})
	}
	c.CompileAndStoreVariables(vars, opts, environment.NewExpressions)
	check := func(what, expr string, acc plugincel.ExpressionAccessor) {
		if res := c.CompileCELExpression(acc, opts, environment.NewExpressions); res.Error != nil {
			t.Fatalf("policy %s, %s: the apiserver would refuse it: %v\n%s", p.Name, what, res.Error, expr)
		}
	}
	for _, v := range p.Spec.Variables {
		check("variable "+v.Name, v.Expression, &validating.Variable{Name: v.Name, Expression: v.Expression})
	}
	for i := range p.Spec.MatchConditions {
		check("matchCondition "+p.Spec.MatchConditions[i].Name, p.Spec.MatchConditions[i].Expression, (*matchconditions.MatchCondition)(&p.Spec.MatchConditions[i]))
	}
	for _, v := range p.Spec.Validations {
		check("validation", v.Expression, &validating.ValidationCondition{Expression: v.Expression})
		check("messageExpression", v.MessageExpression, &validating.MessageExpressionCondition{MessageExpression: v.MessageExpression})
	}
}

// outcome is what the apiserver does with one request, per rule: the
// binding's action and the message.
type outcome struct {
	rule, action, message string
}

// request is one admission request as the validating stage sees it.
type request struct {
	op        admission.Operation
	obj, old  runtime.Object
	namespace *corev1.Namespace // nil for cluster-scoped
	name      string
	dryRun    bool
	user      string
	groups    []string
}

// evaluate runs every policy on r and returns each rule that refused
// (Deny), warned (Warn) or annotated the audit log (Audit). An evaluation
// error fails the test: with failurePolicy Fail it would refuse the
// request, which the backstop must never do on its own.
func evaluate(t testing.TB, ps []compiledPolicy, r request) []outcome {
	t.Helper()
	gvk, gvr := serviceGVK, serviceGVR
	if _, ok := objOf(r).(*corev1.Service); !ok {
		gvk, gvr = serviceCIDRGVK, serviceCIDRGVR
	}
	ns := ""
	if r.namespace != nil {
		ns = r.namespace.Name
	}
	var opts runtime.Object = &metav1.CreateOptions{}
	if r.op == admission.Update {
		opts = &metav1.UpdateOptions{}
	}
	var old runtime.Object
	if r.old != nil {
		old = r.old
	}
	attr := admission.NewAttributesRecord(r.obj, old, gvk, ns, r.name, gvr, "", r.op, opts, r.dryRun, &user.DefaultInfo{Name: r.user, Groups: r.groups})
	va, err := admission.NewVersionedAttributes(attr, gvk, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []outcome
	for _, p := range ps {
		if !matchesResource(p.pol, gvr) {
			continue
		}
		if r.namespace != nil && !p.nsSel.Matches(labels.Set(r.namespace.Labels)) {
			continue
		}
		res := p.validator.Validate(context.Background(), gvr, va, nil, r.namespace, celconfig.RuntimeCELCostBudget, nil)
		for i, d := range res.Decisions {
			switch d.Action {
			case validating.ActionAdmit:
			case validating.ActionDeny:
				if d.Evaluation == validating.EvalError {
					t.Fatalf("policy %s failed to evaluate on %s %s/%s: %s", p.pol.Name, r.op, ns, r.name, d.Message)
				}
				out = append(out, outcome{rule: p.rules[i], action: string(p.binding.Spec.ValidationActions[0]), message: d.Message})
			default:
				t.Fatalf("policy %s: decision %+v", p.pol.Name, d)
			}
		}
	}
	return out
}

func objOf(r request) runtime.Object {
	if r.obj != nil {
		return r.obj
	}
	return r.old
}

func matchesResource(p admissionregistrationv1.ValidatingAdmissionPolicy, gvr schema.GroupVersionResource) bool {
	for _, rr := range p.Spec.MatchConstraints.ResourceRules {
		for _, res := range rr.Resources {
			if res == gvr.Resource && strings.Join(rr.APIGroups, ",") == gvr.Group {
				return true
			}
		}
	}
	return false
}
