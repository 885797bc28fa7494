package backstop

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"clusterip-policy/pkg/allocview"
	"clusterip-policy/pkg/policy"
)

// The Service policies' variables. Each is evaluated at most once per
// request. They mirror pkg/policy: requestedIPs (ips), oldIPs (old), the
// addresses eachNewIP checks (fresh: not held before, as spelled), those
// the backstop can judge (checked: valid IPs in canonical form, without a
// dry run's placeholder; an invalid spelling is the webhook's invalid-ip,
// and with StrictIPCIDRValidation the apiserver refuses it itself).
const (
	varIPs = `(has(object.spec.clusterIPs) && size(object.spec.clusterIPs) > 0 ? object.spec.clusterIPs : ` +
		`(has(object.spec.clusterIP) && object.spec.clusterIP != '' ? [object.spec.clusterIP] : [])).filter(i, i != 'None' && i != '')`
	varOld = `request.operation == 'UPDATE' && oldObject != null && has(oldObject.spec) && ` +
		`!(has(oldObject.spec.type) && oldObject.spec.type == 'ExternalName') ? ` +
		`(has(oldObject.spec.clusterIPs) && size(oldObject.spec.clusterIPs) > 0 ? oldObject.spec.clusterIPs : ` +
		`(has(oldObject.spec.clusterIP) && oldObject.spec.clusterIP != '' ? [oldObject.spec.clusterIP] : [])).filter(i, i != 'None' && i != '') : []`
	varFresh = `size(variables.ips) > 2 ? [] : variables.ips.filter(i, !(i in variables.old))`
	varSelf  = `request.namespace + '/' + (has(object.metadata.name) ? object.metadata.name : '')`
	// varRecorded is the record's addresses that are new in this request.
	varRecorded = `has(object.metadata.annotations) && '` + RecordAnnotation + `' in object.metadata.annotations ? ` +
		`variables.fresh.filter(i, i in object.metadata.annotations['` + RecordAnnotation + `'].split(',') && isIP(i)).map(i, string(ip(i))) : []`
)

// services builds the Service policies' rules: the webhooks' conditions
// and the shared variables, then one rule after another, each left to the
// webhook (and said so in the Set) when its expression does not fit.
func (c compiler) services() group {
	g := c.serviceGroup()
	t := c.serviceTerms()
	c.serviceVariables(&g, t)
	c.outsideServiceCIDRs(&g, t)
	c.reservedForOther(&g, t)
	c.reservedRangeForOther(&g, t)
	c.staticIPInDynamicBand(&g, t)
	if fast, ok := c.plainlyDynamic(t.reserved, t.dynamic, t.dynamicOK && t.rangesOK, t.ranges, t.rangesExprOK); ok {
		g.matchConditions = append([]admissionregistrationv1.MatchCondition{{Name: "not-plainly-dynamic", Expression: fast}}, g.matchConditions...)
	}
	g.matchConditions = oneCondition(NeedsJudging, g.matchConditions)
	return g
}

// serviceTerms are the expressions the Service rules share, each with
// whether it fits the apiserver's limits.
type serviceTerms struct {
	// netsOK: the ranges' network addresses, which a dry run shows, fit
	// the checked variable (MaxNetworks); rangesOK: the active ranges fit
	// (MaxRanges).
	netsOK, rangesOK bool
	// reserved maps every reserved address to its owner.
	reserved map[string]string
	// usable, dynamic and ranges test the address "i": usable in an
	// active range, in a dynamic band, in the reserved ranges.
	usable, dynamic      string
	usableOK, dynamicOK  bool
	ranges               rangeExprs
	rangesExprOK         bool
	hasReservedOrInRange bool
}

