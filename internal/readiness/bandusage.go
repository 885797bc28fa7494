package readiness

import (
	"github.com/prometheus/client_golang/prometheus"

	"clusterip-policy/internal/policysource"
	"clusterip-policy/pkg/allocview"
)

// BandAddressStates are the values of the state label of
// clusterip_policy_band_addresses, in the order they are exported.
var BandAddressStates = []string{"free", "allocated", "held", "reserved-range"}

const bandAddressesHelp = "Addresses of each band (static, dynamic) of each CIDR of each active ServiceCIDR, by state: free (no IPAddress, no reserved range: what the allocator may still pick), allocated (an IPAddress other than our holds), held (our holds of reservations), reserved-range (the reserved ranges' addresses no one else has). The four add up to the band's size. When a dynamic band has no free address left, the apiserver hands out static-band addresses."

var bandAddressesDesc = prometheus.NewDesc("clusterip_policy_band_addresses", bandAddressesHelp,
	[]string{"service_cidr", "cidr", "band", "state"}, nil)

// RegisterBandUsage exposes how full each band of each active ServiceCIDR
// is, counted on the view at scrape time (one pass over its allocations:
// BenchmarkUsage in pkg/allocview). reserved returns the reserved ranges
// of the policy in force (nil for none). Nothing is exported until the
// view has synced, nor where the cluster serves no IPAddress objects: the
// view then knows no allocations, and every address would look free.
func RegisterBandUsage(reg prometheus.Registerer, view *allocview.View, reserved func() []allocview.Band) {
	reg.MustRegister(bandUsageCollector{view, reserved})
}

type bandUsageCollector struct {
	view     *allocview.View
	reserved func() []allocview.Band
}

func (c bandUsageCollector) Describe(ch chan<- *prometheus.Desc) { ch <- bandAddressesDesc }

func (c bandUsageCollector) Collect(ch chan<- prometheus.Metric) {
	snap := c.view.Snapshot()
	if !snap.Synced || !snap.TracksAllocations {
		return
	}
	var reserved []allocview.Band
	if c.reserved != nil {
		reserved = c.reserved()
	}
	for _, u := range snap.Usage(reserved) {
		for i, n := range []uint64{u.Free, u.Allocated, u.Held, u.ReservedRange} {
			ch <- prometheus.MustNewConstMetric(bandAddressesDesc, prometheus.GaugeValue, float64(n), u.ServiceCIDR, u.CIDR.String(), u.Band.String(), BandAddressStates[i])
		}
	}
}

// ReservedBands returns the reserved ranges of the policy in force, for
// RegisterBandUsage.
func ReservedBands(policies *policysource.Store) func() []allocview.Band {
	return func() []allocview.Band {
		pol := policies.Current()
		if pol == nil {
			return nil
		}
		bands := make([]allocview.Band, 0, len(pol.Policy.ReservedRanges))
		for _, r := range pol.Policy.ReservedRanges {
			bands = append(bands, r.Band)
		}
		return bands
	}
}
