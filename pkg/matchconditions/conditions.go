// Package matchconditions computes, from the policy and the active ranges,
// the one matchCondition of each Service webhook that the leader keeps in
// step with them (docs/matchconditions.md). It sends the apiserver's
// request to the webhook only where the webhook's answer can differ from
// "allowed, unchanged, no warning", so the common dynamic Service create
// costs no webhook call.
//
// Every expression is an allow-list that fails towards calling: whatever it
// does not recognise as harmless (an unknown shape, an address outside the
// list, a list too long to encode) makes it true. It is ANDed with the
// static conditions of manifests/base/webhook-configurations.yaml, which
// stay as they are. The validating one is true for anything but a CREATE,
// so UPDATEs keep that webhook's static filter; the mutating one narrows
// UPDATEs to those that may allocate (AllocatingUpdate), since the mutating
// webhook's static conditions send it every UPDATE.
package matchconditions

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"clusterip-policy/pkg/allocview"
	"clusterip-policy/pkg/policy"
)

// Name is the name of the managed condition in both Service webhooks.
const Name = "policy-may-apply"

// Bounds of what one expression encodes. Past them the expressions only get
// less selective (more calls), never wrong.
const (
	// MaxTerms and MaxHoles cap the validating allow-list as the condition
	// tests it (SkipSet): one term per active range or allowed part of one,
	// and one hole per reserved address in a dynamic band plus two or three
	// per range. Past either, the condition tests the exact prefixes of
	// AllowList instead.
	MaxTerms = 64
	MaxHoles = 512
	// MaxPrefixes caps that fallback. A range's dynamic band is at most
	// about 2x its host bits of prefixes (29 for 10.96.0.0/16), and each
	// reserved address inside it adds up to as many again (42 with one
	// hole).
	MaxPrefixes = 256
	// MaxOwners caps the reservation owners the mutating condition names;
	// over it every CREATE is sent, as before this package existed.
	MaxOwners = 512
	// MaxExpressionBytes caps each expression below the 100,000 code
	// points the apiserver's CEL parser accepts (cel-go's default, which
	// Kubernetes keeps); the expressions are ASCII. 512 owners of the
	// longest names (63/63) take about 68 KB.
	MaxExpressionBytes = 90_000
)

// Conditions are the two managed expressions and what they were made from.
type Conditions struct {
	// Mutating and Validating are the CEL expressions of the condition
	// named Name in the mutating and the validating Service webhook.
	Mutating, Validating string
	// Digest identifies the pair (first 12 hex digits of SHA-256 over both);
	// the adapter writes it beside them so that anyone can tell which
	// policy and ranges the apiservers filter with.
	Digest string
	// AllowList are the prefixes the validating condition lets an address
	// skip from (the Include of each of Skip.Terms), Owners the
	// reservation owners (namespace/name) the mutating condition names.
	AllowList []netip.Prefix
	Owners    []string
	// AllowListCapped and OwnersCapped say a bound was hit: ranges were left
	// out of the allow-list, or every CREATE is sent to the mutating webhook.
	AllowListCapped, OwnersCapped bool
	// Skip is the validating allow-list as the condition tests it: the
	// ranges minus their static prefixes (Terms) and the addresses in them
	// that must still be sent (Holes). When the ranges and reservations do
	// not fit MaxTerms and MaxHoles, its terms are the exact prefixes of
	// AllowList, with no exclusion and no hole.
	Skip SkipSet
}

// Compute returns the conditions for policy p and the active ranges rs (the
// same Env.Ranges() the decisions use). A nil policy gives the conditions
// that send every CREATE to both webhooks.
func Compute(p *policy.Policy, rs allocview.RangeSet) Conditions {
	var c Conditions
	if p != nil {
		c.Owners, c.OwnersCapped = owners(p)
	} else {
		c.OwnersCapped = true
	}
	c.Mutating = mutating(c.Owners, c.OwnersCapped, true)
	if len(c.Mutating) > MaxExpressionBytes {
		c.Mutating = mutating(c.Owners, c.OwnersCapped, false) // without the names' prefilter
	}
	if len(c.Mutating) > MaxExpressionBytes {
		c.Owners, c.OwnersCapped = nil, true
		c.Mutating = mutating(nil, true, false)
	}
	if p == nil {
		// The fail-safe conditions: with no policy nothing can be told,
		// not even whether another mutating admission acts on UPDATEs.
		c.Mutating = "true"
	}
	// The validating allow-list as ranges and holes; past MaxTerms,
	// MaxHoles or the expression's size, as its exact prefixes; past
	// that, nothing.
	ok := false
	if p != nil {
		if c.Skip, ok = Skip(p, rs, MaxTerms, MaxHoles); ok {
			c.Validating = validating(c.Skip)
			ok = len(c.Validating) <= MaxExpressionBytes
		}
		if !ok {
			var exact []netip.Prefix
			exact, c.AllowListCapped = AllowList(p, rs, MaxPrefixes)
			c.Skip = SkipSet{}
			for _, pr := range exact {
				c.Skip.Terms = append(c.Skip.Terms, Term{Include: pr})
			}
			c.Validating = validating(c.Skip)
			ok = len(c.Validating) <= MaxExpressionBytes
		}
	}
	if !ok {
		c.AllowListCapped, c.Skip = p != nil, SkipSet{}
		c.Validating = validating(c.Skip)
	}
	for _, t := range c.Skip.Terms {
		c.AllowList = append(c.AllowList, t.Include)
	}
	c.Digest = digest(c.Mutating, c.Validating)
	return c
}

