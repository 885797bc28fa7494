package policy

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"clusterip-policy/pkg/allocview"
	"clusterip-policy/test/fixtures"
)

const dnsPolicy = fixtures.KubeDNSSpec + `- ip: fd00:10:96::a
  service: kube-system/kube-dns
- ip: 10.96.200.1
  service: team-a/frontend
`

var (
	v4Only    = []allocview.ServiceCIDR{serviceCIDR("kubernetes", true, "10.96.0.0/16")}
	dualStack = []allocview.ServiceCIDR{serviceCIDR("kubernetes", true, "10.96.0.0/16", "fd00:10:96::/108")}
	v6First   = []allocview.ServiceCIDR{serviceCIDR("kubernetes", true, "fd00:10:96::/108", "10.96.0.0/16")}
	// An IPv4-only apiserver with an IPv6 ServiceCIDR object (unapproved, or
	// created ahead of a dual-stack migration).
	v4WithV6Object = []allocview.ServiceCIDR{serviceCIDR("kubernetes", true, "10.96.0.0/16"), serviceCIDR("v6-ahead", true, "fd00:10:96::/108")}
)

func TestMutateChecksEachRequestedIP(t *testing.T) {
	p := fixtures.MustPolicy(t, ParseDocument, dnsPolicy)
	tests := []struct {
		name      string
		cidrs     []allocview.ServiceCIDR
		allocated []string
		svc       *corev1.Service
		rule      RuleID // "" when allowed
		message   string // exact denial, when given
	}{
		{name: "allows a static-band IP", svc: fixtures.Service("default", "web", fixtures.WithClusterIP("10.96.0.20"))},
		{name: "allows the first static address", svc: fixtures.Service("default", "web", fixtures.WithClusterIP("10.96.0.2"))},
		{name: "allows the last static address", svc: fixtures.Service("default", "web", fixtures.WithClusterIP("10.96.1.0"))},
		{name: "denies the first dynamic address", svc: fixtures.Service("default", "web", fixtures.WithClusterIP("10.96.1.1")), rule: RuleStaticIPInDynamicBand},
		{name: "denies the last dynamic address", svc: fixtures.Service("default", "web", fixtures.WithClusterIP("10.96.255.254")), rule: RuleStaticIPInDynamicBand},
		{
			name: "denies a dynamic-band IP with the message docs/rules.md gives",
			svc:  fixtures.Service("default", "web", fixtures.WithClusterIP("10.96.200.5")), rule: RuleStaticIPInDynamicBand,
			message: `spec.clusterIP: Invalid value: "10.96.200.5": lies in the dynamic band 10.96.1.1-10.96.255.254 of ServiceCIDR "kubernetes"; choose a free address in the static band 10.96.0.1-10.96.1.0 or ask for a reservation`,
		},
		{name: "allows a dynamic-band IP reserved for this Service", svc: fixtures.Service("team-a", "frontend", fixtures.WithClusterIP("10.96.200.1"))},
		{
			name: "denies a dynamic-band IP reserved for another Service as reserved, naming the owner",
			svc:  fixtures.Service("team-b", "api", fixtures.WithClusterIP("10.96.200.1")), rule: RuleReservedForOther,
			message: `spec.clusterIP: Invalid value: "10.96.200.1": is reserved for Service team-a/frontend; choose another address, or leave clusterIP empty to get one allocated`,
		},
		{
			name: "denies the DNS IP to anyone but kube-dns",
			svc:  fixtures.Service("default", "squatter", fixtures.WithClusterIP("10.96.0.10")), rule: RuleReservedForOther,
			message: `spec.clusterIP: Invalid value: "10.96.0.10": is reserved for Service kube-system/kube-dns (cluster DNS); choose another address, or leave clusterIP empty to get one allocated`,
		},
		{name: "allows kube-dns its reserved IP", svc: fixtures.Service("kube-system", "kube-dns", fixtures.WithClusterIP("10.96.0.10"))},
		{name: "denies the first address to anyone but default/kubernetes", svc: fixtures.Service("default", "web", fixtures.WithClusterIP("10.96.0.1")), rule: RuleReservedForOther},
		{name: "allows default/kubernetes the first address", svc: fixtures.Service("default", "kubernetes", fixtures.WithClusterIP("10.96.0.1"))},
		{
			name: "denies the network address",
			svc:  fixtures.Service("default", "web", fixtures.WithClusterIP("10.96.0.0")), rule: RuleOutsideServiceCIDRs,
			message: `spec.clusterIP: Invalid value: "10.96.0.0": is the network address of 10.96.0.0/16 (ServiceCIDR "kubernetes"), which is never assigned; choose a free address in the static band 10.96.0.1-10.96.1.0`,
		},
		{name: "denies the broadcast address", svc: fixtures.Service("default", "web", fixtures.WithClusterIP("10.96.255.255")), rule: RuleOutsideServiceCIDRs},
		{
			name: "denies an IP outside every range, naming the active ranges",
			svc:  fixtures.Service("default", "web", fixtures.WithClusterIP("10.200.0.1")), rule: RuleOutsideServiceCIDRs,
			message: `spec.clusterIP: Invalid value: "10.200.0.1": is outside every active Service CIDR; the active ones are 10.96.0.0/16 (ServiceCIDR "kubernetes"): choose an address in one of them, or leave clusterIP empty to get one allocated`,
		},
		{
			name: "denies something that is not an IP",
			svc:  fixtures.Service("default", "web", fixtures.WithClusterIP("10.96.0.300")), rule: RuleInvalidIP,
			message: `spec.clusterIP: Invalid value: "10.96.0.300": is not an IP address; use an address from 10.96.0.0/16 (ServiceCIDR "kubernetes"), or leave clusterIP empty to get one allocated`,
		},
		{name: "denies an IPv4-mapped IPv6 address", svc: fixtures.Service("default", "web", fixtures.WithClusterIP("::ffff:10.96.0.20")), rule: RuleInvalidIP},
		{
			name: "denies an allocated static IP, naming the holder", allocated: []string{"10.96.0.20=default/other"},
			svc: fixtures.Service("default", "web", fixtures.WithClusterIP("10.96.0.20")), rule: RuleAlreadyAllocated,
			message: `spec.clusterIP: Invalid value: "10.96.0.20": is held by IPAddress 10.96.0.20 for Service default/other (if that Service no longer exists, the apiserver's repair loop deletes the IPAddress within about 3 minutes); choose a free address in the static band 10.96.0.1-10.96.1.0, or retry then`,
		},
		{name: "allows an IP its own Service still holds", allocated: []string{"10.96.0.20=default/web"}, svc: fixtures.Service("default", "web", fixtures.WithClusterIP("10.96.0.20"))},
		{name: "allows a static IPv6 address", cidrs: dualStack, svc: fixtures.Service("default", "web", fixtures.WithClusterIP("fd00:10:96::20"))},
		{name: "denies a dynamic IPv6 address", cidrs: dualStack, svc: fixtures.Service("default", "web", fixtures.WithClusterIP("fd00:10:96::101")), rule: RuleStaticIPInDynamicBand},
		{name: "allows the last static IPv6 address", cidrs: dualStack, svc: fixtures.Service("default", "web", fixtures.WithClusterIP("fd00:10:96::100"))},
		{name: "denies the last IPv6 address, which IPv6 ranges keep in the dynamic band", cidrs: dualStack, svc: fixtures.Service("default", "web", fixtures.WithClusterIP("fd00:10:96::f:ffff")), rule: RuleStaticIPInDynamicBand},
		{name: "denies the IPv6 DNS address in a non-canonical spelling", cidrs: dualStack, svc: fixtures.Service("default", "web", fixtures.WithClusterIP("FD00:10:96:0::A")), rule: RuleReservedForOther},
		{name: "allows kube-dns its IPv6 address in a non-canonical spelling", cidrs: dualStack, svc: fixtures.Service("kube-system", "kube-dns", fixtures.WithClusterIP("fd00:10:96:0:0::a"))},
		{name: "denies the IPv6 network address", cidrs: dualStack, svc: fixtures.Service("default", "web", fixtures.WithClusterIP("fd00:10:96::")), rule: RuleOutsideServiceCIDRs},
		{
			name: "checks every IP of a dual-stack request", cidrs: dualStack,
			svc:     fixtures.Service("default", "web", fixtures.WithClusterIPs("10.96.0.20", "fd00:10:96::200"), fixtures.WithIPFamilies(corev1.IPv4Protocol, corev1.IPv6Protocol), fixtures.WithIPFamilyPolicy(corev1.IPFamilyPolicyRequireDualStack)),
			rule:    RuleStaticIPInDynamicBand,
			message: `spec.clusterIPs[1]: Invalid value: "fd00:10:96::200": lies in the dynamic band fd00:10:96::101-fd00:10:96::f:ffff of ServiceCIDR "kubernetes"; choose a free address in the static band fd00:10:96::1-fd00:10:96::100 or ask for a reservation`,
		},
		{name: "allows a dual-stack request in IPv6-first order", cidrs: dualStack, svc: fixtures.Service("default", "web", fixtures.WithClusterIPs("fd00:10:96::20", "10.96.0.20"), fixtures.WithIPFamilies(corev1.IPv6Protocol, corev1.IPv4Protocol))},
		{name: "passes a headless Service", svc: fixtures.Service("default", "web", fixtures.WithClusterIP("None"))},
		{name: "passes an ExternalName Service", svc: fixtures.Service("default", "web", fixtures.WithType(corev1.ServiceTypeExternalName))},
		{name: "allows a dynamic request", svc: fixtures.Service("default", "web")},
		{
			name: "treats a tiny range as dynamic only", cidrs: []allocview.ServiceCIDR{serviceCIDR("kubernetes", true, "10.96.0.0/28")},
			svc: fixtures.Service("default", "web", fixtures.WithClusterIP("10.96.0.5")), rule: RuleStaticIPInDynamicBand,
			message: `spec.clusterIP: Invalid value: "10.96.0.5": lies in the dynamic band 10.96.0.1-10.96.0.14 of ServiceCIDR "kubernetes"; these ranges have no static band, so leave clusterIP empty or ask for a reservation`,
		},
		{
			name:  "denies an IP in a ServiceCIDR that is not Ready",
			cidrs: append([]allocview.ServiceCIDR{serviceCIDR("extra", false, "10.97.0.0/24")}, v4Only...),
			svc:   fixtures.Service("default", "web", fixtures.WithClusterIP("10.97.0.5")), rule: RuleOutsideServiceCIDRs,
			message: `spec.clusterIP: Invalid value: "10.97.0.5": is outside every active Service CIDR; 10.97.0.0/24 (ServiceCIDR "extra") is not Ready; the active ones are 10.96.0.0/16 (ServiceCIDR "kubernetes"): choose an address in one of them, or leave clusterIP empty to get one allocated`,
		},
		{
			name:  "allows the static band of a second ServiceCIDR",
			cidrs: append([]allocview.ServiceCIDR{serviceCIDR("extra", true, "10.97.0.0/24")}, v4Only...),
			svc:   fixtures.Service("default", "web", fixtures.WithClusterIP("10.97.0.5")),
		},
		{
			name:  "counts an IP as dynamic when any overlapping range hands it out",
			cidrs: []allocview.ServiceCIDR{serviceCIDR("kubernetes", true, "10.96.0.0/24"), serviceCIDR("wide", true, "10.96.0.0/20")},
			svc:   fixtures.Service("default", "web", fixtures.WithClusterIP("10.96.0.100")), rule: RuleStaticIPInDynamicBand,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cidrs := tt.cidrs
			if cidrs == nil {
				cidrs = v4Only
			}
			d := Mutate(Env{Policy: p, Snapshot: makeSnapshot(cidrs, tt.allocated...)}, Request{Operation: Create, Service: tt.svc})
			assertRule(t, d, tt.rule, tt.message)
		})
	}
}

