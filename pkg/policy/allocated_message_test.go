package policy

import (
	"net/netip"
	"testing"

	"clusterip-policy/pkg/allocview"
	"clusterip-policy/test/fixtures"
)

// The already-allocated message says what blocks the address (an IPAddress
// object) and, for a Service holder, that the apiserver frees an orphaned
// one within about 3 minutes: under create/delete load with several
// apiservers an IPAddress may outlive its Service for that long.
func TestAlreadyAllocatedNamesTheIPAddressAndWhenAnOrphanIsFreed(t *testing.T) {
	tests := []struct {
		name    string
		holder  allocview.Holder
		message string
	}{
		{
			name:    "a Service holder, which may no longer exist",
			holder:  allocview.ServiceHolder("default", "gone"),
			message: `spec.clusterIP: Invalid value: "10.96.0.50": is held by IPAddress 10.96.0.50 for Service default/gone (if that Service no longer exists, the apiserver's repair loop deletes the IPAddress within about 3 minutes); choose a free address in the static band 10.96.0.1-10.96.1.0, or retry then`,
		},
		{
			name:    "another kind of holder, which the repair loop leaves alone",
			holder:  allocview.Holder{Group: "gateway.networking.k8s.io", Resource: "gateways", Namespace: "infra", Name: "gw"},
			message: `spec.clusterIP: Invalid value: "10.96.0.50": is held by IPAddress 10.96.0.50 for gateways.gateway.networking.k8s.io infra/gw; choose a free address in the static band 10.96.0.1-10.96.1.0`,
		},
		{
			name:    "an IPAddress without parentRef",
			holder:  allocview.Holder{Name: "(no parentRef) IPAddress 10.96.0.50"},
			message: `spec.clusterIP: Invalid value: "10.96.0.50": is held by (no parentRef) IPAddress 10.96.0.50; choose a free address in the static band 10.96.0.1-10.96.1.0`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			snap := allocview.NewView().Update(func(tx *allocview.Tx) {
				for _, c := range v4Only {
					tx.SetServiceCIDR(c)
				}
				tx.SetAllocation(netip.MustParseAddr("10.96.0.50"), tt.holder)
				tx.MarkSynced(true)
			})
			d := Mutate(Env{Policy: fixtures.MustPolicy(t, ParseDocument, dnsPolicy), Snapshot: snap}, Request{Operation: Create, Service: fixtures.Service("default", "web", fixtures.WithClusterIP("10.96.0.50"))})
			assertRule(t, d, RuleAlreadyAllocated, tt.message)
		})
	}
}
