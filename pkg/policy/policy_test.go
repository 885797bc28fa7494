package policy

import (
	"strings"
	"testing"

	"clusterip-policy/test/fixtures"
)

// Every refusal of an object manifest names the field, its line in the
// file and the fix.
func TestParseRefusesBadPoliciesNamingTheEntry(t *testing.T) {
	tests := []struct {
		name string
		body string
		want string
	}{
		{name: "a malformed CIDR", body: "allowedCIDRs: [10.96.0.0/12, 10.300.0.0/16]\n", want: `spec.allowedCIDRs[1] (line 6): "10.300.0.0/16" is not a CIDR`},
		{name: "a CIDR with host bits", body: "serviceCIDRs:\n- 10.96.0.1/16\n", want: `spec.serviceCIDRs[0] (line 7): "10.96.0.1/16" has host bits set; did you mean 10.96.0.0/16?`},
		{name: "an IPv6 service range wider than /64", body: "serviceCIDRs: [fd00::/48]\n", want: "fd00::/48 is larger than /64"},
		{name: "a malformed IP", body: "reservations:\n- ip: 10.96.0.300\n  service: kube-system/kube-dns\n", want: `spec.reservations[0].ip (line 7): "10.96.0.300" is not an IP address`},
		{name: "a missing IP", body: "reservations:\n- service: kube-system/kube-dns\n", want: "spec.reservations[0].ip (line 7): required; give the reserved address"},
		{name: "an owner without a namespace", body: "reservations:\n- ip: 10.96.0.10\n  service: kube-dns\n", want: `spec.reservations[0].service (line 8): "kube-dns" is not namespace/name, such as kube-system/kube-dns`},
		{name: "an owner with an invalid name", body: "reservations:\n- ip: 10.96.0.10\n  service: kube-system/Kube_DNS\n", want: `Service name "Kube_DNS" is invalid`},
		{
			name: "one IP for two owners",
			body: "reservations:\n- ip: 10.96.0.10\n  service: kube-system/kube-dns\n- ip: 10.96.0.10\n  service: default/web\n",
			want: "spec.reservations[1] (line 9): 10.96.0.10 is reserved for both kube-system/kube-dns (spec.reservations[0], line 7) and default/web; an IP has one owner",
		},
		{
			name: "one IP in two spellings for two owners",
			body: "reservations:\n- ip: fd00::a\n  service: kube-system/kube-dns\n- ip: FD00:0::A\n  service: default/web\n",
			want: "fd00::a is reserved for both kube-system/kube-dns",
		},
		{
			name: "an owner with two IPs of one family",
			body: "reservations:\n- ip: 10.96.0.10\n  service: kube-system/kube-dns\n- ip: 10.96.0.11\n  service: kube-system/kube-dns\n",
			want: "spec.reservations[1] (line 9): kube-system/kube-dns already holds IPv4 10.96.0.10 (spec.reservations[0], line 7); a Service holds at most one IP per family",
		},
		{name: "a duplicate entry", body: "reservations:\n- ip: 10.96.0.10\n  service: kube-system/kube-dns\n- ip: 10.96.0.10\n  service: kube-system/kube-dns\n", want: "is listed twice"},
		{name: "a reservation outside allowedCIDRs", body: "allowedCIDRs: [10.96.0.0/12]\nreservations:\n- ip: 192.168.0.10\n  service: kube-system/kube-dns\n", want: "192.168.0.10 is outside allowedCIDRs"},
		{name: "a reservation on a network address", body: "serviceCIDRs: [10.96.0.0/16]\nreservations:\n- ip: 10.96.0.0\n  service: kube-system/kube-dns\n", want: "is the network or broadcast address of 10.96.0.0/16"},
		{name: "an unknown action", body: "enforcement:\n  default: block\n", want: `spec.enforcement.default (line 7): "block" is not an action; use deny, warn or audit`},
		{name: "an unknown rule", body: "enforcement:\n  rules:\n    static-ip: warn\n", want: `spec.enforcement.rules[static-ip] (line 8): "static-ip" is not a rule; the rules are invalid-ip, outside-service-cidrs, reserved-for-other, reserved-range-for-other, static-ip-in-dynamic-band, already-allocated`},
		{name: "an unknown rule action", body: "enforcement:\n  rules:\n    invalid-ip: allow\n", want: `spec.enforcement.rules[invalid-ip] (line 8): "allow" is not an action`},
		{name: "an invalid exempt namespace", body: "exemptions:\n  namespaces: [Legacy]\n", want: `spec.exemptions.namespaces[0] (line 7): "Legacy" is not a namespace name`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseDocument([]byte(fixtures.Policy(tt.body)))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v\nwant it to contain %q", err, tt.want)
			}
		})
	}
}