// assertRule checks that d denies with exactly rule (or allows, for "").
func assertRule(t *testing.T, d Decision, rule RuleID, message string) {
	t.Helper()
	if rule == "" {
		if !d.Allowed() || len(d.Violations) > 0 {
			t.Fatalf("want allowed, got %s: %s", d.Outcome, d.Message)
		}
		return
	}
	if d.Allowed() || d.Outcome != Denied {
		t.Fatalf("want denied by %s, got %s: %s", rule, d.Outcome, d.Message)
	}
	if got := d.Rules(); len(got) != 1 || got[0] != rule {
		t.Fatalf("rules = %v, want [%s]; message %s", got, rule, d.Message)
	}
	if message != "" && d.Message != message {
		t.Fatalf("message\n got: %s\nwant: %s", d.Message, message)
	}
}

func TestMutateAssignsReservedIPs(t *testing.T) {
	p := fixtures.MustPolicy(t, ParseDocument, dnsPolicy)
	tests := []struct {
		name    string
		cidrs   []allocview.ServiceCIDR
		svc     *corev1.Service
		want    []string // clusterIPs patched in; nil for no patch
		warning string
	}{
		{name: "gives kube-dns its IPv4 address", svc: fixtures.Service("kube-system", "kube-dns"), want: []string{"10.96.0.10"}},
		{name: "gives kube-dns its IPv4 address on a dual-stack cluster when single-stack", cidrs: dualStack, svc: fixtures.Service("kube-system", "kube-dns"), want: []string{"10.96.0.10"}},
		{name: "gives kube-dns both addresses when RequireDualStack", cidrs: dualStack, svc: fixtures.Service("kube-system", "kube-dns", fixtures.WithIPFamilyPolicy(corev1.IPFamilyPolicyRequireDualStack)), want: []string{"10.96.0.10", "fd00:10:96::a"}},
		{name: "gives kube-dns both addresses when PreferDualStack on a dual-stack cluster", cidrs: dualStack, svc: fixtures.Service("kube-system", "kube-dns", fixtures.WithIPFamilyPolicy(corev1.IPFamilyPolicyPreferDualStack)), want: []string{"10.96.0.10", "fd00:10:96::a"}},
		{name: "gives kube-dns one address when PreferDualStack on a single-stack cluster", svc: fixtures.Service("kube-system", "kube-dns", fixtures.WithIPFamilyPolicy(corev1.IPFamilyPolicyPreferDualStack)), want: []string{"10.96.0.10"}},
		{name: "follows ipFamilies order", cidrs: dualStack, svc: fixtures.Service("kube-system", "kube-dns", fixtures.WithIPFamilies(corev1.IPv6Protocol, corev1.IPv4Protocol), fixtures.WithIPFamilyPolicy(corev1.IPFamilyPolicyRequireDualStack)), want: []string{"fd00:10:96::a", "10.96.0.10"}},
		{name: "uses the IPv6 primary family of an IPv6-first cluster", cidrs: v6First, svc: fixtures.Service("kube-system", "kube-dns"), want: []string{"fd00:10:96::a"}},
		{name: "assigns the first family only when the second has no reservation", cidrs: dualStack, svc: fixtures.Service("team-a", "frontend", fixtures.WithIPFamilyPolicy(corev1.IPFamilyPolicyRequireDualStack)), want: []string{"10.96.200.1"}},
		{
			name: "warns and assigns nothing when the first family has no reservation", cidrs: dualStack,
			svc:     fixtures.Service("team-a", "frontend", fixtures.WithIPFamilies(corev1.IPv6Protocol)),
			warning: "Service team-a/frontend holds reservation 10.96.200.1 but will be IPv6 first (its primary family); set ipFamilies to use the reservation",
		},
		{name: "widens ipFamilies [IPv4] to both families for RequireDualStack, as the apiserver does", cidrs: dualStack, svc: fixtures.Service("kube-system", "kube-dns", fixtures.WithIPFamilies(corev1.IPv4Protocol), fixtures.WithIPFamilyPolicy(corev1.IPFamilyPolicyRequireDualStack)), want: []string{"10.96.0.10", "fd00:10:96::a"}},
		{name: "widens ipFamilies [IPv6] to both families for PreferDualStack on a dual-stack cluster", cidrs: dualStack, svc: fixtures.Service("kube-system", "kube-dns", fixtures.WithIPFamilies(corev1.IPv6Protocol), fixtures.WithIPFamilyPolicy(corev1.IPFamilyPolicyPreferDualStack)), want: []string{"fd00:10:96::a", "10.96.0.10"}},
		{name: "an IPv6 ServiceCIDR object does not make an IPv4 apiserver dual-stack for PreferDualStack", cidrs: v4WithV6Object, svc: fixtures.Service("kube-system", "kube-dns", fixtures.WithIPFamilyPolicy(corev1.IPFamilyPolicyPreferDualStack)), want: []string{"10.96.0.10"}},
		{name: "sends no patch for RequireDualStack on a single-stack apiserver, which refuses it", cidrs: v4WithV6Object, svc: fixtures.Service("kube-system", "kube-dns", fixtures.WithIPFamilyPolicy(corev1.IPFamilyPolicyRequireDualStack))},
		{name: "sends no patch for a family the apiserver does not serve", cidrs: v4WithV6Object, svc: fixtures.Service("kube-system", "kube-dns", fixtures.WithIPFamilies(corev1.IPv6Protocol))},
		{name: "gives default/kubernetes the first address", svc: fixtures.Service("default", "kubernetes"), want: []string{"10.96.0.1"}},
		{name: "leaves a Service without reservations alone", svc: fixtures.Service("default", "web")},
		{name: "leaves a headless kube-dns alone", svc: fixtures.Service("kube-system", "kube-dns", fixtures.WithClusterIP("None"))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cidrs := tt.cidrs
			if cidrs == nil {
				cidrs = v4Only
			}
			d := Mutate(Env{Policy: p, Snapshot: makeSnapshot(cidrs)}, Request{Operation: Create, Service: tt.svc})
			if !d.Allowed() {
				t.Fatalf("denied: %s", d.Message)
			}
			if tt.want == nil {
				if len(d.Patch) != 0 {
					t.Fatalf("unexpected patch %v", d.Patch)
				}
			} else {
				wantPatch := []PatchOp{{"add", "/spec/clusterIP", tt.want[0]}, {"add", "/spec/clusterIPs", tt.want}}
				if got, want := mustJSON(d.Patch), mustJSON(wantPatch); got != want {
					t.Fatalf("patch = %s, want %s", got, want)
				}
				if d.Outcome != Patched || len(d.Mutations) != 1 || d.Mutations[0] != MutationAssignReserved {
					t.Fatalf("outcome %s mutations %v", d.Outcome, d.Mutations)
				}
			}
			if tt.warning != "" && (len(d.Warnings) != 1 || d.Warnings[0] != tt.warning) {
				t.Fatalf("warnings = %q, want %q", d.Warnings, tt.warning)
			}
		})
	}
}

