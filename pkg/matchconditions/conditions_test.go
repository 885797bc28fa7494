package matchconditions

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/cel/environment"

	"clusterip-policy/pkg/allocview"
	"clusterip-policy/pkg/policy"
	"clusterip-policy/test/fixtures"
)

// The expressions are compiled and evaluated by the kube-apiserver's own
// code for webhook matchConditions (k8s.io/apiserver matchconditions and
// its CEL environment), so a typo or a missing has() fails here, not on a
// cluster.

var (
	serviceGVK = schema.GroupVersionKind{Version: "v1", Kind: "Service"}
	serviceGVR = schema.GroupVersionResource{Version: "v1", Resource: "services"}
)

// compileNew compiles expr as the apiserver does when a webhook
// configuration is created or updated (validation of new expressions).
func compileNew(t testing.TB, expr string) {
	t.Helper()
	c := plugincel.NewCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	res := c.CompileCELExpression(&matchconditions.MatchCondition{Name: Name, Expression: expr},
		plugincel.OptionalVariableDeclarations{HasAuthorizer: true}, environment.NewExpressions)
	if res.Error != nil {
		t.Fatalf("the apiserver would refuse the expression: %v\n%s", res.Error, expr)
	}
}

// matcher evaluates expr as the apiserver does at admission time, with
// failurePolicy Fail.
type matcher struct{ m matchconditions.Matcher }

func newMatcher(t testing.TB, expr string) matcher {
	t.Helper()
	compileNew(t, expr)
	fail := admissionregistrationv1.Fail
	cc := plugincel.NewConditionCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	f := cc.CompileCondition([]plugincel.ExpressionAccessor{&matchconditions.MatchCondition{Name: Name, Expression: expr}},
		plugincel.OptionalVariableDeclarations{HasAuthorizer: true}, environment.StoredExpressions)
	return matcher{matchconditions.NewMatcher(f, &fail, "webhook", "admit", "test")}
}

// match reports whether the webhook would be called; an evaluation error
// fails the test (with failurePolicy Fail it would reject the request).
func (m matcher) match(t testing.TB, op admission.Operation, ns, name string, obj, old *corev1.Service, dryRun bool) bool {
	t.Helper()
	var oldObj runtime.Object
	if old != nil {
		oldObj = old
	}
	var opts runtime.Object = &metav1.CreateOptions{}
	if op == admission.Update {
		opts = &metav1.UpdateOptions{}
	}
	attr := admission.NewAttributesRecord(obj, oldObj, serviceGVK, ns, name, serviceGVR, "", op, opts, dryRun, &user.DefaultInfo{Name: "alice", Groups: []string{"system:authenticated"}})
	va, err := admission.NewVersionedAttributes(attr, serviceGVK, nil)
	if err != nil {
		t.Fatal(err)
	}
	res := m.m.Match(context.Background(), va, nil, nil)
	if res.Error != nil {
		t.Fatalf("expression failed to evaluate for %s %s/%s %+v: %v", op, ns, name, obj.Spec, res.Error)
	}
	return res.Matches
}

const testPolicy = `
allowedCIDRs: [10.96.0.0/16, fd00:10:96::/108]
reservations:
- {ip: 10.96.0.10, service: kube-system/kube-dns}
- {ip: 10.96.100.5, service: apps/frontend}
- {ip: "fd00:10:96::a", service: kube-system/kube-dns}
`

// rangesPolicy adds reserved ranges to testPolicy: a DNS block in the
// static band, a team block in the dynamic band given as first-last (not a
// CIDR), an IPv6 block with a Service selector, and a single reservation
// inside a range.
const rangesPolicy = testPolicy + `reservedRanges:
- {cidr: 10.96.0.8/29, namespaces: [kube-system], note: DNS}
- {first: 10.96.40.3, last: 10.96.42.17, namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: other}}, note: team other}
- {cidr: "fd00:10:96::5:0/120", namespaces: [apps], serviceSelector: {matchLabels: {tier: db}}}
- {first: 10.96.100.0, last: 10.96.100.9, namespaces: [apps]}
`

func snapshot(cidrs ...allocview.ServiceCIDR) *allocview.Snapshot {
	return allocview.NewView().Update(func(tx *allocview.Tx) {
		for _, c := range cidrs {
			tx.SetServiceCIDR(c)
		}
		tx.MarkSynced(true)
	})
}

func serviceCIDR(name string, cidrs ...string) allocview.ServiceCIDR {
	c := allocview.ServiceCIDR{Name: name, Ready: true}
	for _, s := range cidrs {
		c.CIDRs = append(c.CIDRs, netip.MustParsePrefix(s))
	}
	return c
}

func TestAllowListIsTheDynamicBandsMinusReservedAddresses(t *testing.T) {
	env := policy.Env{Policy: fixtures.MustPolicy(t, policy.ParseDocument, testPolicy), Snapshot: snapshot(
		serviceCIDR("kubernetes", "10.96.0.0/16"),
		serviceCIDR("extra", "10.97.0.0/24"),      // outside allowedCIDRs: not listed
		serviceCIDR("small", "fd00:10:96::/120"))} // inside: its dynamic band is fd00:10:96::11-ff
	got, capped := AllowList(env.Policy, env.Ranges(), MaxPrefixes)
	if capped {
		t.Fatal("capped")
	}
	contains := func(s string) bool {
		ip := netip.MustParseAddr(s)
		for _, p := range got {
			if p.Contains(ip) {
				return true
			}
		}
		return false
	}
	for ip, want := range map[string]bool{
		"10.96.0.10": false, "10.96.1.0": false, "10.96.1.1": true, "10.96.100.4": true, "10.96.100.5": false,
		"10.96.100.6": true, "10.96.255.254": true, "10.96.255.255": false, "10.97.0.20": false, "10.96.0.0": false,
		"fd00:10:96::10": false, "fd00:10:96::11": true, "fd00:10:96::ff": true, "fd00:10:96::100": false,
	} {
		if contains(ip) != want {
			t.Errorf("allow-list contains %s = %v, want %v (list %v)", ip, !want, want, got)
		}
	}
}