func (c compiler) serviceTerms() serviceTerms {
	t := serviceTerms{rangesOK: len(c.rs.Active) <= MaxRanges, reserved: c.reservations()}
	_, t.netsOK = c.networks()
	t.usable, t.usableOK = c.usable("i")
	t.dynamic, t.dynamicOK = c.dynamic("i")
	t.ranges, t.rangesExprOK = c.reservedRanges("i")
	t.hasReservedOrInRange = len(t.reserved) > 0 || len(c.p.ReservedRanges) > 0
	return t
}

// serviceGroup is the Service group with the webhooks' own conditions
// (manifests/base/webhook-configurations.yaml), the exemptions, and the
// variables every rule reads (pkg/policy's requestedIPs and the rest).
func (c compiler) serviceGroup() group {
	return group{
		resource:   Services,
		namespaced: true,
		rules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
			Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{Services}},
		}}},
		// The webhooks' own conditions (manifests/base/webhook-
		// configurations.yaml), then the stages' skips of pkg/policy.
		matchConditions: append([]admissionregistrationv1.MatchCondition{
			{Name: "not-default-kubernetes", Expression: `!(has(request.namespace) && request.namespace == 'default' && ` +
				`has(request.name) && request.name == 'kubernetes' && ` +
				`has(request.userInfo.username) && request.userInfo.username == 'system:apiserver' && ` +
				`has(request.userInfo.groups) && 'system:masters' in request.userInfo.groups)`},
			{Name: "not-external-name", Expression: `!has(object.spec) || !has(object.spec.type) || object.spec.type != 'ExternalName'`},
			{Name: "not-headless", Expression: `!has(object.spec) || (!(has(object.spec.clusterIP) && object.spec.clusterIP == 'None') && ` +
				`!(has(object.spec.clusterIPs) && size(object.spec.clusterIPs) > 0 && object.spec.clusterIPs[0] == 'None'))`},
		}, c.exemptions(true)...),
		variables: []admissionregistrationv1.Variable{
			{Name: "ips", Expression: varIPs},
			{Name: "old", Expression: varOld},
			{Name: "fresh", Expression: varFresh},
			{Name: "self", Expression: varSelf},
		},
	}
}

// serviceVariables adds the variables that depend on the policy and the
// ranges, in the order the rules read them: the record's addresses, the
// addresses the backstop can judge, and the reservations' maps.
func (c compiler) serviceVariables(g *group, t serviceTerms) {
	if c.in.Mutating {
		// The record tells a named address from one the apiserver picked;
		// the rules' messages word each (allocatedAdvice).
		g.variables = append(g.variables, admissionregistrationv1.Variable{Name: "recorded", Expression: varRecorded})
	}
	if nets, ok := c.networks(); ok {
		g.variables = append(g.variables, admissionregistrationv1.Variable{Name: "checked",
			Expression: fmt.Sprintf(`variables.fresh.filter(i, isIP(i)).map(i, string(ip(i))).filter(i, !(has(request.dryRun) && request.dryRun && i in %s))`, quoteList(nets))})
	}
	if t.hasReservedOrInRange {
		// One variable per map, each under the parser's size limit;
		// reserved is the list of them.
		var names []string
		for k, chunk := range chunkReservations(t.reserved) {
			n := fmt.Sprintf("reserved%d", k)
			g.variables = append(g.variables, admissionregistrationv1.Variable{Name: n, Expression: chunk})
			names = append(names, "variables."+n)
		}
		g.parts = map[string][]string{"reserved": nil}
		for _, n := range names {
			g.parts["reserved"] = append(g.parts["reserved"], strings.TrimPrefix(n, "variables."))
		}
		g.variables = append(g.variables, admissionregistrationv1.Variable{Name: "reserved", Expression: "[" + strings.Join(names, ", ") + "]"})
	}
}

// checkedNeeds are the variables a rule over the checked addresses reads,
// and more.
func checkedNeeds(more ...string) []string {
	return append([]string{"ips", "old", "fresh", "checked"}, more...)
}

