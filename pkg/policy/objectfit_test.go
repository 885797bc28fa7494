package policy

import (
	"reflect"
	"testing"

	"clusterip-policy/pkg/allocview"
	"clusterip-policy/test/fixtures"
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
		// The allocator takes a Service created without a clusterIP from
		// the dynamic band (the static band only once that is full): a
		// policy that keeps only static addresses refuses every such create.
		{name: "refuses allowedCIDRs that keep only the static band", allowed: "[10.96.0.0/24, 10.96.255.255/32]", cidrs: single,
			err: `allowedCIDRs [10.96.0.0/24, 10.96.255.255/32] keep none of the dynamic band 10.96.1.1-10.96.255.254 of 10.96.0.0/16, the primary range of ServiceCIDR "kubernetes", the apiserver's default ServiceCIDR: the apiserver gives a Service created without a clusterIP an address of that band (of the static band only when the dynamic one is full), so every such create would be refused, and that ServiceCIDR cannot be removed (the apiserver makes it again from its --service-cluster-ip-range); add 10.96.0.0/16 (or at least its dynamic band) to allowedCIDRs`},
		{name: "a /31 at the network address keeps a static address only", allowed: "[10.96.0.0/31]", cidrs: single,
			err: `allowedCIDRs [10.96.0.0/31] keep none of the dynamic band 10.96.1.1-10.96.255.254 of 10.96.0.0/16, the primary range of ServiceCIDR "kubernetes", the apiserver's default ServiceCIDR: the apiserver gives a Service created without a clusterIP an address of that band (of the static band only when the dynamic one is full), so every such create would be refused, and that ServiceCIDR cannot be removed (the apiserver makes it again from its --service-cluster-ip-range); add 10.96.0.0/16 (or at least its dynamic band) to allowedCIDRs`},
		{name: "warns about a part of the dynamic band, by the share kept", allowed: "[10.96.0.0/17]", cidrs: single,
			warnings: []string{`allowedCIDRs keep only [10.96.0.0/17] of 10.96.0.0/16 (ServiceCIDR "kubernetes", the apiserver's default ServiceCIDR): 50% of its dynamic band 10.96.1.1-10.96.255.254, from which the apiserver picks the address of a Service created without a clusterIP at random, so about 50% of such creates get an address outside that part and are refused; add 10.96.0.0/16 to allowedCIDRs`}},
		{name: "warns about a small part of the dynamic band", allowed: "[10.96.0.0/23, 10.96.200.0/24]", cidrs: single,
			warnings: []string{`allowedCIDRs keep only [10.96.0.0/23, 10.96.200.0/24] of 10.96.0.0/16 (ServiceCIDR "kubernetes", the apiserver's default ServiceCIDR): 0.78% of its dynamic band 10.96.1.1-10.96.255.254, from which the apiserver picks the address of a Service created without a clusterIP at random, so about 99% of such creates get an address outside that part and are refused; add 10.96.0.0/16 to allowedCIDRs`}},
		{name: "a range of 16 addresses or fewer is all dynamic", allowed: "[10.96.0.0/29]", cidrs: []allocview.ServiceCIDR{serviceCIDR("kubernetes", true, "10.96.0.0/28")},
			warnings: []string{`allowedCIDRs keep only [10.96.0.0/29] of 10.96.0.0/28 (ServiceCIDR "kubernetes", the apiserver's default ServiceCIDR): 50% of its dynamic band 10.96.0.1-10.96.0.14, from which the apiserver picks the address of a Service created without a clusterIP at random, so about 50% of such creates get an address outside that part and are refused; add 10.96.0.0/28 to allowedCIDRs`}},
		{name: "only warns about the second family left out", allowed: "[10.96.0.0/16]", cidrs: dual,
			warnings: []string{`allowedCIDRs [10.96.0.0/16] leave no usable address of fd00:10:96::/108, the second range of ServiceCIDR "kubernetes", the apiserver's default ServiceCIDR: every IPv6 address the apiserver allocates (a dual-stack Service, a Service of that family) will be refused; add fd00:10:96::/108 to allowedCIDRs unless that family is meant to be refused`}},
		{name: "warns about the static band alone of the second family", allowed: "[10.96.0.0/16, fd00:10:96::/120]", cidrs: dual,
			warnings: []string{`allowedCIDRs [10.96.0.0/16, fd00:10:96::/120] keep none of the dynamic band fd00:10:96::101-fd00:10:96::f:ffff of fd00:10:96::/108, the second range of ServiceCIDR "kubernetes", the apiserver's default ServiceCIDR: every IPv6 address the apiserver allocates (a dual-stack Service, a Service of that family) will be refused; add fd00:10:96::/108 to allowedCIDRs unless that family is meant to be refused`}},
		{name: "nested parts count once", allowed: "[10.96.0.0/17, 10.96.64.0/18]", cidrs: single,
			warnings: []string{`allowedCIDRs keep only [10.96.0.0/17, 10.96.64.0/18] of 10.96.0.0/16 (ServiceCIDR "kubernetes", the apiserver's default ServiceCIDR): 50% of its dynamic band 10.96.1.1-10.96.255.254, from which the apiserver picks the address of a Service created without a clusterIP at random, so about 50% of such creates get an address outside that part and are refused; add 10.96.0.0/16 to allowedCIDRs`}},
		{name: "accepts both families allowed", allowed: "[10.96.0.0/12, fd00:10:96::/64]", cidrs: dual},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := fixtures.MustPolicy(t, ParseDocument, "allowedCIDRs: "+tc.allowed+"\n")
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