func TestMutateWarnsAnOwnerThatAsksForAnotherAddress(t *testing.T) {
	p := fixtures.MustPolicy(t, ParseDocument, dnsPolicy)
	d := Mutate(Env{Policy: p, Snapshot: makeSnapshot(v4Only)}, Request{Operation: Create, Service: fixtures.Service("kube-system", "kube-dns", fixtures.WithClusterIP("10.96.0.11"))})
	want := "spec.clusterIP: 10.96.0.10 is reserved for Service kube-system/kube-dns, which asks for 10.96.0.11 instead; the reserved address stays unused"
	if !d.Allowed() || d.Outcome != Warned || len(d.Warnings) != 1 || d.Warnings[0] != want {
		t.Fatalf("%s %q", d.Outcome, d.Warnings)
	}
}

func TestMutateNamesTheFieldTheIPCameFrom(t *testing.T) {
	p := fixtures.MustPolicy(t, ParseDocument, dnsPolicy)
	svc := fixtures.Service("default", "web", func(s *corev1.Service) { s.Spec.ClusterIPs = []string{"10.96.200.5"} })
	d := Mutate(Env{Policy: p, Snapshot: makeSnapshot(v4Only)}, Request{Operation: Create, Service: svc})
	if !strings.HasPrefix(d.Message, `spec.clusterIPs[0]: Invalid value: "10.96.200.5"`) {
		t.Fatalf("message %s", d.Message)
	}
}