func leftNets(rule policy.RuleID) string {
	return fmt.Sprintf("%s on services: the cluster has more than %d ServiceCIDR ranges whose network address a dry run may show", rule, MaxNetworks)
}

func leftRanges(rule policy.RuleID) string {
	return fmt.Sprintf("%s on services: more than %d active ranges to encode", rule, MaxRanges)
}

// outsideServiceCIDRs: outside allowedCIDRs. Every address outside them is
// outside every active range too (the ranges are narrowed to them), which
// is what the webhook refuses; an address inside them but outside the
// active ranges is left to the webhook and to the apiserver, which refuses
// an address no ServiceCIDR holds.
func (c compiler) outsideServiceCIDRs(g *group, t serviceTerms) {
	switch {
	case len(c.p.AllowedCIDRs) == 0:
		g.left = append(g.left, "outside-service-cidrs on services: the policy lists no allowedCIDRs")
	case !t.netsOK:
		g.left = append(g.left, leftNets(policy.RuleOutsideServiceCIDRs))
	default:
		g.add(c.p, c.listRule(policy.RuleOutsideServiceCIDRs, "outside", "checked", checkedNeeds(), "true", []string{"!(" + inPrefixes("i", c.p.AllowedCIDRs) + ")"},
			fmt.Sprintf(`'" is outside the policy\'s allowedCIDRs %s; '`, policy.JoinListed(prefixStrings(c.p.AllowedCIDRs), ", ")), "''"))
	}
}

// reservedForOther: the address is usable in an active range (an address
// outside them is outside-service-cidrs first, in the webhook's order) and
// reserved for another Service.
func (c compiler) reservedForOther(g *group, t serviceTerms) {
	switch {
	case len(t.reserved) == 0:
		g.left = append(g.left, "reserved-for-other on services: the policy reserves no address")
	case !t.netsOK:
		g.left = append(g.left, leftNets(policy.RuleReservedForOther))
	case !t.rangesOK || !t.usableOK:
		g.left = append(g.left, leftRanges(policy.RuleReservedForOther))
	default:
		g.add(c.p, c.listRule(policy.RuleReservedForOther, "taken", "checked", checkedNeeds("self", "reserved"), t.usable,
			[]string{"variables.reserved.exists(m, i in m && m[i] != variables.self)"},
			`'" is reserved for Service ' + variables.reserved.filter(m, variables.taken[0] in m)[0][variables.taken[0]] + '; '`, "''"))
	}
}

// reservedRangeForOther: usable, not reserved itself (a reservation wins
// over its range), in a range the Service may not use.
func (c compiler) reservedRangeForOther(g *group, t serviceTerms) {
	switch {
	case len(c.p.ReservedRanges) == 0:
		g.left = append(g.left, "reserved-range-for-other on services: the policy has no reservedRanges")
	case !t.netsOK:
		g.left = append(g.left, leftNets(policy.RuleReservedRangeForOther))
	case !t.rangesOK || !t.usableOK || !t.rangesExprOK:
		g.left = append(g.left, leftRanges(policy.RuleReservedRangeForOther))
	default:
		v := c.listRule(policy.RuleReservedRangeForOther, "inRange", "checked", checkedNeeds("reserved"),
			fmt.Sprintf("(%s) && !variables.reserved.exists(m, i in m)", t.usable), t.ranges.refused,
			`'" is in reserved range ' + variables.inRange.map(i, `+t.ranges.name+`)[0] + ', which namespace ' + request.namespace + ' (or this Service, by its labels) may not use; '`,
			"' outside the reserved ranges'")
		if v.expression == "" {
			g.left = append(g.left, leftRanges(policy.RuleReservedRangeForOther))
			return
		}
		g.add(c.p, v)
	}
}

