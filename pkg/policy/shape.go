package policy

import (
	"fmt"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	"clusterip-policy/pkg/allocview"
)

// MaxClusterIPs is the most IPs a Service can hold: one per family. The
// apiserver refuses more ("may only hold up to 2 values"), but only in its
// own validation, which runs after the mutating stage.
const MaxClusterIPs = 2

// shapeViolation checks the combination of clusterIP, clusterIPs and
// ipFamilies before any per-IP work, and returns the first problem as one
// invalid-ip violation (ok false when the shape is fine). It runs first
// because the mutating stage sees the request before the apiserver's own
// validation: a clusterIPs list of 50,000 entries must cost one short
// denial, not 50,000 checks and messages.
//
// It follows the apiserver's ValidateServiceClusterIPsRelatedFields, so it
// refuses only what the apiserver would refuse anyway:
//   - more than two clusterIPs, or more than two ipFamilies;
//   - an ipFamilies entry that is not IPv4 or IPv6, or is listed twice;
//   - "None" anywhere but as the only value, or an empty entry;
//   - two IPs of one family;
//   - an IP whose family contradicts ipFamilies at its index;
//   - clusterIPs[0] different from clusterIP, where both are given. Only on
//     CREATE and at the validating stage: on UPDATE the apiserver reconciles
//     the two fields after the mutating stage (a PUT that omits clusterIP
//     keeps clusterIPs), so a mismatch there is not yet an error.
func shapeViolation(stage Stage, req Request) (Violation, bool) {
	spec := req.Service.Spec
	ips, fams := spec.ClusterIPs, spec.IPFamilies
	if v, bad := tooMany(len(ips), len(fams)); bad {
		return v, true // whatever the type: no Service holds more
	}
	if spec.Type == corev1.ServiceTypeExternalName {
		return Violation{}, false // the apiserver clears or refuses these fields for ExternalName
	}
	for i, f := range fams {
		field := fmt.Sprintf("spec.ipFamilies[%d]", i)
		if f != corev1.IPv4Protocol && f != corev1.IPv6Protocol {
			return shapeError(field, fmt.Sprintf("Unsupported value: %s: supported values: \"IPv4\", \"IPv6\"", strconv.Quote(Echo(string(f))))), true
		}
		if i > 0 && fams[0] == f {
			return shapeError(field, fmt.Sprintf("Duplicate value: %q: a Service has one IP per family", f)), true
		}
	}
	for i, ip := range ips {
		if ip == corev1.ClusterIPNone && len(ips) > 1 {
			return shapeError("spec.clusterIPs", "Invalid value: "+quoteList(ips)+": 'None' must be the first and only value"), true
		}
		if ip == "" {
			return shapeError(fmt.Sprintf("spec.clusterIPs[%d]", i), `Invalid value: "": must be a valid IP address, or leave clusterIPs empty to get one allocated`), true
		}
	}
	if (req.Operation == Create || stage == StageValidate) && spec.ClusterIP != "" && len(ips) > 0 && ips[0] != spec.ClusterIP {
		return shapeError("spec.clusterIPs", fmt.Sprintf("Invalid value: %s: first value must match clusterIP %s; set both to the same address, or clusterIP alone", quoteList(ips), strconv.Quote(Echo(spec.ClusterIP)))), true
	}
	if len(ips) == 0 || ips[0] == corev1.ClusterIPNone {
		return Violation{}, false
	}
	// Families of the IPs that parse; one that does not is reported by the
	// per-IP rules, with the field it came from.
	var famOf [MaxClusterIPs]allocview.Family
	for i, raw := range ips {
		if ip, err := allocview.ParseIP(raw); err == nil {
			famOf[i] = allocview.FamilyOf(ip)
		}
	}
	if len(ips) == 2 && famOf[0] != "" && famOf[0] == famOf[1] {
		return shapeError("spec.clusterIPs", "Invalid value: "+quoteList(ips)+": may specify no more than one IP for each IP family"), true
	}
	for i := range min(len(ips), len(fams)) {
		if famOf[i] != "" && string(famOf[i]) != string(fams[i]) {
			return shapeError(fmt.Sprintf("spec.clusterIPs[%d]", i), fmt.Sprintf("Invalid value: %s: expected an %s value as indicated by `ipFamilies[%d]`", strconv.Quote(Echo(ips[i])), fams[i], i)), true
		}
	}
	return Violation{}, false
}

// shapeError is a violation of invalid-ip whose action is always deny: the
// apiserver refuses such a Service whatever the policy says, and allowing it
// (under warn or audit) would send the per-IP rules over a list of any size.
func shapeError(field, detail string) Violation {
	return Violation{Rule: RuleInvalidIP, Action: ActionDeny, Field: field, Message: field + ": " + detail}
}

// tooMany is the violation for a clusterIPs list of ips entries or an
// ipFamilies list of fams entries, when either is over MaxClusterIPs.
func tooMany(ips, fams int) (Violation, bool) {
	switch {
	case ips > MaxClusterIPs:
		return shapeError("spec.clusterIPs", fmt.Sprintf("Too many: %d: must have at most %d items (one per IP family); ask for at most one IPv4 and one IPv6 address, or leave clusterIPs empty to get them allocated", ips, MaxClusterIPs)), true
	case fams > MaxClusterIPs:
		return shapeError("spec.ipFamilies", fmt.Sprintf("Too many: %d: must have at most %d items (IPv4, IPv6 in the order wanted)", fams, MaxClusterIPs)), true
	}
	return Violation{}, false
}

// TooMany decides a request whose lists were counted before they were
// decoded (the webhook counts them in the raw object, so that a list of
// 50,000 entries is never built): ips and fams are the lengths of
// clusterIPs and ipFamilies, head the first entries of clusterIPs. ok is
// false when neither list is too long; the request then needs a full
// decision by Mutate or Validate, which give this same denial.
func TooMany(stage Stage, ips, fams int, head []string) (d Decision, ok bool) {
	v, bad := tooMany(ips, fams)
	if !bad {
		return Decision{}, false
	}
	shown := min(len(head), MaxClusterIPs)
	requested := slices.Clip(ClipList(head[:shown], MaxClusterIPs)) // appended to below, never into head
	if more := ips - shown; more > 0 && shown > 0 {
		requested = append(requested, fmt.Sprintf("... (%d more)", more))
	}
	d = Decision{Stage: stage, RequestedIPs: requested, Violations: []Violation{v}}
	return d.finish(), true
}
