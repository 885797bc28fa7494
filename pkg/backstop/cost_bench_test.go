package backstop

import (
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apiserver/pkg/admission"

	"clusterip-policy/pkg/allocview"
	"clusterip-policy/pkg/policy"
	"clusterip-policy/test/fixtures"
)

// benchmarkPolicy is the shape of the end-to-end benchmark's policy
// (test/bench): the DNS reservation, eight owners, a reserved range.
const benchmarkPolicy = `allowedCIDRs: [10.96.0.0/12]
reservations:
- {ip: 10.96.0.10, service: kube-system/kube-dns}
- {ip: 10.96.0.20, service: bench/owner-0}
- {ip: 10.96.0.21, service: bench/owner-1}
- {ip: 10.96.0.22, service: bench/owner-2}
- {ip: 10.96.0.23, service: bench/owner-3}
reservedRanges:
- {first: 10.96.0.12, last: 10.96.0.19, namespaces: [bench-ranges]}
`

// oneExpression is the end-to-end benchmark's `vap` configuration: one
// expression on the final object, no variables, no matchConditions.
const oneExpression = `!has(object.spec.clusterIP) || object.spec.clusterIP == '' || object.spec.clusterIP == 'None' ||
(cidr('10.96.0.0/16').containsIP(object.spec.clusterIP) &&
 (object.spec.clusterIP != '10.96.0.10' || (request.namespace == 'kube-system' && request.name == 'kube-dns')))`

// BenchmarkValidatingADynamicCreate is the validating stage of the commonest
// create (the apiserver picked a dynamic-band address, nothing recorded),
// evaluated by the apiserver's own ValidatingAdmissionPolicy code: the
// backstop's Services policy against the one-expression policy the
// end-to-end benchmark calls `vap`. go test -run '^$' -bench
// ValidatingADynamicCreate ./pkg/backstop/
func BenchmarkValidatingADynamicCreate(b *testing.B) {
	set := compileWithRecord(b, benchmarkPolicy, "10.96.0.0/16")
	fail := admissionregistrationv1.Fail
	vap := admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "vap"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{FailurePolicy: &fail,
			MatchConstraints: set.Policies[0].Spec.MatchConstraints,
			Validations:      []admissionregistrationv1.Validation{{Expression: oneExpression}}},
	}
	svc := &corev1.Service{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: "dynamic-1", Labels: map[string]string{"app": "bench"}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.96.143.7", ClusterIPs: []string{"10.96.143.7"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}}}
	r := request{op: admission.Create, obj: svc, namespace: namespaceObject("bench"), name: svc.Name, user: "alice"}
	for _, c := range []struct {
		name string
		p    admissionregistrationv1.ValidatingAdmissionPolicy
	}{{"backstop", set.Policies[0]}, {"one-expression", vap}} {
		cp := []compiledPolicy{{pol: c.p, binding: set.Bindings[0], validator: compileValidating(&c.p), nsSel: labels.Everything(), rules: make([]string, len(c.p.Spec.Validations))}}
		if out := evaluate(b, cp, r); len(out) != 0 {
			b.Fatalf("%s refused the dynamic create: %+v", c.name, out)
		}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				evaluate(b, cp, r)
			}
		})
	}
}