// staticIPInDynamicBand: an address the request named (the record) in a
// dynamic band, not reserved, not in a reserved range.
func (c compiler) staticIPInDynamicBand(g *group, t serviceTerms) {
	switch {
	case !c.in.Mutating:
		g.left = append(g.left, "static-ip-in-dynamic-band on services: the apiserver does not serve admissionregistration.k8s.io/v1 MutatingAdmissionPolicy, which records the addresses a request names")
	case !t.rangesOK || !t.dynamicOK:
		g.left = append(g.left, leftRanges(policy.RuleStaticIPInDynamicBand))
	case t.dynamic == "false":
		g.left = append(g.left, "static-ip-in-dynamic-band on services: no active range has a dynamic band")
	default:
		needs := []string{"ips", "old", "fresh", "recorded"}
		notReserved := "true"
		if t.hasReservedOrInRange {
			notReserved = "!variables.reserved.exists(m, i in m)"
			needs = append(needs, "reserved")
		}
		v := c.listRule(policy.RuleStaticIPInDynamicBand, "dynamic", "recorded", needs,
			fmt.Sprintf("(%s) && %s && !(%s)", t.dynamic, notReserved, t.ranges.any), []string{"true"},
			`'" lies in a dynamic band, where the apiserver hands out addresses at random; '`, "' or ask for a reservation'")
		if v.expression == "" {
			g.left = append(g.left, leftRanges(policy.RuleStaticIPInDynamicBand))
			return
		}
		g.add(c.p, v)
	}
}

// plainlyDynamic is a matchCondition that skips the commonest request
// with one cheap expression instead of the rules' variables (a tenth of the
// CEL work, BenchmarkValidatingADynamicCreate): a request carrying no record
// whose every address (old or new: an update checks only its new ones), canonical, lies in a dynamic band (of an active
// range, which is narrowed to allowedCIDRs), reserved for no one and in no
// reserved range. Every rule admits such a request: outside-service-cidrs
// (inside allowedCIDRs),
// reserved-for-other (reserved for no one), reserved-range-for-other (in no
// range), static-ip-in-dynamic-band (nothing recorded, so nothing named).
// Only the reservations inside a dynamic band can match an address that
// passed the band's test, so only those are listed; they are compared as
// text, hence the canonical spelling (a later mutating webhook may set an
// address spelt otherwise). Left out (every request
// evaluated in full) when it does not fit one expression.
func (c compiler) plainlyDynamic(reserved map[string]string, dynamic string, dynamicOK bool, ranges rangeExprs, rangesOK bool) (string, bool) {
	if !dynamicOK || !rangesOK || dynamic == "false" {
		return "", false
	}
	var inDynamic []string
	for k := range reserved {
		a, err := netip.ParseAddr(k)
		if err != nil {
			return "", false
		}
		for _, r := range c.rs.Active {
			if d := r.Dynamic(); !d.IsZero() && d.Contains(a) && r.Contains(a) {
				inDynamic = append(inDynamic, k)
				break
			}
		}
	}
	slices.Sort(inDynamic)
	terms := []string{"isIP(i)", "string(ip(i)) == i", "(" + dynamic + ")"}
	if len(inDynamic) > 0 {
		terms = append(terms, fmt.Sprintf("!(i in %s)", quoteList(inDynamic)))
	}
	if ranges.any != "false" {
		terms = append(terms, "!("+ranges.any+")")
	}
	e := fmt.Sprintf(`!(!(has(object.metadata.annotations) && '%s' in object.metadata.annotations) && `+
		`has(object.spec.clusterIPs) && size(object.spec.clusterIPs) > 0 && size(object.spec.clusterIPs) <= 2 && object.spec.clusterIPs.all(i, %s))`,
		RecordAnnotation, strings.Join(terms, " && "))
	return e, len(e) <= MaxExpressionBytes
}

