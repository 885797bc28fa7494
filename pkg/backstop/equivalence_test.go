package backstop

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"

	"clusterip-policy/pkg/allocview"
	"clusterip-policy/pkg/policy"
	"clusterip-policy/test/fixtures"
)

// The equivalence proof: on random policies, ranges and requests, every
// rule the backstop's policies refuse, warn or audit (as the apiserver
// evaluates them) is exactly what the webhook's decision has for that rule
// with that action: policy.Validate on the object the validating stage
// sees, and, for static-ip-in-dynamic-band, policy.Mutate on the request
// as the user sent it; policy.ReviewServiceCIDR for ServiceCIDRs. So the
// backstop never refuses what the webhook admits, and refuses, for each
// rule it carries, all that the webhook refuses.

const webhookNamespace = "clusterip-policy"

// theWebhooksSelector is the Service webhooks' namespaceSelector as
// manifests/base/webhook-configurations.yaml writes it.
var theWebhooksSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
	Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpNotIn, Values: []string{webhookNamespace},
}}}

var namespaces = map[string]map[string]string{
	"default":        {},
	"kube-system":    {},
	"apps":           {"team": "apps"},
	"team-a":         {"team": "a", "env": "prod"},
	"team-b":         {"team": "b", "env": "dev"},
	"legacy":         {"env": "prod"},
	webhookNamespace: {},
}

func namespaceObject(name string) *corev1.Namespace {
	l := map[string]string{corev1.LabelMetadataName: name}
	for k, v := range namespaces[name] {
		l[k] = v
	}
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}}
}

func nsLabels(ns string) (map[string]string, bool) {
	if _, ok := namespaces[ns]; !ok {
		return nil, false
	}
	return namespaceObject(ns).Labels, true
}

// world is one random policy and cluster, compiled.
type world struct {
	spec     string
	env      policy.Env
	set      Set
	policies []compiledPolicy
	record   *recorder
	pool     []string // addresses worth trying
	nets     []string // the known ranges' network addresses
	sel      labels.Selector
}

var reservationPool = []string{
	"- {ip: 10.96.0.10, service: kube-system/kube-dns}",
	"- {ip: \"fd00:10:96::a\", service: kube-system/kube-dns}",
	"- {ip: 10.96.100.5, service: apps/frontend}",
	"- {ip: 10.96.8.9, service: team-a/db}",
	"- {ip: 10.96.0.1, service: default/kubernetes}",
	"- {ip: 10.96.40.7, service: team-b/web}",
	"- {ip: 10.96.200.3, service: apps/web}",
}

var rangePool = []string{
	"- {cidr: 10.96.0.32/28, namespaces: [kube-system], note: DNS}",
	"- {first: 10.96.40.3, last: 10.96.42.17, namespaceSelector: {matchLabels: {team: a}}, note: \"team a's 'block'\"}",
	"- {cidr: \"fd00:10:96::5:0/120\", namespaces: [apps], serviceSelector: {matchLabels: {tier: db}}}",
	"- {first: 10.96.100.0, last: 10.96.100.9, namespaces: [apps]}",
	"- {cidr: 10.96.200.0/29, namespaceSelector: {matchExpressions: [{key: env, operator: NotIn, values: [prod]}]}}",
	"- {cidr: 10.96.8.0/30, namespaceSelector: {matchExpressions: [{key: team, operator: Exists}]}, serviceSelector: {matchExpressions: [{key: tier, operator: In, values: [db, cache]}]}}",
}

var actions = []string{"deny", "warn", "audit"}