// owners lists every Service that owns a reservation, sorted, once each;
// capped when there are more than MaxOwners.
func owners(p *policy.Policy) ([]string, bool) {
	var out []string
	for _, r := range p.Reservations {
		out = append(out, r.Owner.String())
	}
	if p.ReserveKubernetesService {
		out = append(out, "default/kubernetes") // the implicit reservation, policy.ReservationsOf
	}
	slices.Sort(out)
	out = slices.Compact(out)
	for _, o := range out {
		if !literalSafe(o) {
			return nil, true // never put a string we cannot quote plainly into CEL
		}
	}
	if len(out) > MaxOwners {
		return nil, true
	}
	return out, false
}

// literalSafe accepts what the policy's owner syntax allows (DNS labels and
// one slash), so a single-quoted CEL literal needs no escapes.
func literalSafe(s string) bool {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '.' || r == '/') {
			return false
		}
	}
	return s != ""
}

// The parts of the expressions that do not depend on the policy. Each
// guards every optional field with has(): an expression that fails to
// evaluate counts as a webhook failure and, with failurePolicy Fail,
// rejects the request.

// notCreate keeps UPDATEs under the validating webhook's static
// allocating-requests-only filter.
const notCreate = "request.operation != 'CREATE'"

// AllocatingUpdate is true for an UPDATE that may allocate an address, the
// ones policy.Mutate does not skip (pkg/policy mutateSkips): from type
// ExternalName to a type with a ClusterIP (not ExternalName to
// ExternalName), a single-stack Service growing to dual-stack with a second
// clusterIP named, or growing by ipFamilyPolicy (to RequireDualStack or
// PreferDualStack) or ipFamilies alone (growsToDualStack). It was the
// mutating webhook's static condition; the mutating webhook now gets every
// UPDATE from its static conditions, so that another mutating admission
// that acts on an UPDATE after ours reinvokes it (the apiserver reinvokes
// only a webhook called in the first round), and the managed condition
// narrows UPDATEs to these while no such admission exists.
// TestManagedMutatingConditionSendsExactlyTheUpdatesMutateActsOn holds it
// equal to Go; test/e2e/dualstack_test.go on a real apiserver.
const AllocatingUpdate = "(has(oldObject.spec) && has(oldObject.spec.type) && oldObject.spec.type == 'ExternalName' &&\n" +
	" (!has(object.spec) || !has(object.spec.type) || object.spec.type != 'ExternalName')) ||\n" +
	"(has(object.spec) && has(object.spec.clusterIPs) && has(oldObject.spec) &&\n" +
	" (!has(oldObject.spec.clusterIPs) || size(object.spec.clusterIPs) > size(oldObject.spec.clusterIPs))) ||\n" +
	"(has(object.spec) && has(oldObject.spec) &&\n" +
	" !(has(object.spec.type) && object.spec.type == 'ExternalName') &&\n" +
	" (!has(object.spec.clusterIPs) || size(object.spec.clusterIPs) < 2) &&\n" +
	" ((has(object.spec.ipFamilyPolicy) && object.spec.ipFamilyPolicy != 'SingleStack' &&\n" +
	"   (!has(oldObject.spec.ipFamilyPolicy) || oldObject.spec.ipFamilyPolicy != object.spec.ipFamilyPolicy)) ||\n" +
	"  (has(object.spec.ipFamilies) &&\n" +
	"   size(object.spec.ipFamilies) > (has(oldObject.spec.ipFamilies) ? size(oldObject.spec.ipFamilies) : 0))))"