func TestAllowListCapKeepsTheWidestPrefixes(t *testing.T) {
	var b strings.Builder
	b.WriteString("reservations:\n")
	for i := range 300 { // 300 reservations in the dynamic band: far more than MaxPrefixes prefixes
		fmt.Fprintf(&b, "- {ip: 10.96.%d.%d, service: ns/svc%d}\n", 2+i%250, 10+i/250*50, i)
	}
	p := fixtures.MustPolicy(t, policy.ParseDocument, b.String())
	env := policy.Env{Policy: p, Snapshot: snapshot(serviceCIDR("kubernetes", "10.96.0.0/16"))}
	got, capped := AllowList(p, env.Ranges(), MaxPrefixes)
	if !capped || len(got) != MaxPrefixes {
		t.Fatalf("capped %v, %d prefixes; want capped at %d", capped, len(got), MaxPrefixes)
	}
	for _, r := range p.Reservations {
		for _, pr := range got {
			if pr.Contains(r.IP) {
				t.Fatalf("capped allow-list %s contains reserved %s", pr, r.IP)
			}
		}
	}
	all, _ := AllowList(p, env.Ranges(), 1<<20)
	narrowestKept := 0
	for _, pr := range got {
		narrowestKept = max(narrowestKept, pr.Bits())
	}
	for _, pr := range all {
		if !slicesContains(got, pr) && pr.Bits() < narrowestKept {
			t.Errorf("dropped %s, wider than the kept /%d", pr, narrowestKept)
		}
	}
}

func slicesContains(ps []netip.Prefix, p netip.Prefix) bool {
	for _, q := range ps {
		if q == p {
			return true
		}
	}
	return false
}

func TestCommonDynamicCreateSkipsBothWebhooks(t *testing.T) {
	env := policy.Env{Policy: fixtures.MustPolicy(t, policy.ParseDocument, testPolicy), Snapshot: snapshot(serviceCIDR("kubernetes", "10.96.0.0/16", "fd00:10:96::/108"))}
	c := Compute(env.Policy, env.Ranges())
	mut, val := newMatcher(t, c.Mutating), newMatcher(t, c.Validating)
	run := runCase(t, mut, val)
	final := func(ips ...string) func(*corev1.Service) {
		return func(s *corev1.Service) {
			s.Spec.ClusterIP, s.Spec.ClusterIPs = ips[0], ips
			for _, ip := range ips {
				if strings.Contains(ip, ":") {
					s.Spec.IPFamilies = append(s.Spec.IPFamilies, corev1.IPv6Protocol)
				} else {
					s.Spec.IPFamilies = append(s.Spec.IPFamilies, corev1.IPv4Protocol)
				}
			}
		}
	}
	for _, tc := range []struct {
		name      string
		mutate    bool
		ns, svc   string
		obj       *corev1.Service
		wantCall  bool
		dryRun    bool
		operation admission.Operation
	}{
		{"dynamic create, mutate", true, "apps", "web", fixtures.Service("apps", "web"), false, false, admission.Create},
		{"generateName create, mutate", true, "apps", "", fixtures.Service("apps", "", func(s *corev1.Service) { s.GenerateName = "web-" }), false, false, admission.Create},
		{"owner's create, mutate", true, "apps", "frontend", fixtures.Service("apps", "frontend"), true, false, admission.Create},
		{"owner named only by the request, mutate", true, "apps", "frontend", fixtures.Service("", ""), true, false, admission.Create},
		{"static create, mutate", true, "apps", "web", fixtures.Service("apps", "web", fixtures.WithClusterIP("10.96.0.50")), true, false, admission.Create},
		{"headless create, mutate", true, "apps", "web", fixtures.Service("apps", "web", fixtures.WithClusterIP("None")), true, false, admission.Create},
		{"odd ipFamilies, mutate", true, "apps", "web", fixtures.Service("apps", "web", func(s *corev1.Service) { s.Spec.IPFamilies = []corev1.IPFamily{"IPv4", "IPv4"} }), true, false, admission.Create},
		// An UPDATE that changes nothing allocates nothing: the mutating
		// webhook's static conditions send every UPDATE, the managed one
		// narrows them (AllocatingUpdate).
		{"update that allocates nothing, mutate", true, "apps", "web", fixtures.Service("apps", "web"), false, false, admission.Update},
		{"dynamic allocation, validate", false, "apps", "web", fixtures.Service("apps", "web", final("10.96.77.3")), false, false, admission.Create},
		{"dual-stack dynamic allocation, validate", false, "apps", "web", fixtures.Service("apps", "web", final("fd00:10:96::9:1", "10.96.77.3")), false, false, admission.Create},
		{"dynamic landing on a reservation, validate", false, "apps", "web", fixtures.Service("apps", "web", final("10.96.100.5")), true, false, admission.Create},
		{"static band, validate", false, "apps", "web", fixtures.Service("apps", "web", final("10.96.0.77")), true, false, admission.Create},
		{"first dynamic address, validate", false, "apps", "web", fixtures.Service("apps", "web", final("10.96.1.1")), false, false, admission.Create},
		{"last address of the static band, validate", false, "apps", "web", fixtures.Service("apps", "web", final("10.96.1.0")), true, false, admission.Create},
		{"broadcast address, validate", false, "apps", "web", fixtures.Service("apps", "web", final("10.96.255.255")), true, false, admission.Create},
		{"leading zeros, validate", false, "apps", "web", fixtures.Service("apps", "web", final("010.096.077.003")), true, false, admission.Create},
		{"IPv4-mapped, validate", false, "apps", "web", fixtures.Service("apps", "web", final("::ffff:10.96.77.3")), true, false, admission.Create},
		{"IPv6 in an IPv4 slot, validate", false, "apps", "web", fixtures.Service("apps", "web", func(s *corev1.Service) {
			final("fd00:10:96::9:1")(s)
			s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol}
		}), true, false, admission.Create},
		{"IPv6 dynamic written out in full, validate", false, "apps", "web", fixtures.Service("apps", "web", final("fd00:0010:0096:0000:0000:0000:0009:0001")), false, false, admission.Create},
		{"dry-run placeholder, validate", false, "apps", "web", fixtures.Service("apps", "web", final("10.96.0.0")), true, true, admission.Create},
		{"outside, validate", false, "apps", "web", fixtures.Service("apps", "web", final("10.200.0.3")), true, false, admission.Create},
		{"update, validate", false, "apps", "web", fixtures.Service("apps", "web", final("10.96.77.3")), true, false, admission.Update},
	} {
		run(tc.name, tc.mutate, tc.ns, tc.svc, tc.obj, tc.wantCall, tc.dryRun, tc.operation)
	}
	// With reserved ranges, the common dynamic create still skips both;
	// an address in a range is sent to the validating webhook.
	env = policy.Env{Policy: fixtures.MustPolicy(t, policy.ParseDocument, rangesPolicy), Snapshot: snapshot(serviceCIDR("kubernetes", "10.96.0.0/16", "fd00:10:96::/108"))}
	c = Compute(env.Policy, env.Ranges())
	if len(c.Skip.Terms) == 0 || len(c.Skip.Reserved) == 0 || c.AllowListCapped {
		t.Fatalf("ranges: want the ranges-and-holes form with reserved prefixes, got %+v (capped %v)", c.Skip, c.AllowListCapped)
	}
	run = runCase(t, newMatcher(t, c.Mutating), newMatcher(t, c.Validating))
	for _, tc := range []struct {
		name     string
		mutate   bool
		obj      *corev1.Service
		wantCall bool
	}{
		{"ranges: dynamic create, mutate", true, fixtures.Service("apps", "web"), false},
		{"ranges: static create in a range, mutate", true, fixtures.Service("apps", "web", fixtures.WithClusterIP("10.96.40.5")), true},
		{"ranges: dynamic allocation, validate", false, fixtures.Service("apps", "web", final("10.96.77.3")), false},
		{"ranges: dual-stack dynamic allocation, validate", false, fixtures.Service("apps", "web", final("fd00:10:96::9:1", "10.96.77.3")), false},
		{"ranges: the address before a first-last range, validate", false, fixtures.Service("apps", "web", final("10.96.40.2")), false},
		{"ranges: a first-last range's first address, validate", false, fixtures.Service("apps", "web", final("10.96.40.3")), true},
		{"ranges: inside a first-last range, validate", false, fixtures.Service("apps", "web", final("10.96.41.200")), true},
		{"ranges: a first-last range's last address, validate", false, fixtures.Service("apps", "web", final("10.96.42.17")), true},
		{"ranges: the address after it, validate", false, fixtures.Service("apps", "web", final("10.96.42.18")), false},
		{"ranges: an IPv6 range, validate", false, fixtures.Service("apps", "web", final("fd00:10:96::5:ab")), true},
		{"ranges: an IPv6 range respelt, validate", false, fixtures.Service("apps", "web", final("FD00:10:96:0::5:AB")), true},
		{"ranges: IPv6 next to the range, validate", false, fixtures.Service("apps", "web", final("fd00:10:96::5:100")), false},
	} {
		run(tc.name, tc.mutate, "apps", "web", tc.obj, tc.wantCall, false, admission.Create)
	}
}