func randomWorld(t testing.TB, rnd *rand.Rand) *world {
	t.Helper()
	var b strings.Builder
	dual := rnd.IntN(2) == 0
	switch rnd.IntN(4) {
	case 1:
		b.WriteString("allowedCIDRs: [10.96.0.0/16, \"fd00:10:96::/108\"]\n")
	case 2:
		b.WriteString("allowedCIDRs: [10.96.0.0/17, 10.96.128.0/18, 10.97.0.0/24, \"fd00:10:96::/108\"]\n")
	case 3:
		b.WriteString("allowedCIDRs: [10.96.0.0/12, \"fd00:10:96::/100\"]\n")
	}
	if rnd.IntN(3) == 0 {
		b.WriteString("reserveKubernetesService: false\n")
	}
	var res []string
	for _, r := range reservationPool {
		if rnd.IntN(2) == 0 {
			res = append(res, r)
		}
	}
	if len(res) > 0 {
		b.WriteString("reservations:\n" + strings.Join(res, "\n") + "\n")
	}
	var rngs []string
	for _, r := range rangePool {
		if rnd.IntN(3) == 0 {
			rngs = append(rngs, r)
		}
	}
	if len(rngs) > 0 {
		b.WriteString("reservedRanges:\n" + strings.Join(rngs, "\n") + "\n")
	}
	fmt.Fprintf(&b, "enforcement:\n  default: %s\n  rules:\n", actions[rnd.IntN(3)])
	for _, r := range policy.Rules {
		if rnd.IntN(2) == 0 {
			fmt.Fprintf(&b, "    %s: %s\n", r, actions[rnd.IntN(3)])
		}
	}
	if rnd.IntN(3) == 0 {
		b.WriteString("exemptions: {namespaces: [legacy], users: [admin], groups: [ops]}\n")
	}
	spec := b.String()
	p, err := policy.ParseDocument([]byte(fixtures.Policy(spec)))
	if err != nil {
		// A random combination the loader refuses (a reservation in a
		// range of another owner's...): try again with another.
		return nil
	}
	cidrs := []allocview.ServiceCIDR{sc("kubernetes", true, "10.96.0.0/16")}
	if dual {
		cidrs[0].CIDRs = append(cidrs[0].CIDRs, netip.MustParsePrefix("fd00:10:96::/108"))
	}
	for _, extra := range []allocview.ServiceCIDR{
		sc("extra", true, "10.97.0.0/24"), sc("inner", true, "10.96.8.0/24"), sc("outside", true, "10.250.0.0/24"),
		sc("notready", false, "10.98.0.0/24"), sc("small6", true, "fd00:10:96::/120"), sc("wide", true, "10.96.0.0/15"),
	} {
		if rnd.IntN(3) == 0 {
			cidrs = append(cidrs, extra)
		}
	}
	snap := allocview.NewView().Update(func(tx *allocview.Tx) {
		for _, c := range cidrs {
			tx.SetServiceCIDR(c)
		}
		tx.MarkSynced(true)
	})
	w := &world{spec: spec, env: policy.Env{Policy: p, Snapshot: snap, NamespaceLabels: nsLabels}}
	w.sel, _ = metav1.LabelSelectorAsSelector(theWebhooksSelector)
	w.set, err = Compile(Input{Policy: p, Ranges: w.env.Ranges(), NamespaceSelector: theWebhooksSelector, Mutating: true})
	if err != nil {
		t.Fatal(err)
	}
	w.policies = compileAsAPIServer(t, w.set)
	if len(w.set.MutatingPolicies) > 0 {
		r := compileRecord(t, w.set.MutatingPolicies[0])
		w.record = &r
	}
	w.pool = addressPool(w.env.Ranges(), p)
	for _, c := range cidrs {
		for _, pr := range c.CIDRs {
			w.nets = append(w.nets, pr.Addr().String())
		}
	}
	return w
}

func sc(name string, ready bool, cidrs ...string) allocview.ServiceCIDR {
	c := allocview.ServiceCIDR{Name: name, Ready: ready}
	for _, s := range cidrs {
		c.CIDRs = append(c.CIDRs, netip.MustParsePrefix(s))
	}
	return c
}

