package policy

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"clusterip-policy/pkg/allocview"
	"clusterip-policy/test/fixtures"
)

const auditPolicy = "allowedCIDRs: [10.96.0.0/16]\n" + fixtures.KubeDNSSpec + `- ip: 10.96.0.20
  service: web/ingress
exemptions:
  namespaces: [legacy]
`

// auditCIDRs: the default ServiceCIDR and one outside allowedCIDRs.
var auditCIDRs = []allocview.ServiceCIDR{
	serviceCIDR("kubernetes", true, "10.96.0.0/16"),
	serviceCIDR("unapproved", true, "10.97.0.0/24"),
}

// finding is what a test pins of a Finding: the problem and fix must each
// contain the given parts.
type finding struct {
	service, rule, field, ip string
	problem, fix             []string
}

func TestAuditReportsEachBreachOfThePolicy(t *testing.T) {
	pol := fixtures.MustPolicy(t, ParseDocument, auditPolicy)
	for _, tc := range []struct {
		name      string
		services  []*corev1.Service
		allocated []string
		want      []finding
		notJudged int
	}{
		{
			name: "a Service on another Service's reservation is reserved-for-other, and the owner holding another address is reservation-not-held",
			services: []*corev1.Service{
				fixtures.Service("default", "early-bird", fixtures.WithClusterIP("10.96.0.10")),
				fixtures.Service("kube-system", "kube-dns", fixtures.WithClusterIP("10.96.0.11")),
			},
			want: []finding{
				{"default/early-bird", "reserved-for-other", "spec.clusterIP", "10.96.0.10",
					[]string{"is reserved for Service kube-system/kube-dns (cluster DNS)"},
					[]string{"delete default/early-bird and create it again without clusterIP", "then kube-system/kube-dns can have 10.96.0.10"}},
				{"kube-system/kube-dns", "reservation-not-held", "spec.clusterIP", "10.96.0.11",
					[]string{"kube-system/kube-dns holds 10.96.0.11, but 10.96.0.10 is reserved for it (cluster DNS)"},
					[]string{"first move default/early-bird off 10.96.0.10", "delete kube-system/kube-dns and create it again without clusterIP: the webhook assigns 10.96.0.10"}},
			},
		},
		{
			name:     "an address from a ServiceCIDR outside allowedCIDRs is outside-service-cidrs, naming the range and both fixes",
			services: []*corev1.Service{fixtures.Service("default", "spilled", fixtures.WithClusterIP("10.97.0.33"))},
			want: []finding{{"default/spilled", "outside-service-cidrs", "spec.clusterIP", "10.97.0.33",
				[]string{`comes from 10.97.0.0/24 (ServiceCIDR "unapproved"), which is not inside the policy's allowedCIDRs`},
				[]string{"add 10.97.0.0/24 to allowedCIDRs if it is approved", "create it again without clusterIP", "static band 10.96.0.1-10.96.1.0"}}},
		},
		{
			name:     "an address in no range at all is outside-service-cidrs",
			services: []*corev1.Service{fixtures.Service("default", "restored", fixtures.WithClusterIP("10.200.0.1"))},
			want: []finding{{"default/restored", "outside-service-cidrs", "spec.clusterIP", "10.200.0.1",
				[]string{`is outside every active Service CIDR (10.96.0.0/16 (ServiceCIDR "kubernetes"))`},
				[]string{"delete default/restored and create it again without clusterIP"}}},
		},
		{
			name:      "an address whose IPAddress names another Service is already-allocated",
			services:  []*corev1.Service{fixtures.Service("default", "twin", fixtures.WithClusterIP("10.96.0.53"))},
			allocated: []string{"10.96.0.53=default/original"},
			want: []finding{{"default/twin", "already-allocated", "spec.clusterIP", "10.96.0.53",
				[]string{"is held by IPAddress 10.96.0.53 for default/original, not for this Service"},
				[]string{"if default/original no longer exists, the apiserver's repair loop deletes its IPAddress"}}},
		},
		{
			name: "owners on their reservations, static addresses and headless, ExternalName and exempt Services give no finding",
			services: []*corev1.Service{
				fixtures.Service("kube-system", "kube-dns", fixtures.WithClusterIP("10.96.0.10")),
				fixtures.Service("default", "kubernetes", fixtures.WithClusterIP("10.96.0.1")),
				fixtures.Service("web", "ingress", fixtures.WithClusterIP("10.96.0.20")),
				fixtures.Service("default", "static", fixtures.WithClusterIP("10.96.0.53")),
				fixtures.Service("default", "headless", fixtures.WithClusterIP("None")),
				fixtures.Service("default", "external", fixtures.WithType(corev1.ServiceTypeExternalName)),
				fixtures.Service("legacy", "squatter", fixtures.WithClusterIP("10.96.0.20")),
			},
			allocated: []string{"10.96.0.10=kube-system/kube-dns", "10.96.0.53=default/static"},
		},
		{
			name: "a dynamic-band address not reserved for its Service is not judged: asked for or allocated, a stored Service does not say",
			services: []*corev1.Service{
				fixtures.Service("default", "dynamic-a", fixtures.WithClusterIP("10.96.7.7")),
				fixtures.Service("default", "dynamic-b", fixtures.WithClusterIP("10.96.200.5")),
			},
			notJudged: 2,
		},
		{
			name:     "an owner that does not use its reservation's family gets no finding; one on another address of it does",
			services: []*corev1.Service{fixtures.Service("web", "ingress", fixtures.WithClusterIP("10.96.0.21"))},
			want: []finding{{"web/ingress", "reservation-not-held", "spec.clusterIP", "10.96.0.21",
				[]string{"web/ingress holds 10.96.0.21, but 10.96.0.20 is reserved for it"},
				[]string{"delete web/ingress and create it again without clusterIP: the webhook assigns 10.96.0.20"}}},
		},
		{
			name:      "an owner whose reserved address an IPAddress holds for someone else is told to free it first",
			services:  []*corev1.Service{fixtures.Service("web", "ingress", fixtures.WithClusterIP("10.96.0.21"))},
			allocated: []string{"10.96.0.20=other/gone"},
			want: []finding{{"web/ingress", "reservation-not-held", "spec.clusterIP", "10.96.0.21",
				[]string{"web/ingress holds 10.96.0.21, but 10.96.0.20 is reserved for it"},
				[]string{"IPAddress 10.96.0.20 is held for other/gone; once it is free, delete web/ingress"}}},
		},
		{
			name: "a network address is outside-service-cidrs; a stored address that is not an IP is invalid-ip",
			services: []*corev1.Service{
				fixtures.Service("default", "network", fixtures.WithClusterIP("10.96.0.0")),
				fixtures.Service("default", "garbled", fixtures.WithClusterIP("10.96.0.300")),
			},
			want: []finding{
				{"default/garbled", "invalid-ip", "spec.clusterIP", "10.96.0.300", []string{"is not an IP address"}, []string{"delete default/garbled and create it again without clusterIP"}},
				{"default/network", "outside-service-cidrs", "spec.clusterIP", "10.96.0.0",
					[]string{"is a network or broadcast address of 10.96.0.0/16"}, []string{"create it again without clusterIP"}},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snap := makeSnapshot(auditCIDRs, tc.allocated...)
			r := Audit(Env{Policy: pol, Snapshot: snap}, tc.services)
			if len(r.Findings) != len(tc.want) {
				t.Fatalf("%d findings, want %d: %+v", len(r.Findings), len(tc.want), r.Findings)
			}
			for i, w := range tc.want {
				f := r.Findings[i]
				if got := f.Namespace + "/" + f.Name; got != w.service || string(f.Rule) != w.rule || f.Field != w.field || f.IP != w.ip {
					t.Errorf("finding %d: %s %s %s %s, want %s %s %s %s", i, got, f.Rule, f.Field, f.IP, w.service, w.rule, w.field, w.ip)
				}
				for _, part := range w.problem {
					if !strings.Contains(f.Problem, part) {
						t.Errorf("finding %d: problem %q lacks %q", i, f.Problem, part)
					}
				}
				for _, part := range w.fix {
					if !strings.Contains(f.Fix, part) {
						t.Errorf("finding %d: fix %q lacks %q", i, f.Fix, part)
					}
				}
			}
			if r.NotJudged != tc.notJudged {
				t.Errorf("NotJudged %d, want %d", r.NotJudged, tc.notJudged)
			}
		})
	}
}