func TestMutateRefusesToAssignAReservedIPSomeoneHolds(t *testing.T) {
	p := fixtures.MustPolicy(t, ParseDocument, dnsPolicy)
	d := Mutate(Env{Policy: p, Snapshot: makeSnapshot(v4Only, "10.96.0.10=default/squatter")}, Request{Operation: Create, Service: fixtures.Service("kube-system", "kube-dns")})
	assertRule(t, d, RuleAlreadyAllocated, `spec.clusterIP: Invalid value: "10.96.0.10": is reserved for this Service (cluster DNS) but held by IPAddress 10.96.0.10 for Service default/squatter; free it (kubectl -n default delete service squatter, or recreate that Service without this address; if that Service no longer exists, the apiserver's repair loop deletes the IPAddress within about 3 minutes), then create this Service again`)
	if len(d.Patch) != 0 {
		t.Fatalf("patched although denied: %v", d.Patch)
	}
	// At warn the owner falls back to a dynamic address, and is told so.
	p = fixtures.MustPolicy(t, ParseDocument, dnsPolicy+"enforcement:\n  rules:\n    already-allocated: warn\n")
	d = Mutate(Env{Policy: p, Snapshot: makeSnapshot(v4Only, "10.96.0.10=default/squatter")}, Request{Operation: Create, Service: fixtures.Service("kube-system", "kube-dns")})
	want := `spec.clusterIP: Invalid value: "10.96.0.10": is reserved for this Service (cluster DNS) but held by IPAddress 10.96.0.10 for Service default/squatter; free it (kubectl -n default delete service squatter, or recreate that Service without this address; if that Service no longer exists, the apiserver's repair loop deletes the IPAddress within about 3 minutes), this Service gets a dynamic address meanwhile: recreate it once the address is free`
	if !d.Allowed() || len(d.Patch) != 0 || len(d.Warnings) != 1 || d.Warnings[0] != want {
		t.Fatalf("allowed %v patch %v warnings %q", d.Allowed(), d.Patch, d.Warnings)
	}
}

// An owner that names its own reserved address while someone else holds it
// is told who holds it, not to choose another address.
func TestMutateTellsAnOwnerNamingItsReservationWhoHoldsIt(t *testing.T) {
	p := fixtures.MustPolicy(t, ParseDocument, dnsPolicy)
	d := Mutate(Env{Policy: p, Snapshot: makeSnapshot(v4Only, "10.96.0.10=default/squatter")}, Request{Operation: Create, Service: fixtures.Service("kube-system", "kube-dns", fixtures.WithClusterIP("10.96.0.10"))})
	assertRule(t, d, RuleAlreadyAllocated, `spec.clusterIP: Invalid value: "10.96.0.10": is reserved for this Service (cluster DNS) but held by IPAddress 10.96.0.10 for Service default/squatter; free it (kubectl -n default delete service squatter, or recreate that Service without this address; if that Service no longer exists, the apiserver's repair loop deletes the IPAddress within about 3 minutes), then create this Service again`)
}

// A reservation owner that grows to dual-stack by ipFamilyPolicy alone gets
// its reserved address of the new family, as on create.
func TestMutateAssignsTheReservationOfAFamilyAnUpdateAdds(t *testing.T) {
	p := fixtures.MustPolicy(t, ParseDocument, dnsPolicy)
	env := Env{Policy: p, Snapshot: makeSnapshot(dualStack, "10.96.0.10=kube-system/kube-dns")}
	single := fixtures.Service("kube-system", "kube-dns", fixtures.WithClusterIPs("10.96.0.10"), fixtures.WithIPFamilies(corev1.IPv4Protocol), fixtures.WithIPFamilyPolicy(corev1.IPFamilyPolicySingleStack))
	grown := func(tweaks ...func(*corev1.Service)) *corev1.Service {
		s := single.DeepCopy()
		for _, tw := range tweaks {
			tw(s)
		}
		return s
	}
	tests := []struct {
		name     string
		env      Env
		old, svc *corev1.Service
		patch    string // "" for none
		rule     RuleID
	}{
		{name: "RequireDualStack alone", env: env, old: single, svc: grown(fixtures.WithIPFamilyPolicy(corev1.IPFamilyPolicyRequireDualStack)),
			patch: `[{"op":"add","path":"/spec/clusterIPs","value":["10.96.0.10","fd00:10:96::a"]}]`},
		{name: "PreferDualStack alone", env: env, old: single, svc: grown(fixtures.WithIPFamilyPolicy(corev1.IPFamilyPolicyPreferDualStack)),
			patch: `[{"op":"add","path":"/spec/clusterIPs","value":["10.96.0.10","fd00:10:96::a"]}]`},
		{name: "ipFamilies grown with RequireDualStack", env: env, old: single, svc: grown(fixtures.WithIPFamilyPolicy(corev1.IPFamilyPolicyRequireDualStack), fixtures.WithIPFamilies(corev1.IPv4Protocol, corev1.IPv6Protocol)),
			patch: `[{"op":"add","path":"/spec/clusterIPs","value":["10.96.0.10","fd00:10:96::a"]}]`},
		{name: "PreferDualStack on a single-stack apiserver stays single-stack", env: Env{Policy: p, Snapshot: makeSnapshot(v4WithV6Object)}, old: single, svc: grown(fixtures.WithIPFamilyPolicy(corev1.IPFamilyPolicyPreferDualStack))},
		{name: "an unchanged PreferDualStack is not upgraded by a label update", env: env, old: grown(fixtures.WithIPFamilyPolicy(corev1.IPFamilyPolicyPreferDualStack)), svc: grown(fixtures.WithIPFamilyPolicy(corev1.IPFamilyPolicyPreferDualStack), func(s *corev1.Service) { s.Labels = map[string]string{"a": "b"} })},
		{name: "a Service without a reservation of the new family is left to the allocator", env: env, old: fixtures.Service("default", "web", fixtures.WithClusterIPs("10.96.0.20")), svc: fixtures.Service("default", "web", fixtures.WithClusterIPs("10.96.0.20"), fixtures.WithIPFamilyPolicy(corev1.IPFamilyPolicyRequireDualStack))},
		{name: "a reserved address held by someone else is reported, not patched", env: Env{Policy: p, Snapshot: makeSnapshot(dualStack, "fd00:10:96::a=default/squatter")}, old: single, svc: grown(fixtures.WithIPFamilyPolicy(corev1.IPFamilyPolicyRequireDualStack)), rule: RuleAlreadyAllocated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Mutate(tt.env, Request{Operation: Update, Service: tt.svc, OldService: tt.old})
			assertRule(t, d, tt.rule, "")
			got := ""
			if len(d.Patch) > 0 {
				got = mustJSON(d.Patch)
			}
			if got != tt.patch {
				t.Fatalf("patch %s, want %s", got, tt.patch)
			}
		})
	}
}