// addressPool lists the addresses where the rules change their mind: each
// range's network, first, static edges, dynamic start, last and broadcast,
// the reservations and the reserved ranges' edges, and some outside.
func addressPool(rs allocview.RangeSet, p *policy.Policy) []string {
	seen := map[string]bool{}
	var out []string
	add := func(a netip.Addr) {
		if a.IsValid() && !seen[a.String()] {
			seen[a.String()] = true
			out = append(out, a.String())
		}
	}
	for _, s := range []string{"10.96.0.0/16", "10.97.0.0/24", "10.96.8.0/24", "10.250.0.0/24", "10.98.0.0/24", "fd00:10:96::/120", "fd00:10:96::/108", "10.96.0.0/15"} {
		r, _ := allocview.NewRange("", netip.MustParsePrefix(s))
		add(r.Prefix.Addr())
		add(r.Usable().First)
		add(r.Usable().First.Next())
		add(r.Static().Last)
		add(r.Dynamic().First)
		add(r.Dynamic().First.Next())
		add(r.Usable().Last)
		add(lastOf(r.Prefix))
	}
	for _, r := range p.Reservations {
		add(r.IP)
		add(r.IP.Next())
	}
	for _, r := range p.ReservedRanges {
		add(r.Band.First)
		add(r.Band.First.Prev())
		add(r.Band.Last)
		add(r.Band.Last.Next())
	}
	for _, s := range []string{"10.200.0.1", "10.96.130.7", "10.96.77.77", "10.111.0.5", "fd00:10:96::1:5", "fd00:10:97::1", "10.96.1.1", "10.96.8.17"} {
		add(netip.MustParseAddr(s))
	}
	slices.Sort(out)
	return out
}

// a random Service request: the object as the user sends it, the stored
// object on UPDATE, and who sends it.
type svcRequest struct {
	op       admission.Operation
	user     *corev1.Service // as sent
	old      *corev1.Service
	dryRun   bool
	username string
	groups   []string
}

func (w *world) randomService(rnd *rand.Rand) svcRequest {
	nsNames := make([]string, 0, len(namespaces))
	for n := range namespaces {
		nsNames = append(nsNames, n)
	}
	sort.Strings(nsNames)
	ns := nsNames[rnd.IntN(len(nsNames))]
	names := []string{"kube-dns", "frontend", "db", "web", "kubernetes", "cache"}
	svc := &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: names[rnd.IntN(len(names))]},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}, Type: corev1.ServiceTypeClusterIP},
	}
	if rnd.IntN(2) == 0 {
		svc.Labels = map[string]string{"tier": []string{"db", "web", "cache"}[rnd.IntN(3)]}
	}
	if rnd.IntN(4) == 0 {
		svc.Annotations = map[string]string{RecordAnnotation: "10.96.0.20", "x": "y"} // forged or stale
	}
	r := svcRequest{op: admission.Create, user: svc, dryRun: rnd.IntN(4) == 0, username: "alice", groups: []string{"system:authenticated"}}
	switch rnd.IntN(8) {
	case 0:
		r.username = "admin"
	case 1:
		r.groups = append(r.groups, "ops")
	case 2:
		r.username, r.groups = "system:apiserver", []string{"system:masters"}
	}
	switch rnd.IntN(12) {
	case 0:
		svc.Spec.Type = corev1.ServiceTypeExternalName
		svc.Spec.ExternalName = "example.com"
		return r
	case 1:
		svc.Spec.ClusterIP = corev1.ClusterIPNone
		svc.Spec.ClusterIPs = []string{corev1.ClusterIPNone}
		return r
	}
	v4, v6 := w.poolOf(true), w.poolOf(false)
	named := rnd.IntN(2) == 0
	if named {
		switch rnd.IntN(3) {
		case 0, 1:
			all := append(slices.Clone(v4), v6...)
			setIPs(svc, all[rnd.IntN(len(all))])
		case 2:
			setIPs(svc, v4[rnd.IntN(len(v4))], v6[rnd.IntN(len(v6))])
		}
	}
	if rnd.IntN(4) == 0 {
		r.op = admission.Update
		old := svc.DeepCopy()
		old.Annotations = nil
		switch rnd.IntN(3) {
		case 0: // from ExternalName
			old.Spec = corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "example.com"}
		case 1: // grows to dual-stack: the stored object had the first address
			if len(svc.Spec.ClusterIPs) == 2 {
				setIPs(old, svc.Spec.ClusterIPs[0])
				break
			}
			fallthrough
		case 2: // keeps its addresses (a label change); a stored ClusterIP Service has one
			if len(svc.Spec.ClusterIPs) == 0 {
				setIPs(svc, v4[rnd.IntN(len(v4))])
			}
			old = svc.DeepCopy()
			old.Annotations = nil
		}
		r.old = old
	}
	return r
}

