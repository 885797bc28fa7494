package matchconditions

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/cel/environment"
	"sigs.k8s.io/yaml"

	"clusterip-policy/manifests"
	"clusterip-policy/pkg/policy"
	"clusterip-policy/test/fixtures"
)

// What a dynamic Service create costs the apiserver in matchConditions is
// what the apiserver's own matcher spends on each Service webhook's
// conditions (the static ones of manifests/base and the managed one), once
// per webhook: every condition is evaluated, each CEL step with its cost
// tracking. `go test -run '^$' -bench Conditions -benchmem
// ./pkg/matchconditions/` measures it here; test/bench (make bench-e2e)
// measures it in a real apiserver.

// staticConditions are the matchConditions of the two Service webhooks in
// manifests/base.
func staticConditions(tb testing.TB) (mut, val []admissionregistrationv1.MatchCondition) {
	tb.Helper()
	data, err := os.ReadFile("../../manifests/base/webhook-configurations.yaml")
	if err != nil {
		tb.Fatal(err)
	}
	docs, err := manifests.SplitYAML(data)
	if err != nil {
		tb.Fatal(err)
	}
	for _, d := range docs {
		var probe struct{ Kind string }
		if err := yaml.Unmarshal(d, &probe); err != nil {
			tb.Fatal(err)
		}
		switch probe.Kind {
		case "MutatingWebhookConfiguration":
			var c admissionregistrationv1.MutatingWebhookConfiguration
			if err := yaml.Unmarshal(d, &c); err != nil {
				tb.Fatal(err)
			}
			mut = c.Webhooks[0].MatchConditions
		case "ValidatingWebhookConfiguration":
			var c admissionregistrationv1.ValidatingWebhookConfiguration
			if err := yaml.Unmarshal(d, &c); err != nil {
				tb.Fatal(err)
			}
			val = c.Webhooks[0].MatchConditions
		}
	}
	if len(mut) == 0 || len(val) == 0 {
		tb.Fatal("manifests/base has no matchConditions for the Service webhooks")
	}
	return mut, val
}

// webhookMatcher compiles conds as the apiserver does for one webhook.
func webhookMatcher(tb testing.TB, conds []admissionregistrationv1.MatchCondition) matchconditions.Matcher {
	tb.Helper()
	var acc []plugincel.ExpressionAccessor
	for _, c := range conds {
		compileNew(tb, c.Expression)
		acc = append(acc, &matchconditions.MatchCondition{Name: c.Name, Expression: c.Expression})
	}
	fail := admissionregistrationv1.Fail
	cc := plugincel.NewConditionCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	f := cc.CompileCondition(acc, plugincel.OptionalVariableDeclarations{HasAuthorizer: true}, environment.StoredExpressions)
	return matchconditions.NewMatcher(f, &fail, "webhook", "admit", "test")
}

// benchPolicy is the policy test/bench runs ours with: the DNS address and
// eight owners in the static band of 10.96.0.0/16.
func benchPolicy(tb testing.TB) policy.Env {
	body := "allowedCIDRs: [10.96.0.0/12]\nreserveKubernetesService: true\nreservations:\n- {ip: 10.96.0.10, service: kube-system/kube-dns}\n"
	for i := range 8 {
		body += fmt.Sprintf("- {ip: 10.96.0.%d, service: bench/owner-%d}\n", 20+i, i)
	}
	p := fixtures.MustPolicy(tb, policy.ParseDocument, body)
	return policy.Env{Policy: p, Snapshot: snapshot(serviceCIDR("kubernetes", "10.96.0.0/16"))}
}

// vapExpression is test/bench's ValidatingAdmissionPolicy expression, for
// scale: one range test and one reserved address.
const vapExpression = `!has(object.spec.clusterIP) || object.spec.clusterIP == '' || object.spec.clusterIP == 'None' ||
(cidr('10.96.0.0/16').containsIP(object.spec.clusterIP) &&
 (object.spec.clusterIP != '10.96.0.10' || (request.namespace == 'kube-system' && request.name == 'kube-dns')))`