// listRule builds a rule as a list variable, named list, of the addresses
// of the list variable from that break it: those for which cond and one of
// terms hold. When the terms do not fit one expression they are split over
// several variables (list0, list1, ...) that the list joins. The rule
// holds while the list is empty; the message names its first address, what
// is wrong with it (what, a CEL string after the address) and what to
// pick instead (advice then tail). needs are the group's variables read.
// An empty expression means even one term does not fit.
func (c compiler) listRule(rule policy.RuleID, list, from string, needs []string, cond string, terms []string, what, tail string) validation {
	v := validation{rule: rule, needs: needs}
	filter := func(ts []string) string {
		return fmt.Sprintf("variables.%s.filter(i, (%s) && (%s))", from, cond, strings.Join(ts, " || "))
	}
	var chunks [][]string
	for _, t := range terms {
		if n := len(chunks); n > 0 && len(filter(append(chunks[n-1], t))) <= MaxExpressionBytes {
			chunks[n-1] = append(chunks[n-1], t)
			continue
		}
		if len(filter([]string{t})) > MaxExpressionBytes {
			return validation{}
		}
		chunks = append(chunks, []string{t})
	}
	if len(chunks) == 1 {
		v.vars = []admissionregistrationv1.Variable{{Name: list, Expression: filter(chunks[0])}}
	} else {
		var parts []string
		for k, ch := range chunks {
			n := fmt.Sprintf("%s%d", list, k)
			v.vars = append(v.vars, admissionregistrationv1.Variable{Name: n, Expression: filter(ch)})
			parts = append(parts, "variables."+n)
		}
		v.vars = append(v.vars, admissionregistrationv1.Variable{Name: list, Expression: strings.Join(parts, " + ")})
	}
	first := "variables." + list + "[0]"
	v.expression = fmt.Sprintf("size(variables.%s) == 0", list)
	named := fmt.Sprintf(`'ClusterIP "' + %s + %s + %s + %s`, first, what, c.staticAdvice(first), tail)
	if !c.in.Mutating || from == "recorded" {
		// Without the record a named address and an allocated one look
		// the same; from the record, every address was named.
		v.message = fmt.Sprintf(`%s + ' (clusterip-policy backstop, rule %s)'`, named, rule)
		return v
	}
	v.needs = append(slices.Clone(v.needs), "recorded")
	v.message = fmt.Sprintf(`(%s in variables.recorded ? %s : 'allocated ClusterIP "' + %s + %s + %s) + ' (clusterip-policy backstop, rule %s)'`,
		first, named, first, what, c.allocatedAdvice(rule, first), rule)
	return v
}

// allocatedAdvice is a CEL string that tells the user of a request that
// named no address (the record says so) what to do when the apiserver
// picked one the policy refuses, as the webhook's validating stage words it
// (pkg/policy final.go): the apiserver picked it without the webhook, which
// would have chosen the band, and frees it with the denial.
func (c compiler) allocatedAdvice(rule policy.RuleID, ipExpr string) string {
	if c.p.ActionFor(rule) != policy.ActionDeny {
		// Warned or audited: nothing is released, nothing to do again.
		return quote("the apiserver picked it (the request named none), and the policy lets it stay")
	}
	again := "the apiserver picked it (the request named none) and releases it with this denial: create the Service again"
	if rule == policy.RuleOutsideServiceCIDRs {
		again += " (the apiserver picks among its ServiceCIDRs at random; an administrator can delete the ServiceCIDR outside allowedCIDRs)"
	}
	advice := func(f allocview.Family) string {
		if bands := c.rs.StaticBands(f); len(bands) > 0 {
			s := again + ", or name a free address in the static band " + policy.JoinListed(bands, " or ")
			if rule == policy.RuleReservedRangeForOther {
				s += " outside the reserved ranges"
			}
			return s
		}
		return again
	}
	return fmt.Sprintf("(ip(%s).family() == 4 ? %s : %s)", ipExpr, quote(advice(allocview.IPv4)), quote(advice(allocview.IPv6)))
}

