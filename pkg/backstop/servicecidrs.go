package backstop

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"clusterip-policy/pkg/allocview"
	"clusterip-policy/pkg/policy"
)

// varAdded is the CIDRs a ServiceCIDR request adds: all on CREATE, those the
// stored object lacks on UPDATE (policy.ReviewServiceCIDR). One with host
// bits set is the webhook's invalid-ip (and refused by the apiserver's own
// validation first): not judged here.
const varAdded = `has(object.spec) && has(object.spec.cidrs) ? object.spec.cidrs.filter(c, isCIDR(c) && cidr(c).masked() == cidr(c) && ` +
	`(request.operation != 'UPDATE' || oldObject == null || !has(oldObject.spec) || !has(oldObject.spec.cidrs) || !(c in oldObject.spec.cidrs))) : []`

// serviceCIDRs builds the ServiceCIDR door: the rules of
// policy.ReviewServiceCIDR. The apiserver's own default ServiceCIDR is
// exempt by name and identity together, as in the webhook configuration
// (a user creating a ServiceCIDR named kubernetes is judged).
func (c compiler) serviceCIDRs() group {
	g := group{
		resource: ServiceCIDRs,
		rules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
			Rule:       admissionregistrationv1.Rule{APIGroups: []string{"networking.k8s.io"}, APIVersions: []string{"v1"}, Resources: []string{ServiceCIDRs}},
		}}},
		matchConditions: append([]admissionregistrationv1.MatchCondition{
			{Name: "not-default-servicecidr", Expression: `!(has(request.name) && request.name == '` + allocview.DefaultServiceCIDRName + `' && ` +
				`has(request.userInfo.username) && request.userInfo.username == 'system:apiserver' && ` +
				`has(request.userInfo.groups) && 'system:masters' in request.userInfo.groups)`},
		}, c.exemptions(false)...),
		variables: []admissionregistrationv1.Variable{
			{Name: "added", Expression: varAdded},
		},
	}

	// inside is true for a CIDR wholly inside allowedCIDRs. The webhook
	// reports one rule per CIDR, outside-service-cidrs first, so the
	// dynamic band of a CIDR outside them is not judged.
	inside := "true"
	if len(c.p.AllowedCIDRs) == 0 {
		g.left = append(g.left, "outside-service-cidrs on servicecidrs: the policy lists no allowedCIDRs")
	} else {
		inside = fmt.Sprintf("%s.exists(a, cidr(a).containsCIDR(cidr(c)))", quoteList(prefixStrings(c.p.AllowedCIDRs)))
		g.add(c.p, validation{
			rule:       policy.RuleOutsideServiceCIDRs,
			needs:      []string{"added"},
			expression: fmt.Sprintf("variables.added.all(c, %s)", inside),
			message: fmt.Sprintf(`'spec.cidrs: Invalid value: "' + variables.added.filter(c, !(%s))[0] + '": is not inside the policy\'s allowedCIDRs %s; the apiserver would hand out its addresses at random: choose a range inside allowedCIDRs, or, if this range is approved, add it to allowedCIDRs first (clusterip-policy backstop, rule outside-service-cidrs)'`,
				inside, policy.JoinListed(prefixStrings(c.p.AllowedCIDRs), ", ")),
		})
	}

	var covers []string
	n := 0
	for _, r := range c.rs.Active {
		if r.Static().IsZero() {
			continue
		}
		if n++; n > MaxRanges {
			break
		}
		covers = append(covers, coversStatic("c", r))
	}
	switch {
	case n == 0:
		g.left = append(g.left, "static-ip-in-dynamic-band on servicecidrs: no active range has a static band")
	case n > MaxRanges:
		g.left = append(g.left, fmt.Sprintf("static-ip-in-dynamic-band on servicecidrs: more than %d active ranges to encode", MaxRanges))
	default:
		bad := fmt.Sprintf("%s && (%s)", inside, strings.Join(covers, " || "))
		if len(bad) > MaxExpressionBytes {
			g.left = append(g.left, "static-ip-in-dynamic-band on servicecidrs: the ranges' expression is too long")
			break
		}
		g.add(c.p, validation{
			rule:       policy.RuleStaticIPInDynamicBand,
			needs:      []string{"added"},
			expression: fmt.Sprintf("variables.added.all(c, !(%s))", bad),
			message:    fmt.Sprintf(`'spec.cidrs: Invalid value: "' + variables.added.filter(c, %s)[0] + '": its dynamic band would cover the static band of an active Service range, whose addresses the apiserver would then hand out at random; choose a range that does not overlap it, or one with the same network address that is at least as large (clusterip-policy backstop, rule static-ip-in-dynamic-band)'`, bad),
		})
	}
	return g
}