func setIPs(s *corev1.Service, ips ...string) {
	s.Spec.ClusterIP = ips[0]
	s.Spec.ClusterIPs = ips
	s.Spec.IPFamilies = nil
	for _, ip := range ips {
		f := corev1.IPv4Protocol
		if strings.Contains(ip, ":") {
			f = corev1.IPv6Protocol
		}
		s.Spec.IPFamilies = append(s.Spec.IPFamilies, f)
	}
	if len(ips) == 2 {
		p := corev1.IPFamilyPolicyRequireDualStack
		s.Spec.IPFamilyPolicy = &p
	}
}

func (w *world) poolOf(v4 bool) []string {
	var out []string
	for _, a := range w.pool {
		if strings.Contains(a, ":") != v4 {
			out = append(out, a)
		}
	}
	return out
}

// final is the object the validating stage sees: the record applied, then,
// for a Service that named no address, what the allocator picked (any
// address of the pool, as a full dynamic band or a divergent apiserver
// can give) or, on a dry run, a range's network address.
func (w *world) final(t testing.TB, rnd *rand.Rand, r svcRequest) *corev1.Service {
	f := r.user
	if w.record != nil {
		f = w.record.apply(t, r.op, r.user, r.old, r.dryRun, &user.DefaultInfo{Name: r.username, Groups: r.groups})
	} else {
		f = f.DeepCopy()
	}
	if f.Spec.Type == corev1.ServiceTypeExternalName || f.Spec.ClusterIP == corev1.ClusterIPNone || len(f.Spec.ClusterIPs) > 0 {
		return f
	}
	if r.dryRun {
		setIPs(f, w.nets[rnd.IntN(len(w.nets))])
		return f
	}
	pool := w.poolOf(rnd.IntN(3) != 0)
	setIPs(f, pool[rnd.IntN(len(pool))])
	return f
}

type ruleAction struct{ rule, action string }

func (w *world) carried(resource string, rule policy.RuleID) bool {
	return slices.ContainsFunc(w.set.Carried, func(k Carried) bool { return k.Resource == resource && k.Rule == rule })
}

// webhookService is what the webhook decides for the rules the backstop
// carries.
func (w *world) webhookService(r svcRequest, final *corev1.Service) []ruleAction {
	ns := r.user.Namespace
	if !w.sel.Matches(labels.Set(namespaceObject(ns).Labels)) {
		return nil // the webhooks are never called for this namespace
	}
	if ns == "default" && r.user.Name == "kubernetes" && r.username == "system:apiserver" && slices.Contains(r.groups, "system:masters") {
		return nil // not-default-kubernetes
	}
	op := policy.Create
	if r.op == admission.Update {
		op = policy.Update
	}
	var out []ruleAction
	add := func(d policy.Decision, only policy.RuleID) {
		for _, v := range d.Violations {
			if v.Rule == policy.RuleOutsideServiceCIDRs && !w.outsideAllowed(v.IP) {
				// The backstop carries the part of the rule that the
				// policy alone decides (outside allowedCIDRs), not an
				// address inside them that no active range hands out.
				continue
			}
			if (only == "" || v.Rule == only) && w.carried(Services, v.Rule) && !slices.Contains(out, ruleAction{string(v.Rule), string(v.Action)}) {
				out = append(out, ruleAction{string(v.Rule), string(v.Action)})
			}
		}
	}
	v := policy.Validate(w.env, policy.Request{Operation: op, Service: final, OldService: r.old, User: r.username, Groups: r.groups, DryRun: r.dryRun})
	for _, viol := range v.Violations {
		if viol.Rule == policy.RuleStaticIPInDynamicBand {
			panic("the validating stage never reports " + viol.Rule)
		}
	}
	add(v, "")
	m := policy.Mutate(w.env, policy.Request{Operation: op, Service: r.user, OldService: r.old, User: r.username, Groups: r.groups, DryRun: r.dryRun})
	add(m, policy.RuleStaticIPInDynamicBand)
	return out
}

func (w *world) outsideAllowed(raw string) bool {
	ip, err := allocview.ParseIP(raw)
	if err != nil {
		return false
	}
	return !slices.ContainsFunc(w.env.Policy.AllowedCIDRs, func(p netip.Prefix) bool { return p.Contains(ip) })
}

