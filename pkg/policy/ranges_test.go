package policy

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"clusterip-policy/pkg/allocview"
	"clusterip-policy/test/fixtures"
)

func TestReservedRangesRefusedAtLoadNamingTheValueAndTheFix(t *testing.T) {
	tests := []struct{ name, body, want string }{
		{"cidr and first/last", "reservedRanges:\n- cidr: 10.96.0.16/28\n  first: 10.96.0.20\n  last: 10.96.0.30\n  namespaces: [a]\n",
			`spec.reservedRanges[0] (line 7): gives both cidr "10.96.0.16/28" and first/last; give the range one way`},
		{"first without last", "reservedRanges:\n- first: 10.96.0.20\n  namespaces: [a]\n", "needs both first and last"},
		{"no range at all", "reservedRanges:\n- namespaces: [a]\n", "gives no range; set cidr"},
		{"a malformed cidr", "reservedRanges:\n- cidr: 10.96.0.300/28\n  namespaces: [a]\n", `spec.reservedRanges[0].cidr (line 7): "10.96.0.300/28" is not a CIDR`},
		{"a malformed first", "reservedRanges:\n- first: 10.96.0.x\n  last: 10.96.0.30\n  namespaces: [a]\n", `spec.reservedRanges[0].first (line 7): "10.96.0.x" is not an IP address`},
		{"mixed families", "reservedRanges:\n- first: 10.96.0.20\n  last: fd00::30\n  namespaces: [a]\n", "first 10.96.0.20 and last fd00::30 are of different IP families"},
		{"last below first", "reservedRanges:\n- first: 10.96.0.30\n  last: 10.96.0.20\n  namespaces: [a]\n", "last 10.96.0.20 is below first 10.96.0.30; swap them"},
		{"nobody may use it", "reservedRanges:\n- cidr: 10.96.0.16/28\n", "10.96.0.16/28 names no namespace that may use it; add namespaces"},
		{"a bad namespace", "reservedRanges:\n- cidr: 10.96.0.16/28\n  namespaces: [Team_A]\n", `spec.reservedRanges[0].namespaces[0] (line 8): "Team_A" is not a namespace name`},
		{"a bad selector operator", "reservedRanges:\n- cidr: 10.96.0.16/28\n  namespaceSelector:\n    matchExpressions:\n    - {key: team, operator: Near, values: [a]}\n", "spec.reservedRanges[0].namespaceSelector (line 8): "},
		{"a bad selector label", "reservedRanges:\n- cidr: 10.96.0.16/28\n  namespaces: [a]\n  serviceSelector:\n    matchLabels: {\"bad key!\": x}\n", "spec.reservedRanges[0].serviceSelector (line 9): "},
		{"an unknown field", "reservedRanges:\n- cidr: 10.96.0.16/28\n  namespace: a\n", `unknown field "namespace"`},
		{"overlapping ranges", "reservedRanges:\n- cidr: 10.96.0.16/28\n  namespaces: [a]\n- first: 10.96.0.30\n  last: 10.96.0.40\n  namespaces: [b]\n",
			"spec.reservedRanges[1] (line 9): 10.96.0.30-10.96.0.40 overlaps spec.reservedRanges[0] 10.96.0.16/28 (line 7) from 10.96.0.30; an address belongs to one range"},
		{"overlap listed in reverse order", "reservedRanges:\n- cidr: fd00::/120\n  namespaces: [a]\n- first: fd00::ff\n  last: fd00::1ff\n  namespaces: [b]\n- cidr: fd00::f0/124\n  namespaces: [c]\n",
			"overlaps spec.reservedRanges[0] fd00::/120"},
		{"one range too large (IPv4 cidr)", "reservedRanges:\n- cidr: 10.96.0.0/19\n  namespaces: [a]\n", "spec.reservedRanges[0].cidr (line 7): 10.96.0.0/19 has 8192 addresses, more than the limit of 4096 for all ranges together; use a smaller prefix (/20 or longer)"},
		{"one range hostile (IPv6 cidr)", "reservedRanges:\n- cidr: fd00::/8\n  namespaces: [a]\n", "spec.reservedRanges[0].cidr (line 7): fd00::/8 has 1329227995784915872903807060280344576 addresses, more than the limit of 4096"},
		{"one range hostile (IPv6 first/last)", "reservedRanges:\n- first: \"::\"\n  last: ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff\n  namespaces: [a]\n", "::-ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff has more than 4096 addresses"},
		{"ranges together too large", "reservedRanges:\n- cidr: 10.96.0.0/21\n  namespaces: [a]\n- cidr: 10.96.8.0/21\n  namespaces: [b]\n- cidr: 10.96.16.0/30\n  namespaces: [c]\n",
			"spec.reservedRanges[2] (line 11): 10.96.16.0/30 brings reservedRanges to more than 4096 addresses in all"},
		{"outside allowedCIDRs", "allowedCIDRs: [10.96.0.0/16]\nreservedRanges:\n- first: 10.96.255.250\n  last: 10.97.0.5\n  namespaces: [a]\n", "10.96.255.250-10.97.0.5 is not wholly inside one of allowedCIDRs"},
		{"a long note", "reservedRanges:\n- cidr: 10.96.0.16/28\n  namespaces: [a]\n  note: " + strings.Repeat("x", 300) + "\n", "spec.reservedRanges[0].note (line 9): is 300 bytes, more than the limit of 256"},
		{"too many ranges", "reservedRanges:\n" + strings.Repeat("- cidr: 10.96.0.16/28\n  namespaces: [a]\n", 65), "spec.reservedRanges (line 6): 65 entries, more than the limit of 64"},
		{"the new rule with a bad action", "enforcement:\n  rules:\n    reserved-range-for-other: allow\n", `spec.enforcement.rules[reserved-range-for-other] (line 8): "allow" is not an action`},
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

func TestReservedRangesLoadSortedWithWhoMayUseThem(t *testing.T) {
	p := fixtures.MustPolicy(t, ParseDocument, `enforcement:
  rules: {reserved-range-for-other: warn}
reservedRanges:
- first: fd00::20
  last: fd00::3f
  namespaceSelector: {matchLabels: {team: b}}
  note: team b
- cidr: 10.96.0.16/28
  namespaces: [team-a]
  serviceSelector: {matchExpressions: [{key: tier, operator: In, values: [db]}]}
`)
	if p.ActionFor(RuleReservedRangeForOther) != ActionWarn {
		t.Errorf("action = %s, want warn", p.ActionFor(RuleReservedRangeForOther))
	}
	if len(p.ReservedRanges) != 2 || p.ReservedRanges[0].Written != "10.96.0.16/28" || p.ReservedRanges[1].Written != "fd00::20-fd00::3f" {
		t.Fatalf("ranges = %+v", p.ReservedRanges)
	}
	v4, v6 := p.ReservedRanges[0], p.ReservedRanges[1]
	if v4.Size != 16 || v6.Size != 32 || v4.Index != 1 || v6.Index != 0 {
		t.Errorf("sizes %d %d, indexes %d %d", v4.Size, v6.Size, v4.Index, v6.Index)
	}
	for _, c := range []struct {
		ip   string
		want string
	}{{"10.96.0.15", ""}, {"10.96.0.16", "10.96.0.16/28"}, {"10.96.0.31", "10.96.0.16/28"}, {"10.96.0.32", ""},
		{"fd00::1f", ""}, {"fd00::20", "fd00::20-fd00::3f"}, {"fd00::3f", "fd00::20-fd00::3f"}, {"fd00::40", ""}, {"::ffff:10.96.0.20", ""}} {
		r, ok := p.ReservedRangeOf(netip.MustParseAddr(c.ip))
		if got := map[bool]string{true: r.Written}[ok]; got != c.want {
			t.Errorf("ReservedRangeOf(%s) = %q, want %q", c.ip, got, c.want)
		}
	}
	labelsOf := func(ns string) (map[string]string, bool) {
		if ns == "payments" {
			return map[string]string{"team": "b"}, true
		}
		return nil, false
	}
	db := map[string]string{"tier": "db"}
	for _, c := range []struct {
		r      ReservedRange
		ns     string
		labels map[string]string
		want   bool
	}{
		{v4, "team-a", db, true}, {v4, "team-a", nil, false}, {v4, "team-b", db, false},
		{v6, "payments", nil, true}, {v6, "team-a", nil, false},
	} {
		if got := c.r.Allows(c.ns, c.labels, labelsOf); got != c.want {
			t.Errorf("%s.Allows(%s, %v) = %v, want %v", c.r.Written, c.ns, c.labels, got, c.want)
		}
	}
	if got := v4.Who(); got != "namespace team-a (Services matching tier in (db))" {
		t.Errorf("Who = %q", got)
	}
	if got := v6.String(); got != "fd00::20-fd00::3f (team b)" {
		t.Errorf("String = %q", got)
	}
}

func TestReservedRangeSelectorWithoutLabelsMatchesTheNamespaceName(t *testing.T) {
	p := fixtures.MustPolicy(t, ParseDocument, "reservedRanges:\n- cidr: 10.96.0.16/28\n  namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: dns}}\n")
	r := p.ReservedRanges[0]
	if !r.Allows("dns", nil, nil) || r.Allows("web", nil, nil) {
		t.Fatal("a namespace with unknown labels is matched by its kubernetes.io/metadata.name label only")
	}
}

func TestReservedRangesAtTheSizeBoundLoad(t *testing.T) {
	var b strings.Builder
	b.WriteString("reservedRanges:\n")
	for i := range 64 { // 64 ranges of 64 addresses: exactly the bound
		fmt.Fprintf(&b, "- cidr: 10.96.%d.0/26\n  namespaces: [team-%d]\n", i, i)
	}
	p := fixtures.MustPolicy(t, ParseDocument, b.String())
	total := 0
	for _, r := range p.ReservedRanges {
		total += r.Size
	}
	if total != MaxReservedRangeAddresses {
		t.Fatalf("total = %d", total)
	}
}

func TestFitReservedRangesNeedsOneActiveRange(t *testing.T) {
	p := fixtures.MustPolicy(t, ParseDocument, "reservedRanges:\n- cidr: 10.96.0.16/28\n  namespaces: [a]\n- first: 10.97.255.250\n  last: 10.98.0.3\n  namespaces: [b]\n")
	rs := allocview.StaticRanges("test", []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16")}, nil)
	err := FitReservedRanges(p, rs)
	if err == nil || !strings.Contains(err.Error(), "reservedRanges[1]: 10.97.255.250-10.98.0.3 is not wholly inside one active Service range") {
		t.Fatalf("err = %v", err)
	}
	rs = allocview.StaticRanges("test", []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16"), netip.MustParsePrefix("10.97.0.0/16"), netip.MustParsePrefix("10.98.0.0/16")}, nil)
	if err := FitReservedRanges(p, rs); err == nil {
		t.Fatal("a range across two active ranges must be refused")
	}
	rs = allocview.StaticRanges("test", []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12")}, nil)
	if err := FitReservedRanges(p, rs); err != nil {
		t.Fatal(err)
	}
}

func TestReservedRangesLoadFromTheObjectSpec(t *testing.T) {
	p, err := ParseObjectSpec([]byte(`{"reservedRanges":[{"cidr":"10.96.0.16/28","namespaces":["dns"],"note":"DNS"},{"first":"10.96.0.40","last":"10.96.0.79","namespaceSelector":{"matchLabels":{"team":"a"}},"serviceSelector":{"matchLabels":{"app":"db"}}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.ReservedRanges) != 2 || p.ReservedRanges[1].Who() != "namespaces matching team=a (Services matching app=db)" {
		t.Fatalf("ranges = %+v", p.ReservedRanges)
	}
	_, err = ParseObjectSpec([]byte(`{"reservedRanges":[{"cidr":"10.96.0.16/28","namespaces":["dns"]},{"cidr":"10.96.0.16/29","namespaces":["web"]}]}`))
	if err == nil || !strings.Contains(err.Error(), "spec.reservedRanges[1]: 10.96.0.16/29 overlaps spec.reservedRanges[0] 10.96.0.16/28 from") {
		t.Fatalf("err = %v", err)
	}
}
