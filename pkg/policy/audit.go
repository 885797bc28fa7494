package policy

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"clusterip-policy/pkg/allocview"
)

// RuleReservationNotHeld is a finding of `clusterip-policy audit` only: a
// reservation's owner Service exists and has an address of the
// reservation's family, but not the reserved one. No admission request
// breaks it (the owner was created before the reservation, or while the
// address was taken), so it is not one of Rules and the enforcement
// section cannot name it. Public API like the other IDs.
const RuleReservationNotHeld RuleID = "reservation-not-held"

// AuditRules are the rules an audit reports, in the order it reports them.
// static-ip-in-dynamic-band is not among them: see Audit.
var AuditRules = []RuleID{RuleInvalidIP, RuleOutsideServiceCIDRs, RuleReservedForOther, RuleReservedRangeForOther, RuleAlreadyAllocated, RuleReservationNotHeld}

// Finding is one address of one existing Service that breaks the policy.
type Finding struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Rule      RuleID `json:"rule"`
	// Action is what the policy does with the rule at admission (deny,
	// warn, audit); empty for reservation-not-held, which no admission
	// request breaks.
	Action Action `json:"action,omitempty"`
	Field  string `json:"field"`
	IP     string `json:"ip"`
	// Reserved is the address reserved for the Service, on
	// reservation-not-held (IP is the one it holds instead).
	Reserved string `json:"reservedIP,omitempty"`
	// Problem says what is wrong, Fix what to do about it.
	Problem string `json:"problem"`
	Fix     string `json:"fix"`
}

// AuditReport is what Audit found among the Services it was given. The
// counts are always complete; Findings holds every finding (callers that
// print them bound what they print: see Shown).
type AuditReport struct {
	// Services is the number of Services audited; Checked those of them
	// with a ClusterIP (not headless, not ExternalName) outside exempt
	// namespaces.
	Services int `json:"services"`
	Checked  int `json:"checked"`
	// Exempt counts Services in namespaces the policy exempts: the webhook
	// never reviews them, so neither does the audit.
	Exempt   int       `json:"exempt"`
	Findings []Finding `json:"-"`
	// NotJudged counts addresses in a dynamic band that are not reserved
	// for their Service: fine when the apiserver allocated them, a breach
	// of static-ip-in-dynamic-band when a user asked for them, and a stored
	// Service does not say which.
	NotJudged int `json:"notJudgedDynamic"`
	// TracksAllocations is false when the cluster has no IPAddress objects
	// to compare with, so already-allocated was not checked.
	TracksAllocations bool `json:"tracksAllocations"`
}

// CountByRule counts the findings of each rule; every rule of AuditRules
// is present, with 0 when it found nothing.
func (r AuditReport) CountByRule() map[RuleID]int {
	out := make(map[RuleID]int, len(AuditRules))
	for _, id := range AuditRules {
		out[id] = 0
	}
	for _, f := range r.Findings {
		out[f.Rule]++
	}
	return out
}

// Shown returns at most maxPerRule findings of each rule, in report
// order, and how many of each rule were left out.
func (r AuditReport) Shown(maxPerRule int) (shown []Finding, omitted map[RuleID]int) {
	omitted = map[RuleID]int{}
	per := map[RuleID]int{}
	for _, f := range r.Findings {
		if per[f.Rule] < maxPerRule {
			shown = append(shown, f)
		} else {
			omitted[f.Rule]++
		}
		per[f.Rule]++
	}
	return shown, omitted
}