func backstopAnswer(outs []outcome) []ruleAction {
	var got []ruleAction
	for _, o := range outs {
		ra := ruleAction{o.rule, strings.ToLower(o.action)}
		if !slices.Contains(got, ra) {
			got = append(got, ra)
		}
	}
	return got
}

func sameSet(a, b []ruleAction) bool {
	return len(a) == len(b) && !slices.ContainsFunc(a, func(x ruleAction) bool { return !slices.Contains(b, x) })
}

func TestBackstopDecidesAsTheWebhookOnRandomServiceRequests(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 37))
	worlds, requests, refused := 0, 0, 0
	for worlds < 60 {
		w := randomWorld(t, rnd)
		if w == nil {
			continue
		}
		worlds++
		for range 300 {
			r := w.randomService(rnd)
			final := w.final(t, rnd, r)
			requests++
			var oldObj *corev1.Service
			if r.old != nil {
				oldObj = r.old
			}
			req := request{op: r.op, obj: final, namespace: namespaceObject(final.Namespace), name: final.Name, dryRun: r.dryRun, user: r.username, groups: r.groups}
			if oldObj != nil {
				req.old = oldObj
			}
			outs := evaluate(t, w.policies, req)
			got := backstopAnswer(outs)
			want := w.webhookService(r, final)
			if !sameSet(got, want) {
				t.Fatalf("policy:\n%s\nrequest %s %s/%s as %s %v dryRun=%v\nsent:  %+v %v\nfinal: %+v %v\nold: %v\nbackstop: %v\nwebhook:  %v\nmessages: %+v\nrules carried: %+v",
					w.spec, r.op, final.Namespace, final.Name, r.username, r.groups, r.dryRun, r.user.Spec, r.user.Annotations, final.Spec, final.Annotations, r.old, got, want, outs, w.set.Carried)
			}
			for _, o := range outs {
				if !strings.Contains(o.message, "rule "+o.rule) || !strings.Contains(o.message, `"`) {
					t.Fatalf("message names no rule or address: %q", o.message)
				}
				checkAllocatedWording(t, w, r, o)
			}
			if len(got) > 0 {
				refused++
			}
		}
	}
	t.Logf("%d policies, %d requests, %d judged by the backstop", worlds, requests, refused)
	if refused < requests/20 {
		t.Fatalf("only %d of %d requests matched a rule: the generator is too tame to prove anything", refused, requests)
	}
}