func TestAuditCountsServicesCheckedAndExempt(t *testing.T) {
	pol := fixtures.MustPolicy(t, ParseDocument, auditPolicy)
	r := Audit(Env{Policy: pol, Snapshot: makeSnapshot(auditCIDRs)}, []*corev1.Service{
		fixtures.Service("default", "a", fixtures.WithClusterIP("10.96.0.50")),
		fixtures.Service("default", "headless", fixtures.WithClusterIP("None")),
		fixtures.Service("legacy", "b", fixtures.WithClusterIP("10.96.0.10")),
	})
	if r.Services != 3 || r.Checked != 1 || r.Exempt != 1 || len(r.Findings) != 0 {
		t.Fatalf("services %d checked %d exempt %d findings %d, want 3 1 1 0", r.Services, r.Checked, r.Exempt, len(r.Findings))
	}
	if !r.TracksAllocations {
		t.Error("a synced snapshot with allocations reported as not tracking them")
	}
}

func TestAuditActionIsThePolicysForTheRule(t *testing.T) {
	pol := fixtures.MustPolicy(t, ParseDocument, auditPolicy+"enforcement:\n  default: audit\n  rules:\n    reserved-for-other: warn\n")
	r := Audit(Env{Policy: pol, Snapshot: makeSnapshot(auditCIDRs)}, []*corev1.Service{
		fixtures.Service("default", "early-bird", fixtures.WithClusterIP("10.96.0.10")),
		fixtures.Service("default", "restored", fixtures.WithClusterIP("10.200.0.1")),
		fixtures.Service("kube-system", "kube-dns", fixtures.WithClusterIP("10.96.0.11")),
	})
	got := map[RuleID]Action{}
	for _, f := range r.Findings {
		got[f.Rule] = f.Action
	}
	want := map[RuleID]Action{RuleOutsideServiceCIDRs: ActionAudit, RuleReservedForOther: ActionWarn, RuleReservationNotHeld: ""}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("actions %v, want %v", got, want)
	}
}

