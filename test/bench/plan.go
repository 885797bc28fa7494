package bench

import (
	"fmt"
	"net/netip"
)

// The benchmark's cluster has one Service range, 10.96.0.0/16, whose static
// band is 10.96.0.1-10.96.1.0 (256 addresses) and whose dynamic band, the
// rest, holds the existing Services and the dynamic creates. In the static
// band:
//
//	10.96.0.1           default/kubernetes (the apiserver's own)
//	10.96.0.10          reserved for kube-system/kube-dns: the probe that a
//	                    policy is in force asks for it from another Service
//	10.96.0.20-27       reserved for the owners bench/owner-0..7
//	10.96.0.31          the probe that a webhook is called (free, unreserved)
//	10.96.0.32-10.96.1.0 the static requests of the mixed workload
const (
	ServiceRange = "10.96.0.0/16"
	dnsIP        = "10.96.0.10"
	probeIP      = "10.96.0.31"
	// Namespaces: the measured creates, and the Services that exist before.
	benchNamespace    = "bench"
	existingNamespace = "bench-existing"
	// staticEvery: one create in this many of the mixed workload asks for a
	// static address (10%); ownerEvery: at most one in this many is a
	// reservation owner.
	staticEvery = 10
	ownerEvery  = 50
)

var (
	ownerIPs   = addrRange("10.96.0.20", 8)
	staticPool = addrRange("10.96.0.32", 225)
)

func addrRange(first string, n int) []string {
	a := netip.MustParseAddr(first)
	out := make([]string, n)
	for i := range out {
		out[i] = a.String()
		a = a.Next()
	}
	return out
}

// ownerName is the Service that owns the reservation of ownerIPs[i].
func ownerName(i int) string { return fmt.Sprintf("owner-%d", i) }

// mixedStatic is how many static requests a mixed run of n creates makes.
func mixedStatic(n int) int { return n / staticEvery }

// Request is one planned create.
type Request struct {
	Name      string
	ClusterIP string // requested address; empty for a dynamic one
	// Owner is the reservation owner index (ownerIPs) or -1: an owner asks
	// for no address, and ours assigns it the reserved one.
	Owner int
}

// Plan lays out the n creates of one run: names unique to the run (prefix),
// and for the mixed kind every staticEvery-th a static address of
// staticPool and up to len(ownerIPs) reservation owners spread over the
// run. Every configuration of a round runs the same plan.
func Plan(kind, prefix string, n int) []Request {
	reqs := make([]Request, n)
	static, owners := 0, 0
	for i := range reqs {
		r := Request{Name: fmt.Sprintf("%s-%d", prefix, i), Owner: -1}
		if kind == KindMixed {
			switch {
			case i%staticEvery == staticEvery-1 && static < len(staticPool):
				r.ClusterIP = staticPool[static]
				static++
			case i%ownerEvery == ownerEvery/2 && owners < len(ownerIPs):
				r.Name, r.Owner = ownerName(owners), owners
				owners++
			}
		}
		reqs[i] = r
	}
	return reqs
}

// policySpec is the spec of ours' ClusterIPPolicy: the DNS and owner
// reservations, deny by default. The ranges come from the cluster's
// ServiceCIDR.
func policySpec() string {
	s := `allowedCIDRs: [10.96.0.0/12]
reserveKubernetesService: true
reservations:
- ip: ` + dnsIP + `
  service: kube-system/kube-dns
  note: cluster DNS
`
	for i, ip := range ownerIPs {
		s += fmt.Sprintf("- ip: %s\n  service: %s/%s\n  note: benchmark reservation owner\n", ip, benchNamespace, ownerName(i))
	}
	// A reserved range in the static band (between the owners and the
	// DNS address, clear of the static pool): the managed matchConditions
	// must still send no dynamic create. None in the dynamic band: without
	// the leader's range holds a dynamic allocation may land in it, and is
	// then sent to the validating webhook, as it should be.
	s += "reservedRanges:\n- first: 10.96.0.12\n  last: 10.96.0.19\n  namespaces: [bench-ranges]\n  note: benchmark range\n"
	return s + "enforcement:\n  default: deny\n"
}
