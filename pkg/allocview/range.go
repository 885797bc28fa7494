// Package allocview models Service IP ranges, their static and dynamic bands,
// and an immutable view of which ranges are active and which IPs are
// allocated. Everything here is pure: no I/O, no Kubernetes client.
package allocview

import (
	"fmt"
	"math"
	"math/big"
	"net/netip"
	"strings"

	netutils "k8s.io/utils/net"
)

// BandKind says where an address sits inside a range.
type BandKind int

const (
	// Outside: not inside the range's prefix.
	Outside BandKind = iota
	// Unusable: the network address, or the IPv4 broadcast address; the
	// apiserver never hands these out ("the provided network does not match
	// the current range").
	Unusable
	// Static: the lower band the dynamic allocator only uses once the
	// dynamic band is full; the place for hand-picked IPs.
	Static
	// Dynamic: the band the apiserver's allocator picks from.
	Dynamic
)

func (k BandKind) String() string {
	switch k {
	case Outside:
		return "outside"
	case Unusable:
		return "unusable"
	case Static:
		return "static"
	case Dynamic:
		return "dynamic"
	}
	return fmt.Sprintf("BandKind(%d)", int(k))
}

// Band is an inclusive address interval.
type Band struct {
	First, Last netip.Addr
}

// Contains reports whether ip lies in [First, Last].
func (b Band) Contains(ip netip.Addr) bool {
	return b.First.IsValid() && b.First.Compare(ip) <= 0 && ip.Compare(b.Last) <= 0
}

// IsZero reports whether the band is empty.
func (b Band) IsZero() bool { return !b.First.IsValid() }

// Intersect is the part of b inside o, and whether there is one (bands of
// two families never meet).
func (b Band) Intersect(o Band) (Band, bool) {
	if b.First.Is4() != o.First.Is4() {
		return Band{}, false
	}
	first, last := b.First, b.Last
	if o.First.Compare(first) > 0 {
		first = o.First
	}
	if o.Last.Compare(last) < 0 {
		last = o.Last
	}
	if first.Compare(last) > 0 {
		return Band{}, false
	}
	return Band{first, last}, true
}

// String renders "10.96.0.1-10.96.1.0", or "none" for an empty band.
func (b Band) String() string {
	if b.IsZero() {
		return "none"
	}
	return b.First.String() + "-" + b.Last.String()
}

// Range is one Service CIDR with its bands, computed as the apiserver's
// ipallocator does (pkg/registry/core/service/ipallocator in Kubernetes;
// docs/apiserver-facts.md, "Ranges and bands", has the formula and a table).
type Range struct {
	// Prefix is the CIDR, masked.
	Prefix netip.Prefix
	// Source names where the range comes from: a ServiceCIDR object's name,
	// or "--service-cidr" / "policy serviceCIDRs" for static sources.
	Source string

	usable  Band
	static  Band
	dynamic Band
	offset  uint64
}

// NewRange computes the bands of prefix.
//
// Usable addresses run from network+1 to broadcast-1 for IPv4 and to the
// last address itself for IPv6. The static band holds the first `offset`
// usable addresses, where, with size = 2^hostbits capped at MaxInt64,
//
//	offset = 0                              if size <= 16
//	offset = min(max(16, size/16), 256)     otherwise
//
// Example: 10.96.0.0/24 has size 256 and offset 16, so the static band is
// 10.96.0.1-10.96.0.16 and the dynamic band 10.96.0.17-10.96.0.254.
func NewRange(source string, prefix netip.Prefix) (Range, error) {
	if !prefix.IsValid() {
		return Range{}, fmt.Errorf("invalid service CIDR %q", prefix)
	}
	if prefix.Addr().Is4In6() {
		return Range{}, fmt.Errorf("invalid service CIDR %q: write IPv4 ranges in dotted form", prefix)
	}
	if prefix.Masked() != prefix {
		return Range{}, fmt.Errorf("invalid service CIDR %q: host bits are set; did you mean %s?", prefix, prefix.Masked())
	}
	r := Range{Prefix: prefix, Source: source}
	hostBits := prefix.Addr().BitLen() - prefix.Bits()
	network := prefix.Addr()
	lastAddr := lastAddress(prefix)
	first := network.Next()
	last := lastAddr
	if prefix.Addr().Is4() {
		last = lastAddr.Prev()
	}
	if !first.IsValid() || !last.IsValid() || first.Compare(last) > 0 {
		return r, nil // /31, /32 (and IPv6 /128): no usable address
	}
	r.usable = Band{first, last}
	r.offset = staticOffset(hostBits)
	if r.offset == 0 {
		r.dynamic = r.usable
		return r, nil
	}
	staticLast := addOffset(first, r.offset-1)
	r.static = Band{first, staticLast}
	if dynFirst := staticLast.Next(); dynFirst.IsValid() && dynFirst.Compare(last) <= 0 {
		r.dynamic = Band{dynFirst, last}
	}
	return r, nil
}

// staticOffset is calculateRangeOffset from the apiserver's bitmap.go.
func staticOffset(hostBits int) uint64 {
	var size uint64 = math.MaxInt64
	if hostBits < 63 {
		size = 1 << hostBits
	}
	const minOffset, maxOffset, step = 16, 256, 16
	if size <= minOffset {
		return 0
	}
	return min(max(minOffset, size/step), maxOffset)
}

// lastAddress is the all-ones host address of prefix (the IPv4 broadcast).
func lastAddress(p netip.Prefix) netip.Addr {
	b := p.Addr().As16()
	bits := p.Bits()
	if p.Addr().Is4() {
		bits += 96
	}
	for i := bits; i < 128; i++ {
		b[i/8] |= 1 << (7 - i%8)
	}
	a := netip.AddrFrom16(b)
	if p.Addr().Is4() {
		return a.Unmap()
	}
	return a
}

