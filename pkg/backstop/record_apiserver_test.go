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

// matches says whether the record's matchConditions send it the request.
func (r recorder) matches(t testing.TB, obj *corev1.Service) bool {
	t.Helper()
	attr := admission.NewAttributesRecord(obj.DeepCopy(), nil, serviceGVK, obj.Namespace, obj.Name, serviceGVR, "", admission.Create, &metav1.CreateOptions{}, false, &user.DefaultInfo{Name: "alice"})
	va, err := admission.NewVersionedAttributes(attr, serviceGVK, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := r.matcher.Match(r.compiler.CreateContext(context.Background()), va, nil, nil)
	if m.Error != nil {
		t.Fatal(m.Error)
	}
	return m.Matches
}

// A create that names no address and carries no record has nothing for the
// record to write: the apiserver skips it at its matchConditions (most of
// the traffic, measured in test/bench's backstop configuration). One that
// carries a record of its own still has it removed, and one that names an
// address gets it recorded.
func TestTheRecordSkipsARequestWithNothingToWrite(t *testing.T) {
	set := compileWithRecord(t, "allowedCIDRs: [10.96.0.0/16]\n", "10.96.0.0/16")
	r := compileRecord(t, set.MutatingPolicies[0])
	svc := func(ips []string, annotations map[string]string) *corev1.Service {
		s := &corev1.Service{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"}, ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "s", Annotations: annotations}}
		if len(ips) > 0 {
			s.Spec.ClusterIP, s.Spec.ClusterIPs = ips[0], ips
		}
		return s
	}
	alice := &user.DefaultInfo{Name: "alice"}
	for _, tc := range []struct {
		name    string
		s       *corev1.Service
		matches bool
		want    string // the record after it, "" for none
	}{
		{"dynamic", svc(nil, nil), false, ""},
		{"headless", svc([]string{"None"}, nil), false, ""},
		{"dynamic with other annotations", svc(nil, map[string]string{"team": "a"}), false, ""},
		{"dynamic carrying a forged record", svc(nil, map[string]string{RecordAnnotation: "10.96.0.10"}), true, ""},
		{"named", svc([]string{"10.96.200.5"}, nil), true, "10.96.200.5"},
	} {
		if got := r.matches(t, tc.s); got != tc.matches {
			t.Errorf("%s: the record's matchConditions say %v, want %v", tc.name, got, tc.matches)
		}
		out := r.apply(t, admission.Create, tc.s, nil, false, alice)
		if got := out.Annotations[RecordAnnotation]; got != tc.want {
			t.Errorf("%s: record %q after admission, want %q", tc.name, got, tc.want)
		}
	}
}