// The plainly-dynamic matchCondition skips a request only when every rule
// would admit it; a reserved address in a dynamic band, spelt otherwise
// than canonically (as a later mutating webhook may set it), still goes
// through the rules and is refused.
func TestThePlainlyDynamicSkipIsTakenOnlyWhereEveryRuleAdmits(t *testing.T) {
	set := compileWithRecord(t, `allowedCIDRs: [10.96.0.0/16, "fd00::/108"]
reservations:
- {ip: 10.96.0.10, service: kube-system/kube-dns}
- {ip: "fd00::8:a", service: team/owner}
- {ip: 10.96.200.9, service: team/owner4}
reservedRanges:
- {first: 10.96.100.0, last: 10.96.100.255, namespaces: [bench-ranges]}
`, "10.96.0.0/16", "fd00::/108")
	cps := compileAsAPIServer(t, set)
	var services compiledPolicy
	for _, cp := range cps {
		if matchesResource(cp.pol, serviceGVR) {
			services = cp
		}
	}
	// The one condition (NeedsJudging) with the plainly-dynamic term first;
	// the requests below are exempt from nothing and judged by the
	// webhooks' own conditions, so the condition is false exactly when
	// that term is.
	if mc := services.pol.Spec.MatchConditions; len(mc) != 1 || mc[0].Name != NeedsJudging || !strings.HasPrefix(mc[0].Expression, "(!(!(has(object.metadata.annotations)") {
		t.Fatalf("%s's matchConditions %+v: want one, %s, starting with the plainly-dynamic term", services.pol.Name, mc, NeedsJudging)
	}
	only := services
	only.pol.Spec.Validations = []admissionregistrationv1.Validation{{Expression: "false"}}
	only.rules = []string{"skip"}
	only.validator = compileValidating(&only.pol)
	for _, c := range []struct {
		ips      []string
		record   string
		skipped  bool
		refusals string
	}{
		{[]string{"10.96.143.7"}, "", true, ""},
		{[]string{"10.96.143.7", "fd00::9:1"}, "", true, ""},
		{[]string{"10.96.143.7"}, "10.96.143.7", false, "static-ip-in-dynamic-band"}, // named: recorded
		{[]string{"10.96.0.5"}, "", false, ""},                                       // static band
		{[]string{"10.96.200.9"}, "", false, "reserved-for-other"},                   // reserved, dynamic band
		{[]string{"10.96.100.7"}, "", false, "reserved-range-for-other"},             // reserved range
		{[]string{"fd00::8:a"}, "", false, "reserved-for-other"},
		{[]string{"fd00:0::8:a"}, "", false, "reserved-for-other"}, // not canonical
		{[]string{"fd00::9:1"}, "", true, ""},
	} {
		svc := &corev1.Service{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
			ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "s"},
			Spec:       corev1.ServiceSpec{ClusterIP: c.ips[0], ClusterIPs: c.ips}}
		if c.record != "" {
			svc.Annotations = map[string]string{RecordAnnotation: c.record}
		}
		r := request{op: admission.Create, obj: svc, namespace: namespaceObject("team"), name: "s", user: "alice"}
		skipped := len(evaluate(t, []compiledPolicy{only}, r)) == 0
		var got []string
		for _, o := range evaluate(t, []compiledPolicy{services}, r) {
			got = append(got, o.rule)
		}
		if skipped != c.skipped || strings.Join(got, ",") != c.refusals {
			t.Errorf("%v (record %q): skipped %v, refused by %v; want skipped %v, refused by %q", c.ips, c.record, skipped, got, c.skipped, c.refusals)
		}
	}
}

// BenchmarkRecordSkipsADynamicCreate is the record's (MutatingAdmission-
// Policy's) matchConditions on a create naming no address, which skip it,
// evaluated by the apiserver's own matcher: what the record costs the
// commonest create. go test -run '^$' -bench RecordSkips ./pkg/backstop/
func BenchmarkRecordSkipsADynamicCreate(b *testing.B) {
	set := compileWithRecord(b, benchmarkPolicy, "10.96.0.0/16")
	r := compileRecord(b, set.MutatingPolicies[0])
	svc := &corev1.Service{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: "dynamic-1"},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}}}
	if r.matches(b, svc) {
		b.Fatal("the record matched a create naming no address")
	}
	b.ReportAllocs()
	for b.Loop() {
		r.matches(b, svc)
	}
}

// compileWithRecord compiles the backstop of spec (a policy's fields) for a
// cluster whose one ServiceCIDR holds cidrs, with the record, as the leader
// compiles it where the apiserver serves MutatingAdmissionPolicy.
func compileWithRecord(t testing.TB, spec string, cidrs ...string) Set {
	t.Helper()
	p, err := policy.ParseDocument([]byte(fixtures.Policy(spec)))
	if err != nil {
		t.Fatal(err)
	}
	snap := allocview.NewView().Update(func(tx *allocview.Tx) {
		tx.SetServiceCIDR(sc("kubernetes", true, cidrs...))
		tx.MarkSynced(true)
	})
	env := policy.Env{Policy: p, Snapshot: snap}
	set, err := Compile(Input{Policy: p, Ranges: env.Ranges(), NamespaceSelector: theWebhooksSelector, Mutating: true})
	if err != nil || len(set.MutatingPolicies) != 1 {
		t.Fatalf("compile: %v (%d record policies)", err, len(set.MutatingPolicies))
	}
	return set
}