// coversStatic is true when the CIDR expression cExpr (a valid CIDR string)
// has a dynamic band that covers part of r's static band (policy:
// reportDynamicOverStatic), unless the object under review is r's own
// ServiceCIDR. With S the static band of r, N its size (16 to 256, a power
// of two) and B the aligned block of N addresses at r's network address
// (so S is B without its first address, plus the address after B), a
// valid CIDR C of r's family covers part of S exactly when:
//
//   - C is wider than r, starts elsewhere, and its own static band does not
//     reach past S (such wider ranges are few and listed: good); a wider
//     range with r's network address has a static band at least as large;
//   - C lies inside B and has a usable address (its dynamic band then lies
//     in B above its own network address, so in S); or
//   - C starts at r's network address, is wider than B but narrower than
//     r, and its static band is smaller than N.
//
// Any other C misses S: disjoint, r itself, or starting at the address
// after B, which is C's own network address and never handed out.
func coversStatic(cExpr string, r allocview.ActiveRange) string {
	net := r.Prefix.Addr()
	rlen := r.Prefix.Bits()
	bits := net.BitLen()
	n := r.Offset()
	block := blockAt(net, n)
	var good []string
	for l := rlen - 1; l >= 0; l-- {
		sup := netip.PrefixFrom(net, l).Masked()
		if sup.Addr() == net {
			continue
		}
		sr, err := allocview.NewRange("", sup)
		if err != nil {
			continue
		}
		// S ends at net+N; C's static band ends at C.net+offset(C).
		if !addrPlus(sup.Addr(), sr.Offset()).Less(addrPlus(net, n)) {
			good = append(good, sup.String())
		}
	}
	var smaller []string
	for l := rlen + 1; l < block.Bits(); l++ {
		sr, err := allocview.NewRange("", netip.PrefixFrom(net, l))
		if err == nil && sr.Offset() < n {
			smaller = append(smaller, strconv.Itoa(l))
		}
	}
	maxUsable := 30 // IPv4: a /31 or /32 has no usable address
	if bits == 128 {
		maxUsable = 127
	}
	x := fmt.Sprintf("cidr(%s)", cExpr)
	wider := fmt.Sprintf("(%s.containsCIDR(cidr(%s)) && %s.prefixLength() < %d && %s.ip() != ip(%s)", x, quote(r.Prefix.String()), x, rlen, x, quote(net.String()))
	if len(good) > 0 {
		wider += fmt.Sprintf(" && !(string(%s) in %s)", x, quoteList(good))
	}
	wider += ")"
	inBlock := fmt.Sprintf("(cidr(%s).containsCIDR(%s) && %s.prefixLength() <= %d)", quote(block.String()), x, x, maxUsable)
	parts := []string{wider, inBlock}
	if len(smaller) > 0 {
		parts = append(parts, fmt.Sprintf("(%s.ip() == ip(%s) && %s.prefixLength() in [%s])", x, quote(net.String()), x, strings.Join(smaller, ", ")))
	}
	e := "(" + strings.Join(parts, " || ") + ")"
	if name, ok := serviceCIDRName(r.Source); ok {
		e = fmt.Sprintf("(object.metadata.name != %s && %s)", quote(name), e)
	}
	return e
}

// serviceCIDRName is the ServiceCIDR object a range was read from.
func serviceCIDRName(source string) (string, bool) {
	rest, ok := strings.CutPrefix(source, "ServiceCIDR ")
	if !ok {
		return "", false
	}
	name, err := strconv.Unquote(rest)
	return name, err == nil
}