func TestMutateOnUpdate(t *testing.T) {
	p := fixtures.MustPolicy(t, ParseDocument, dnsPolicy)
	env := Env{Policy: p, Snapshot: makeSnapshot(dualStack, "10.96.200.9=default/web")}
	extName := fixtures.Service("default", "web", fixtures.WithType(corev1.ServiceTypeExternalName))
	tests := []struct {
		name     string
		old, svc *corev1.Service
		rule     RuleID
		patched  bool
	}{
		{name: "denies ExternalName to ClusterIP with a dynamic-band IP", old: extName, svc: fixtures.Service("default", "web", fixtures.WithClusterIP("10.96.200.5")), rule: RuleStaticIPInDynamicBand},
		{name: "allows ExternalName to ClusterIP with a static-band IP", old: extName, svc: fixtures.Service("default", "web", fixtures.WithClusterIP("10.96.0.30"))},
		{name: "assigns kube-dns its IP when it turns from ExternalName to ClusterIP", old: fixtures.Service("kube-system", "kube-dns", fixtures.WithType(corev1.ServiceTypeExternalName)), svc: fixtures.Service("kube-system", "kube-dns"), patched: true},
		{name: "passes a label-only update of a Service that kept a dynamic IP", old: fixtures.Service("default", "web", fixtures.WithClusterIP("10.96.200.9")), svc: fixtures.Service("default", "web", fixtures.WithClusterIP("10.96.200.9"))},
		{name: "does not assign on a PUT that omits clusterIP", old: fixtures.Service("kube-system", "kube-dns", fixtures.WithClusterIP("10.96.0.10")), svc: fixtures.Service("kube-system", "kube-dns")},
		{
			name: "checks only the IP a single-to-dual-stack update adds",
			old:  fixtures.Service("default", "web", fixtures.WithClusterIPs("10.96.200.9")),
			svc:  fixtures.Service("default", "web", fixtures.WithClusterIPs("10.96.200.9", "fd00:10:96::5000"), fixtures.WithIPFamilyPolicy(corev1.IPFamilyPolicyRequireDualStack)),
			rule: RuleStaticIPInDynamicBand,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Mutate(env, Request{Operation: Update, Service: tt.svc, OldService: tt.old})
			assertRule(t, d, tt.rule, "")
			if got := len(d.Patch) > 0; got != tt.patched {
				t.Fatalf("patched = %v, want %v (%v)", got, tt.patched, d.Patch)
			}
		})
	}
}

func TestValidateChecksFinalIPs(t *testing.T) {
	p := fixtures.MustPolicy(t, ParseDocument, dnsPolicy+"allowedCIDRs: [10.96.0.0/12, fd00:10:96::/64]\n")
	unapproved := append([]allocview.ServiceCIDR{serviceCIDR("rogue", true, "192.168.0.0/24")}, v4Only...)
	tests := []struct {
		name    string
		cidrs   []allocview.ServiceCIDR
		req     Request
		rule    RuleID
		message string
	}{
		{name: "allows a dynamic allocation in the dynamic band", req: Request{Operation: Create, Service: fixtures.Service("default", "web", fixtures.WithClusterIPs("10.96.44.3"))}},
		{
			name: "denies a dynamic allocation that spilled onto the DNS IP",
			req:  Request{Operation: Create, Service: fixtures.Service("default", "web", fixtures.WithClusterIPs("10.96.0.10"))}, rule: RuleReservedForOther,
			message: `allocated ClusterIP "10.96.0.10" is reserved for Service kube-system/kube-dns (cluster DNS); the apiserver hands out static-band addresses of ServiceCIDR "kubernetes" only when its dynamic band 10.96.1.1-10.96.255.254 is full, and releases it with this denial: free addresses or add a ServiceCIDR, then create the Service again`,
		},
		{
			name: "denies a dynamic allocation of a reservation in the dynamic band without claiming the band was full",
			req:  Request{Operation: Create, Service: fixtures.Service("default", "web", fixtures.WithClusterIPs("10.96.200.1"))}, rule: RuleReservedForOther,
			message: `allocated ClusterIP "10.96.200.1" is reserved for Service team-a/frontend; the apiserver picked it at random from the dynamic band 10.96.1.1-10.96.255.254 of ServiceCIDR "kubernetes", and releases it with this denial: create the Service again to get another address`,
		},
		{name: "allows kube-dns its IP", req: Request{Operation: Create, Service: fixtures.Service("kube-system", "kube-dns", fixtures.WithClusterIPs("10.96.0.10"))}},
		{
			name: "denies an IP from a ServiceCIDR outside allowedCIDRs", cidrs: unapproved,
			req: Request{Operation: Create, Service: fixtures.Service("default", "web", fixtures.WithClusterIPs("192.168.0.77"))}, rule: RuleOutsideServiceCIDRs,
			message: `allocated ClusterIP "192.168.0.77" comes from 192.168.0.0/24 (ServiceCIDR "rogue"), which is not inside the policy's allowedCIDRs; the apiserver releases it with this denial: create the Service again (the apiserver picks among its ServiceCIDRs at random), or name a free address in the static band 10.96.0.1-10.96.1.0; an administrator can delete ServiceCIDR "rogue" or add it to allowedCIDRs`,
		},
		{name: "denies an IP from an apiserver with a divergent range", req: Request{Operation: Create, Service: fixtures.Service("default", "web", fixtures.WithClusterIPs("192.168.0.5"))}, rule: RuleOutsideServiceCIDRs},
		{name: "allows the dry-run placeholder", req: Request{Operation: Create, DryRun: true, Service: fixtures.Service("default", "web", fixtures.WithClusterIPs("10.96.0.0"))}},
		{name: "denies the network address outside a dry run", req: Request{Operation: Create, Service: fixtures.Service("default", "web", fixtures.WithClusterIPs("10.96.0.0"))}, rule: RuleOutsideServiceCIDRs},
		{name: "allows both dry-run placeholders of a dual-stack create", cidrs: dualStack, req: Request{Operation: Create, DryRun: true, Service: fixtures.Service("default", "web", fixtures.WithClusterIPs("10.96.0.0", "fd00:10:96::"))}},
		{name: "allows a dry-run placeholder from a range outside allowedCIDRs", cidrs: unapproved, req: Request{Operation: Create, DryRun: true, Service: fixtures.Service("default", "web", fixtures.WithClusterIPs("192.168.0.0"))}},
		{name: "passes an update that keeps the IPs", req: Request{Operation: Update, OldService: fixtures.Service("default", "web", fixtures.WithClusterIPs("192.168.0.5")), Service: fixtures.Service("default", "web", fixtures.WithClusterIPs("192.168.0.5"))}},
		{name: "does not care about the dynamic band (the allocator put it there)", req: Request{Operation: Create, Service: fixtures.Service("default", "web", fixtures.WithClusterIPs("10.96.255.254"))}},
		{name: "passes a headless Service", req: Request{Operation: Create, Service: fixtures.Service("default", "web", fixtures.WithClusterIPs("None"))}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cidrs := tt.cidrs
			if cidrs == nil {
				cidrs = v4Only
			}
			assertRule(t, Validate(Env{Policy: p, Snapshot: makeSnapshot(cidrs)}, tt.req), tt.rule, tt.message)
		})
	}
}

