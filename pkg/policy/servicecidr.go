package policy

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"clusterip-policy/pkg/allocview"
)

// StageServiceCIDR reviews networking.k8s.io/v1 ServiceCIDR objects
// themselves, before the apiserver allocates from them.
const StageServiceCIDR Stage = "servicecidr"

// The identity the apiserver writes its default ServiceCIDR with: its
// loopback client (see the loopback token authenticator in
// k8s.io/apiserver/pkg/server/config.go). The webhook configuration's
// matchCondition not-default-servicecidr exempts the same identity and name.
const (
	apiserverUser  = "system:apiserver"
	apiserverGroup = "system:masters"
)

// MaxServiceCIDRCIDRs is how many CIDRs the apiserver accepts in one
// ServiceCIDR (one per IP family); more is refused before any range work.
const MaxServiceCIDRCIDRs = 2

// ServiceCIDRRequest is what a ServiceCIDR decision needs to know.
type ServiceCIDRRequest struct {
	Operation Operation
	Name      string
	// CIDRs is spec.cidrs as sent; OldCIDRs the stored object's, on UPDATE.
	CIDRs    []string
	OldCIDRs []string
	User     string
	Groups   []string
}

// ReviewServiceCIDR decides a ServiceCIDR create or update. Each CIDR the
// object adds (on UPDATE, only the ones the stored object did not have; the
// apiserver allows an update only to add the second IP family) must:
//
//   - lie wholly inside one of the policy's allowedCIDRs (rule
//     outside-service-cidrs): the apiserver spreads dynamic allocations over
//     every ready ServiceCIDR, so a range outside them would make a share of
//     ordinary creates fail one by one at the validating stage;
//   - keep its dynamic band off the static band of every active range
//     (rule static-ip-in-dynamic-band): the allocator would otherwise hand
//     out, at random, addresses that users and reservations were promised
//     as static. Example: beside 10.96.0.0/16 (static band
//     10.96.0.1-10.96.1.0), 10.96.0.0/24 has the dynamic band
//     10.96.0.17-10.96.0.254 and is refused; 10.96.0.0/12 (static band
//     10.96.0.1-10.96.1.0 again) and 10.97.0.0/16 pass.
//
// The apiserver's own default ServiceCIDR, which it creates and updates
// from --service-cluster-ip-range, is never refused.
func ReviewServiceCIDR(env Env, req ServiceCIDRRequest) Decision {
	d := Decision{Stage: StageServiceCIDR, RequestedIPs: ClipList(req.CIDRs, MaxListed)}
	d.FinalIPs = d.RequestedIPs
	if len(req.CIDRs) > MaxServiceCIDRCIDRs {
		d.Violations = []Violation{{Rule: RuleInvalidIP, Action: ActionDeny, Field: "spec.cidrs",
			Message: fmt.Sprintf("spec.cidrs: Too many: %d: a ServiceCIDR holds at most %d CIDRs, one per IP family", len(req.CIDRs), MaxServiceCIDRCIDRs)}}
		return d.finish()
	}
	switch {
	case req.Name == allocview.DefaultServiceCIDRName && req.User == apiserverUser && slices.Contains(req.Groups, apiserverGroup):
		d.Skipped = "the apiserver's default ServiceCIDR, made from its --service-cluster-ip-range"
	default:
		d.Skipped = env.Policy.Exempt("", req.User, req.Groups)
	}
	if d.Skipped != "" {
		return d.finish()
	}
	rs := env.Ranges()
	for i, raw := range req.CIDRs {
		if slices.Contains(req.OldCIDRs, raw) {
			continue // kept from before: not being added now
		}
		v := cidrViolation{env: env, d: &d, field: fmt.Sprintf("spec.cidrs[%d]", i), raw: raw}
		p, err := allocview.ParsePrefix(raw)
		if err != nil {
			// The value is quoted (clipped) at the front already.
			v.report(RuleInvalidIP, "%s", strings.TrimPrefix(err.Error(), fmt.Sprintf("%q ", raw)))
			continue
		}
		if v.reportNotAllowed(p) {
			continue
		}
		v.reportDynamicOverStatic(p, rs, req.Name)
	}
	if len(d.Violations) == 0 && len(req.OldCIDRs) > 0 && slices.Equal(req.CIDRs, req.OldCIDRs) {
		d.Skipped = "spec.cidrs unchanged"
	}
	return d.finish()
}

// cidrViolation records the violations of one CIDR of a ServiceCIDR.
type cidrViolation struct {
	env        Env
	d          *Decision
	field, raw string
}

func (v cidrViolation) report(rule RuleID, format string, args ...any) {
	msg := fmt.Sprintf("%s: Invalid value: %q: ", v.field, Echo(v.raw)) + fmt.Sprintf(format, args...)
	v.d.Violations = append(v.d.Violations, Violation{Rule: rule, Action: v.env.Policy.ActionFor(rule), Field: v.field, IP: Echo(v.raw), Message: Clip(msg, MaxMessageBytes)})
}

// reportNotAllowed records outside-service-cidrs for a CIDR that is not
// wholly inside one of allowedCIDRs (none listed: every range is allowed).
func (v cidrViolation) reportNotAllowed(p netip.Prefix) bool {
	allowed := v.env.Policy.AllowedCIDRs
	if len(allowed) == 0 || slices.ContainsFunc(allowed, func(a netip.Prefix) bool { return a.Bits() <= p.Bits() && a.Contains(p.Addr()) }) {
		return false
	}
	list := make([]string, len(allowed))
	for i, a := range allowed {
		list[i] = a.String()
	}
	var inside []string
	for _, a := range allowed {
		if p.Bits() < a.Bits() && p.Contains(a.Addr()) {
			inside = append(inside, a.String())
		}
	}
	what := "is not inside the policy's allowedCIDRs " + JoinListed(list, ", ")
	if len(inside) > 0 {
		what = fmt.Sprintf("is only partly inside the policy's allowedCIDRs %s (%s of it)", JoinListed(list, ", "), JoinListed(inside, ", "))
	}
	v.report(RuleOutsideServiceCIDRs, "%s; the apiserver would hand out its addresses to Services at random and the webhook would deny each of those creates: choose a range inside allowedCIDRs, or, if this range is approved, add it to allowedCIDRs first", what)
	return true
}

// reportDynamicOverStatic records static-ip-in-dynamic-band for a CIDR whose
// dynamic band covers part of the static band of an active range of
// another ServiceCIDR.
func (v cidrViolation) reportDynamicOverStatic(p netip.Prefix, rs allocview.RangeSet, self string) {
	r, err := allocview.NewRange("", p)
	if err != nil || r.Dynamic().IsZero() {
		return
	}
	dyn := r.Dynamic()
	for _, other := range rs.Active {
		if other.Source == fmt.Sprintf("ServiceCIDR %q", self) {
			continue // the object being updated
		}
		st := other.Static()
		if st.IsZero() || other.Family() != r.Family() {
			continue
		}
		cover, ok := dyn.Intersect(st)
		if !ok {
			continue
		}
		v.report(RuleStaticIPInDynamicBand, "its dynamic band %s covers %s of the static band %s of %s: the apiserver would hand out those addresses at random, so they would no longer be free for Services that name them (or for reservations); choose a range that does not overlap %s, or one with the same network address that is at least as large",
			dyn, cover, st, other.Name(), other.Prefix)
		return // one range named is enough to act on
	}
}