// updateFirst decides an UPDATE by AllocatingUpdate alone; what follows it
// decides every other request.
const updateFirst = "request.operation == 'UPDATE' ? (\n" + AllocatingUpdate + ") :\n"

// namesAddress: the request names a ClusterIP ("None" included); the
// mutating webhook checks every requested address.
const namesAddress = "(has(object.spec.clusterIP) && object.spec.clusterIP != '') || " +
	"(has(object.spec.clusterIPs) && size(object.spec.clusterIPs) > 0)"

// oddFamilies: ipFamilies is not one of the lists the apiserver accepts;
// the webhook gives its short denial (policy shapeViolation). size() comes
// first so that a hostile list of any length is never compared.
const oddFamilies = "(has(object.spec.ipFamilies) && size(object.spec.ipFamilies) > 0 && " +
	"!(size(object.spec.ipFamilies) <= 2 && object.spec.ipFamilies in [['IPv4'], ['IPv6'], ['IPv4', 'IPv6'], ['IPv6', 'IPv4']]))"

// serviceKey is namespace/name as the webhook computes it: the object's
// own fields, else the request's (internal/admission's reviewer.answer). A create
// with generateName has no name yet and owns nothing.
const serviceKey = "((has(object.metadata.namespace) && object.metadata.namespace != '') ? object.metadata.namespace : (has(request.namespace) ? request.namespace : '')) + '/' + " +
	"((has(object.metadata.name) && object.metadata.name != '') ? object.metadata.name : (has(request.name) ? request.name : ''))"

// ownerNamed is true when the name the webhook reads (the object's own,
// else the request's, as in serviceKey) is one of the names %[1]s: a cheap
// test that keeps serviceKey, which builds a string, off the common
// create.
const ownerNamed = "((has(object.metadata.name) && object.metadata.name != '') ? object.metadata.name in %[1]s : (has(request.name) && request.name in %[1]s))"

// mutating is true for a CREATE the mutating webhook may deny, warn about
// or patch: one that names an address, has odd ipFamilies, or is made by a
// reservation owner (the webhook assigns its reservation and, outside a
// dry run, frees its hold). A CREATE that names no address and is not an
// owner's is allowed unchanged by policy.Mutate. prefilter tests the
// owners' names (ownerNamed) before their keys; it is left out when the
// expression would be too long with it.
func mutating(owners []string, capped, prefilter bool) string {
	if capped {
		return updateFirst + "true"
	}
	parts := []string{notCreate, "!has(object.spec)", "!has(object.metadata)", namesAddress, oddFamilies}
	if len(owners) > 0 && !prefilter {
		parts = append(parts, serviceKey+" in "+quoteList(owners))
	} else if len(owners) > 0 {
		var names []string
		for _, o := range owners {
			names = append(names, o[strings.IndexByte(o, '/')+1:])
		}
		slices.Sort(names)
		names = slices.Compact(names)
		parts = append(parts, "("+fmt.Sprintf(ownerNamed, quoteList(names))+" && "+serviceKey+" in "+quoteList(owners)+")")
	}
	return updateFirst + "(" + strings.Join(parts, " ||\n") + ")"
}

// validating is true for a CREATE the validating webhook may deny, warn
// about or log. It is written as "not skippable", where a skippable
// CREATE's final object has the shape the apiserver gives a dynamic
// allocation: ipFamilies one of [IPv4], [IPv6], [IPv4, IPv6], [IPv6, IPv4];
// clusterIPs one address per family in that order, the first equal to
// clusterIP; and each address in the allow-list of its family (see
// inAllowList). A dry run shows a range's network address as a
// placeholder, which is never in the allow-list of its own range, so such
// dry runs are sent (and allowed by the webhook), unless it is the network
// address of a range nested in a wider one (10.97.0.0 of 10.97.0.0/16
// inside 10.96.0.0/12): that is a usable address of the wider range's
// dynamic band, so it may be listed and the dry run skipped, which the
// webhook would have allowed anyway.
//
// What a dynamic create costs the apiserver is the number of CEL steps it
// evaluates, each with its cost tracking, so every field is read as few
// times as the logic allows, an address of one family is never tested
// against the other's ranges, and the branch of the commonest shape,
// single-stack, comes first.
func validating(s SkipSet) string {
	const ip0, ip1 = "object.spec.clusterIP", "object.spec.clusterIPs[1]"
	in4, in6 := inAllowList(s, 4, ip0), inAllowList(s, 6, ip0)
	var branches []string
	if in4 != "" {
		branches = append(branches, "(object.spec.ipFamilies == ['IPv4'] && object.spec.clusterIPs == [object.spec.clusterIP] && "+in4+")")
	}
	if in6 != "" {
		branches = append(branches, "(object.spec.ipFamilies == ['IPv6'] && object.spec.clusterIPs == [object.spec.clusterIP] && "+in6+")")
	}
	if in4 != "" && in6 != "" {
		const pair = "size(object.spec.clusterIPs) == 2 && object.spec.clusterIPs[0] == object.spec.clusterIP && "
		branches = append(branches,
			"(object.spec.ipFamilies == ['IPv4', 'IPv6'] && "+pair+in4+" && "+inAllowList(s, 6, ip1)+")",
			"(object.spec.ipFamilies == ['IPv6', 'IPv4'] && "+pair+in6+" && "+inAllowList(s, 4, ip1)+")")
	}
	if len(branches) == 0 {
		return "true" // nothing is listed: every request is sent
	}
	// has() guards every field the branches read: an expression that fails
	// to evaluate counts as a webhook failure.
	return notCreate + " ||\n!(has(object.spec) && has(object.spec.ipFamilies) && has(object.spec.clusterIPs) && has(object.spec.clusterIP) && (\n" +
		strings.Join(branches, " ||\n") + "))"
}

