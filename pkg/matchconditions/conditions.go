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
// stay as they are; for anything but a CREATE it is true, so UPDATEs keep
// today's static filter.
package matchconditions

import (
	"crypto/sha256"
	"encoding/hex"
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
	// MaxPrefixes caps the validating allow-list. A range's dynamic band is
	// at most about 2x its host bits of prefixes (29 for 10.96.0.0/16), and
	// each reserved address inside it adds up to as many again (42 with one
	// hole). The largest list costs the apiserver 2,625 of its 1,000,000
	// per-expression limit for a dual-stack create (docs/matchconditions.md).
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
	// AllowList is the validating allow-list, Owners the reservation owners
	// (namespace/name) the mutating condition names.
	AllowList []netip.Prefix
	Owners    []string
	// AllowListCapped and OwnersCapped say a bound was hit: ranges were left
	// out of the allow-list, or every CREATE is sent to the mutating webhook.
	AllowListCapped, OwnersCapped bool
}

// Compute returns the conditions for policy p and the active ranges rs (the
// same Env.Ranges() the decisions use). A nil policy gives the conditions
// that send every CREATE to both webhooks.
func Compute(p *policy.Policy, rs allocview.RangeSet) Conditions {
	var c Conditions
	if p != nil {
		c.AllowList, c.AllowListCapped = AllowList(p, rs, MaxPrefixes)
		c.Owners, c.OwnersCapped = owners(p)
	} else {
		c.OwnersCapped = true
	}
	c.Mutating = mutating(c.Owners, c.OwnersCapped)
	if len(c.Mutating) > MaxExpressionBytes {
		c.Owners, c.OwnersCapped = nil, true
		c.Mutating = mutating(nil, true)
	}
	c.Validating = validating(c.AllowList)
	if len(c.Validating) > MaxExpressionBytes {
		c.AllowList, c.AllowListCapped = nil, true
		c.Validating = validating(nil)
	}
	sum := sha256.Sum256([]byte(c.Mutating + "\x00" + c.Validating))
	c.Digest = hex.EncodeToString(sum[:6])
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

// notCreate keeps UPDATEs under the static allocating-requests-only filter.
const notCreate = "request.operation != 'CREATE'"

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
// own fields, else the request's (cmd/webhook decodeService). A create
// with generateName has no name yet and owns nothing.
const serviceKey = "((has(object.metadata.namespace) && object.metadata.namespace != '') ? object.metadata.namespace : (has(request.namespace) ? request.namespace : '')) + '/' + " +
	"((has(object.metadata.name) && object.metadata.name != '') ? object.metadata.name : (has(request.name) ? request.name : ''))"

// mutating is true for a CREATE the mutating webhook may deny, warn about
// or patch: one that names an address, has odd ipFamilies, or is made by a
// reservation owner (the webhook assigns its reservation and, outside a
// dry run, frees its hold). A CREATE that names no address and is not an
// owner's is allowed unchanged by policy.Mutate.
func mutating(owners []string, capped bool) string {
	if capped {
		return "true"
	}
	parts := []string{notCreate, "!has(object.spec)", "!has(object.metadata)", namesAddress, oddFamilies}
	if len(owners) > 0 {
		parts = append(parts, serviceKey+" in "+quoteList(owners))
	}
	return strings.Join(parts, " ||\n")
}

// validating is true for a CREATE the validating webhook may deny, warn
// about or log: one whose final clusterIPs are missing, more than two,
// inconsistent with clusterIP or ipFamilies, or any of them not an address
// in the allow-list. The network-address placeholder of a dry run is not in
// the list, and so is sent (and allowed by the webhook), unless it is the
// network address of a range nested in a wider one (10.97.0.0 of
// 10.97.0.0/16 inside 10.96.0.0/12): that address is a usable one of the
// wider range's dynamic band, so it may be listed and the dry run skipped,
// which the webhook would have allowed anyway.
func validating(allow []netip.Prefix) string {
	inList := "false"
	if len(allow) > 0 {
		ps := make([]string, len(allow))
		for i, p := range allow {
			ps[i] = p.String()
		}
		inList = quoteList(ps) + ".exists(c, cidr(c).containsIP(ip(a)))"
	}
	return strings.Join([]string{
		notCreate,
		"!has(object.spec)",
		"!has(object.spec.clusterIPs)",
		"size(object.spec.clusterIPs) == 0",
		"size(object.spec.clusterIPs) > 2",
		"!has(object.spec.clusterIP)",
		"object.spec.clusterIP != object.spec.clusterIPs[0]",
		oddFamilies,
		// isIP first: ip(a) is reached only for a string that parses.
		fmt.Sprintf("object.spec.clusterIPs.exists(a, !isIP(a) || !(%s))", inList),
		// Reached only when both parse: two addresses of one family.
		"(size(object.spec.clusterIPs) == 2 && ip(object.spec.clusterIPs[0]).family() == ip(object.spec.clusterIPs[1]).family())",
		// ... or an address whose family contradicts ipFamilies at its index.
		"(has(object.spec.ipFamilies) && size(object.spec.ipFamilies) > 0 && object.spec.ipFamilies[0] != (ip(object.spec.clusterIPs[0]).family() == 4 ? 'IPv4' : 'IPv6'))",
		"(has(object.spec.ipFamilies) && size(object.spec.ipFamilies) > 1 && size(object.spec.clusterIPs) > 1 && object.spec.ipFamilies[1] != (ip(object.spec.clusterIPs[1]).family() == 4 ? 'IPv4' : 'IPv6'))",
	}, " ||\n")
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