func TestEnforcementModes(t *testing.T) {
	req := Request{Operation: Create, Service: fixtures.Service("default", "web", fixtures.WithClusterIP("10.96.200.5"))}
	tests := []struct {
		name        string
		enforcement string
		outcome     Outcome
		warnings    int
	}{
		{name: "denies by default", enforcement: "", outcome: Denied},
		{name: "warns when the rule says warn", enforcement: "enforcement:\n  rules:\n    static-ip-in-dynamic-band: warn\n", outcome: Warned, warnings: 1},
		{name: "only audits when the default says audit", enforcement: "enforcement:\n  default: audit\n", outcome: Allowed},
		{name: "a rule's deny beats a default warn", enforcement: "enforcement:\n  default: warn\n  rules:\n    static-ip-in-dynamic-band: deny\n", outcome: Denied},
		{name: "another rule's action does not apply", enforcement: "enforcement:\n  rules:\n    reserved-for-other: warn\n", outcome: Denied},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Mutate(Env{Policy: fixtures.MustPolicy(t, ParseDocument, tt.enforcement), Snapshot: makeSnapshot(v4Only)}, req)
			if d.Outcome != tt.outcome || len(d.Warnings) != tt.warnings {
				t.Fatalf("outcome %s warnings %q; want %s and %d", d.Outcome, d.Warnings, tt.outcome, tt.warnings)
			}
			if got := d.Rules(); len(got) != 1 || got[0] != RuleStaticIPInDynamicBand {
				t.Fatalf("rules %v: every mode still records the rule", got)
			}
			if tt.outcome == Allowed && !strings.Contains(d.Message, "audit: ") {
				t.Fatalf("audit message missing: %q", d.Message)
			}
		})
	}
}

func TestExemptions(t *testing.T) {
	p := fixtures.MustPolicy(t, ParseDocument, "exemptions:\n  namespaces: [legacy]\n  users: [alice]\n  groups: [platform-admins]\n")
	env := Env{Policy: p, Snapshot: makeSnapshot(v4Only)}
	tests := []struct {
		name    string
		req     Request
		skipped string
	}{
		{name: "exempts a namespace", req: Request{Operation: Create, Service: fixtures.Service("legacy", "web", fixtures.WithClusterIP("10.96.200.5"))}, skipped: "namespace legacy is exempt by the policy"},
		{name: "exempts a user", req: Request{Operation: Create, User: "alice", Service: fixtures.Service("default", "web", fixtures.WithClusterIP("10.96.200.5"))}, skipped: "user alice is exempt by the policy"},
		{name: "exempts a group", req: Request{Operation: Create, User: "bob", Groups: []string{"system:authenticated", "platform-admins"}, Service: fixtures.Service("default", "web", fixtures.WithClusterIP("10.96.200.5"))}, skipped: "group platform-admins is exempt by the policy"},
		{name: "does not exempt anyone else", req: Request{Operation: Create, User: "bob", Groups: []string{"dev"}, Service: fixtures.Service("default", "web", fixtures.WithClusterIP("10.96.200.5"))}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, decide := range []func(Env, Request) Decision{Mutate, Validate} {
				d := decide(env, tt.req)
				if d.Skipped != tt.skipped {
					t.Fatalf("%s: skipped %q, want %q", d.Stage, d.Skipped, tt.skipped)
				}
				if tt.skipped != "" && (!d.Allowed() || d.Outcome != Allowed) {
					t.Fatalf("%s: exempt request not allowed: %s", d.Stage, d.Message)
				}
			}
		})
	}
}

