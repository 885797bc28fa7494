package policy

import (
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"clusterip-policy/pkg/allocview"
)

// makeService builds a ClusterIP Service namespace/name with tweaks applied.
func makeService(nsName string, tweaks ...func(*corev1.Service)) *corev1.Service {
	o, err := parseOwner(nsName)
	if err != nil {
		panic(err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: o.Namespace, Name: o.Name},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP},
	}
	for _, t := range tweaks {
		t(svc)
	}
	return svc
}

func clusterIP(ip string) func(*corev1.Service) {
	return func(s *corev1.Service) { s.Spec.ClusterIP = ip }
}

func clusterIPs(ips ...string) func(*corev1.Service) {
	return func(s *corev1.Service) {
		s.Spec.ClusterIPs = ips
		if len(ips) > 0 {
			s.Spec.ClusterIP = ips[0]
		}
	}
}

func families(f ...corev1.IPFamily) func(*corev1.Service) {
	return func(s *corev1.Service) { s.Spec.IPFamilies = f }
}

func familyPolicy(p corev1.IPFamilyPolicy) func(*corev1.Service) {
	return func(s *corev1.Service) { s.Spec.IPFamilyPolicy = &p }
}

func serviceType(t corev1.ServiceType) func(*corev1.Service) {
	return func(s *corev1.Service) { s.Spec.Type = t }
}

// makeSnapshot builds a synced view with ServiceCIDRs and allocations
// ("ip=namespace/name").
func makeSnapshot(cidrs []allocview.ServiceCIDR, allocated ...string) *allocview.Snapshot {
	v := allocview.NewView()
	return v.Update(func(tx *allocview.Tx) {
		for _, c := range cidrs {
			tx.SetServiceCIDR(c)
		}
		for _, a := range allocated {
			ip, ref, _ := cutEq(a)
			o, err := parseOwner(ref)
			if err != nil {
				panic(err)
			}
			tx.SetAllocation(netip.MustParseAddr(ip), allocview.ServiceHolder(o.Namespace, o.Name))
		}
		tx.MarkSynced(true)
	})
}

func cutEq(s string) (string, string, bool) {
	for i := range s {
		if s[i] == '=' {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

func serviceCIDR(name string, ready bool, cidrs ...string) allocview.ServiceCIDR {
	c := allocview.ServiceCIDR{Name: name, Ready: ready}
	for _, s := range cidrs {
		c.CIDRs = append(c.CIDRs, netip.MustParsePrefix(s))
	}
	return c
}

func mustPrefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}