// Audit reports every address of the Services that breaks the policy as
// it stands, against the ranges and allocations of env.Snapshot:
//   - invalid-ip: a stored address that is not a plain IP;
//   - outside-service-cidrs: an address no active range holds (or only as
//     its network or broadcast address), such as one from a ServiceCIDR
//     outside allowedCIDRs, or one being deleted;
//   - reserved-for-other: an address reserved for another Service;
//   - already-allocated: an address whose IPAddress object names another
//     holder than the Service;
//   - reservation-not-held: an owner that has an address of its
//     reservation's family, but not the reserved one.
//
// What it cannot judge: whether an address was asked for or allocated. An
// address in a dynamic band that is not reserved for its Service breaks
// static-ip-in-dynamic-band only if a user named it, so it is counted in
// NotJudged, not reported. Exempt users and groups are not known for a
// stored Service either; only exempt namespaces are left out.
func Audit(env Env, services []*corev1.Service) AuditReport {
	rs := env.Ranges()
	r := AuditReport{Services: len(services), TracksAllocations: env.Snapshot != nil && env.Snapshot.TracksAllocations}
	// Who holds each address, from the Services themselves: an owner's
	// finding names the Service that sits on its reserved address.
	holders := map[netip.Addr]Owner{}
	exempt := make(map[string]bool, len(env.Policy.ExemptNamespaces)) // looked up once per Service
	for _, ns := range env.Policy.ExemptNamespaces {
		exempt[ns] = true
	}
	var audited []*corev1.Service
	for _, svc := range services {
		if exempt[svc.Namespace] {
			r.Exempt++
			continue
		}
		if svc.Spec.Type == corev1.ServiceTypeExternalName || isHeadless(svc) || len(requestedIPs(svc)) == 0 {
			continue
		}
		r.Checked++
		audited = append(audited, svc)
		for _, raw := range requestedIPs(svc) {
			if ip, ok := allocview.ParseIPAsAPIServer(raw); ok {
				holders[ip] = Owner{svc.Namespace, svc.Name}
			}
		}
	}
	a := auditor{env: env, rs: rs, holders: holders, report: &r}
	for _, svc := range audited {
		a.service(svc)
	}
	slices.SortStableFunc(r.Findings, func(x, y Finding) int {
		return cmp.Or(
			cmp.Compare(slices.Index(AuditRules, x.Rule), slices.Index(AuditRules, y.Rule)),
			cmp.Compare(x.Namespace, y.Namespace),
			cmp.Compare(x.Name, y.Name),
			cmp.Compare(x.Field, y.Field))
	})
	return r
}

type auditor struct {
	env     Env
	rs      allocview.RangeSet
	holders map[netip.Addr]Owner
	report  *AuditReport
}

func (a auditor) add(svc *corev1.Service, rule RuleID, field, ip, problem, fix string) {
	action := Action("")
	if rule != RuleReservationNotHeld {
		action = a.env.Policy.ActionFor(rule)
	}
	a.report.Findings = append(a.report.Findings, Finding{
		Namespace: svc.Namespace, Name: svc.Name, Rule: rule, Action: action, Field: field, IP: Echo(ip),
		Problem: Clip(problem, MaxMessageBytes), Fix: Clip(fix, MaxMessageBytes)})
}

// service audits each address of svc, then its reservations.
func (a auditor) service(svc *corev1.Service) {
	self := Owner{svc.Namespace, svc.Name}
	held := map[allocview.Family]netip.Addr{}
	for i, raw := range requestedIPs(svc) {
		field := fieldFor(svc, i)
		ip, err := allocview.ParseIP(raw)
		if err != nil {
			a.add(svc, RuleInvalidIP, field, raw, strings.TrimPrefix(err.Error(), fmt.Sprintf("%q ", raw)),
				fmt.Sprintf("delete %s and create it again without clusterIP (a ClusterIP cannot be changed in place)", self))
			// A spelling an apiserver without StrictIPCIDRValidation
			// stored holds the address it parsed: judge that one too.
			if ip, _ = allocview.ParseIPAsAPIServer(raw); !ip.IsValid() {
				continue
			}
		}
		held[allocview.FamilyOf(ip)] = ip
		a.address(svc, self, field, raw, ip)
	}
	a.reservations(svc, self, held)
}

// recreate is the fix for an address a Service should not have: a
// ClusterIP cannot change, so the Service is deleted and created again.
func (a auditor) recreate(svc *corev1.Service, ip netip.Addr) string {
	s := fmt.Sprintf("delete %s/%s and create it again without clusterIP (a ClusterIP cannot be changed in place), so that it gets an address from %s", svc.Namespace, svc.Name, a.rs.Describe())
	if bands := a.rs.StaticBands(allocview.FamilyOf(ip)); len(bands) > 0 {
		s += ", or with a free address in the static band " + JoinListed(bands, " or ")
	}
	return s
}