func TestBackstopDecidesAsTheWebhookOnRandomServiceCIDRs(t *testing.T) {
	rnd := rand.New(rand.NewPCG(2, 37))
	candidates := []string{"10.96.0.0/16", "10.96.0.0/12", "10.96.0.0/24", "10.96.0.0/28", "10.96.0.0/20", "10.96.0.0/17", "10.96.0.0/8",
		"10.96.0.16/28", "10.96.0.0/25", "10.96.1.0/24", "10.96.0.128/25", "10.97.0.0/16", "10.96.0.0/8", "10.64.0.0/10",
		"10.96.128.0/17", "10.96.0.0/30", "FD00:10:96::/108", "10.96.0.4/30", "10.96.1.0/30", "10.96.0.0/31", "10.96.0.8/29", "10.250.0.0/24",
		"10.96.8.0/24", "10.96.8.32/27", "10.96.8.0/20", "10.96.8.0/26", "10.96.8.16/28", "10.0.0.0/8", "0.0.0.0/0", "10.97.0.0/24",
		"fd00:10:96::/108", "fd00:10:96::/120", "fd00:10:96::/64", "fd00:10:96::100/120", "fd00:10:96::/124", "fd00:10:96::10/124", "fd00:10::/64"}
	worlds, requests, refused := 0, 0, 0
	for worlds < 60 {
		w := randomWorld(t, rnd)
		if w == nil {
			continue
		}
		worlds++
		for range 200 {
			name := []string{"kubernetes", "extra", "new", "inner", "team"}[rnd.IntN(5)]
			var cidrs []string
			n := 1 + rnd.IntN(2)
			for range n {
				c := candidates[rnd.IntN(len(candidates))]
				if len(cidrs) == 1 && strings.Contains(cidrs[0], ":") == strings.Contains(c, ":") {
					continue
				}
				cidrs = append(cidrs, c)
			}
			op, username, groups := admission.Create, "alice", []string{"system:authenticated"}
			switch rnd.IntN(6) {
			case 0:
				username = "admin"
			case 1:
				username, groups = "system:apiserver", []string{"system:masters"}
			}
			obj := &networkingv1.ServiceCIDR{TypeMeta: metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "ServiceCIDR"},
				ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: cidrs}}
			req := request{op: op, obj: obj, name: name, user: username, groups: groups}
			var oldCIDRs []string
			if len(cidrs) == 2 && rnd.IntN(2) == 0 {
				req.op = admission.Update
				oldCIDRs = cidrs[:1]
				req.old = &networkingv1.ServiceCIDR{TypeMeta: obj.TypeMeta, ObjectMeta: obj.ObjectMeta, Spec: networkingv1.ServiceCIDRSpec{CIDRs: oldCIDRs}}
			}
			requests++
			outs := evaluate(t, w.policies, req)
			got := backstopAnswer(outs)
			var want []ruleAction
			if !(name == "kubernetes" && username == "system:apiserver") {
				pop := policy.Create
				if req.op == admission.Update {
					pop = policy.Update
				}
				d := policy.ReviewServiceCIDR(w.env, policy.ServiceCIDRRequest{Operation: pop, Name: name, CIDRs: cidrs, OldCIDRs: oldCIDRs, User: username, Groups: groups})
				for _, v := range d.Violations {
					ra := ruleAction{string(v.Rule), string(v.Action)}
					if w.carried(ServiceCIDRs, v.Rule) && !slices.Contains(want, ra) {
						want = append(want, ra)
					}
				}
			}
			if !sameSet(got, want) {
				t.Fatalf("policy:\n%s\nranges %s\n%s ServiceCIDR %s %v (old %v) as %s\nbackstop: %v\nwebhook:  %v\nmessages: %+v",
					w.spec, w.env.Ranges().Describe(), req.op, name, cidrs, oldCIDRs, username, got, want, outs)
			}
			if len(got) > 0 {
				refused++
			}
		}
	}
	t.Logf("%d policies, %d ServiceCIDR requests, %d judged by the backstop", worlds, requests, refused)
	if refused < requests/10 {
		t.Fatalf("only %d of %d requests matched a rule: the generator is too tame", refused, requests)
	}
}

// quotedAddress is the address a backstop message names first.
var quotedAddress = regexp.MustCompile(`ClusterIP "([^"]*)"`)

// checkAllocatedWording: where the record exists, a message about an
// address the request did not name says the apiserver picked it (and, when
// it refuses, to create the Service again), never to leave clusterIP empty
// to a user who did; one about a named address says what to name instead.
func checkAllocatedWording(t *testing.T, w *world, r svcRequest, o outcome) {
	t.Helper()
	m := quotedAddress.FindStringSubmatch(o.message)
	if m == nil {
		t.Fatalf("message names no ClusterIP: %q", o.message)
	}
	if w.record == nil || o.rule == string(policy.RuleStaticIPInDynamicBand) {
		if strings.HasPrefix(o.message, "allocated ") {
			t.Fatalf("without the record (or for a named address) the message cannot know the address was allocated: %q", o.message)
		}
		return
	}
	named := false
	for _, raw := range append(slices.Clone(r.user.Spec.ClusterIPs), r.user.Spec.ClusterIP) {
		if a, err := netip.ParseAddr(raw); err == nil && a.String() == m[1] {
			named = true
		}
	}
	allocated := strings.HasPrefix(o.message, "allocated ClusterIP")
	switch {
	case named && allocated:
		t.Fatalf("%s was named by the request, yet the message says allocated: %q", m[1], o.message)
	case !named && !allocated:
		t.Fatalf("%s was picked by the apiserver (the request named %v), yet the message does not say so: %q", m[1], r.user.Spec.ClusterIPs, o.message)
	case !named && strings.Contains(o.message, "leave clusterIP empty"):
		t.Fatalf("tells a request that named no address to leave clusterIP empty: %q", o.message)
	case !named && strings.EqualFold(o.action, "deny") && !strings.Contains(o.message, "create the Service again"):
		t.Fatalf("a refused allocated address without the way out: %q", o.message)
	}
}
