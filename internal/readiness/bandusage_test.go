package readiness

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"clusterip-policy/pkg/allocview"
)

func TestBandUsageIsExportedOnceTheViewTracksAllocations(t *testing.T) {
	view := allocview.NewView()
	reg := prometheus.NewRegistry()
	reserved := []allocview.Band{{First: netip.MustParseAddr("10.96.0.29"), Last: netip.MustParseAddr("10.96.0.30")}}
	RegisterBandUsage(reg, view, func() []allocview.Band { return reserved })
	view.Update(func(tx *allocview.Tx) {
		tx.SetServiceCIDR(allocview.ServiceCIDR{Name: "small", CIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/27")}, Ready: true})
		tx.SetAllocation(netip.MustParseAddr("10.96.0.20"), allocview.ServiceHolder("a", "b"))
	})
	// Not synced yet: nothing, rather than every address free.
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 0 {
		t.Fatalf("%d series before the view synced (%v), want none", n, err)
	}
	view.Update(func(tx *allocview.Tx) { tx.MarkSynced(false) })
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 0 {
		t.Fatalf("%d series on a view that tracks no allocations (%v), want none", n, err)
	}
	view.Update(func(tx *allocview.Tx) { tx.MarkSynced(true) })
	expected := "# HELP clusterip_policy_band_addresses " + bandAddressesHelp + `
# TYPE clusterip_policy_band_addresses gauge
clusterip_policy_band_addresses{band="dynamic",cidr="10.96.0.0/27",service_cidr="small",state="allocated"} 1
clusterip_policy_band_addresses{band="dynamic",cidr="10.96.0.0/27",service_cidr="small",state="free"} 11
clusterip_policy_band_addresses{band="dynamic",cidr="10.96.0.0/27",service_cidr="small",state="held"} 0
clusterip_policy_band_addresses{band="dynamic",cidr="10.96.0.0/27",service_cidr="small",state="reserved-range"} 2
clusterip_policy_band_addresses{band="static",cidr="10.96.0.0/27",service_cidr="small",state="allocated"} 0
clusterip_policy_band_addresses{band="static",cidr="10.96.0.0/27",service_cidr="small",state="free"} 16
clusterip_policy_band_addresses{band="static",cidr="10.96.0.0/27",service_cidr="small",state="held"} 0
clusterip_policy_band_addresses{band="static",cidr="10.96.0.0/27",service_cidr="small",state="reserved-range"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(expected)); err != nil {
		t.Fatal(err)
	}
}
