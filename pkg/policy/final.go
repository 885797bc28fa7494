package policy

import (
	"fmt"
	"net/netip"

	"clusterip-policy/pkg/allocview"
)

// The validating stage sees the address the apiserver allocated, not what
// the user asked for: every address a user names was already checked by
// the mutating stage with the same rules, so a denial here is about an
// address the apiserver picked for a Service that asked for none (or for
// the family an update added). Its messages say so, name no field the user
// set, and say what that user can do: create the Service again, or name a
// static address.

// reportAllocatedOutside records a violation for an allocated address no active
// range can hand out: from a ServiceCIDR the policy does not accept, or
// from an apiserver whose range the cluster's ServiceCIDRs lack.
func (c *checker) reportAllocatedOutside(field, raw string, ip netip.Addr, pl allocview.Placement) bool {
	if pl.Kind != allocview.Outside && pl.Kind != allocview.Unusable {
		return false
	}
	from := fmt.Sprintf("is outside every active Service CIDR (%s)", c.rs.Describe())
	again, admin := "create the Service again", ""
	if ex, ok := c.rs.ExcludedContaining(ip); ok {
		from = fmt.Sprintf("comes from %s, which is %s", ex.Range, ex.Reason)
		again += " (the apiserver picks among its ServiceCIDRs at random)"
		if ex.Reason == allocview.ReasonNotAllowed {
			admin = notAllowedAdvice(ex.Range)
		}
	} else if pl.Kind == allocview.Unusable {
		from = fmt.Sprintf("is a network or broadcast address of %s, which is never assigned", pl.Range.String())
	}
	c.violateAllocated(RuleOutsideServiceCIDRs, field, raw, "%s; the apiserver releases it with this denial: %s%s%s", from, again, orNameStatic(c.rs, allocview.FamilyOf(ip)), admin)
	return true
}

// reportAllocatedReserved records an allocated address that is reserved for
// another Service. In a dynamic band the allocator picks addresses at
// random, so a reservation there can be hit at any time; the static band
// is handed out only once its range's dynamic band is full.
func (c *checker) reportAllocatedReserved(field, raw string, res Reservation, pl allocview.Placement) {
	why := "the apiserver hands out static-band addresses only when the range's dynamic band is full"
	fix := "free addresses or add a ServiceCIDR, then create the Service again"
	if pl.Kind == allocview.Dynamic {
		why = fmt.Sprintf("the apiserver picked it at random from the dynamic band %s of %s", pl.DynamicIn.Dynamic(), pl.DynamicIn.Name())
		fix = "create the Service again to get another address"
	} else if band := pl.Range.Dynamic(); !band.IsZero() {
		why = fmt.Sprintf("the apiserver hands out static-band addresses of %s only when its dynamic band %s is full", pl.Range.Name(), band)
	}
	c.violateAllocated(RuleReservedForOther, field, raw, "is reserved for Service %s%s; %s, and releases it with this denial: %s", res.Owner, noteOf(res), why, fix)
}

// reportAllocatedInRange records an allocated address in a reserved range
// the Service may not use: the leader's holds were off or late (the range
// was added a moment ago), or the allocator raced them.
func (c *checker) reportAllocatedInRange(field, raw string, r ReservedRange, pl allocview.Placement) {
	why := "the apiserver hands out static-band addresses only when the range's dynamic band is full"
	if pl.Kind == allocview.Dynamic {
		why = fmt.Sprintf("the apiserver picked it at random from the dynamic band %s of %s before the range's free addresses were held", pl.DynamicIn.Dynamic(), pl.DynamicIn.Name())
	}
	c.violateAllocated(RuleReservedRangeForOther, field, raw, "is in reserved range %s, which only %s may use; %s, and releases it with this denial: create the Service again to get another address%s", r, r.Who(), why, orNameStatic(c.rs, allocview.FamilyOf(r.Band.First)))
}

// violateAllocated records a validating-stage violation about an address
// the apiserver allocated: "allocated ClusterIP "10.96.0.10" is ...".
func (c *checker) violateAllocated(rule RuleID, field, raw, format string, args ...any) {
	msg := fmt.Sprintf("allocated ClusterIP %q ", raw) + fmt.Sprintf(format, args...)
	c.d.Violations = append(c.d.Violations, Violation{Rule: rule, Action: c.env.Policy.ActionFor(rule), Field: field, IP: raw, Message: msg})
}

// orNameStatic offers the static bands of family f, if there are any.
func orNameStatic(rs allocview.RangeSet, f allocview.Family) string {
	bands := rs.StaticBands(f)
	if len(bands) == 0 {
		return ""
	}
	return ", or name a free address in the static band " + joinOr(bands)
}

func joinOr(ss []string) string {
	out := ""
	for i, s := range ss {
		if i > 0 {
			out += " or "
		}
		out += s
	}
	return out
}

// reportAllowedAnyway records, for a rule the policy only warns about or audits,
// one message for both stages: the apiserver drops a warning it already
// returned for the same request, so a static request warned by the
// mutating stage is not warned again, with different words, by the
// validating one; and the words are true whether the user named the address
// or the apiserver picked it (no denial, no release, no field the user may
// not have set). It returns false when the rule denies (or does not match):
// each stage then words its own denial.
func (c *checker) reportAllowedAnyway(field, raw string, ip netip.Addr, pl allocview.Placement) bool {
	p := c.env.Policy
	var rule RuleID
	var what string
	switch res, reserved := p.ReservedOwner(ip, c.rs); {
	case pl.Kind == allocview.Outside:
		rule, what = RuleOutsideServiceCIDRs, fmt.Sprintf("is outside every active Service CIDR (%s)", c.rs.Describe())
		if ex, ok := c.rs.ExcludedContaining(ip); ok {
			what += fmt.Sprintf("; %s is %s", ex.Range, ex.Reason)
		}
	case pl.Kind == allocview.Unusable:
		rule, what = RuleOutsideServiceCIDRs, fmt.Sprintf("is a network or broadcast address of %s, which the apiserver never assigns", pl.Range.String())
	case reserved && res.Owner != c.self():
		rule, what = RuleReservedForOther, fmt.Sprintf("is reserved for Service %s%s, which cannot get it while this Service holds it", res.Owner, noteOf(res))
	default:
		rng, inRange := c.rangeOf(ip, reserved)
		if !inRange || c.mayUse(rng) {
			return false
		}
		rule, what = RuleReservedRangeForOther, fmt.Sprintf("is in reserved range %s, which only %s may use", rng, rng.Who())
	}
	a := p.ActionFor(rule)
	if a == ActionDeny {
		return false
	}
	msg := fmt.Sprintf("ClusterIP %q %s; allowed only because the policy sets %s to %s", raw, what, rule, a)
	c.d.Violations = append(c.d.Violations, Violation{Rule: rule, Action: a, Field: field, IP: raw, Message: msg})
	return true
}

// notAllowedAdvice tells an administrator how to end denials from a
// ServiceCIDR outside allowedCIDRs. Deleting the apiserver's default
// ServiceCIDR is never offered: the apiserver creates it again from its
// --service-cluster-ip-range, so only allowedCIDRs can change.
func notAllowedAdvice(r allocview.Range) string {
	if r.IsDefaultServiceCIDR() {
		return fmt.Sprintf("; an administrator must add %s to allowedCIDRs (%s is the apiserver's default ServiceCIDR, made again from its --service-cluster-ip-range if deleted)", r.Prefix, r.Name())
	}
	return fmt.Sprintf("; an administrator can delete %s or add it to allowedCIDRs", r.Name())
}
