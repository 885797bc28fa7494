package manifests

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	admv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"clusterip-policy/pkg/policy"
)

// The operation filter is written three times: the configurations' rules,
// their allocating-requests-only matchConditions (CEL, so that while the
// webhook is down a Service update that cannot allocate still goes
// through), and pkg/policy/operations.go with the stages' skips. This test
// holds the manifest and Go equal where Go can read the manifest; the CEL
// itself is evaluated on a real apiserver by
// test/e2e/matchconditions_test.go and test/e2e/dualstack_test.go.
func TestManifestFiltersOperationsAsGoDoes(t *testing.T) {
	var goOps []string
	for _, op := range policy.AllocatingOperations {
		goOps = append(goOps, string(op))
	}
	for _, op := range []policy.Operation{"CREATE", "UPDATE", "DELETE", "CONNECT"} {
		if reviewed := policy.OperationSkip(op) == ""; reviewed != slices.Contains(goOps, string(op)) {
			t.Errorf("policy.OperationSkip(%s) reviewed=%v disagrees with policy.AllocatingOperations %v", op, reviewed, goOps)
		}
	}
	whs := loadBase(t).webhooks()
	if len(whs) != 4 {
		t.Fatalf("want a mutating and a validating webhook for Services and a validating one each for ServiceCIDRs and the policy object, got %d", len(whs))
	}
	for _, w := range whs {
		condition := "allocating-requests-only"
		switch {
		case w.mutating:
			// Every UPDATE is sent (mutateEveryUpdate in safety_test.go);
			// the managed condition narrows them as mutateSkips does
			// (pkg/matchconditions AllocatingUpdate, held equal to Go by
			// TestManagedMutatingConditionSendsExactlyTheUpdatesMutateActsOn).
			condition = ""
		case w.name == serviceCIDRWebhook:
			// Go's side: policy.ReviewServiceCIDR skips an UPDATE that keeps spec.cidrs.
			condition = "range-changes-only"
		case w.name == policyObjectWebhook:
			// An UPDATE that keeps the spec gives the loader nothing new.
			condition = "spec-changes-only"
			for _, p := range policyObjectSpecChangesOnly(w) {
				t.Error(p)
			}
		}
		for _, r := range w.rules {
			var ops []string
			for _, op := range r.Operations {
				ops = append(ops, string(op))
			}
			if !slices.Equal(ops, goOps) {
				t.Errorf("%s sends operations %v; pkg/policy reviews %v (policy.AllocatingOperations): change both", w.where, ops, goOps)
			}
		}
		if condition == "" {
			continue
		}
		i := slices.IndexFunc(w.matchConditions, func(mc admv1.MatchCondition) bool { return mc.Name == condition })
		if i < 0 {
			t.Errorf("%s has no matchCondition %s", w.where, condition)
			continue
		}
		// Every allocating operation but UPDATE passes the condition whole,
		// as it passes the stages' skips in Go; UPDATE alone is narrowed.
		expr := strings.Join(strings.Fields(w.matchConditions[i].Expression), " ")
		if !strings.HasPrefix(expr, "request.operation != 'UPDATE' || ") {
			t.Errorf("%s: %s does not pass every non-UPDATE request first: %s", w.where, condition, expr)
		}
	}

	// The Go side of the same intent: a CREATE is reviewed by both stages,
	// an UPDATE that changes nothing by neither.
	env := policy.Env{Policy: policy.Default(), StaticCIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16")}}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.96.0.20", ClusterIPs: []string{"10.96.0.20"}}}
	create := policy.Request{Operation: policy.Create, Service: svc}
	update := policy.Request{Operation: policy.Update, Service: svc, OldService: svc.DeepCopy()}
	for _, stage := range []func(policy.Env, policy.Request) policy.Decision{policy.Mutate, policy.Validate} {
		if d := stage(env, create); d.Skipped != "" {
			t.Errorf("%s skips a CREATE: %s", d.Stage, d.Skipped)
		}
		if d := stage(env, update); d.Skipped == "" {
			t.Errorf("%s reviews an UPDATE that changes no IP", d.Stage)
		}
	}
}