func (a auditor) address(svc *corev1.Service, self Owner, field, raw string, ip netip.Addr) {
	pl := a.rs.Place(ip)
	switch pl.Kind {
	case allocview.Outside:
		problem := fmt.Sprintf("is outside every active Service CIDR (%s)", a.rs.Describe())
		fix := a.recreate(svc, ip)
		if ex, ok := a.rs.ExcludedContaining(ip); ok {
			problem = fmt.Sprintf("comes from %s, which is %s", ex.Range, ex.Reason)
			if ex.Reason == allocview.ReasonNotAllowed {
				fix = fmt.Sprintf("add %s to allowedCIDRs if it is approved; otherwise %s", ex.Range.Prefix, fix)
			}
		}
		a.add(svc, RuleOutsideServiceCIDRs, field, raw, problem, fix)
		return
	case allocview.Unusable:
		a.add(svc, RuleOutsideServiceCIDRs, field, raw, fmt.Sprintf("is a network or broadcast address of %s, which the apiserver never assigns", pl.Range.String()), a.recreate(svc, ip))
		return
	}
	res, reserved := a.env.Policy.ReservedOwner(ip, a.rs)
	if reserved && res.Owner != self {
		a.add(svc, RuleReservedForOther, field, raw, fmt.Sprintf("is reserved for Service %s%s", res.Owner, noteOf(res)),
			fmt.Sprintf("%s; then %s can have %s (created without clusterIP, the webhook assigns it)", a.recreate(svc, ip), res.Owner, ip))
		return
	}
	inRange := false
	if !reserved && len(a.env.Policy.ReservedRanges) > 0 {
		var rng ReservedRange
		if rng, inRange = a.env.Policy.ReservedRangeOf(ip); inRange && !rng.Allows(svc.Namespace, svc.Labels, a.env.NamespaceLabels) {
			a.add(svc, RuleReservedRangeForOther, field, raw, fmt.Sprintf("is in reserved range %s, which only %s may use", rng, rng.Who()),
				fmt.Sprintf("%s outside the reserved ranges", a.recreate(svc, ip)))
			return
		}
	}
	if a.env.Snapshot != nil {
		if h, ok := a.env.Snapshot.Holder(ip); ok && !h.IsService(svc.Namespace, svc.Name) {
			a.add(svc, RuleAlreadyAllocated, field, raw, fmt.Sprintf("is held by IPAddress %s for %s, not for this Service", ip, h),
				fmt.Sprintf("two objects claim one address: if %s no longer exists, the apiserver's repair loop deletes its IPAddress within about 3 minutes; otherwise %s", h, a.recreate(svc, ip)))
			return
		}
	}
	if pl.Kind == allocview.Dynamic && !reserved && !inRange {
		a.report.NotJudged++
	}
}

// reservations reports each reservation of svc whose family svc has an
// address of, but not the reserved one.
func (a auditor) reservations(svc *corev1.Service, self Owner, held map[allocview.Family]netip.Addr) {
	owned := a.env.Policy.ReservationsOf(self, a.rs)
	fams := make([]allocview.Family, 0, len(owned))
	for f := range owned {
		fams = append(fams, f)
	}
	slices.Sort(fams)
	for _, f := range fams {
		res := owned[f]
		has, ok := held[f]
		if !ok || has == res.IP {
			continue // a family the Service does not use: the reservation waits (admission warns about it)
		}
		i := slices.IndexFunc(requestedIPs(svc), func(s string) bool {
			ip, ok := allocview.ParseIPAsAPIServer(s)
			return ok && ip == has
		})
		problem := fmt.Sprintf("%s holds %s, but %s is reserved for it%s", self, has, res.IP, noteOf(res))
		var fix string
		switch a.rs.Place(res.IP).Kind {
		case allocview.Outside, allocview.Unusable:
			fix = fmt.Sprintf("%s is not an address any active range can hand out (%s): correct the reservation in the policy, or the Service CIDRs", res.IP, a.rs.Describe())
		default:
			fix = fmt.Sprintf("delete %s and create it again without clusterIP: the webhook assigns %s", self, res.IP)
			if other, taken := a.holders[res.IP]; taken && other != self {
				fix = fmt.Sprintf("first move %s off %s (see its reserved-for-other finding), then %s", other, res.IP, fix)
			} else if h, taken := a.holderOf(res.IP); taken && !h.IsService(self.Namespace, self.Name) {
				fix = fmt.Sprintf("IPAddress %s is held for %s; once it is free, %s", res.IP, h, fix)
			}
		}
		a.add(svc, RuleReservationNotHeld, fieldFor(svc, max(i, 0)), has.String(), problem, fix)
		a.report.Findings[len(a.report.Findings)-1].Reserved = res.IP.String()
	}
}

func (a auditor) holderOf(ip netip.Addr) (allocview.Holder, bool) {
	if a.env.Snapshot == nil {
		return allocview.Holder{}, false
	}
	return a.env.Snapshot.Holder(ip)
}