// The retired file format is decoded strictly, as it always was, before
// its translation into the spec; its refusals name the fields as the file
// writes them, without spec.
func TestTheRetiredFileFormatIsDecodedStrictly(t *testing.T) {
	const head = "apiVersion: clusterip-policy/v1alpha1\nkind: ClusterIPPolicy\n"
	tests := []struct {
		name string
		body string
		want string
	}{
		{name: "an empty file", body: "", want: "the file is empty"},
		{name: "an unknown field", body: head + "reservation:\n- ip: 10.96.0.10\n", want: `line 3: unknown field "reservation"`},
		{name: "an unknown nested field", body: head + "reservations:\n- ip: 10.96.0.10\n  service: kube-system/kube-dns\n  owner: x\n", want: `line 6: unknown field "owner"`},
		{name: "a wrong apiVersion", body: "apiVersion: v1\nkind: ClusterIPPolicy\n", want: `line 1: apiVersion "v1" is not supported; use clusterip-policy/v1alpha1`},
		{name: "a wrong kind", body: "apiVersion: clusterip-policy/v1alpha1\nkind: Policy\n", want: `line 2: kind "Policy" is not supported; use ClusterIPPolicy`},
		{name: "a second document", body: head + "---\n" + head, want: "line 3: a second YAML document"},
		{name: "a refusal of the translated spec", body: head + "reservations:\n- ip: 10.96.0.10\n  service: kube-system/kube-dns\n- ip: 10.96.0.10\n  service: default/web\n",
			want: "reservations[1] (line 6): 10.96.0.10 is reserved for both kube-system/kube-dns (reservations[0], line 4) and default/web; an IP has one owner"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.body))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v\nwant it to contain %q", err, tt.want)
			}
		})
	}
}

func TestParseTheDocumentedPolicy(t *testing.T) {
	p, err := ParseDocument([]byte(fixtures.Policy(`serviceCIDRs: [10.96.0.0/16, fd00:10:96::/108]
allowedCIDRs: [10.96.0.0/12, fd00:10:96::/64]
reserveKubernetesService: true
reservations:
- ip: 10.96.0.10
  service: kube-system/kube-dns
  note: cluster DNS
- ip: fd00:10:96::a
  service: kube-system/kube-dns
enforcement:
  default: deny
  rules:
    static-ip-in-dynamic-band: warn
exemptions:
  namespaces: [legacy]
  users: []
  groups: []
`)))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.ServiceCIDRs) != 2 || len(p.AllowedCIDRs) != 2 || !p.ReserveKubernetesService || len(p.Reservations) != 2 {
		t.Fatalf("parsed %+v", p)
	}
	if p.ActionFor(RuleStaticIPInDynamicBand) != ActionWarn || p.ActionFor(RuleReservedForOther) != ActionDeny {
		t.Fatal("enforcement not applied")
	}
	if p.Exempt("legacy", "", nil) == "" || p.Exempt("default", "", nil) != "" {
		t.Fatal("exemptions not applied")
	}
	if len(p.Digest) != 12 {
		t.Fatalf("digest %q", p.Digest)
	}
}

func TestReserveKubernetesServiceCanBeTurnedOff(t *testing.T) {
	env := Env{Policy: fixtures.MustPolicy(t, ParseDocument, "reserveKubernetesService: false\n"), Snapshot: makeSnapshot(v4Only)}
	d := Mutate(env, Request{Operation: Create, Service: fixtures.Service("default", "web", fixtures.WithClusterIP("10.96.0.1"))})
	assertRule(t, d, "", "")
	if !Default().ReserveKubernetesService {
		t.Fatal("the default policy must reserve the first address")
	}
}
