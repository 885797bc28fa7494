package policy

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"clusterip-policy/pkg/allocview"
)

// growsToDualStack reports an UPDATE that may make a single-stack Service
// dual-stack without naming the new address: its ipFamilyPolicy changes to
// RequireDualStack or PreferDualStack (`kubectl patch`, or an apply of the
// field alone), or its ipFamilies grow. The apiserver then allocates the
// second family's address (initIPFamilyFields widens ipFamilies); an
// unchanged PreferDualStack is never upgraded, as in its
// isMatchingPreferDualStackClusterIPFields. The mutating webhook's managed
// matchCondition sends exactly these updates too (pkg/matchconditions
// AllocatingUpdate; TestManagedMutatingConditionSendsExactlyTheUpdatesMutateActsOn
// holds the two equal).
func growsToDualStack(req Request) bool {
	if req.Operation != Update || req.OldService == nil {
		return false
	}
	svc, old := req.Service, req.OldService
	if svc.Spec.Type == corev1.ServiceTypeExternalName || len(svc.Spec.ClusterIPs) >= 2 {
		return false
	}
	p := svc.Spec.IPFamilyPolicy
	policyGrows := p != nil && *p != corev1.IPFamilyPolicySingleStack &&
		(old.Spec.IPFamilyPolicy == nil || *old.Spec.IPFamilyPolicy != *p)
	return policyGrows || len(svc.Spec.IPFamilies) > len(old.Spec.IPFamilies)
}

// namesOwnReservation reports a request that names one address, the
// Service's own reservation of that family: kube-dns created with
// clusterIP 10.96.0.10 (kubeadm's and the coredns chart's shape).
func (c *checker) namesOwnReservation() bool {
	if len(c.d.RequestedIPs) != 1 {
		return false
	}
	ip, err := allocview.ParseIP(c.d.RequestedIPs[0])
	if err != nil {
		return false
	}
	r, ok := c.env.Policy.ReservationsOf(c.self(), c.rs)[allocview.FamilyOf(ip)]
	return ok && r.IP == ip
}

// assignSecondary gives a reservation owner that grows to dual-stack (see
// growsToDualStack), or is created naming its reserved address of one
// family and asking for two (namesOwnReservation), its reserved address of
// the other family: kube-dns patched to RequireDualStack, or created with
// clusterIP 10.96.0.10 and PreferDualStack, gets fd00:10:96::a, not a
// random IPv6 address while its reservation stays unused (and held). The
// Service keeps its first address; the patch names the second one in
// clusterIPs[1].
func (c *checker) assignSecondary() {
	if len(c.d.RequestedIPs) != 1 {
		return
	}
	first, err := allocview.ParseIP(c.d.RequestedIPs[0])
	fams := wantedFamilies(c.svc, c.rs)
	if err != nil || len(fams) != 2 || fams[0] != allocview.FamilyOf(first) {
		return // stays single-stack, or the apiserver refuses the update
	}
	r, ok := c.env.Policy.ReservationsOf(c.self(), c.rs)[fams[1]]
	if !ok {
		return // the apiserver allocates it dynamically
	}
	field, raw := "spec.clusterIPs[1]", r.IP.String()
	before := len(c.d.Violations)
	if !c.reportReservationOutside(field, raw, r) {
		c.reportReservationHeld(field, raw, r)
	}
	if len(c.d.Violations) > before {
		return // reported, not patched
	}
	ips := []string{c.d.RequestedIPs[0], raw}
	c.d.Mutations = append(c.d.Mutations, MutationAssignReserved)
	c.d.Patch = append(c.d.Patch, PatchOp{Op: "add", Path: "/spec/clusterIPs", Value: ips})
	c.d.FinalIPs = ips
}

// reportReservationHeld records a violation for an owner's reserved
// address that an IPAddress gives to someone else, and says whether it did: the owner is told who holds its
// reservation and how to free it, not to pick another address. With the
// already-allocated rule at deny (the default) the owner is refused, so
// kube-dns never silently starts on a random address that no Pod's
// resolv.conf names; at warn or audit the Service falls back to a dynamic
// address, with that warning.
func (c *checker) reportReservationHeld(field, raw string, r Reservation) bool {
	if c.env.Snapshot == nil {
		return false
	}
	h, ok := c.env.Snapshot.Holder(r.IP)
	if !ok || h.IsService(c.svc.Namespace, c.svc.Name) {
		return false
	}
	free := fmt.Sprintf("free it (delete that %s, or recreate it without this address)", h.Resource)
	holder := h.String()
	if h.Resource == "services" && h.Group == "" {
		holder = "IPAddress " + r.IP.String() + " for Service " + holder
		// The IPAddress may outlive its Service (see checkAllocated).
		free = fmt.Sprintf("free it (kubectl -n %s delete service %s, or recreate that Service without this address; if that Service no longer exists, the apiserver's repair loop deletes the IPAddress within about 3 minutes)", h.Namespace, h.Name)
	}
	then := "then create this Service again"
	if c.env.Policy.ActionFor(RuleAlreadyAllocated) != ActionDeny {
		then = "this Service gets a dynamic address meanwhile: recreate it once the address is free"
	}
	c.violate(RuleAlreadyAllocated, field, raw, "is reserved for this Service%s but held by %s; %s, %s", noteOf(r), holder, free, then)
	return true
}

// reportReservationOutside records a violation for an owner's reserved address that
// no active range can hand out. The owner asked for no address, so it is
// not told to leave clusterIP empty: the reservation or the ranges need an
// administrator, and meanwhile the owner can name an address itself (at
// deny) or gets a dynamic one (at warn or audit).
func (c *checker) reportReservationOutside(field, raw string, r Reservation) bool {
	pl := c.rs.Place(r.IP)
	var where string
	switch pl.Kind {
	case allocview.Outside:
		where = fmt.Sprintf("is outside every active Service CIDR (%s)", c.rs.Describe())
		if ex, ok := c.rs.ExcludedContaining(r.IP); ok {
			where += fmt.Sprintf("; %s is %s", ex.Range, ex.Reason)
		}
	case allocview.Unusable:
		where = fmt.Sprintf("is a network or broadcast address of %s, which is never assigned", pl.Range.String())
	default:
		return false
	}
	then := "meanwhile give this Service a clusterIP of its own"
	if bands := c.rs.StaticBands(allocview.FamilyOf(r.IP)); len(bands) > 0 {
		then = "meanwhile give this Service a free address of the static band " + joinOr(bands) + " as its clusterIP"
	}
	if c.env.Policy.ActionFor(RuleOutsideServiceCIDRs) != ActionDeny {
		then = "meanwhile this Service gets a dynamic address"
	}
	msg := fmt.Sprintf("reserved ClusterIP %q of this Service%s %s, so it cannot be assigned: an administrator can fix the reservation or the ServiceCIDRs; %s", raw, noteOf(r), where, then)
	c.d.Violations = append(c.d.Violations, Violation{Rule: RuleOutsideServiceCIDRs, Action: c.env.Policy.ActionFor(RuleOutsideServiceCIDRs), Field: field, IP: raw, Message: msg})
	return true
}
