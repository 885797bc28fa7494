package allocview

import (
	"net/netip"
	"testing"
)

func TestPlaceAcrossRanges(t *testing.T) {
	cidrs := []ServiceCIDR{
		{Name: "kubernetes", CIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16"), netip.MustParsePrefix("fd00:10:96::/108")}, Ready: true},
		{Name: "rogue", CIDRs: []netip.Prefix{netip.MustParsePrefix("192.168.0.0/24")}, Ready: true},
		{Name: "wide", CIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, Ready: true},
		{Name: "going", CIDRs: []netip.Prefix{netip.MustParsePrefix("10.200.0.0/24")}, Ready: true, Deleting: true},
	}
	tight := ActiveServiceCIDRs(cidrs[:1], nil)
	if got := tight.Place(netip.MustParseAddr("10.96.0.5")).Kind; got != Static {
		t.Errorf("without the wide range: %s, want static", got)
	}
	rs := ActiveServiceCIDRs(cidrs, []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12"), netip.MustParsePrefix("fd00:10:96::/64")})
	tests := []struct {
		ip   string
		want BandKind
	}{
		{"10.96.0.5", Dynamic},   // static in "kubernetes", but "wide"'s allocator may hand it out
		{"10.0.0.5", Outside},    // static in "wide", but outside its allowed part
		{"10.100.0.5", Dynamic},  // only "wide" (restricted to 10.96.0.0/12) holds it
		{"10.1.0.5", Outside},    // "wide" outside its allowed part
		{"192.168.0.5", Outside}, // "rogue" is not allowed
		{"10.200.0.5", Outside},  // outside the allowed part of "wide"; "going" is being deleted
		{"fd00:10:96::5", Static},
		{"10.96.0.0", Dynamic}, // the network address of "kubernetes", a dynamic address of "wide"
		{"fd00:10:96::", Unusable},
	}
	for _, tt := range tests {
		if got := rs.Place(netip.MustParseAddr(tt.ip)).Kind; got != tt.want {
			t.Errorf("Place(%s) = %s, want %s", tt.ip, got, tt.want)
		}
	}
	if rs.Primary != IPv4 {
		t.Errorf("primary %s", rs.Primary)
	}
	if len(rs.Excluded) != 2 {
		t.Errorf("excluded %v", rs.Excluded)
	}
	want := `10.96.0.0/16 (ServiceCIDR "kubernetes"), fd00:10:96::/108 (ServiceCIDR "kubernetes"), 10.0.0.0/8 (ServiceCIDR "wide"), only 10.96.0.0/12`
	if got := rs.Describe(); got != want {
		t.Errorf("Describe:\n got %s\nwant %s", got, want)
	}
}
