package backstop

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/authentication/user"

	"clusterip-policy/pkg/allocview"
	"clusterip-policy/pkg/policy"
	"clusterip-policy/test/fixtures"
)

// boundsPolicy is a policy at every bound the loader allows at once: 64
// allowedCIDRs, MaxReservations reservations, 64 reserved ranges of 4,096
// addresses in all, each listing 100 namespaces and both selectors, and
// 1,000 exempt namespaces, users and groups. nameLen sets the length of
// every owner's namespace and name.
func boundsPolicy(nameLen int) string {
	var b strings.Builder
	b.WriteString("allowedCIDRs: [10.96.0.0/16")
	for i := range policy.MaxPolicyCIDRs - 1 {
		fmt.Fprintf(&b, ", 10.97.%d.0/24", i)
	}
	b.WriteString("]\nreservations:\n")
	pad := func(prefix string, i int) string {
		s := fmt.Sprintf("%s%d", prefix, i)
		return s + strings.Repeat("x", max(0, nameLen-len(s)))
	}
	for i := range policy.MaxReservations {
		// 10.96.16.0 onwards: clear of the reserved ranges below.
		fmt.Fprintf(&b, "- {ip: 10.96.%d.%d, service: %s/%s}\n", 16+i/250, 1+i%250, pad("ns", i), pad("svc", i))
	}
	b.WriteString("reservedRanges:\n")
	for i := range policy.MaxReservedRanges {
		var ns []string
		for j := range policy.MaxRangeNamespaces {
			ns = append(ns, fmt.Sprintf("team-%d-%d", i, j))
		}
		fmt.Fprintf(&b, "- {first: 10.96.%d.%d, last: 10.96.%d.%d, namespaces: [%s], namespaceSelector: {matchLabels: {team: t%d}, matchExpressions: [{key: env, operator: NotIn, values: [prod, staging]}]}, serviceSelector: {matchExpressions: [{key: tier, operator: Exists}]}, note: %q}\n",
			1+i/4, (i%4)*64, 1+i/4, (i%4)*64+63, strings.Join(ns, ", "), i, strings.Repeat("n", policy.MaxRangeNoteBytes))
	}
	b.WriteString("exemptions:\n  namespaces: [")
	for i := range policy.MaxExemptions {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "exempt-%d", i)
	}
	b.WriteString("]\n  users: [")
	for i := range policy.MaxExemptions {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "system:serviceaccount:exempt-%d:deployer", i)
	}
	b.WriteString("]\n  groups: [")
	for i := range policy.MaxExemptions {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "group-%d", i)
	}
	b.WriteString("]\n")
	return b.String()
}