// inAllowList is true when the string a (a CEL expression) is an address
// of family fam in the allow-list s: isIP first, so that nothing below
// meets a string that does not parse; then the holes, the ranges, and for
// IPv6 the holes again in canonical form. An IPv4 address isIP accepts is
// canonical (no leading zeros, no IPv4-mapped form: the CEL ip library
// refuses both), so the IPv4 holes are matched as written; an IPv6 address
// has many spellings (fd00:10:96:0::a), so its holes are matched on
// string(ip(a)). "" when the family has no range.
func inAllowList(s SkipSet, fam int, a string) string {
	var ranges, holes []string
	for _, t := range s.Terms {
		if bitLen(t.Include.Addr()) != fam {
			continue
		}
		test := prefixTest(t.Include, a)
		if t.Exclude.IsValid() {
			test = "(" + test + " && !" + prefixTest(t.Exclude, a) + ")"
		}
		ranges = append(ranges, test)
	}
	if len(ranges) == 0 {
		return ""
	}
	for _, h := range s.Holes {
		if bitLen(h) == fam {
			holes = append(holes, h.String())
		}
	}
	within := strings.Join(ranges, " || ")
	if len(ranges) > 1 {
		within = "(" + within + ")"
	}
	var reserved []string
	for _, r := range s.Reserved {
		if bitLen(r.Addr()) == fam {
			reserved = append(reserved, prefixTest(r, a))
		}
	}
	if len(reserved) > 0 {
		within += " && !(" + strings.Join(reserved, " || ") + ")"
	}
	parts := []string{"isIP(" + a + ")"}
	switch {
	case len(holes) == 0:
		parts = append(parts, within)
	case fam == 4:
		parts = append(parts, "!("+a+" in "+quoteList(holes)+")", within)
	default:
		parts = append(parts, within, "!(string(ip("+a+")) in "+quoteList(holes)+")")
	}
	return strings.Join(parts, " && ")
}

// prefixTest is true when the address a (a CEL expression that isIP
// accepted) lies in p. An IPv4 prefix of whole octets (/8, /16, /24) is
// tested on the text: isIP accepts one spelling of an IPv4 address, without
// leading zeros, so '10.96.' begins exactly the addresses of 10.96.0.0/16,
// and a prefix of a string costs less than cidr(), which parses its literal
// on every evaluation. Anything else, IPv6 included (whose spellings are
// many), is tested with cidr().containsIP().
func prefixTest(p netip.Prefix, a string) string {
	if b := p.Bits(); p.Addr().Is4() && b%8 == 0 && b > 0 && b < 32 {
		o := p.Addr().As4()
		var text strings.Builder
		for _, x := range o[:b/8] {
			fmt.Fprintf(&text, "%d.", x)
		}
		return a + ".startsWith('" + text.String() + "')"
	}
	return "cidr('" + p.String() + "').containsIP(" + a + ")"
}

// bitLen is 4 for an IPv4 address and 6 for an IPv6 one.
func bitLen(a netip.Addr) int {
	if a.Is4() {
		return 4
	}
	return 6
}

// quoteList renders ss (literalSafe strings, or netip prefixes) as a CEL
// list literal.
func quoteList(ss []string) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, s := range ss {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("'" + s + "'")
	}
	b.WriteByte(']')
	return b.String()
}
