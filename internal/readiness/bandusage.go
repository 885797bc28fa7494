package readiness

import (
	"github.com/prometheus/client_golang/prometheus"

	"clusterip-policy/internal/policysource"
	"clusterip-policy/pkg/allocview"
	"clusterip-policy/pkg/policy"
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

const rangeAddressesHelp = "Addresses of each reserved range of the policy in force (range: as the policy writes it), by state: used (an IPAddress other than our holds: a Service of a namespace the range admits) and free (held for the range, what its namespaces may still name). When free reaches 0, those namespaces can name no address of the range."

var rangeAddressesDesc = prometheus.NewDesc("clusterip_policy_reserved_range_addresses", rangeAddressesHelp, []string{"range", "state"}, nil)

// RegisterRangeUsage exposes how full each reserved range of the policy in
// force is, counted on the view at scrape time (one pass over its
// allocations); nothing until the view has synced, nor where the cluster
// serves no IPAddress objects. ranges returns the policy's reserved ranges.
func RegisterRangeUsage(reg prometheus.Registerer, view *allocview.View, ranges func() []policy.ReservedRange) {
	reg.MustRegister(rangeUsageCollector{view, ranges})
}

type rangeUsageCollector struct {
	view   *allocview.View
	ranges func() []policy.ReservedRange
}

func (c rangeUsageCollector) Describe(ch chan<- *prometheus.Desc) { ch <- rangeAddressesDesc }

func (c rangeUsageCollector) Collect(ch chan<- prometheus.Metric) {
	snap := c.view.Snapshot()
	if !snap.Synced || !snap.TracksAllocations {
		return
	}
	rs := c.ranges()
	bands := make([]allocview.Band, len(rs))
	for i, r := range rs {
		bands[i] = r.Band
	}
	for i, u := range snap.RangeUsage(bands) {
		ch <- prometheus.MustNewConstMetric(rangeAddressesDesc, prometheus.GaugeValue, float64(u.Used), rs[i].Written, "used")
		ch <- prometheus.MustNewConstMetric(rangeAddressesDesc, prometheus.GaugeValue, float64(u.Free), rs[i].Written, "free")
	}
}

// ReservedRanges returns the reserved ranges of the policy in force, for
// RegisterRangeUsage.
func ReservedRanges(policies *policysource.Store) func() []policy.ReservedRange {
	return func() []policy.ReservedRange {
		pol := policies.Current()
		if pol == nil {
			return nil
		}
		return pol.Policy.ReservedRanges
	}
}
