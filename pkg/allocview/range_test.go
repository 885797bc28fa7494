package allocview

import (
	"net/netip"
	"testing"
)

// TestBandsMatchTheApiserver pins every row of the table in
// docs/apiserver-facts.md ("Ranges and bands").
func TestBandsMatchTheApiserver(t *testing.T) {
	tests := []struct {
		cidr    string
		offset  uint64
		static  string
		dynamic string
	}{
		{"10.96.0.0/12", 256, "10.96.0.1-10.96.1.0", "10.96.1.1-10.111.255.254"},
		{"10.96.0.0/16", 256, "10.96.0.1-10.96.1.0", "10.96.1.1-10.96.255.254"},
		{"10.96.0.0/20", 256, "10.96.0.1-10.96.1.0", "10.96.1.1-10.96.15.254"},
		{"10.96.0.0/21", 128, "10.96.0.1-10.96.0.128", "10.96.0.129-10.96.7.254"},
		{"10.96.0.0/22", 64, "10.96.0.1-10.96.0.64", "10.96.0.65-10.96.3.254"},
		{"10.96.0.0/23", 32, "10.96.0.1-10.96.0.32", "10.96.0.33-10.96.1.254"},
		{"10.96.0.0/24", 16, "10.96.0.1-10.96.0.16", "10.96.0.17-10.96.0.254"},
		{"10.96.0.0/25", 16, "10.96.0.1-10.96.0.16", "10.96.0.17-10.96.0.126"},
		{"10.96.0.0/26", 16, "10.96.0.1-10.96.0.16", "10.96.0.17-10.96.0.62"},
		{"10.96.0.0/27", 16, "10.96.0.1-10.96.0.16", "10.96.0.17-10.96.0.30"},
		{"10.96.0.0/28", 0, "none", "10.96.0.1-10.96.0.14"},
		{"10.96.0.0/31", 0, "none", "none"},
		{"10.96.0.0/32", 0, "none", "none"},
		{"fd00::/64", 256, "fd00::1-fd00::100", "fd00::101-fd00::ffff:ffff:ffff:ffff"},
		{"fd00::/108", 256, "fd00::1-fd00::100", "fd00::101-fd00::f:ffff"},
		{"fd00::/116", 256, "fd00::1-fd00::100", "fd00::101-fd00::fff"},
		{"fd00::/120", 16, "fd00::1-fd00::10", "fd00::11-fd00::ff"},
		{"fd00::/122", 16, "fd00::1-fd00::10", "fd00::11-fd00::3f"},
		{"fd00::/123", 16, "fd00::1-fd00::10", "fd00::11-fd00::1f"},
		{"fd00::/124", 0, "none", "fd00::1-fd00::f"},
	}
	for _, tt := range tests {
		t.Run(tt.cidr, func(t *testing.T) {
			r, err := NewRange("test", netip.MustParsePrefix(tt.cidr))
			if err != nil {
				t.Fatal(err)
			}
			if r.Offset() != tt.offset {
				t.Errorf("offset = %d, want %d", r.Offset(), tt.offset)
			}
			if got := r.Static().String(); got != tt.static {
				t.Errorf("static band = %s, want %s", got, tt.static)
			}
			if got := r.Dynamic().String(); got != tt.dynamic {
				t.Errorf("dynamic band = %s, want %s", got, tt.dynamic)
			}
		})
	}
}

func TestBandOfEveryEdge(t *testing.T) {
	tests := []struct {
		cidr string
		ip   string
		want BandKind
	}{
		{"10.96.0.0/16", "10.96.0.0", Unusable},     // network
		{"10.96.0.0/16", "10.96.0.1", Static},       // first usable, first static
		{"10.96.0.0/16", "10.96.1.0", Static},       // last static
		{"10.96.0.0/16", "10.96.1.1", Dynamic},      // first dynamic
		{"10.96.0.0/16", "10.96.255.254", Dynamic},  // last usable
		{"10.96.0.0/16", "10.96.255.255", Unusable}, // broadcast
		{"10.96.0.0/16", "10.97.0.0", Outside},      // just past the range
		{"10.96.0.0/16", "10.95.255.255", Outside},  // just before it
		{"10.96.0.0/16", "fd00::1", Outside},        // other family
		{"10.96.0.0/28", "10.96.0.1", Dynamic},      // no static band
		{"10.96.0.0/28", "10.96.0.15", Unusable},    // broadcast of a tiny range
		{"10.96.0.0/31", "10.96.0.1", Unusable},     // no usable address
		{"fd00::/108", "fd00::", Unusable},          // IPv6 network address
		{"fd00::/108", "fd00::1", Static},           // first static
		{"fd00::/108", "fd00::100", Static},         // last static
		{"fd00::/108", "fd00::101", Dynamic},        // first dynamic
		{"fd00::/108", "fd00::f:ffff", Dynamic},     // IPv6 keeps its last address
		{"fd00::/108", "fd00::10:0", Outside},       // past the range
		{"fd00::/64", "fd00::ffff:ffff:ffff:ffff", Dynamic},
	}
	for _, tt := range tests {
		t.Run(tt.cidr+" "+tt.ip, func(t *testing.T) {
			r, err := NewRange("test", netip.MustParsePrefix(tt.cidr))
			if err != nil {
				t.Fatal(err)
			}
			if got := r.Band(netip.MustParseAddr(tt.ip)); got != tt.want {
				t.Errorf("Band(%s) = %s, want %s", tt.ip, got, tt.want)
			}
		})
	}
}

