package cli

import (
	"net/netip"
	"slices"
	"testing"

	"clusterip-policy/pkg/allocview"
	"clusterip-policy/pkg/policy"
	"clusterip-policy/test/fixtures"
)

// suggest offers, in order, the free addresses a namespace may name: its
// reserved ranges first, then the static bands, never an address that is
// allocated, reserved for another, in another namespace's range or
// dynamic; at most n.
func TestSuggestOffersOnlyFreeAddressesThePolicyAllows(t *testing.T) {
	spec := `allowedCIDRs: [10.96.0.0/24]
reservations:
- {ip: 10.96.0.2, service: kube-system/kube-dns}
reservedRanges:
- {cidr: 10.96.0.4/30, namespaces: [team]}
`
	p := fixtures.MustPolicy(t, policy.ParseDocument, spec)
	snap := allocview.NewView().Update(func(tx *allocview.Tx) {
		tx.SetServiceCIDR(allocview.ServiceCIDR{Name: "kubernetes", Ready: true, CIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/24")}})
		tx.SetAllocation(netip.MustParseAddr("10.96.0.1"), allocview.ServiceHolder("default", "kubernetes"))
		tx.SetAllocation(netip.MustParseAddr("10.96.0.3"), allocview.ServiceHolder("a", "x"))
		tx.SetAllocation(netip.MustParseAddr("10.96.0.5"), allocview.ServiceHolder("team", "db"))
		tx.MarkSynced(true)
	})
	env := policy.Env{Policy: p, Snapshot: snap}
	addrs := func(ss []suggestion) []string {
		var out []string
		for _, s := range ss {
			out = append(out, s.Address)
		}
		return out
	}
	// team: its range first (.4, .6, .7; .5 is taken), then the static
	// band .1-.16 without .1 (allocated), .2 (kube-dns's), .3 (taken)
	// and its own range already listed.
	if got, want := addrs(suggest(env, "team", nil, allocview.IPv4, 6)), []string{"10.96.0.4", "10.96.0.6", "10.96.0.7", "10.96.0.8", "10.96.0.9", "10.96.0.10"}; !slices.Equal(got, want) {
		t.Errorf("team: %v, want %v", got, want)
	}
	// another namespace: never the range, never the reservation.
	got := addrs(suggest(env, "other", nil, allocview.IPv4, 100))
	for _, bad := range []string{"10.96.0.1", "10.96.0.2", "10.96.0.3", "10.96.0.4", "10.96.0.6", "10.96.0.7", "10.96.0.17"} {
		if slices.Contains(got, bad) {
			t.Errorf("other: offered %s: %v", bad, got)
		}
	}
	if len(got) != 16-3-4+0 { // .1-.16 minus .1-.3 and the range .4-.7
		t.Errorf("other: %d addresses %v, want the 9 free static ones", len(got), got)
	}
	if got := suggest(env, "team", nil, allocview.IPv6, 5); len(got) != 0 {
		t.Errorf("no IPv6 range, yet %v", got)
	}
}
