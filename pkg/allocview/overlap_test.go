package allocview

import (
	"net/netip"
	"slices"
	"testing"
)

func cidrs(name string, ss ...string) ServiceCIDR {
	c := ServiceCIDR{Name: name, Ready: true}
	for _, s := range ss {
		c.CIDRs = append(c.CIDRs, netip.MustParsePrefix(s))
	}
	return c
}

func TestPlaceCountsAnAddressUsableWhenAWiderRangeCanHandItOut(t *testing.T) {
	tests := []struct {
		name  string
		cidrs []ServiceCIDR
		ip    string
		want  BandKind
		in    string // the range Place reports
	}{
		{name: "the network address of a /24 inside a /16 is a dynamic address of the /16",
			cidrs: []ServiceCIDR{cidrs("kubernetes", "10.96.0.0/16"), cidrs("extra", "10.96.8.0/24")}, ip: "10.96.8.0", want: Dynamic, in: "10.96.0.0/16"},
		{name: "the broadcast address of a /24 inside a /16 is a dynamic address of the /16",
			cidrs: []ServiceCIDR{cidrs("kubernetes", "10.96.0.0/16"), cidrs("extra", "10.96.8.0/24")}, ip: "10.96.8.255", want: Dynamic, in: "10.96.0.0/16"},
		{name: "the broadcast address of a /28 inside a /24 is a static address of the /24",
			cidrs: []ServiceCIDR{cidrs("kubernetes", "10.96.0.0/28"), cidrs("extension", "10.96.0.0/24")}, ip: "10.96.0.15", want: Static, in: "10.96.0.0/24"},
		{name: "an address of both is dynamic when the narrower range hands it out",
			cidrs: []ServiceCIDR{cidrs("kubernetes", "10.96.0.0/28"), cidrs("extension", "10.96.0.0/24")}, ip: "10.96.0.5", want: Dynamic, in: "10.96.0.0/28"},
		{name: "the network address shared by both is unusable",
			cidrs: []ServiceCIDR{cidrs("kubernetes", "10.96.0.0/28"), cidrs("extension", "10.96.0.0/24")}, ip: "10.96.0.0", want: Unusable, in: "10.96.0.0/28"},
		{name: "the broadcast address of the wider range is unusable",
			cidrs: []ServiceCIDR{cidrs("kubernetes", "10.96.0.0/28"), cidrs("extension", "10.96.0.0/24")}, ip: "10.96.0.255", want: Unusable, in: "10.96.0.0/24"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := ActiveServiceCIDRs(tt.cidrs, nil).Place(netip.MustParseAddr(tt.ip))
			if p.Kind != tt.want || p.Range.Prefix.String() != tt.in {
				t.Fatalf("Place(%s) = %s in %s, want %s in %s", tt.ip, p.Kind, p.Range.Prefix, tt.want, tt.in)
			}
		})
	}
}

func TestStaticBandsLeaveOutWhatAnotherRangeHandsOutDynamically(t *testing.T) {
	tests := []struct {
		name  string
		cidrs []ServiceCIDR
		want  []string
	}{
		{name: "one range", cidrs: []ServiceCIDR{cidrs("kubernetes", "10.96.0.0/16")}, want: []string{"10.96.0.1-10.96.1.0"}},
		{name: "a /28 (no static band) over the start of a /24",
			cidrs: []ServiceCIDR{cidrs("kubernetes", "10.96.0.0/28"), cidrs("extension", "10.96.0.0/24")}, want: []string{"10.96.0.15-10.96.0.16"}},
		{name: "a /16 around a /24: the /24's static band is dynamic in the /16",
			cidrs: []ServiceCIDR{cidrs("kubernetes", "10.96.0.0/16"), cidrs("extra", "10.96.8.0/24")}, want: []string{"10.96.0.1-10.96.1.0"}},
		{name: "a /27 inside a /20's static band cuts its dynamic band out, and its own static band is not named twice",
			cidrs: []ServiceCIDR{cidrs("kubernetes", "10.96.0.0/20"), cidrs("inner", "10.96.0.64/27")}, want: []string{"10.96.0.1-10.96.0.80", "10.96.0.95-10.96.1.0"}},
		{name: "the same CIDR in two objects is named once",
			cidrs: []ServiceCIDR{cidrs("kubernetes", "10.96.0.0/24"), cidrs("copy", "10.96.0.0/24")}, want: []string{"10.96.0.1-10.96.0.16"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ActiveServiceCIDRs(tt.cidrs, nil).StaticBands(IPv4); !slices.Equal(got, tt.want) {
				t.Fatalf("StaticBands = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestFamiliesFollowTheApiserversConfiguredRanges(t *testing.T) {
	v6Object := cidrs("v6-ahead", "fd00:10:96::/108")
	tests := []struct {
		name   string
		rs     RangeSet
		want   []Family
		kubeIP string
	}{
		{name: "an IPv6 ServiceCIDR object does not make an IPv4 apiserver dual-stack",
			rs: ActiveServiceCIDRs([]ServiceCIDR{cidrs("kubernetes", "10.96.0.0/16"), v6Object}, nil), want: []Family{IPv4}, kubeIP: "10.96.0.1"},
		{name: "a dual-stack default ServiceCIDR",
			rs: ActiveServiceCIDRs([]ServiceCIDR{cidrs("kubernetes", "fd00:10:96::/108", "10.96.0.0/16")}, nil), want: []Family{IPv6, IPv4}, kubeIP: "fd00:10:96::1"},
		{name: "a second small ServiceCIDR has no kubernetes address",
			rs: ActiveServiceCIDRs([]ServiceCIDR{cidrs("small", "10.97.0.0/28"), cidrs("kubernetes", "10.96.0.0/16")}, nil), want: []Family{IPv4}, kubeIP: "10.96.0.1"},
		{name: "static ranges", rs: StaticRanges("--service-cidr", []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24"), netip.MustParsePrefix("fd00::/120")}, nil), want: []Family{IPv4, IPv6}, kubeIP: "10.0.0.1"},
		{name: "without a default ServiceCIDR the active ranges stand in",
			rs: ActiveServiceCIDRs([]ServiceCIDR{v6Object}, nil), want: []Family{IPv6}, kubeIP: "fd00:10:96::1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.rs.Families(); !slices.Equal(got, tt.want) {
				t.Fatalf("Families = %v, want %v", got, tt.want)
			}
			ip, _, ok := tt.rs.KubernetesServiceIP()
			if !ok || ip.String() != tt.kubeIP {
				t.Fatalf("KubernetesServiceIP = %s %v, want %s", ip, ok, tt.kubeIP)
			}
		})
	}
}

func TestKubernetesServiceIPMatchesTheFirstUsableAddress(t *testing.T) {
	for _, s := range []string{"10.96.0.0/16", "10.96.0.0/30", "10.96.0.0/31", "10.96.0.0/32", "fd00::/64", "fd00::/127", "fd00::/128"} {
		p := netip.MustParsePrefix(s)
		r, err := NewRange("", p)
		if err != nil {
			t.Fatal(err)
		}
		ip, _, ok := StaticRanges("test", []netip.Prefix{p}, nil).KubernetesServiceIP()
		if ok != r.First().IsValid() || (ok && ip != r.First()) {
			t.Errorf("%s: KubernetesServiceIP = %s %v, want the first usable address %s", s, ip, ok, r.First())
		}
	}
}
