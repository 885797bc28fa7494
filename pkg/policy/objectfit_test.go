package policy

import (
	"reflect"
	"testing"

	"clusterip-policy/pkg/allocview"
)

func TestFitDefaultServiceCIDR(t *testing.T) {
	single := []allocview.ServiceCIDR{serviceCIDR("kubernetes", true, "10.96.0.0/16"), serviceCIDR("extra", true, "10.69.0.0/16")}
	dual := []allocview.ServiceCIDR{serviceCIDR("kubernetes", true, "10.96.0.0/16", "fd00:10:96::/108")}
	for _, tc := range []struct {
		name     string
		allowed  string
		cidrs    []allocview.ServiceCIDR
		err      string
		warnings []string
	}{
		{name: "refuses allowedCIDRs that leave out the default ServiceCIDR", allowed: "[10.69.0.0/16]", cidrs: single,
			err: `allowedCIDRs [10.69.0.0/16] leave no usable address of 10.96.0.0/16, the primary range of ServiceCIDR "kubernetes", the apiserver's default ServiceCIDR: every Service created without a clusterIP would be refused, and that ServiceCIDR cannot be removed (the apiserver makes it again from its --service-cluster-ip-range); add 10.96.0.0/16 (or the part of it Services may use) to allowedCIDRs`},
		{name: "refuses a part that is only the network address", allowed: "[10.96.0.0/32, 10.96.255.255/32]", cidrs: single,
			err: `allowedCIDRs [10.96.0.0/32, 10.96.255.255/32] leave no usable address of 10.96.0.0/16, the primary range of ServiceCIDR "kubernetes", the apiserver's default ServiceCIDR: every Service created without a clusterIP would be refused, and that ServiceCIDR cannot be removed (the apiserver makes it again from its --service-cluster-ip-range); add 10.96.0.0/16 (or the part of it Services may use) to allowedCIDRs`},
		{name: "accepts a wider allowed CIDR", allowed: "[10.64.0.0/10]", cidrs: single},
		{name: "accepts the range itself beside others", allowed: "[10.69.0.0/16, 10.96.0.0/16]", cidrs: single},
		{name: "accepts any policy without allowedCIDRs", allowed: "[]", cidrs: single},
		{name: "accepts anything where the cluster has no ServiceCIDRs", allowed: "[10.69.0.0/16]", cidrs: nil},
		{name: "warns about a part of the range", allowed: "[10.96.0.0/24, 10.96.255.255/32]", cidrs: single,
			warnings: []string{`allowedCIDRs keep only [10.96.0.0/24] of 10.96.0.0/16 (ServiceCIDR "kubernetes", the apiserver's default ServiceCIDR): the apiserver allocates from the whole range, so a Service created without a clusterIP that gets an address outside that part is refused; add 10.96.0.0/16 to allowedCIDRs, or expect such creates to fail at random`}},
		{name: "a /31 at the network address still holds a usable address", allowed: "[10.96.0.0/31]", cidrs: single,
			warnings: []string{`allowedCIDRs keep only [10.96.0.0/31] of 10.96.0.0/16 (ServiceCIDR "kubernetes", the apiserver's default ServiceCIDR): the apiserver allocates from the whole range, so a Service created without a clusterIP that gets an address outside that part is refused; add 10.96.0.0/16 to allowedCIDRs, or expect such creates to fail at random`}},
		{name: "only warns about the second family left out", allowed: "[10.96.0.0/16]", cidrs: dual,
			warnings: []string{`allowedCIDRs [10.96.0.0/16] leave no usable address of fd00:10:96::/108, the second range of ServiceCIDR "kubernetes", the apiserver's default ServiceCIDR: every IPv6 address the apiserver allocates (a dual-stack Service, a Service of that family) will be refused; add fd00:10:96::/108 to allowedCIDRs unless that family is meant to be refused`}},
		{name: "accepts both families allowed", allowed: "[10.96.0.0/12, fd00:10:96::/64]", cidrs: dual},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustPolicy(t, "allowedCIDRs: "+tc.allowed+"\n")
			warnings, err := FitDefaultServiceCIDR(p, tc.cidrs)
			if got := errString(err); got != tc.err {
				t.Errorf("error\n got: %s\nwant: %s", got, tc.err)
			}
			if !reflect.DeepEqual(warnings, tc.warnings) {
				t.Errorf("warnings\n got: %q\nwant: %q", warnings, tc.warnings)
			}
		})
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