func TestAuditDualStackOwnerIsJudgedPerFamily(t *testing.T) {
	pol := fixtures.MustPolicy(t, ParseDocument, "reservations:\n- ip: 10.96.0.10\n  service: kube-system/kube-dns\n- ip: fd00:10:96::a\n  service: kube-system/kube-dns\n")
	cidrs := []allocview.ServiceCIDR{serviceCIDR("kubernetes", true, "10.96.0.0/16", "fd00:10:96::/108")}
	r := Audit(Env{Policy: pol, Snapshot: makeSnapshot(cidrs)}, []*corev1.Service{
		fixtures.Service("kube-system", "kube-dns", fixtures.WithClusterIPs("10.96.0.10", "fd00:10:96::b"), fixtures.WithIPFamilyPolicy(corev1.IPFamilyPolicyPreferDualStack)),
	})
	if len(r.Findings) != 1 {
		t.Fatalf("%d findings, want 1: %+v", len(r.Findings), r.Findings)
	}
	f := r.Findings[0]
	if f.Rule != RuleReservationNotHeld || f.Field != "spec.clusterIPs[1]" || f.IP != "fd00:10:96::b" || f.Reserved != "fd00:10:96::a" {
		t.Fatalf("got %+v, want reservation-not-held on spec.clusterIPs[1] fd00:10:96::b (reserved fd00:10:96::a)", f)
	}
}

func TestAuditWithoutIPAddressesSaysItDidNotCheckThem(t *testing.T) {
	pol := fixtures.MustPolicy(t, ParseDocument, "serviceCIDRs: [10.96.0.0/16]\n")
	v := allocview.NewView()
	snap := v.Update(func(tx *allocview.Tx) { tx.MarkSynced(false) })
	r := Audit(Env{Policy: pol, Snapshot: snap}, []*corev1.Service{fixtures.Service("default", "x", fixtures.WithClusterIP("10.200.0.1"))})
	if r.TracksAllocations {
		t.Error("TracksAllocations true without IPAddresses")
	}
	if len(r.Findings) != 1 || r.Findings[0].Rule != RuleOutsideServiceCIDRs || !strings.Contains(r.Findings[0].Problem, "(policy serviceCIDRs)") {
		t.Fatalf("want one outside-service-cidrs against the policy's serviceCIDRs, got %+v", r.Findings)
	}
}