func TestStaticRangesServeClustersWithoutServiceCIDRs(t *testing.T) {
	p := fixtures.MustPolicy(t, ParseDocument, "serviceCIDRs: [10.0.0.0/24]\n")
	noAPI := allocview.NewView().Update(func(tx *allocview.Tx) { tx.MarkSynced(false) })
	d := Mutate(Env{Policy: p, Snapshot: noAPI}, Request{Operation: Create, Service: fixtures.Service("default", "web", fixtures.WithClusterIP("10.0.0.100"))})
	assertRule(t, d, RuleStaticIPInDynamicBand, `spec.clusterIP: Invalid value: "10.0.0.100": lies in the dynamic band 10.0.0.17-10.0.0.254 of 10.0.0.0/24 (policy serviceCIDRs); choose a free address in the static band 10.0.0.1-10.0.0.16 or ask for a reservation`)
	// --service-cidr replaces the policy's serviceCIDRs.
	d = Mutate(Env{Policy: p, Snapshot: noAPI, StaticCIDRs: mustPrefixes("10.1.0.0/24")}, Request{Operation: Create, Service: fixtures.Service("default", "web", fixtures.WithClusterIP("10.0.0.5"))})
	assertRule(t, d, RuleOutsideServiceCIDRs, "")
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// Only the apiserver's primary range gives its first address to
// default/kubernetes; in a second ServiceCIDR it is an ordinary address.
func TestOnlyThePrimaryRangesFirstAddressIsReservedForKubernetes(t *testing.T) {
	p := fixtures.MustPolicy(t, ParseDocument, dnsPolicy)
	withSmall := append([]allocview.ServiceCIDR{serviceCIDR("small", true, "10.97.0.0/28")}, v4Only...)
	env := Env{Policy: p, Snapshot: makeSnapshot(withSmall)}
	d := Validate(env, Request{Operation: Create, Service: fixtures.Service("default", "web", fixtures.WithClusterIPs("10.97.0.1"))})
	assertRule(t, d, "", "")
	d = Validate(env, Request{Operation: Create, Service: fixtures.Service("default", "web", fixtures.WithClusterIPs("10.96.0.1"))})
	assertRule(t, d, RuleReservedForOther, "")
	d = Mutate(env, Request{Operation: Create, Service: fixtures.Service("default", "web", fixtures.WithClusterIP("10.97.0.1"))})
	assertRule(t, d, RuleStaticIPInDynamicBand, `spec.clusterIP: Invalid value: "10.97.0.1": lies in the dynamic band 10.97.0.1-10.97.0.14 of ServiceCIDR "small"; choose a free address in the static band 10.96.0.1-10.96.1.0 or ask for a reservation`)
	// A dual-stack cluster's default/kubernetes is single-stack: the first
	// IPv6 address is an ordinary static address.
	d = Mutate(Env{Policy: p, Snapshot: makeSnapshot(dualStack)}, Request{Operation: Create, Service: fixtures.Service("default", "web", fixtures.WithClusterIP("fd00:10:96::1"), fixtures.WithIPFamilies(corev1.IPv6Protocol))})
	assertRule(t, d, "", "")
	d = Mutate(Env{Policy: p, Snapshot: makeSnapshot(dualStack)}, Request{Operation: Create, Service: fixtures.Service("default", "kubernetes", fixtures.WithIPFamilyPolicy(corev1.IPFamilyPolicyRequireDualStack))})
	if got := mustJSON(d.Patch); got != `[{"op":"add","path":"/spec/clusterIP","value":"10.96.0.1"},{"op":"add","path":"/spec/clusterIPs","value":["10.96.0.1"]}]` {
		t.Fatalf("default/kubernetes patch %s", got)
	}
}

// Overlapping ServiceCIDRs: an address is refused as unusable only when no
// range containing it can hand it out.
func TestOverlappingRangesDecideByTheWiderRange(t *testing.T) {
	p := fixtures.MustPolicy(t, ParseDocument, "")
	wide := []allocview.ServiceCIDR{serviceCIDR("kubernetes", true, "10.96.0.0/16"), serviceCIDR("extra", true, "10.96.8.0/24")}
	extension := []allocview.ServiceCIDR{serviceCIDR("kubernetes", true, "10.96.0.0/28"), serviceCIDR("extension", true, "10.96.0.0/24")}
	tests := []struct {
		name    string
		cidrs   []allocview.ServiceCIDR
		ip      string
		rule    RuleID
		message string
	}{
		{name: "the network address of the narrower range is a dynamic address of the wider one", cidrs: wide, ip: "10.96.8.0", rule: RuleStaticIPInDynamicBand,
			message: `spec.clusterIP: Invalid value: "10.96.8.0": lies in the dynamic band 10.96.1.1-10.96.255.254 of ServiceCIDR "kubernetes"; choose a free address in the static band 10.96.0.1-10.96.1.0 or ask for a reservation`},
		{name: "the broadcast address of the /28 is a static address of the /24", cidrs: extension, ip: "10.96.0.15"},
		{name: "advice never names a static band that holds the refused address", cidrs: extension, ip: "10.96.0.5", rule: RuleStaticIPInDynamicBand,
			message: `spec.clusterIP: Invalid value: "10.96.0.5": lies in the dynamic band 10.96.0.1-10.96.0.14 of ServiceCIDR "kubernetes"; choose a free address in the static band 10.96.0.15-10.96.0.16 or ask for a reservation`},
		{name: "the shared network address stays refused", cidrs: extension, ip: "10.96.0.0", rule: RuleOutsideServiceCIDRs},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := Env{Policy: p, Snapshot: makeSnapshot(tt.cidrs)}
			assertRule(t, Mutate(env, Request{Operation: Create, Service: fixtures.Service("default", "web", fixtures.WithClusterIP(tt.ip))}), tt.rule, tt.message)
			if tt.rule != RuleStaticIPInDynamicBand { // the validating stage does not care about bands
				assertRule(t, Validate(env, Request{Operation: Create, Service: fixtures.Service("default", "web", fixtures.WithClusterIPs(tt.ip))}), tt.rule, "")
			}
		})
	}
}

// With reserved-for-other at warn, a static request for a reserved address
// gets one warning, not a second one from the validating stage that speaks
// of a denial: both stages word it alike, and the apiserver drops a
// warning it already returned for the request.
func TestWarnedViolationsReadTheSameAtBothStages(t *testing.T) {
	p := fixtures.MustPolicy(t, ParseDocument, dnsPolicy+"enforcement:\n  rules:\n    reserved-for-other: warn\n    outside-service-cidrs: warn\n")
	env := Env{Policy: p, Snapshot: makeSnapshot(v4Only)}
	for _, ip := range []string{"10.96.0.10", "10.200.0.1"} {
		m := Mutate(env, Request{Operation: Create, Service: fixtures.Service("default", "web", fixtures.WithClusterIP(ip))})
		v := Validate(env, Request{Operation: Create, Service: fixtures.Service("default", "web", fixtures.WithClusterIPs(ip))})
		if !m.Allowed() || !v.Allowed() || len(m.Warnings) != 1 || len(v.Warnings) != 1 || m.Warnings[0] != v.Warnings[0] {
			t.Fatalf("%s: mutate %q, validate %q", ip, m.Warnings, v.Warnings)
		}
		for _, w := range []string{"denial", "releases", "leave clusterIP empty", "Invalid value"} {
			if strings.Contains(v.Warnings[0], w) {
				t.Fatalf("%s: warning %q says %q", ip, v.Warnings[0], w)
			}
		}
	}
	want := `ClusterIP "10.96.0.10" is reserved for Service kube-system/kube-dns (cluster DNS), which cannot get it while this Service holds it; allowed only because the policy sets reserved-for-other to warn`
	if d := Validate(env, Request{Operation: Create, Service: fixtures.Service("default", "web", fixtures.WithClusterIPs("10.96.0.10"))}); d.Warnings[0] != want {
		t.Fatalf("warning\n got: %s\nwant: %s", d.Warnings[0], want)
	}
}

// A range without a static band: the advice does not send a user to a
// static band that does not exist.
func TestValidateAdviceWithoutAStaticBand(t *testing.T) {
	p := fixtures.MustPolicy(t, ParseDocument, "allowedCIDRs: [10.96.0.0/28]\n")
	cidrs := []allocview.ServiceCIDR{serviceCIDR("kubernetes", true, "10.96.0.0/28"), serviceCIDR("rogue", true, "10.200.0.0/28")}
	d := Validate(Env{Policy: p, Snapshot: makeSnapshot(cidrs)}, Request{Operation: Create, Service: fixtures.Service("default", "web", fixtures.WithClusterIPs("10.200.0.3"))})
	assertRule(t, d, RuleOutsideServiceCIDRs, `allocated ClusterIP "10.200.0.3" comes from 10.200.0.0/28 (ServiceCIDR "rogue"), which is not inside the policy's allowedCIDRs; the apiserver releases it with this denial: create the Service again (the apiserver picks among its ServiceCIDRs at random); an administrator can delete ServiceCIDR "rogue" or add it to allowedCIDRs`)
}