// networks are the network addresses of every known range, active or not:
// a dry-run create shows validating admission one of them instead of an
// allocated address (policy: RangeSet.IsNetworkAddress).
func (c compiler) networks() ([]string, bool) {
	var out []string
	add := func(p netip.Prefix) {
		if s := p.Addr().String(); !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	for _, r := range c.rs.Active {
		add(r.Prefix)
	}
	for _, e := range c.rs.Excluded {
		add(e.Range.Prefix)
	}
	slices.Sort(out)
	return out, len(out) <= MaxNetworks
}

// reservations maps every reserved address (canonical) to its owner, with
// the implicit one of default/kubernetes (policy: ReservedOwner).
func (c compiler) reservations() map[string]string {
	out := map[string]string{}
	for _, r := range c.p.Reservations {
		out[r.IP.String()] = r.Owner.String()
	}
	if c.p.ReserveKubernetesService {
		if ip, _, ok := c.rs.KubernetesServiceIP(); ok {
			if _, explicit := out[ip.String()]; !explicit {
				out[ip.String()] = policy.KubernetesService.String()
			}
		}
	}
	return out
}

// chunkReservations writes the reservations as CEL maps of at most
// MaxExpressionBytes each, in address order so that a policy compiles to
// the same text every time.
func chunkReservations(res map[string]string) []string {
	keys := make([]string, 0, len(res))
	for k := range res {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var chunks []string
	var b strings.Builder
	flush := func() {
		chunks = append(chunks, "{"+b.String()+"}")
		b.Reset()
	}
	for _, k := range keys {
		entry := quote(k) + ": " + quote(res[k])
		if b.Len() > 0 && b.Len()+len(entry)+2 > MaxExpressionBytes-2 {
			flush()
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		b.WriteString(entry)
	}
	if b.Len() > 0 || len(chunks) == 0 {
		flush()
	}
	return chunks
}

// inRangeExpr is true when ipExpr lies in r and, if the policy narrows r,
// in an allowed part of it (allocview.ActiveRange.Contains).
func inRangeExpr(ipExpr string, r allocview.ActiveRange) string {
	e := fmt.Sprintf("cidr(%s).containsIP(%s)", quote(r.Prefix.String()), ipExpr)
	if r.Allowed != nil {
		e += " && " + inPrefixes(ipExpr, r.Allowed)
	}
	return e
}

// usable is true when ipExpr (canonical) can be handed out by some active
// range: Place gives Static or Dynamic, not Outside or Unusable.
func (c compiler) usable(ipExpr string) (string, bool) {
	var parts []string
	for _, r := range c.rs.Active {
		u := r.Usable()
		if u.IsZero() {
			continue
		}
		e := inRangeExpr(ipExpr, r) + fmt.Sprintf(" && %s != %s", ipExpr, quote(r.Prefix.Addr().String()))
		if last := lastOf(r.Prefix); last != u.Last {
			e += fmt.Sprintf(" && %s != %s", ipExpr, quote(last.String())) // the IPv4 broadcast
		}
		parts = append(parts, "("+e+")")
	}
	if len(parts) == 0 {
		return "false", true
	}
	e := strings.Join(parts, " || ")
	return e, len(e) <= MaxExpressionBytes
}

// dynamic is true when ipExpr (canonical) is in the dynamic band of some
// active range (Place gives Dynamic). A range's addresses below its
// dynamic band are its network address and static band: the aligned block
// of offset addresses at the network address, and the one address after
// it.
func (c compiler) dynamic(ipExpr string) (string, bool) {
	var parts []string
	for _, r := range c.rs.Active {
		d := r.Dynamic()
		if d.IsZero() {
			continue
		}
		e := inRangeExpr(ipExpr, r)
		if r.Offset() == 0 {
			e += fmt.Sprintf(" && %s != %s", ipExpr, quote(r.Prefix.Addr().String()))
		} else {
			block := blockAt(r.Prefix.Addr(), r.Offset())
			edge := addrPlus(r.Prefix.Addr(), r.Offset())
			e += fmt.Sprintf(" && !cidr(%s).containsIP(%s) && %s != %s", quote(block.String()), ipExpr, ipExpr, quote(edge.String()))
		}
		if last := lastOf(r.Prefix); last != d.Last {
			e += fmt.Sprintf(" && %s != %s", ipExpr, quote(last.String()))
		}
		parts = append(parts, "("+e+")")
	}
	if len(parts) == 0 {
		return "false", true
	}
	e := strings.Join(parts, " || ")
	return e, len(e) <= MaxExpressionBytes
}

// rangeExprs are the reserved ranges' expressions over one address.
type rangeExprs struct {
	// any is true when the address is in some reserved range; refused
	// (each term) when it is in one the Service may not use; name names
	// the range holding it (as the policy writes it, with its note).
	any, name string
	refused   []string
}

// reservedRanges writes the reserved ranges' tests (policy:
// ReservedRangeOf, ReservedRange.Allows).
func (c compiler) reservedRanges(ipExpr string) (rangeExprs, bool) {
	if len(c.p.ReservedRanges) == 0 {
		return rangeExprs{any: "false", name: "''"}, true
	}
	var anyParts, refusedParts []string
	name := "''"
	for k := len(c.p.ReservedRanges) - 1; k >= 0; k-- {
		r := c.p.ReservedRanges[k]
		in := inPrefixes(ipExpr, coverBand(r.Band))
		may, err := c.mayUse(r)
		if err != nil {
			return rangeExprs{}, false
		}
		anyParts = append(anyParts, "("+in+")")
		refusedParts = append(refusedParts, fmt.Sprintf("((%s) && !(%s))", in, may))
		name = fmt.Sprintf("(%s ? %s : %s)", in, quote(policy.Clip(r.String(), policy.MaxEchoBytes*3)), name)
	}
	out := rangeExprs{any: strings.Join(anyParts, " || "), refused: refusedParts, name: name}
	ok := len(out.any) <= MaxExpressionBytes && len(out.name) <= MaxExpressionBytes
	return out, ok
}

// mayUse is ReservedRange.Allows in CEL: the Service's namespace is listed
// or its Namespace object matches namespaceSelector, and the Service's
// labels match serviceSelector. The apiserver gives the policy the real
// Namespace object (namespaceObject), which always carries the
// kubernetes.io/metadata.name label the webhook falls back on.
func (c compiler) mayUse(r policy.ReservedRange) (string, error) {
	var who []string
	if len(r.Namespaces) > 0 {
		who = append(who, fmt.Sprintf("request.namespace in %s", quoteList(r.Namespaces)))
	}
	if r.NamespaceSelector != nil {
		sel, err := selectorCEL(r.NamespaceSelector, "namespaceObject.metadata.labels",
			"(namespaceObject != null && has(namespaceObject.metadata) && has(namespaceObject.metadata.labels))")
		if err != nil {
			return "", err
		}
		who = append(who, sel)
	}
	if len(who) == 0 {
		who = []string{"false"}
	}
	svc, err := selectorCEL(r.ServiceSelector, "object.metadata.labels", "has(object.metadata.labels)")
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("(%s) && %s", strings.Join(who, " || "), svc), nil
}

// staticAdvice is a CEL string that tells where to pick instead, for the
// family of the address expression ipExpr: the static bands of the active
// ranges, as the webhook's messages name them (RangeSet.StaticBands).
func (c compiler) staticAdvice(ipExpr string) string {
	advice := func(f allocview.Family) string {
		bands := c.rs.StaticBands(f)
		if len(bands) == 0 {
			return "leave clusterIP empty to get one allocated"
		}
		return "choose a free address in the static band " + policy.JoinListed(bands, " or ") + " or leave clusterIP empty"
	}
	return fmt.Sprintf("(ip(%s).family() == 4 ? %s : %s)", ipExpr, quote(advice(allocview.IPv4)), quote(advice(allocview.IPv6)))
}