func TestAuditShownBoundsEachRuleAndCountsTheRest(t *testing.T) {
	pol := fixtures.MustPolicy(t, ParseDocument, auditPolicy)
	var svcs []*corev1.Service
	for i := range 2500 {
		svcs = append(svcs, fixtures.Service("default", fmt.Sprintf("s%04d", i), fixtures.WithClusterIP(fmt.Sprintf("10.200.%d.%d", i/250, i%250+1))))
	}
	svcs = append(svcs, fixtures.Service("default", "early-bird", fixtures.WithClusterIP("10.96.0.10")))
	r := Audit(Env{Policy: pol, Snapshot: makeSnapshot(auditCIDRs)}, svcs)
	counts := r.CountByRule()
	if counts[RuleOutsideServiceCIDRs] != 2500 || counts[RuleReservedForOther] != 1 || counts[RuleInvalidIP] != 0 {
		t.Fatalf("counts %v", counts)
	}
	shown, omitted := r.Shown(20)
	if len(shown) != 21 || omitted[RuleOutsideServiceCIDRs] != 2480 || omitted[RuleReservedForOther] != 0 {
		t.Fatalf("shown %d, omitted %v; want 21 shown, 2480 outside-service-cidrs omitted", len(shown), omitted)
	}
	if shown[0].Name != "s0000" || shown[19].Name != "s0019" || shown[20].Name != "early-bird" {
		t.Errorf("not in report order: first %s, 20th %s, last %s", shown[0].Name, shown[19].Name, shown[20].Name)
	}
}

func TestAuditClipsWhatItEchoes(t *testing.T) {
	pol := fixtures.MustPolicy(t, ParseDocument, auditPolicy)
	long := strings.Repeat("1", 5000)
	r := Audit(Env{Policy: pol, Snapshot: makeSnapshot(auditCIDRs)}, []*corev1.Service{fixtures.Service("default", "x", fixtures.WithClusterIP(long))})
	if len(r.Findings) != 1 {
		t.Fatalf("%d findings", len(r.Findings))
	}
	f := r.Findings[0]
	if len(f.IP) > MaxEchoBytes+clipSlack || len(f.Problem) > MaxMessageBytes+clipSlack || len(f.Fix) > MaxMessageBytes+clipSlack {
		t.Fatalf("unbounded finding: ip %d, problem %d, fix %d bytes", len(f.IP), len(f.Problem), len(f.Fix))
	}
}

// The apiserver stores an IPv6 clusterIP as written: a non-canonical
// spelling is the same address, for the owner and for anyone else.
func TestAuditComparesIPv6InCanonicalForm(t *testing.T) {
	pol := fixtures.MustPolicy(t, ParseDocument, "reservations:\n- ip: fd00:10:96::a\n  service: kube-system/kube-dns\n")
	cidrs := []allocview.ServiceCIDR{serviceCIDR("kubernetes", true, "fd00:10:96::/108")}
	for _, tc := range []struct {
		service string
		want    []RuleID
	}{
		{"kube-system/kube-dns", nil},
		{"default/squatter", []RuleID{RuleReservedForOther}},
	} {
		svcNamespace, svcName, _ := strings.Cut(tc.service, "/")
		r := Audit(Env{Policy: pol, Snapshot: makeSnapshot(cidrs)}, []*corev1.Service{fixtures.Service(svcNamespace, svcName, fixtures.WithClusterIP("fd00:10:96:0::a"), fixtures.WithIPFamilies(corev1.IPv6Protocol))})
		var got []RuleID
		for _, f := range r.Findings {
			got = append(got, f.Rule)
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s on fd00:10:96:0::a: rules %v, want %v", tc.service, got, tc.want)
		}
	}
}