func runCase(t *testing.T, mut, val matcher) func(name string, mutate bool, ns, svc string, obj *corev1.Service, wantCall, dryRun bool, operation admission.Operation) {
	return func(name string, mutate bool, ns, svc string, obj *corev1.Service, wantCall, dryRun bool, operation admission.Operation) {
		t.Run(name, func(t *testing.T) {
			m := val
			if mutate {
				m = mut
			}
			var old *corev1.Service
			if operation == admission.Update {
				old = obj.DeepCopy()
			}
			if got := m.match(t, operation, ns, svc, obj, old, dryRun); got != wantCall {
				t.Errorf("called = %v, want %v", got, wantCall)
			}
		})
	}
}

// TestConditionIsTrueWheneverTheWebhookWouldAct is the safety property:
// for random requests, whenever policy.Mutate or policy.Validate would
// return anything but "allowed, unchanged, no warning, nothing audited",
// the managed condition sends the request to the webhook.
//
// Half of the requests have the shape the apiserver gives a final object
// (families following the addresses, clusterIP equal to clusterIPs[0]), so
// that the skipping branches are reached; the addresses come from every
// band, from the edges of each range, of each excluded static prefix and
// of each hole, and in other spellings of the same address (IPv6 written
// out in full or in capitals, IPv4 with leading zeros or IPv4-mapped),
// which the holes must not let through.
func TestConditionIsTrueWheneverTheWebhookWouldAct(t *testing.T) {
	envs := map[string]policy.Env{
		"single-stack, allowed /16": {Policy: fixtures.MustPolicy(t, policy.ParseDocument, testPolicy), Snapshot: snapshot(serviceCIDR("kubernetes", "10.96.0.0/16"), serviceCIDR("extra", "10.97.0.0/24"))},
		"dual-stack, narrowed": {Policy: fixtures.MustPolicy(t, policy.ParseDocument, "allowedCIDRs: [10.96.0.0/17, 'fd00:10:96::/112']\nreservations:\n- {ip: 10.96.0.10, service: kube-system/kube-dns}\n- {ip: 10.96.9.9, service: apps/frontend}\n"),
			Snapshot: snapshot(serviceCIDR("kubernetes", "10.96.0.0/16", "fd00:10:96::/108"), serviceCIDR("small", "10.96.50.0/24"))},
		"warn everything":  {Policy: fixtures.MustPolicy(t, policy.ParseDocument, testPolicy+"enforcement: {default: warn}\n"), Snapshot: snapshot(serviceCIDR("kubernetes", "10.96.0.0/16"))},
		"audit everything": {Policy: fixtures.MustPolicy(t, policy.ParseDocument, testPolicy+"enforcement: {default: audit}\n"), Snapshot: snapshot(serviceCIDR("kubernetes", "10.96.0.0/16", "fd00:10:96::/108"))},
		// Nested ranges, ranges without a static band (offset 0), an
		// owner whose name other Services share (the names' prefilter
		// passes, the key does not), reservations in dynamic bands.
		"nested and tiny ranges": {Policy: fixtures.MustPolicy(t, policy.ParseDocument, "reservations:\n- {ip: 10.96.0.10, service: kube-system/kube-dns}\n- {ip: 10.96.50.20, service: other/web}\n- {ip: 10.98.0.5, service: apps/frontend}\n- {ip: 'fd00:10:96::9:1', service: apps/frontend}\n- {ip: 'fd00:20::7', service: kube-system/kube-dns}\n"),
			Snapshot: snapshot(serviceCIDR("kubernetes", "10.96.0.0/16", "fd00:10:96::/108"), serviceCIDR("nested", "10.96.50.0/24"),
				serviceCIDR("tiny", "10.98.0.0/28", "fd00:20::/124"), serviceCIDR("dying", "10.99.0.0/24"))},
		// Reserved ranges in both bands and families, by name, label
		// selector and Service selector, with a reservation inside one.
		"reserved ranges": {Policy: fixtures.MustPolicy(t, policy.ParseDocument, rangesPolicy), Snapshot: snapshot(serviceCIDR("kubernetes", "10.96.0.0/16", "fd00:10:96::/108"), serviceCIDR("extra", "10.97.0.0/24"))},
		"reserved ranges, warned": {Policy: fixtures.MustPolicy(t, policy.ParseDocument, rangesPolicy+"enforcement: {rules: {reserved-range-for-other: warn}}\n"),
			Snapshot: snapshot(serviceCIDR("kubernetes", "10.96.0.0/16", "fd00:10:96::/108"))},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	pools := []string{"", "", "", "None", "10.96.0.10", "10.96.100.5", "10.96.9.9", "10.96.0.1", "10.96.0.0", "10.96.255.255",
		"10.97.0.30", "10.200.0.1", "fd00:10:96::a", "fd00:10:96::1", "fd00:10:96::0", "fd00:10:96:0::20", "not-an-ip", "::ffff:10.96.3.3", "10.96.50.0"}
	famSets := [][]corev1.IPFamily{nil, nil, {"IPv4"}, {"IPv6"}, {"IPv4", "IPv6"}, {"IPv6", "IPv4"}, {"IPv4", "IPv4"}, {"IPvX"}, {"IPv4", "IPv6", "IPv4"}}
	names := [][2]string{{"apps", "web"}, {"apps", "frontend"}, {"kube-system", "kube-dns"}, {"default", "kubernetes"}, {"apps", ""}, {"other", "web"}}
	called := map[string]int{}
	for envName, env := range envs {
		c := Compute(env.Policy, env.Ranges())
		edges := edgeAddresses(env.Ranges(), c.Skip, env.Policy)
		randomAddr := func() string {
			var a string
			switch rng.IntN(6) {
			case 0:
				a = pools[rng.IntN(len(pools))]
			case 1:
				a = fmt.Sprintf("10.96.%d.%d", rng.IntN(256), rng.IntN(256))
			case 2:
				a = fmt.Sprintf("fd00:10:96::%x:%x", rng.IntN(16), rng.IntN(65536))
			case 3:
				a = fmt.Sprintf("10.96.%d.%d", []int{0, 1, 40, 41, 42, 100}[rng.IntN(6)], rng.IntN(256))
			default:
				a = edges[rng.IntN(len(edges))]
			}
			if rng.IntN(4) == 0 {
				a = respell(a, rng.IntN(2))
			}
			return a
		}
		mut, val := newMatcher(t, c.Mutating), newMatcher(t, c.Validating)
		for i := range 4000 {
			nn := names[rng.IntN(len(names))]
			svc := fixtures.Service(nn[0], nn[1])
			if rng.IntN(3) == 0 { // the label a reserved range's serviceSelector asks for
				svc.Labels = map[string]string{"tier": "db"}
			}
			if rng.IntN(5) == 0 { // the namespace only in the request, as the apiserver may send it
				svc.Namespace = ""
			}
			n := rng.IntN(3) // 0, 1 or 2 addresses; now and then a hostile 3 or 4
			if rng.IntN(40) == 0 {
				n += 2
			}
			ips := []string{}
			for range n {
				ips = append(ips, randomAddr())
			}
			if rng.IntN(2) == 0 && n > 0 && n <= 2 {
				// As the apiserver leaves a final object.
				svc.Spec.ClusterIP, svc.Spec.ClusterIPs = ips[0], ips
				for _, ip := range ips {
					f := corev1.IPv4Protocol
					if strings.Contains(ip, ":") {
						f = corev1.IPv6Protocol
					}
					svc.Spec.IPFamilies = append(svc.Spec.IPFamilies, f)
				}
			} else {
				switch rng.IntN(3) {
				case 0:
					svc.Spec.ClusterIPs = ips
					if len(ips) > 0 && rng.IntN(4) > 0 {
						svc.Spec.ClusterIP = ips[0]
					}
				case 1:
					if len(ips) > 0 {
						svc.Spec.ClusterIP = ips[0]
					}
				}
				svc.Spec.IPFamilies = famSets[rng.IntN(len(famSets))]
			}
			if rng.IntN(3) == 0 {
				pol := []corev1.IPFamilyPolicy{corev1.IPFamilyPolicySingleStack, corev1.IPFamilyPolicyPreferDualStack, corev1.IPFamilyPolicyRequireDualStack}[rng.IntN(3)]
				svc.Spec.IPFamilyPolicy = &pol
			}
			if rng.IntN(20) == 0 {
				svc.Spec.Type = corev1.ServiceTypeExternalName
			}
			dryRun := rng.IntN(6) == 0
			req := policy.Request{Operation: policy.Create, Service: svc.DeepCopy(), User: "alice", Groups: []string{"system:authenticated"}, DryRun: dryRun}
			if req.Service.Namespace == "" {
				req.Service.Namespace = nn[0] // as internal/admission's reviewer.answer fills it in
			}
			for _, stage := range []struct {
				name   string
				decide func(policy.Env, policy.Request) policy.Decision
				m      matcher
			}{{"mutate", policy.Mutate, mut}, {"validate", policy.Validate, val}} {
				d := stage.decide(env, req)
				acts := d.Outcome != policy.Allowed || len(d.Violations) > 0 || len(d.Patch) > 0 || len(d.Warnings) > 0
				got := stage.m.match(t, admission.Create, nn[0], nn[1], svc, nil, dryRun)
				called[fmt.Sprintf("%s %v", stage.name, got)]++
				if acts && !got {
					t.Fatalf("%s, request %d: %s would act (%s: %s) but the condition skips the call\nservice %s/%s spec %+v",
						envName, i, stage.name, d.Outcome, d.Message, nn[0], nn[1], svc.Spec)
				}
			}
		}
	}
	// Both sides of both conditions, many times: a condition that always
	// calls would pass the property and prove nothing.
	for _, k := range []string{"mutate true", "mutate false", "validate true", "validate false"} {
		if called[k] < 500 {
			t.Errorf("%s: %d of the random requests, want at least 500 (%v)", k, called[k], called)
		}
	}
	t.Logf("calls and skips: %v", called)
}

// edgeAddresses are the addresses where an allow-list written as ranges
// and holes could be off by one: each active range's network, first,
// static-band end and the addresses beside it, last and broadcast; each
// term's excluded prefix's first and last address and the one after; each
// hole and its neighbours; every reserved address.
func edgeAddresses(rs allocview.RangeSet, s SkipSet, p *policy.Policy) []string {
	var out []netip.Addr
	near := func(a netip.Addr) {
		out = append(out, a)
		if n := a.Next(); n.IsValid() {
			out = append(out, n)
		}
		if n := a.Prev(); n.IsValid() {
			out = append(out, n)
		}
	}
	for _, r := range rs.Active {
		near(r.Prefix.Addr())
		near(spanOf(r.Prefix).hi)
		if d := r.Dynamic(); !d.IsZero() {
			near(d.First)
		}
		if st := r.Static(); !st.IsZero() {
			near(st.Last)
		}
	}
	for _, t := range s.Terms {
		if t.Exclude.IsValid() {
			near(t.Exclude.Addr())
			near(spanOf(t.Exclude).hi)
		}
	}
	for _, h := range s.Holes {
		near(h)
	}
	for _, r := range p.Reservations {
		near(r.IP)
	}
	for _, r := range p.ReservedRanges {
		near(r.Band.First)
		near(r.Band.Last)
	}
	for _, r := range s.Reserved {
		near(r.Addr())
		near(spanOf(r).hi)
	}
	ss := make([]string, len(out))
	for i, a := range out {
		ss[i] = a.String()
	}
	return ss
}

// respell writes the address a in another spelling the apiserver may store
// (with StrictIPCIDRValidation off, or for IPv6 always): IPv6 written out
// in full or in capitals; IPv4 with leading zeros, or IPv4-mapped.
func respell(a string, how int) string {
	ip, err := netip.ParseAddr(a)
	if err != nil {
		return a
	}
	if ip.Is4() {
		b := ip.As4()
		if how == 0 {
			return fmt.Sprintf("%03d.%03d.%03d.%03d", b[0], b[1], b[2], b[3])
		}
		return "::ffff:" + a
	}
	if how == 0 {
		return ip.StringExpanded()
	}
	return strings.ToUpper(a)
}

func TestCappedOwnersSendEveryCreate(t *testing.T) {
	var b strings.Builder
	b.WriteString("reservations:\n")
	for i := range MaxOwners + 1 {
		fmt.Fprintf(&b, "- {ip: 10.96.%d.%d, service: ns/svc%d}\n", i/250, 1+i%250, i)
	}
	p := fixtures.MustPolicy(t, policy.ParseDocument, b.String())
	c := Compute(p, policy.Env{Policy: p, Snapshot: snapshot(serviceCIDR("kubernetes", "10.96.0.0/16"))}.Ranges())
	if !c.OwnersCapped || !strings.HasSuffix(c.Mutating, ") :\ntrue") {
		t.Fatalf("owners capped %v, mutating %q; want every CREATE sent", c.OwnersCapped, c.Mutating)
	}
	if !newMatcher(t, c.Mutating).match(t, admission.Create, "apps", "web", fixtures.Service("apps", "web"), nil, false) {
		t.Fatal("a capped mutating condition skipped a create")
	}
}

func TestNilPolicySendsEveryCreate(t *testing.T) {
	c := Compute(nil, allocview.RangeSet{})
	for _, e := range []string{c.Mutating, c.Validating} {
		m := newMatcher(t, e)
		if !m.match(t, admission.Create, "apps", "web", fixtures.Service("apps", "web", func(s *corev1.Service) {
			s.Spec.ClusterIP, s.Spec.ClusterIPs, s.Spec.IPFamilies = "10.96.7.7", []string{"10.96.7.7"}, []corev1.IPFamily{"IPv4"}
		}), nil, false) {
			t.Errorf("skipped with no policy: %s", e)
		}
	}
}

// largestPolicy has MaxOwners owners with the longest names the policy
// accepts, each with an address of its own spread over both families'
// dynamic bands: the longest mutating expression, and more holes than
// MaxHoles, so the validating condition falls back to the exact prefixes,
// capped (test/e2e builds the same policy for a real apiserver).
func largestPolicy(owners int) string {
	var b strings.Builder
	b.WriteString("allowedCIDRs: [10.96.0.0/16, 'fd00:10:96::/108']\nreservations:\n")
	for i := range owners {
		ip := fmt.Sprintf("10.96.%d.%d", 2+i%250, 7+i/250)
		if i%2 == 1 {
			ip = fmt.Sprintf("fd00:10:96::%x:%x", 1+i%14, 0x101+i)
		}
		fmt.Fprintf(&b, "- {ip: '%s', service: ns%061d/svc%060d}\n", ip, i, i)
	}
	return b.String()
}

// largestSkipSet has MaxTerms ranges, each of its own ServiceCIDR, and as
// many reserved addresses in their dynamic bands as MaxHoles leaves room
// for, half of them of a long IPv6 spelling: the most range tests and
// holes an address can meet. (Holes of the longest IPv6 spelling alone
// would make the expression longer than MaxExpressionBytes, and Compute
// then falls back to the exact prefixes: the case above.)
func largestSkipSet(t *testing.T) (*policy.Policy, allocview.RangeSet) {
	var cidrs []allocview.ServiceCIDR
	var allowed []string
	for i := range MaxTerms / 2 {
		v4, v6 := fmt.Sprintf("10.%d.0.0/16", 100+i), fmt.Sprintf("fd00:1234:5678:%x::/64", 0x9a00+i)
		cidrs = append(cidrs, serviceCIDR(fmt.Sprintf("r%d", i), v4, v6))
		allowed = append(allowed, v4, "'"+v6+"'")
	}
	// Each range adds its holes (IPv4: static end and broadcast; IPv6:
	// static end); reservations fill the rest.
	room := MaxHoles - MaxTerms/2*3
	var b strings.Builder
	fmt.Fprintf(&b, "allowedCIDRs: [%s]\nreserveKubernetesService: false\nreservations:\n", strings.Join(allowed, ", "))
	for i := range room {
		if i%2 == 0 {
			fmt.Fprintf(&b, "- {ip: 'fd00:1234:5678:9a00:ffff:ffff:ffff:%x', service: ns/s%d}\n", 0xf000+i, i)
		} else {
			fmt.Fprintf(&b, "- {ip: '10.100.%d.%d', service: ns/s%d}\n", 100+i/250, 1+i%250, i)
		}
	}
	p := fixtures.MustPolicy(t, policy.ParseDocument, b.String())
	return p, policy.Env{Policy: p, Snapshot: snapshot(cidrs...)}.Ranges()
}

// worstCost evaluates expr on svc with the apiserver's evaluator and
// returns its runtime cost.
func worstCost(t *testing.T, expr string, svc *corev1.Service) int64 {
	t.Helper()
	cc := plugincel.NewConditionCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	compileNew(t, expr)
	f := cc.CompileCondition([]plugincel.ExpressionAccessor{&matchconditions.MatchCondition{Name: Name, Expression: expr}},
		plugincel.OptionalVariableDeclarations{HasAuthorizer: true}, environment.StoredExpressions)
	attr := admission.NewAttributesRecord(svc, nil, serviceGVK, svc.Namespace, svc.Name, serviceGVR, "", admission.Create, &metav1.CreateOptions{}, false, &user.DefaultInfo{Name: "alice"})
	va, _ := admission.NewVersionedAttributes(attr, serviceGVK, nil)
	const budget = 2_500_000 // RuntimeCELCostBudgetMatchConditions
	res, left, err := f.ForInput(context.Background(), va, plugincel.CreateAdmissionRequest(attr, metav1.GroupVersionResource(serviceGVR), metav1.GroupVersionKind(serviceGVK)), plugincel.OptionalVariableBindings{}, nil, budget)
	if err != nil || len(res) != 1 || res[0].Error != nil {
		t.Fatalf("%v %+v", err, res)
	}
	return budget - left
}

func dualStack(ips ...string) func(*corev1.Service) {
	return func(s *corev1.Service) {
		s.Spec.ClusterIP, s.Spec.ClusterIPs = ips[0], ips
		s.Spec.IPFamilies = nil
		for _, ip := range ips {
			f := corev1.IPv4Protocol
			if strings.Contains(ip, ":") {
				f = corev1.IPv6Protocol
			}
			s.Spec.IPFamilies = append(s.Spec.IPFamilies, f)
		}
	}
}

func TestLargestConditionsStayWithinTheApiserversLimits(t *testing.T) {
	const limit = 100_000 // far below the per-expression 1,000,000 and the 2,500,000 of all conditions of a webhook
	check := func(t *testing.T, name, expr string, svcs ...*corev1.Service) {
		t.Helper()
		if len(expr) > MaxExpressionBytes {
			t.Fatalf("%s: expression of %d bytes, over %d", name, len(expr), MaxExpressionBytes)
		}
		var worst int64
		for _, svc := range svcs {
			worst = max(worst, worstCost(t, expr, svc))
		}
		t.Logf("%s: %d bytes, worst-case runtime cost %d of the per-expression limit 1,000,000", name, len(expr), worst)
		if worst > limit {
			t.Errorf("%s: cost %d, want it under %d", name, worst, limit)
		}
	}

	t.Run("most owners, exact prefixes", func(t *testing.T) {
		p := fixtures.MustPolicy(t, policy.ParseDocument, largestPolicy(MaxOwners-1)) // plus default/kubernetes, implicitly
		env := policy.Env{Policy: p, Snapshot: snapshot(serviceCIDR("kubernetes", "10.96.0.0/16", "fd00:10:96::/108"))}
		c := Compute(p, env.Ranges())
		if c.OwnersCapped || len(c.Owners) != MaxOwners || !c.AllowListCapped || len(c.AllowList) != MaxPrefixes || len(c.Skip.Holes) != 0 {
			t.Fatalf("owners %d (capped %v), prefixes %d (capped %v), holes %d: not the largest case", len(c.Owners), c.OwnersCapped, len(c.AllowList), c.AllowListCapped, len(c.Skip.Holes))
		}
		// Worst case: an owner listed last; a dual-stack create none of
		// whose addresses is listed (every prefix tried for each).
		check(t, "mutating", c.Mutating, fixtures.Service(fmt.Sprintf("ns%061d", MaxOwners+1), fmt.Sprintf("svc%060d", MaxOwners+1)))
		check(t, "validating", c.Validating,
			fixtures.Service("apps", "web", dualStack("10.96.0.20")), fixtures.Service("apps", "web", dualStack("fd00:10:96::20")),
			fixtures.Service("apps", "web", dualStack("10.96.0.20", "fd00:10:96::20")),
			fixtures.Service("apps", "web", dualStack("fd00:10:96::20", "10.96.0.20")))
	})
	t.Run("most ranges and holes", func(t *testing.T) {
		p, rs := largestSkipSet(t)
		c := Compute(p, rs)
		if c.AllowListCapped || len(c.Skip.Terms) != MaxTerms || len(c.Skip.Holes) != MaxHoles {
			t.Fatalf("capped %v, %d terms, %d holes: not the largest case", c.AllowListCapped, len(c.Skip.Terms), len(c.Skip.Holes))
		}
		// Addresses in no range (every range tried), and in the
		// excluded static prefix of the range tried last.
		last4, last6 := "10.131.0.5", "fd00:1234:5678:9a1f::5"
		check(t, "validating", c.Validating,
			fixtures.Service("apps", "web", dualStack("10.200.0.20")), fixtures.Service("apps", "web", dualStack("fd00:99::20")),
			fixtures.Service("apps", "web", dualStack("10.200.0.20", "fd00:99::20")),
			fixtures.Service("apps", "web", dualStack("fd00:99::20", "10.200.0.20")),
			fixtures.Service("apps", "web", dualStack(last4, last6)),
			fixtures.Service("apps", "web", dualStack(last6, last4)),
			fixtures.Service("apps", "web", dualStack("10.100.7.7", "fd00:1234:5678:9a00:ffff:ffff:ffff:f000")))
	})
	t.Run("most reserved-range prefixes", func(t *testing.T) {
		// 64 ranges of two addresses that no single prefix covers: two
		// prefixes each, MaxReservedPrefixes in all, half of each family.
		var b strings.Builder
		b.WriteString("reservedRanges:\n")
		for i := range 32 {
			fmt.Fprintf(&b, "- {first: 10.96.%d.1, last: 10.96.%d.2, namespaces: [a]}\n", 10+i, 10+i)
			fmt.Fprintf(&b, "- {first: 'fd00:10:96::9:%x01', last: 'fd00:10:96::9:%x02', namespaces: [a]}\n", 0x10+i, 0x10+i)
		}
		p := fixtures.MustPolicy(t, policy.ParseDocument, b.String())
		env := policy.Env{Policy: p, Snapshot: snapshot(serviceCIDR("kubernetes", "10.96.0.0/16", "fd00:10:96::/108"))}
		c := Compute(p, env.Ranges())
		if c.AllowListCapped || len(c.Skip.Reserved) != MaxReservedPrefixes {
			t.Fatalf("capped %v, %d reserved prefixes: not the largest case", c.AllowListCapped, len(c.Skip.Reserved))
		}
		// Dynamic addresses in no range: every range prefix tried.
		check(t, "validating", c.Validating,
			fixtures.Service("apps", "web", dualStack("10.96.200.20", "fd00:10:96::9:20")),
			fixtures.Service("apps", "web", dualStack("fd00:10:96::9:20", "10.96.200.20")),
			fixtures.Service("apps", "web", dualStack("10.96.41.2", "fd00:10:96::9:2f02")))
	})
}

// TestSkipSetIsExactlyTheAllowList: the ranges and holes the validating
// condition tests hold the same addresses as the exact allow-list, for
// nested ranges, narrowed ones, ranges without a static band and both
// families: never more (a wrong skip), and not fewer (a call for nothing).
func TestSkipSetIsExactlyTheAllowList(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for name, env := range map[string]policy.Env{
		"default range": {Policy: fixtures.MustPolicy(t, policy.ParseDocument, testPolicy), Snapshot: snapshot(serviceCIDR("kubernetes", "10.96.0.0/16", "fd00:10:96::/108"))},
		"narrowed": {Policy: fixtures.MustPolicy(t, policy.ParseDocument, "allowedCIDRs: [10.96.0.0/17, 10.96.200.0/24, 'fd00:10:96::/112']\n"),
			Snapshot: snapshot(serviceCIDR("kubernetes", "10.96.0.0/16", "fd00:10:96::/108"))},
		"nested and tiny": {Policy: fixtures.MustPolicy(t, policy.ParseDocument, "reservations:\n- {ip: 10.96.50.20, service: a/b}\n- {ip: 10.98.0.5, service: a/c}\n- {ip: 'fd00:20::7', service: a/d}\n"),
			Snapshot: snapshot(serviceCIDR("kubernetes", "10.96.0.0/16", "fd00:10:96::/108"), serviceCIDR("nested", "10.96.50.0/24"),
				serviceCIDR("tiny", "10.98.0.0/28", "fd00:20::/124"), serviceCIDR("small", "10.99.0.0/27"))},
		"kubeadm /12":     {Policy: fixtures.MustPolicy(t, policy.ParseDocument, "reservations:\n- {ip: 10.100.7.7, service: a/b}\n"), Snapshot: snapshot(serviceCIDR("kubernetes", "10.96.0.0/12"))},
		"reserved ranges": {Policy: fixtures.MustPolicy(t, policy.ParseDocument, rangesPolicy), Snapshot: snapshot(serviceCIDR("kubernetes", "10.96.0.0/16", "fd00:10:96::/108"), serviceCIDR("nested", "10.96.41.0/24"))},
	} {
		t.Run(name, func(t *testing.T) {
			rs := env.Ranges()
			s, ok := Skip(env.Policy, rs, MaxTerms, MaxHoles)
			if !ok {
				t.Fatal("did not fit the bounds")
			}
			exact, capped := AllowList(env.Policy, rs, 1<<20)
			if capped {
				t.Fatal("exact allow-list capped")
			}
			in := func(a netip.Addr) (skip, allow bool) {
				for _, p := range exact {
					allow = allow || p.Contains(a)
				}
				return s.Contains(a), allow
			}
			addrs := []netip.Addr{}
			for _, e := range edgeAddresses(rs, s, env.Policy) {
				addrs = append(addrs, netip.MustParseAddr(e))
			}
			for _, r := range rs.Active {
				sp := spanOf(r.Prefix)
				if r.Prefix.Addr().BitLen()-r.Prefix.Bits() <= 8 { // every address of a small range
					for a := sp.lo; ; a = a.Next() {
						addrs = append(addrs, a)
						if a == sp.hi {
							break
						}
					}
				}
				for range 2000 { // and random ones of any range
					b := r.Prefix.Addr().AsSlice()
					for i := r.Prefix.Bits(); i < len(b)*8; i++ {
						if rng.IntN(2) == 1 {
							b[i/8] |= 0x80 >> (i % 8)
						}
					}
					a, _ := netip.AddrFromSlice(b)
					addrs = append(addrs, a)
				}
			}
			for _, a := range addrs {
				if skip, allow := in(a); skip != allow {
					t.Fatalf("%s: in the ranges and holes %v, in the exact allow-list %v (terms %v, holes %v)", a, skip, allow, s.Terms, s.Holes)
				}
			}
			t.Logf("%d addresses agree; %d terms, %d holes against %d exact prefixes", len(addrs), len(s.Terms), len(s.Holes), len(exact))
		})
	}
}

// The mutating webhook's static conditions send it every UPDATE (so that
// another mutating admission acting on an UPDATE after ours reinvokes it);
// the managed condition narrows them to exactly the UPDATEs policy.Mutate
// does not skip: none it acts on is left out, none it skips is sent.
func TestManagedMutatingConditionSendsExactlyTheUpdatesMutateActsOn(t *testing.T) {
	env := policy.Env{Policy: fixtures.MustPolicy(t, policy.ParseDocument, testPolicy), Snapshot: snapshot(serviceCIDR("kubernetes", "10.96.0.0/16", "fd00:10:96::/108"))}
	c := Compute(env.Policy, env.Ranges())
	mut := newMatcher(t, c.Mutating)
	single := fixtures.Service("apps", "web", func(s *corev1.Service) {
		s.Spec.ClusterIP, s.Spec.ClusterIPs, s.Spec.IPFamilies = "10.96.0.40", []string{"10.96.0.40"}, []corev1.IPFamily{corev1.IPv4Protocol}
		p := corev1.IPFamilyPolicySingleStack
		s.Spec.IPFamilyPolicy = &p
	})
	dual := fixtures.Service("apps", "web", dualStack("10.96.0.40", "fd00:10:96::40"), func(s *corev1.Service) {
		p := corev1.IPFamilyPolicyPreferDualStack
		s.Spec.IPFamilyPolicy = &p
	})
	external := fixtures.Service("apps", "web", func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeExternalName
		s.Spec.ExternalName = "example.com"
	})
	for _, tc := range []struct {
		name     string
		old      *corev1.Service
		change   func(*corev1.Service)
		wantSent bool
	}{
		{"a label only", single, func(s *corev1.Service) { s.Labels = map[string]string{"a": "b"} }, false},
		{"a label of a dual-stack Service", dual, func(s *corev1.Service) { s.Labels = map[string]string{"a": "b"} }, false},
		{"an ExternalName's label", external, func(s *corev1.Service) { s.Labels = map[string]string{"a": "b"} }, false},
		{"PreferDualStack with a second address named", single, func(s *corev1.Service) {
			p := corev1.IPFamilyPolicyPreferDualStack
			s.Spec.IPFamilyPolicy = &p
			s.Spec.ClusterIPs = []string{"10.96.0.40", "fd00:10:96::5000"}
			s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
		}, true},
		{"PreferDualStack alone", single, func(s *corev1.Service) {
			p := corev1.IPFamilyPolicyPreferDualStack
			s.Spec.IPFamilyPolicy = &p
		}, true},
		{"ipFamilies grown", single, func(s *corev1.Service) {
			s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
		}, true},
		{"RequireDualStack on a Service with two addresses", dual, func(s *corev1.Service) {
			p := corev1.IPFamilyPolicyRequireDualStack
			s.Spec.IPFamilyPolicy = &p
		}, false},
		{"ExternalName to ClusterIP", external, func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeClusterIP; s.Spec.ExternalName = "" }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := tc.old.DeepCopy()
			tc.change(obj)
			d := policy.Mutate(env, policy.Request{Operation: policy.Update, Service: obj, OldService: tc.old, User: "alice", Groups: []string{"system:authenticated"}})
			if acts := d.Skipped == ""; acts != tc.wantSent {
				t.Fatalf("policy.Mutate acts = %v (skipped %q), want %v", acts, d.Skipped, tc.wantSent)
			}
			if got := mut.match(t, admission.Update, "apps", "web", obj, tc.old, false); got != tc.wantSent {
				t.Fatalf("managed mutating condition sends = %v, want %v", got, tc.wantSent)
			}
		})
	}
}