// addOffset returns a + n, for n small enough to stay inside a's prefix.
func addOffset(a netip.Addr, n uint64) netip.Addr {
	b := a.As16()
	var x big.Int
	x.SetBytes(b[:])
	x.Add(&x, new(big.Int).SetUint64(n))
	x.FillBytes(b[:])
	r := netip.AddrFrom16(b)
	if a.Is4() {
		return r.Unmap()
	}
	return r
}

// Usable is the interval of assignable addresses (empty for /31 and /32).
func (r Range) Usable() Band { return r.usable }

// Static is the static band; empty when the range is too small to have one.
func (r Range) Static() Band { return r.static }

// Dynamic is the dynamic band.
func (r Range) Dynamic() Band { return r.dynamic }

// Offset is the size of the static band.
func (r Range) Offset() uint64 { return r.offset }

// First is the first usable address, implicitly reserved for the
// default/kubernetes Service. Invalid when the range has none.
func (r Range) First() netip.Addr { return r.usable.First }

// Band says where ip sits in the range. ip must be canonical (see Canonical).
func (r Range) Band(ip netip.Addr) BandKind {
	if !r.Prefix.Contains(ip) {
		return Outside
	}
	switch {
	case r.static.Contains(ip):
		return Static
	case r.dynamic.Contains(ip):
		return Dynamic
	}
	return Unusable
}

// Family returns "IPv4" or "IPv6", the spelling of Service.spec.ipFamilies.
func (r Range) Family() Family { return FamilyOf(r.Prefix.Addr()) }

func (r Range) String() string {
	return fmt.Sprintf("%s (%s)", r.Prefix, r.Source)
}

// Name is how a message names the range: `ServiceCIDR "kubernetes"` for a
// ServiceCIDR object, `10.96.0.0/16 (--service-cidr)` for a static source.
func (r Range) Name() string {
	if strings.HasPrefix(r.Source, "ServiceCIDR ") {
		return r.Source
	}
	return r.String()
}

// IsDefaultServiceCIDR reports whether the range is a CIDR of the
// apiserver's default ServiceCIDR object, which it recreates from its
// --service-cluster-ip-range whenever it is missing.
func (r Range) IsDefaultServiceCIDR() bool {
	return r.Source == ServiceCIDRSource(DefaultServiceCIDRName)
}

// ServiceCIDRSource is the Source of a range read from the ServiceCIDR
// object named name.
func ServiceCIDRSource(name string) string { return fmt.Sprintf("ServiceCIDR %q", name) }

// Family is an IP family as Kubernetes spells it.
type Family string

const (
	IPv4 Family = "IPv4"
	IPv6 Family = "IPv6"
)

// FamilyOf returns the family of a canonical address.
func FamilyOf(a netip.Addr) Family {
	if a.Is4() {
		return IPv4
	}
	return IPv6
}

// ParseIP parses a Service IP the way the policy compares them: IPv6 in any
// spelling (fd00:10:96:0::20 and fd00:10:96::20 are the same address), IPv4
// only in plain dotted form. It refuses zones and IPv4-mapped IPv6
// (::ffff:10.96.0.1), which name an IPv4 address in an IPv6 spelling the
// apiserver does not accept for Services.
func ParseIP(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		if sloppy, ok := ParseIPAsAPIServer(s); ok && sloppy.Is4() {
			return netip.Addr{}, fmt.Errorf("%q has leading zeros, which some software reads as octal and an apiserver without StrictIPCIDRValidation as %s; write it as %s", s, sloppy, sloppy)
		}
		return netip.Addr{}, fmt.Errorf("%q is not an IP address", s)
	}
	if a.Zone() != "" {
		return netip.Addr{}, fmt.Errorf("%q has an IPv6 zone; Service IPs have none", s)
	}
	if a.Is4In6() {
		return netip.Addr{}, fmt.Errorf("%q is an IPv4-mapped IPv6 address; write it as %s", s, a.Unmap())
	}
	return a, nil
}

// ParseIPAsAPIServer returns the address an apiserver whose
// StrictIPCIDRValidation feature gate is off stores and allocates for a
// Service IP that ParseIP refuses: that apiserver validates and parses
// clusterIP with netutils.ParseIPSloppy (k8s.io/apimachinery
// IsValidIPForLegacyField, k8s.io/kubernetes service storage alloc.go), so
// "010.096.000.010" is 10.96.0.10 (leading zeros read as decimal) and
// "::ffff:10.96.0.10" is the IPv4 address 10.96.0.10. The gate is on by
// default since Kubernetes 1.36, and then the apiserver refuses both
// spellings itself. ok is false for a string no apiserver accepts, and for
// a zone (which neither parser takes).
func ParseIPAsAPIServer(s string) (netip.Addr, bool) {
	ip := netutils.ParseIPSloppy(s)
	if ip == nil {
		return netip.Addr{}, false
	}
	if v4 := ip.To4(); v4 != nil {
		return netip.AddrFrom4([4]byte(v4)), true
	}
	a, ok := netip.AddrFromSlice(ip)
	return a, ok
}

// ParsePrefix parses a CIDR and insists that it is masked, as the apiserver
// does for ServiceCIDRs and --service-cluster-ip-range.
func ParsePrefix(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not a CIDR such as 10.96.0.0/16 or fd00:10:96::/108", s)
	}
	if p.Addr().Is4In6() {
		return netip.Prefix{}, fmt.Errorf("%q is an IPv4-mapped IPv6 CIDR; write it in dotted IPv4 form", s)
	}
	if p.Masked() != p {
		return netip.Prefix{}, fmt.Errorf("%q has host bits set; did you mean %s?", s, p.Masked())
	}
	return p, nil
}