func BenchmarkConditionsOfADynamicCreate(b *testing.B) {
	env := benchPolicy(b)
	c := Compute(env.Policy, env.Ranges())
	smut, sval := staticConditions(b)
	with := func(static []admissionregistrationv1.MatchCondition, managed string) []admissionregistrationv1.MatchCondition {
		return append(append([]admissionregistrationv1.MatchCondition{}, static...), admissionregistrationv1.MatchCondition{Name: Name, Expression: managed})
	}
	// folded is one condition, the managed expression ANDed with the
	// static ones: what the matcher would evaluate if the static
	// conditions were carried inside the managed one (a shape this
	// package does not write; measured to say what it would save).
	folded := func(static []admissionregistrationv1.MatchCondition, managed string) []admissionregistrationv1.MatchCondition {
		e := "(" + managed + ")"
		for _, s := range static {
			e += " &&\n(" + s.Expression + ")"
		}
		return []admissionregistrationv1.MatchCondition{{Name: Name, Expression: e}}
	}
	never := []admissionregistrationv1.MatchCondition{{Name: "never", Expression: "false"}}
	// The objects as each stage sees a dynamic create: the request as
	// sent, and the final object after allocation.
	requested := fixtures.Service("bench", "web")
	allocated := fixtures.Service("bench", "web", func(s *corev1.Service) {
		pol := corev1.IPFamilyPolicySingleStack
		s.Spec.ClusterIP, s.Spec.ClusterIPs, s.Spec.IPFamilies, s.Spec.IPFamilyPolicy = "10.96.77.3", []string{"10.96.77.3"}, []corev1.IPFamily{"IPv4"}, &pol
	})
	for _, tc := range []struct {
		name  string
		conds []admissionregistrationv1.MatchCondition
		svc   *corev1.Service
		call  bool
	}{
		// The floors of test/bench (floor-single, floor-static): the
		// matcher's own work, and the static conditions beside a managed
		// condition that costs nothing.
		{"one-false-condition", never, requested, false},
		{"mutating/static+false", with(smut, "false"), requested, false},
		{"validating/static+false", with(sval, "false"), allocated, false},
		{"mutating/static", smut, requested, true},
		{"mutating/static+managed", with(smut, c.Mutating), requested, false},
		{"mutating/folded", folded(smut, c.Mutating), requested, false},
		{"validating/static", sval, allocated, true},
		{"validating/static+managed", with(sval, c.Validating), allocated, false},
		{"validating/folded", folded(sval, c.Validating), allocated, false},
		{"vap-expression", []admissionregistrationv1.MatchCondition{{Name: "vap", Expression: vapExpression}}, allocated, true},
	} {
		m := webhookMatcher(b, tc.conds)
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			// Wall time per op moves with whatever else the machine runs;
			// the CPU time of this goroutine's thread moves much less, so
			// it is reported beside it (cpu-ns/op; the GC's background
			// workers run on other threads and are not in it).
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			cpu0 := threadCPU(b)
			for b.Loop() {
				attr := admission.NewAttributesRecord(tc.svc, nil, serviceGVK, tc.svc.Namespace, tc.svc.Name, serviceGVR, "", admission.Create, &metav1.CreateOptions{}, false, &user.DefaultInfo{Name: "alice", Groups: []string{"system:authenticated"}})
				va, err := admission.NewVersionedAttributes(attr, serviceGVK, nil)
				if err != nil {
					b.Fatal(err)
				}
				res := m.Match(context.Background(), va, nil, nil)
				if res.Error != nil || res.Matches != tc.call {
					b.Fatalf("matches %v, error %v; want %v", res.Matches, res.Error, tc.call)
				}
			}
			if cpu1 := threadCPU(b); cpu1 > 0 {
				b.ReportMetric(float64(cpu1-cpu0)/float64(b.N), "cpu-ns/op")
			}
		})
	}
}