// boundsRanges are MaxRanges active ServiceCIDRs.
func boundsRanges(p *policy.Policy) allocview.RangeSet {
	snap := allocview.NewView().Update(func(tx *allocview.Tx) {
		tx.SetServiceCIDR(allocview.ServiceCIDR{Name: "kubernetes", Ready: true, CIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16")}})
		for i := range MaxRanges - 1 {
			tx.SetServiceCIDR(allocview.ServiceCIDR{Name: fmt.Sprintf("extra-%d", i), Ready: true, CIDRs: []netip.Prefix{netip.MustParsePrefix(fmt.Sprintf("10.97.%d.0/24", i))}})
		}
		tx.MarkSynced(true)
	})
	return policy.Env{Policy: p, Snapshot: snap}.Ranges()
}

// minimalBudget finds, by bisection, the smallest runtime cost budget the
// policy evaluates r within: the request's real cost.
func minimalBudget(t testing.TB, cp compiledPolicy, r request) int64 {
	attr := admission.NewAttributesRecord(r.obj, r.old, serviceGVK, r.namespace.Name, r.name, serviceGVR, "", r.op, &metav1.CreateOptions{}, r.dryRun, &user.DefaultInfo{Name: r.user, Groups: r.groups})
	va, err := admission.NewVersionedAttributes(attr, serviceGVK, nil)
	if err != nil {
		t.Fatal(err)
	}
	fits := func(budget int64) bool {
		res := cp.validator.Validate(context.Background(), serviceGVR, va, nil, r.namespace, budget, nil)
		for _, d := range res.Decisions {
			if strings.Contains(d.Message, "budget") || strings.Contains(d.Message, "cost") {
				return false
			}
		}
		return true
	}
	lo, hi := int64(0), int64(celconfig.RuntimeCELCostBudget)
	if !fits(hi) {
		t.Fatalf("policy %s exceeds the apiserver's runtime cost budget of %d", cp.pol.Name, hi)
	}
	for lo+1 < hi {
		mid := (lo + hi) / 2
		if fits(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

func TestAtThePolicysBoundsEveryRuleCompilesAndEvaluatesWithinTheApiserversLimits(t *testing.T) {
	p := fixtures.MustPolicy(t, policy.ParseDocument, boundsPolicy(20))
	set, err := Compile(Input{Policy: p, Ranges: boundsRanges(p), Mutating: true, NamespaceSelector: theWebhooksSelector})
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Left) != 0 {
		t.Fatalf("at the bounds (names of 20 characters) rules were left out: %v", set.Left)
	}
	for _, pol := range set.Policies {
		size := objectSize(pol)
		t.Logf("%s: %d validations, %d bytes", pol.Name, len(pol.Spec.Validations), size)
		for _, v := range pol.Spec.Variables {
			if len(v.Expression) > MaxExpressionBytes {
				t.Errorf("%s variable %s: %d bytes", pol.Name, v.Name, len(v.Expression))
			}
		}
		for _, v := range pol.Spec.Validations {
			if len(v.Expression) > MaxExpressionBytes || len(v.MessageExpression) > MaxExpressionBytes {
				t.Errorf("%s: an expression of %d bytes (message %d)", pol.Name, len(v.Expression), len(v.MessageExpression))
			}
		}
	}
	compiled := compileAsAPIServer(t, set)
	// The costliest requests: a dual-stack create naming two addresses
	// (one in a reserved range, one reserved for another owner), as a
	// user in many groups, in a namespace with many labels; a dry run.
	labels := map[string]string{}
	for i := range 100 {
		labels[fmt.Sprintf("label-%d", i)] = "v"
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-63-99", Labels: map[string]string{corev1.LabelMetadataName: "team-63-99", "team": "t1"}}}
	svc := &corev1.Service{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "svc", Labels: labels,
			Annotations: map[string]string{RecordAnnotation: "10.96.1.5,10.96.200.200"}},
		Spec: corev1.ServiceSpec{ClusterIP: "10.96.1.5", ClusterIPs: []string{"10.96.1.5", "10.96.200.200"}}}
	var groups []string
	for i := range 200 {
		groups = append(groups, fmt.Sprintf("g-%d", i))
	}
	for _, dry := range []bool{false, true} {
		r := request{op: admission.Create, obj: svc, namespace: ns, name: "svc", user: "someone", groups: groups, dryRun: dry}
		start := time.Now()
		outs := evaluate(t, compiled, r)
		took := time.Since(start)
		for _, cp := range compiled {
			if matchesResource(cp.pol, serviceGVR) {
				t.Logf("dryRun=%v %s: runtime cost %d (the apiserver allows %d per policy, %d per expression)", dry, cp.pol.Name, minimalBudget(t, cp, r), int64(celconfig.RuntimeCELCostBudget), int64(celconfig.PerCallLimit))
			}
		}
		t.Logf("dryRun=%v: %d refusals, all policies evaluated in %s", dry, len(outs), took)
	}
}

func TestAPolicyTooLargeToWriteIsLeftToTheWebhookAndSaysSo(t *testing.T) {
	// A policy object is at most 1 MiB, which keeps every compiled
	// policy under MaxObjectBytes; with the limit lowered, the
	// reservations no longer fit and their rules are left out whole.
	defer func(old int) { maxObjectBytes = old }(maxObjectBytes)
	maxObjectBytes = 200_000
	p := fixtures.MustPolicy(t, policy.ParseDocument, boundsPolicy(20))
	set, err := Compile(Input{Policy: p, Ranges: boundsRanges(p), Mutating: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Left) == 0 {
		t.Fatal("nothing left out")
	}
	for _, l := range set.Left {
		if !strings.Contains(l, "bytes, more than the limit") {
			t.Errorf("left: %q does not say why", l)
		}
	}
	for _, pol := range set.Policies {
		if size := objectSize(pol); size > MaxObjectBytes {
			t.Errorf("%s written at %d bytes", pol.Name, size)
		}
	}
	for _, k := range set.Carried {
		if k.Resource == Services && (k.Rule == policy.RuleReservedForOther) {
			t.Errorf("%s carried although its policy is too large", k.Rule)
		}
	}
	t.Logf("left: %v", set.Left)
}
