package backstop

import (
	"context"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating/patch"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/client-go/kubernetes/scheme"
)

// recorder is the record MutatingAdmissionPolicy compiled as the
// apiserver's mutating plugin compiles it (mutating/compilation.go's
// compilePolicy, not exported): its matchConditions and its JSON Patch.
type recorder struct {
	compiler *plugincel.CompositedCompiler
	matcher  matchconditions.Matcher
	patchers []patch.Patcher
}

func compileRecord(t testing.TB, p admissionregistrationv1.MutatingAdmissionPolicy) recorder {
	t.Helper()
	opts := plugincel.OptionalVariableDeclarations{HasAuthorizer: true}
	for _, env := range []environment.Type{environment.NewExpressions, environment.StoredExpressions} {
		c, err := plugincel.NewCompositedCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
		if err != nil {
			t.Fatal(err)
		}
		var vars []plugincel.NamedExpressionAccessor
		for _, v := range p.Spec.Variables {
			vars = append(vars, &validating.Variable{Name: v.Name, Expression: v.Expression})
		}
		c.CompileAndStoreVariables(vars, opts, env)
		for _, v := range p.Spec.Variables {
			if res := c.CompileCELExpression(&validating.Variable{Name: v.Name, Expression: v.Expression}, opts, env); res.Error != nil {
				t.Fatalf("record variable %s: %v", v.Name, res.Error)
			}
		}
		var acc []plugincel.ExpressionAccessor
		for i := range p.Spec.MatchConditions {
			acc = append(acc, (*matchconditions.MatchCondition)(&p.Spec.MatchConditions[i]))
			if res := c.CompileCELExpression(acc[i], opts, env); res.Error != nil {
				t.Fatalf("record matchCondition: %v", res.Error)
			}
		}
		patchOpts := opts
		patchOpts.HasPatchTypes = true
		r := recorder{compiler: c}
		r.matcher = matchconditions.NewMatcher(c.CompileCondition(acc, opts, env), p.Spec.FailurePolicy, "policy", "mutate", p.Name)
		for _, m := range p.Spec.Mutations {
			res := c.CompileMutatingEvaluator(&patch.JSONPatchCondition{Expression: m.JSONPatch.Expression}, patchOpts, env)
			if res.CompilationErrors() != nil {
				t.Fatalf("record patch: %v", res.CompilationErrors())
			}
			r.patchers = append(r.patchers, patch.NewJSONPatcher(res))
		}
		if env == environment.StoredExpressions {
			return r
		}
	}
	panic("unreachable")
}

// apply runs the record on a Service request as the apiserver's mutating
// stage would, and returns the object it passes on.
func (r recorder) apply(t testing.TB, op admission.Operation, obj, old *corev1.Service, dryRun bool, u user.Info) *corev1.Service {
	t.Helper()
	var oldObj runtime.Object
	if old != nil {
		oldObj = old
	}
	var opts runtime.Object = &metav1.CreateOptions{}
	if op == admission.Update {
		opts = &metav1.UpdateOptions{}
	}
	attr := admission.NewAttributesRecord(obj.DeepCopy(), oldObj, serviceGVK, obj.Namespace, obj.Name, serviceGVR, "", op, opts, dryRun, u)
	va, err := admission.NewVersionedAttributes(attr, serviceGVK, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The dispatcher gives each evaluation a context of its own for the
	// policy's variables (mutating/dispatcher.go).
	ctx := r.compiler.CreateContext(context.Background())
	m := r.matcher.Match(ctx, va, nil, nil)
	if m.Error != nil {
		t.Fatalf("record matchCondition failed on %+v: %v", obj.Spec, m.Error)
	}
	if !m.Matches {
		return obj.DeepCopy()
	}
	for _, p := range r.patchers {
		out, err := p.Patch(ctx, patch.Request{
			MatchedResource:     serviceGVR,
			VersionedAttributes: va,
			ObjectInterfaces:    admission.NewObjectInterfacesFromScheme(scheme.Scheme),
		}, celconfig.RuntimeCELCostBudget)
		if err != nil {
			t.Fatalf("record patch failed on %+v (annotations %v): %v", obj.Spec, obj.Annotations, err)
		}
		va.VersionedObject.Set(out)
	}
	return va.VersionedObject.Object().(*corev1.Service)
}
