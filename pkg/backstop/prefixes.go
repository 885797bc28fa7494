package backstop

import (
	"math/big"
	"net/netip"

	"clusterip-policy/pkg/allocview"
)

// coverBand returns the fewest CIDRs whose union is exactly the addresses
// first..last (inclusive, one family): CEL tests membership of a prefix
// (cidr().containsIP) but has no address arithmetic, so a band such as a
// reserved range 10.96.0.20-10.96.0.59 is written as 10.96.0.20/30,
// 10.96.0.24/29, 10.96.0.32/28, 10.96.0.48/29, 10.96.0.56/30. A band of n
// addresses takes at most 2*log2(n) prefixes.
func coverBand(b allocview.Band) []netip.Prefix {
	if !b.First.IsValid() || !b.Last.IsValid() || b.First.BitLen() != b.Last.BitLen() || b.Last.Less(b.First) {
		return nil
	}
	bits := b.First.BitLen()
	cur, last := toInt(b.First), toInt(b.Last)
	one := big.NewInt(1)
	var out []netip.Prefix
	for cur.Cmp(last) <= 0 {
		// The largest aligned block starting at cur that ends at or
		// before last.
		host := 0
		for host < bits && cur.Bit(host) == 0 {
			end := new(big.Int).Add(cur, new(big.Int).Sub(new(big.Int).Lsh(one, uint(host+1)), one))
			if end.Cmp(last) > 0 {
				break
			}
			host++
		}
		out = append(out, netip.PrefixFrom(fromInt(cur, bits), bits-host))
		cur.Add(cur, new(big.Int).Lsh(one, uint(host)))
	}
	return out
}

// blockAt is the prefix of size addresses (a power of two) that starts at
// the aligned address a: 10.96.0.0 and 256 give 10.96.0.0/24.
func blockAt(a netip.Addr, size uint64) netip.Prefix {
	host := 0
	for s := size; s > 1; s >>= 1 {
		host++
	}
	return netip.PrefixFrom(a, a.BitLen()-host)
}

// addrPlus is a + n within a's family.
func addrPlus(a netip.Addr, n uint64) netip.Addr {
	x := toInt(a)
	x.Add(x, new(big.Int).SetUint64(n))
	return fromInt(x, a.BitLen())
}

// lastOf is the last (all-ones host part) address of p.
func lastOf(p netip.Prefix) netip.Addr {
	x := toInt(p.Addr())
	host := p.Addr().BitLen() - p.Bits()
	x.Add(x, new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), uint(host)), big.NewInt(1)))
	return fromInt(x, p.Addr().BitLen())
}

func toInt(a netip.Addr) *big.Int {
	b := a.AsSlice()
	return new(big.Int).SetBytes(b)
}

func fromInt(x *big.Int, bits int) netip.Addr {
	buf := make([]byte, bits/8)
	x.FillBytes(buf)
	a, _ := netip.AddrFromSlice(buf)
	return a
}