func TestNewRangeRefusesUnmaskedPrefixes(t *testing.T) {
	_, err := NewRange("test", netip.MustParsePrefix("10.96.0.1/16"))
	if err == nil || err.Error() != `invalid service CIDR "10.96.0.1/16": host bits are set; did you mean 10.96.0.0/16?` {
		t.Fatalf("err = %v", err)
	}
}

// What an apiserver without StrictIPCIDRValidation stores for spellings
// ParseIP refuses (netutils.ParseIPSloppy, as its Service validation and
// allocation use).
func TestParseIPAsAPIServer(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"010.096.000.010", "10.96.0.10"},
		{"::ffff:10.96.0.10", "10.96.0.10"},
		{"::FFFF:010.096.000.010", "10.96.0.10"},
		{"10.96.0.10", "10.96.0.10"},
		{"fd00:10:96:0::0a", "fd00:10:96::a"},
		{"0010.96.0.10", "10.96.0.10"},
		{"10.96.0.300", ""},
		{"fe80::1%eth0", ""},
		{"", ""},
	} {
		got, ok := ParseIPAsAPIServer(tc.in)
		if tc.want == "" {
			if ok {
				t.Errorf("%q: %s, want refused", tc.in, got)
			}
			continue
		}
		if !ok || got.String() != tc.want || (got.Is4() != (FamilyOf(got) == IPv4)) {
			t.Errorf("%q: %v %v, want %s", tc.in, got, ok, tc.want)
		}
	}
}

func TestParseIP(t *testing.T) {
	tests := []struct {
		in      string
		want    string
		wantErr string
	}{
		{in: "10.96.0.10", want: "10.96.0.10"},
		{in: "fd00:10:96:0::20", want: "fd00:10:96::20"},
		{in: "FD00:10:96::A", want: "fd00:10:96::a"},
		{in: "10.96.0.300", wantErr: `"10.96.0.300" is not an IP address`},
		{in: "010.096.000.010", wantErr: `"010.096.000.010" has leading zeros, which some software reads as octal and an apiserver without StrictIPCIDRValidation as 10.96.0.10; write it as 10.96.0.10`},
		{in: "", wantErr: `"" is not an IP address`},
		{in: "fe80::1%eth0", wantErr: `"fe80::1%eth0" has an IPv6 zone; Service IPs have none`},
		{in: "::ffff:10.96.0.1", wantErr: `"::ffff:10.96.0.1" is an IPv4-mapped IPv6 address; write it as 10.96.0.1`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseIP(tt.in)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("err = %v, want %s", err, tt.wantErr)
				}
				return
			}
			if err != nil || got.String() != tt.want {
				t.Fatalf("ParseIP(%q) = %v, %v; want %s", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestParsePrefix(t *testing.T) {
	for in, wantErr := range map[string]string{
		"10.96.0.0/16":     "",
		"fd00:10:96::/108": "",
		"10.96.0.1/16":     `"10.96.0.1/16" has host bits set; did you mean 10.96.0.0/16?`,
		"10.96.0.0":        `"10.96.0.0" is not a CIDR such as 10.96.0.0/16 or fd00:10:96::/108`,
		"10.96.0.0/33":     `"10.96.0.0/33" is not a CIDR such as 10.96.0.0/16 or fd00:10:96::/108`,
	} {
		_, err := ParsePrefix(in)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != wantErr {
			t.Errorf("ParsePrefix(%q) err = %q, want %q", in, got, wantErr)
		}
	}
}