// kube-dns left clusterIP empty: when its reserved address cannot be
// assigned because no active range holds it, it is not told to leave
// clusterIP empty.
func TestMutateReportsAReservationOutsideTheRangesToItsOwner(t *testing.T) {
	p := fixtures.MustPolicy(t, ParseDocument, dnsPolicy)
	other := []allocview.ServiceCIDR{serviceCIDR("kubernetes", true, "10.100.0.0/16")}
	d := Mutate(Env{Policy: p, Snapshot: makeSnapshot(other)}, Request{Operation: Create, Service: fixtures.Service("kube-system", "kube-dns")})
	assertRule(t, d, RuleOutsideServiceCIDRs, `reserved ClusterIP "10.96.0.10" of this Service (cluster DNS) is outside every active Service CIDR (10.100.0.0/16 (ServiceCIDR "kubernetes")), so it cannot be assigned: an administrator can fix the reservation or the ServiceCIDRs; meanwhile give this Service a free address of the static band 10.100.0.1-10.100.1.0 as its clusterIP`)
}

// A policy that leaves out the apiserver's default ServiceCIDR: the advice
// never says to delete it (the apiserver recreates it at once), only to
// widen allowedCIDRs.
func TestValidateAdviceNeverDeletesTheDefaultServiceCIDR(t *testing.T) {
	p := fixtures.MustPolicy(t, ParseDocument, "allowedCIDRs: [10.69.0.0/16]\n")
	cidrs := []allocview.ServiceCIDR{serviceCIDR("kubernetes", true, "10.96.0.0/16"), serviceCIDR("extra", true, "10.69.0.0/16")}
	d := Validate(Env{Policy: p, Snapshot: makeSnapshot(cidrs)}, Request{Operation: Create, Service: fixtures.Service("default", "web", fixtures.WithClusterIPs("10.96.77.3"))})
	assertRule(t, d, RuleOutsideServiceCIDRs, `allocated ClusterIP "10.96.77.3" comes from 10.96.0.0/16 (ServiceCIDR "kubernetes"), which is not inside the policy's allowedCIDRs; the apiserver releases it with this denial: create the Service again (the apiserver picks among its ServiceCIDRs at random), or name a free address in the static band 10.69.0.1-10.69.1.0; an administrator must add 10.96.0.0/16 to allowedCIDRs (ServiceCIDR "kubernetes" is the apiserver's default ServiceCIDR, made again from its --service-cluster-ip-range if deleted)`)
	if strings.Contains(d.Violations[0].Message, `delete ServiceCIDR "kubernetes"`) {
		t.Fatalf("advises deleting the default ServiceCIDR: %s", d.Violations[0].Message)
	}
}

// kubeadm's and the coredns chart's kube-dns names its address and asks for
// two families: the apiserver would allocate the second one at random while
// its reservation stays unused (and held). It gets its reserved second
// address on create, as on an update to dual-stack.
func TestMutateGivesAnOwnerNamingItsAddressTheReservedSecondFamilyOnCreate(t *testing.T) {
	p := fixtures.MustPolicy(t, ParseDocument, dnsPolicy)
	for _, tt := range []struct {
		name  string
		cidrs []allocview.ServiceCIDR
		svc   *corev1.Service
		want  []string // clusterIPs patched in; nil for no patch
	}{
		{name: "PreferDualStack on a dual-stack cluster", cidrs: dualStack,
			svc: fixtures.Service("kube-system", "kube-dns", fixtures.WithClusterIP("10.96.0.10"), fixtures.WithIPFamilyPolicy(corev1.IPFamilyPolicyPreferDualStack)), want: []string{"10.96.0.10", "fd00:10:96::a"}},
		{name: "RequireDualStack", cidrs: dualStack,
			svc: fixtures.Service("kube-system", "kube-dns", fixtures.WithClusterIP("10.96.0.10"), fixtures.WithIPFamilyPolicy(corev1.IPFamilyPolicyRequireDualStack)), want: []string{"10.96.0.10", "fd00:10:96::a"}},
		{name: "IPv6 first", cidrs: dualStack,
			svc: fixtures.Service("kube-system", "kube-dns", fixtures.WithClusterIP("fd00:10:96::a"), fixtures.WithIPFamilies(corev1.IPv6Protocol), fixtures.WithIPFamilyPolicy(corev1.IPFamilyPolicyRequireDualStack)), want: []string{"fd00:10:96::a", "10.96.0.10"}},
		{name: "PreferDualStack on a single-stack cluster stays single", cidrs: v4Only,
			svc: fixtures.Service("kube-system", "kube-dns", fixtures.WithClusterIP("10.96.0.10"), fixtures.WithIPFamilyPolicy(corev1.IPFamilyPolicyPreferDualStack))},
		{name: "an address of its own, not its reservation, gets nothing added", cidrs: dualStack,
			svc: fixtures.Service("kube-system", "kube-dns", fixtures.WithClusterIP("10.96.0.11"), fixtures.WithIPFamilyPolicy(corev1.IPFamilyPolicyPreferDualStack))},
		{name: "both addresses named: nothing to add", cidrs: dualStack,
			svc: fixtures.Service("kube-system", "kube-dns", fixtures.WithClusterIPs("10.96.0.10", "fd00:10:96::a"), fixtures.WithIPFamilyPolicy(corev1.IPFamilyPolicyPreferDualStack))},
		{name: "single-stack: nothing to add", cidrs: dualStack,
			svc: fixtures.Service("kube-system", "kube-dns", fixtures.WithClusterIP("10.96.0.10"))},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := Mutate(Env{Policy: p, Snapshot: makeSnapshot(tt.cidrs)}, Request{Operation: Create, Service: tt.svc})
			if !d.Allowed() {
				t.Fatalf("denied: %s", d.Message)
			}
			if tt.want == nil {
				if len(d.Patch) != 0 {
					t.Fatalf("unexpected patch %v", d.Patch)
				}
				return
			}
			wantPatch := []PatchOp{{"add", "/spec/clusterIPs", tt.want}}
			if got, want := mustJSON(d.Patch), mustJSON(wantPatch); got != want {
				t.Fatalf("patch = %s, want %s", got, want)
			}
			if d.Outcome != Patched || len(d.Mutations) != 1 || d.Mutations[0] != MutationAssignReserved || !slices.Equal(d.FinalIPs, tt.want) {
				t.Fatalf("outcome %s mutations %v final %v", d.Outcome, d.Mutations, d.FinalIPs)
			}
		})
	}
}
