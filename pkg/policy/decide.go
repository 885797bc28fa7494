package policy

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"clusterip-policy/pkg/allocview"
)

// Stage is the admission stage a decision is for. docs/rules.md states
// what each stage promises; docs/apiserver-facts.md ("Admission order")
// what each sees.
type Stage string

const (
	// StageMutate sees the user's request before the apiserver allocates.
	StageMutate Stage = "mutate"
	// StageValidate sees the final object with the allocated IPs.
	StageValidate Stage = "validate"
)

// Operation is the admission operation.
type Operation string

const (
	Create Operation = "CREATE"
	Update Operation = "UPDATE"
)

// Request is what a decision needs to know about one admission request.
type Request struct {
	Operation Operation
	Service   *corev1.Service
	// OldService is the stored object, on UPDATE.
	OldService *corev1.Service
	User       string
	Groups     []string
	DryRun     bool
}

// Env is the state a decision is made against.
type Env struct {
	Policy   *Policy
	Snapshot *allocview.Snapshot
	// StaticCIDRs (--service-cidr) replace the policy's serviceCIDRs where
	// the cluster has no ServiceCIDR objects.
	StaticCIDRs []netip.Prefix
	// NamespaceLabels answers the labels of a namespace, for the
	// namespaceSelector of reservedRanges; asked only about a Service that
	// names an address in a range. Nil (offline): no labels are known.
	NamespaceLabels NamespaceLabels
}

// Ranges returns the active ranges: from ServiceCIDR objects when the
// cluster has any, otherwise from --service-cidr or the policy's
// serviceCIDRs; always narrowed to allowedCIDRs.
func (e Env) Ranges() allocview.RangeSet {
	if e.Snapshot != nil && len(e.Snapshot.ServiceCIDRs()) > 0 {
		return e.Snapshot.ActiveRanges(e.Policy.AllowedCIDRs)
	}
	if len(e.StaticCIDRs) > 0 {
		return allocview.StaticRanges("--service-cidr", e.StaticCIDRs, e.Policy.AllowedCIDRs)
	}
	return allocview.StaticRanges("policy serviceCIDRs", e.Policy.ServiceCIDRs, e.Policy.AllowedCIDRs)
}

// Outcome is the one-word result in the audit log and in `review` output.
type Outcome string

const (
	Allowed Outcome = "allowed"
	Denied  Outcome = "denied"
	Warned  Outcome = "warned"
	Patched Outcome = "patched"
)

// Violation is one rule that matched one IP.
type Violation struct {
	Rule    RuleID `json:"rule"`
	Action  Action `json:"action"`
	Field   string `json:"field"`
	IP      string `json:"ip"`
	Message string `json:"message"`
}

// PatchOp is one JSON Patch (RFC 6902) operation.
type PatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// Decision is the result of one stage for one request.
type Decision struct {
	Stage Stage
	// Outcome is the one-word result; Allowed says whether it lets the
	// request through.
	Outcome Outcome
	// Skipped says why the stage did not evaluate the request (not an
	// allocating operation, headless, ExternalName, exempt); empty otherwise.
	Skipped    string
	Violations []Violation
	Mutations  []string
	Patch      []PatchOp
	// Warnings go back to the client as admission warnings.
	Warnings []string
	// Message is the denial message, or a summary for the audit log.
	Message string
	// RequestedIPs are the IPs the request names; FinalIPs those the Service
	// ends with as far as this stage knows (empty: allocated dynamically).
	RequestedIPs []string
	FinalIPs     []string
}

// Allowed reports whether the request goes through: every outcome but
// Denied lets it (a warning, an audit-only match and a patch all allow).
func (d Decision) Allowed() bool { return d.Outcome != Denied }

// Rules lists the rule IDs that matched, once each, in order.
func (d Decision) Rules() []RuleID {
	var ids []RuleID
	for _, v := range d.Violations {
		if !slices.Contains(ids, v.Rule) {
			ids = append(ids, v.Rule)
		}
	}
	return ids
}

// Mutate decides the mutating stage: it checks each IP the user asked for
// and, when the Service asks for none but owns reservations, assigns them.
func Mutate(env Env, req Request) Decision {
	c, ok := begin(StageMutate, env, req, mutateSkips)
	switch {
	case !ok:
	case len(c.d.RequestedIPs) > 0:
		c.eachNewIP(req, c.checkRequested)
		if (growsToDualStack(req) && !hasNewIP(req)) || (req.Operation == Create && c.namesOwnReservation()) {
			c.assignSecondary()
		}
	case req.Operation == Create || changesFromExternalName(req):
		c.assignReserved()
	}
	return c.d.finish()
}

// pkg/matchconditions encodes, in the CEL of the managed matchCondition, when
// Mutate and Validate answer "allowed, unchanged" to a CREATE: a change to
// what they check must keep its TestConditionIsTrueWheneverTheWebhookWouldAct
// passing.

// Validate decides the validating stage: every IP the Service ends with must
// lie in an active range and must not be reserved for another Service. This
// catches what the mutating stage cannot see: dynamic allocations, a
// divergent apiserver's range, a ServiceCIDR removed meanwhile.
func Validate(env Env, req Request) Decision {
	c, ok := begin(StageValidate, env, req, validateSkips)
	if ok {
		c.eachNewIP(req, func(field, raw string) { c.checkFinal(field, raw, req.DryRun) })
	}
	return c.d.finish()
}

// begin starts a decision, in c.d. It returns ok false when the stage does
// not apply (skip is not empty) or the request is exempt: the decision is
// then final as it is. The checker (and the decision in it) lives on the
// caller's stack, which is why an allowed request allocates nothing.
func begin(stage Stage, env Env, req Request, skips func(Request) string) (c checker, ok bool) {
	svc := req.Service
	if v, bad := shapeViolation(stage, req); bad {
		// One short denial, before any per-IP work, exemption or skip.
		requested := ClipList(svc.Spec.ClusterIPs, MaxClusterIPs)
		if len(svc.Spec.ClusterIPs) <= MaxClusterIPs {
			requested = requestedIPs(svc) // as the audit log shows it for any request
		}
		c.d = Decision{Stage: stage, RequestedIPs: requested, Violations: []Violation{v}}
		return c, false
	}
	c.d = Decision{Stage: stage, RequestedIPs: requestedIPs(svc)}
	c.d.FinalIPs = c.d.RequestedIPs
	skip := skips(req) // after the shape check: it looks at every IP
	if skip == "" {
		skip = env.Policy.Exempt(svc.Namespace, req.User, req.Groups)
	}
	if skip != "" {
		c.d.Skipped = skip
		return c, false
	}
	c.env, c.rs, c.svc = env, env.Ranges(), svc
	return c, true
}

// eachNewIP calls check for every IP of the Service that the stored object
// did not already hold: an IP kept from before is not being allocated now,
// and a later range change does not revoke it.
func (c *checker) eachNewIP(req Request, check func(field, raw string)) {
	old := oldIPs(req)
	for i, raw := range c.d.RequestedIPs {
		if !slices.Contains(old, raw) {
			check(fieldFor(c.svc, i), raw)
		}
	}
}

// mutateSkips and validateSkips are the Go side of the UPDATE filters in
// CEL: the validating webhook's static matchCondition
// allocating-requests-only (manifests/base/webhook-configurations.yaml) and
// the mutating webhook's managed one (pkg/matchconditions
// AllocatingUpdate), which send an UPDATE only when these would review it.
// See operations.go.
func mutateSkips(req Request) string {
	return skips(req, changesFromExternalName(req) || hasNewIP(req) || growsToDualStack(req), "UPDATE that allocates no IP")
}

func validateSkips(req Request) string {
	return skips(req, hasNewIP(req), "UPDATE that does not change the IPs")
}

// skips says why a stage does not apply to req, or "" when it does: it
// applies to every CREATE, and to an UPDATE when updateApplies.
func skips(req Request, updateApplies bool, updateSkip string) string {
	svc := req.Service
	switch {
	case svc.Spec.Type == corev1.ServiceTypeExternalName:
		return "ExternalName Service: no ClusterIP"
	case isHeadless(svc):
		return "headless Service (clusterIP None)"
	case req.Operation == Create:
		return ""
	case req.Operation == Update && updateApplies:
		return ""
	case req.Operation == Update:
		return updateSkip
	}
	return OperationSkip(req.Operation)
}

func isHeadless(svc *corev1.Service) bool {
	return svc.Spec.ClusterIP == corev1.ClusterIPNone ||
		(len(svc.Spec.ClusterIPs) > 0 && svc.Spec.ClusterIPs[0] == corev1.ClusterIPNone)
}

func changesFromExternalName(req Request) bool {
	return req.Operation == Update && req.OldService != nil &&
		req.OldService.Spec.Type == corev1.ServiceTypeExternalName &&
		req.Service.Spec.Type != corev1.ServiceTypeExternalName
}

// requestedIPs are clusterIPs, else clusterIP; never "None" or "". When
// clusterIPs holds nothing to leave out, it is returned itself (clipped,
// so that an append never writes into the Service), without a copy.
func requestedIPs(svc *corev1.Service) []string {
	ips := svc.Spec.ClusterIPs
	if len(ips) == 0 && svc.Spec.ClusterIP != "" {
		ips = []string{svc.Spec.ClusterIP}
	}
	if len(ips) == 0 {
		return []string{}
	}
	if !slices.ContainsFunc(ips, func(ip string) bool { return ip == "" || ip == corev1.ClusterIPNone }) {
		return slices.Clip(ips)
	}
	out := make([]string, 0, len(ips))
	for _, ip := range ips {
		if ip != "" && ip != corev1.ClusterIPNone {
			out = append(out, ip)
		}
	}
	return out
}

func oldIPs(req Request) []string {
	if req.Operation != Update || req.OldService == nil || req.OldService.Spec.Type == corev1.ServiceTypeExternalName {
		return nil
	}
	return requestedIPs(req.OldService)
}

// hasNewIP reports whether the request names an IP that the stored object
// did not have (on CREATE: any IP).
func hasNewIP(req Request) bool {
	old := oldIPs(req)
	for _, ip := range requestedIPs(req.Service) {
		if !slices.Contains(old, ip) {
			return true
		}
	}
	return false
}

// fieldFor names the field an IP came from the way the apiserver does.
func fieldFor(svc *corev1.Service, i int) string {
	if len(svc.Spec.ClusterIPs) > 1 || (len(svc.Spec.ClusterIPs) == 1 && svc.Spec.ClusterIP == "") {
		return fmt.Sprintf("spec.clusterIPs[%d]", i)
	}
	return "spec.clusterIP"
}

type checker struct {
	env Env
	rs  allocview.RangeSet
	svc *corev1.Service
	d   Decision
}

func (c *checker) self() Owner { return Owner{c.svc.Namespace, c.svc.Name} }

// selfName is the Service's namespace/name for a message: at the mutating
// stage the apiserver has not validated it yet, so it may be of any length.
func (c *checker) selfName() string { return Echo(c.self().String()) }

func (c *checker) violate(rule RuleID, field, raw, format string, args ...any) {
	msg := fmt.Sprintf("%s: Invalid value: %q: ", field, Echo(raw)) + fmt.Sprintf(format, args...)
	c.d.Violations = append(c.d.Violations, Violation{Rule: rule, Action: c.env.Policy.ActionFor(rule), Field: field, IP: Echo(raw), Message: Clip(msg, MaxMessageBytes)})
}

// checkRequested applies the mutating stage's rules, in order, to one IP
// the user asked for; the first rule that matches is reported.
func (c *checker) checkRequested(field, raw string) {
	ip, err := allocview.ParseIP(raw)
	if err != nil {
		c.violate(RuleInvalidIP, field, raw, "%s; use an address from %s, or leave clusterIP empty to get one allocated", strings.TrimPrefix(err.Error(), fmt.Sprintf("%q ", raw)), c.rs.Describe())
		if ip = c.allowedInvalid(raw); !ip.IsValid() {
			return
		}
	}
	pl := c.rs.Place(ip)
	if c.reportAllowedAnyway(field, raw, ip, pl) || c.reportOutside(field, raw, ip, pl) {
		return
	}
	res, reserved := c.env.Policy.ReservedOwner(ip, c.rs)
	if reserved && res.Owner != c.self() {
		c.violate(RuleReservedForOther, field, raw, "is reserved for Service %s%s; choose another address, or leave clusterIP empty to get one allocated", res.Owner, noteOf(res))
		return
	}
	// A reservation of the address itself wins over its range: its owner
	// may have it whatever the range says.
	rng, inRange := c.rangeOf(ip, reserved)
	if inRange && !c.mayUse(rng) {
		c.violate(RuleReservedRangeForOther, field, raw, "is in reserved range %s, which only %s may use; %s outside the reserved ranges, or leave clusterIP empty to get one allocated", rng, rng.Who(), c.chooseStatic(ip))
		return
	}
	// A reserved range is held from the allocator, so a Service that may
	// use it does not compete with dynamic allocations in either band.
	if pl.Kind == allocview.Dynamic && !reserved && !inRange {
		c.violate(RuleStaticIPInDynamicBand, field, raw, "lies in the dynamic band %s of %s; %s or ask for a reservation", pl.DynamicIn.Dynamic(), pl.DynamicIn.Name(), c.chooseStatic(ip))
		return
	}
	if reserved && c.reportReservationHeld(field, raw, res) {
		return // this Service's own reservation, held by someone else
	}
	if c.reportAllocated(field, raw, ip) {
		return
	}
	if own, ok := c.env.Policy.ReservationsOf(c.self(), c.rs)[allocview.FamilyOf(ip)]; ok && own.IP != ip && !own.Implicit {
		// Allowed, but the reservation then guards an address nobody uses.
		c.d.Warnings = append(c.d.Warnings, fmt.Sprintf("%s: %s is reserved for Service %s, which asks for %s instead; the reserved address stays unused", field, own.IP, c.selfName(), Echo(raw)))
	}
}

// allowedInvalid returns the address the apiserver will store for raw, an
// address ParseIP refused, when the request may go on despite invalid-ip
// (the policy only warns about it or audits it): an apiserver without
// StrictIPCIDRValidation accepts "010.096.000.010" and "::ffff:10.96.0.10"
// as 10.96.0.10, so the other rules (reserved-for-other above all) must
// judge that address, or a reserved one passes under another spelling. It
// returns the zero Addr when invalid-ip denies, or when no apiserver
// accepts raw.
func (c *checker) allowedInvalid(raw string) netip.Addr {
	if c.env.Policy.ActionFor(RuleInvalidIP) == ActionDeny {
		return netip.Addr{}
	}
	ip, _ := allocview.ParseIPAsAPIServer(raw)
	return ip
}

// reportAllocated records an already-allocated violation for an IP that
// an IPAddress gives to another holder, and says whether it did. Where the
// view tracks no allocations (a cluster without the IPAddress API) absence
// proves nothing, so the rule is left to the apiserver's own check.
func (c *checker) reportAllocated(field, raw string, ip netip.Addr) bool {
	if c.env.Snapshot == nil || !c.env.Snapshot.TracksAllocations {
		return false
	}
	h, ok := c.env.Snapshot.Holder(ip)
	if !ok || h.IsService(c.svc.Namespace, c.svc.Name) || c.rangeHoldReleasable(ip, h) {
		return false
	}
	// The IPAddress object is what blocks the address, and it may outlive
	// its Service: the apiserver's repair loop (repairip.go, Kubernetes
	// 1.37) rechecks every IPAddress every 3 minutes and deletes one whose
	// Service is gone once it is older than 60 s ("The repair loop" in
	// docs/apiserver-facts.md).
	what := "is held by IPAddress " + ip.String()
	switch {
	case h.Resource == "services" && h.Group == "":
		c.violate(RuleAlreadyAllocated, field, raw, "%s for Service %s (if that Service no longer exists, the apiserver's repair loop deletes the IPAddress within about 3 minutes); %s, or retry then", what, h, c.chooseStatic(ip))
	case h.Resource == "":
		c.violate(RuleAlreadyAllocated, field, raw, "is held by %s; %s", h.Name, c.chooseStatic(ip)) // "(no parentRef) IPAddress …"
	default:
		c.violate(RuleAlreadyAllocated, field, raw, "%s for %s; %s", what, h, c.chooseStatic(ip))
	}
	return true
}

// rangeHoldReleasable reports whether h is our hold on ip for the reserved
// range holding it and this Service may use that range: the mutating
// stage releases such a hold before the allocation (Releaser in
// internal/controllers/holds), so the address is free for this Service. A
// reservation of ip itself is held for its owner, never for the range.
func (c *checker) rangeHoldReleasable(ip netip.Addr, h allocview.Holder) bool {
	if !h.Ours || h.Resource != allocview.RangeHoldResource {
		return false
	}
	if _, reserved := c.env.Policy.ReservedOwner(ip, c.rs); reserved {
		return false
	}
	// Any range hold of ours on ip: ip is in rng, and a hold made before
	// the range was resized still names the range as it was.
	rng, ok := c.env.Policy.ReservedRangeOf(ip)
	return ok && h.IsAnyRangeHold() && c.mayUse(rng)
}

// reportOutside records a violation for an IP no active range can hand
// out, and says whether it did.
func (c *checker) reportOutside(field, raw string, ip netip.Addr, pl allocview.Placement) bool {
	switch pl.Kind {
	case allocview.Outside:
		why := ""
		if ex, ok := c.rs.ExcludedContaining(ip); ok {
			why = fmt.Sprintf("; %s is %s", ex.Range, ex.Reason)
		}
		c.violate(RuleOutsideServiceCIDRs, field, raw, "is outside every active Service CIDR%s; the active ones are %s: choose an address in one of them, or leave clusterIP empty to get one allocated", why, c.rs.Describe())
		return true
	case allocview.Unusable:
		what := "network"
		if ip != pl.Range.Prefix.Addr() {
			what = "broadcast"
		}
		c.violate(RuleOutsideServiceCIDRs, field, raw, "is the %s address of %s, which is never assigned; %s", what, pl.Range.String(), c.chooseStatic(ip))
		return true
	}
	return false
}

// chooseStatic tells the user where to pick an address of ip's family.
func (c *checker) chooseStatic(ip netip.Addr) string {
	bands := c.rs.StaticBands(allocview.FamilyOf(ip))
	if len(bands) == 0 {
		return "these ranges have no static band, so leave clusterIP empty"
	}
	return "choose a free address in the static band " + JoinListed(bands, " or ")
}

func noteOf(r Reservation) string {
	if r.Note == "" {
		return ""
	}
	return " (" + r.Note + ")"
}

// checkFinal applies the validating stage's rules to one IP the Service
// ends with.
func (c *checker) checkFinal(field, raw string, dryRun bool) {
	ip, err := allocview.ParseIP(raw)
	if err != nil {
		c.violate(RuleInvalidIP, field, raw, "%s", strings.TrimPrefix(err.Error(), fmt.Sprintf("%q ", raw)))
		if ip = c.allowedInvalid(raw); !ip.IsValid() {
			return
		}
	}
	if dryRun && c.rs.IsNetworkAddress(ip) {
		return // the placeholder a dry-run create shows instead of allocating
	}
	pl := c.rs.Place(ip)
	if c.reportAllowedAnyway(field, raw, ip, pl) || c.reportAllocatedOutside(field, raw, ip, pl) {
		return
	}
	res, reserved := c.env.Policy.ReservedOwner(ip, c.rs)
	if reserved && res.Owner != c.self() {
		c.reportAllocatedReserved(field, raw, res, pl)
		return
	}
	if rng, inRange := c.rangeOf(ip, reserved); inRange && !c.mayUse(rng) {
		c.reportAllocatedInRange(field, raw, rng, pl)
	}
}

// rangeOf returns the reserved range holding ip, unless a reservation of
// ip itself decides (reserved).
func (c *checker) rangeOf(ip netip.Addr, reserved bool) (ReservedRange, bool) {
	if reserved || len(c.env.Policy.ReservedRanges) == 0 {
		return ReservedRange{}, false
	}
	return c.env.Policy.ReservedRangeOf(ip)
}

// mayUse reports whether the Service under review may have an address of r.
func (c *checker) mayUse(r ReservedRange) bool {
	return r.Allows(c.svc.Namespace, c.svc.Labels, c.env.NamespaceLabels)
}

// assignReserved gives a Service that asks for no IP the IPs reserved for
// it, one per family in the order the Service will have its families.
func (c *checker) assignReserved() {
	owned := c.env.Policy.ReservationsOf(c.self(), c.rs)
	if len(owned) == 0 {
		return
	}
	fams := wantedFamilies(c.svc, c.rs)
	if len(fams) == 0 {
		return // the apiserver refuses the request itself, with its own message
	}
	var ips []string
	for _, f := range fams {
		r, ok := owned[f]
		if !ok {
			break // clusterIPs follow ipFamilies in order; the rest is allocated dynamically
		}
		ips = append(ips, r.IP.String())
	}
	if len(ips) == 0 {
		var held []string
		for _, r := range owned {
			held = append(held, r.IP.String())
		}
		slices.Sort(held)
		c.d.Warnings = append(c.d.Warnings, fmt.Sprintf("Service %s holds reservation %s but will be %s first (its primary family); set ipFamilies to use the reservation", c.selfName(), strings.Join(held, ", "), fams[0]))
		return
	}
	before := len(c.d.Violations)
	for i, raw := range ips {
		field := "spec.clusterIP"
		if len(ips) > 1 {
			field = fmt.Sprintf("spec.clusterIPs[%d]", i)
		}
		ip := netip.MustParseAddr(raw)
		if !c.reportReservationOutside(field, raw, owned[allocview.FamilyOf(ip)]) {
			c.reportReservationHeld(field, raw, owned[allocview.FamilyOf(ip)])
		}
	}
	if len(c.d.Violations) > before {
		return // a reserved IP that cannot be assigned is reported, not patched
	}
	c.d.Mutations = append(c.d.Mutations, MutationAssignReserved)
	c.d.Patch = append(c.d.Patch,
		PatchOp{Op: "add", Path: "/spec/clusterIP", Value: ips[0]},
		PatchOp{Op: "add", Path: "/spec/clusterIPs", Value: ips},
	)
	c.d.FinalIPs = ips
}

// wantedFamilies is the order of families the apiserver will give the
// Service, as its initIPFamilyFields (pkg/registry/core/service/storage/
// alloc.go; "Dual-stack" in docs/apiserver-facts.md) decides: ipFamilies as given, else the primary family; widened
// with the other family when it names one and ipFamilyPolicy is
// RequireDualStack or PreferDualStack on a dual-stack cluster. Dual-stack
// means the apiserver serves both families (RangeSet.Families, from its
// flags), not that a ServiceCIDR object of the other family exists. It
// returns nil when the apiserver will refuse the request (RequireDualStack
// on a single-stack cluster, a family it does not serve): a patch then
// would only be refused too.
func wantedFamilies(svc *corev1.Service, rs allocview.RangeSet) []allocview.Family {
	served := rs.Families()
	dualStack := len(served) == 2
	var fams []allocview.Family
	for _, f := range svc.Spec.IPFamilies {
		fams = append(fams, allocview.Family(f))
	}
	if len(fams) == 0 {
		fams = []allocview.Family{rs.Primary}
	}
	policy := corev1.IPFamilyPolicySingleStack
	if svc.Spec.IPFamilyPolicy != nil {
		policy = *svc.Spec.IPFamilyPolicy
	}
	if policy == corev1.IPFamilyPolicyRequireDualStack && !dualStack {
		return nil // "this cluster is not configured for dual-stack services"
	}
	for _, f := range fams {
		if len(served) > 0 && !rs.Serves(f) {
			return nil // "not configured on this cluster"
		}
	}
	if policy != corev1.IPFamilyPolicySingleStack && len(fams) == 1 && dualStack {
		other := allocview.IPv6
		if fams[0] == allocview.IPv6 {
			other = allocview.IPv4
		}
		fams = append(fams, other)
	}
	return fams
}

// finish applies the policy's actions to the violations and sets the outcome.
func (d Decision) finish() Decision {
	var denials []string
	for _, v := range d.Violations {
		switch v.Action {
		case ActionDeny:
			denials = append(denials, v.Message)
		case ActionWarn:
			d.Warnings = append(d.Warnings, v.Message)
		}
	}
	switch {
	case len(denials) > 0:
		d.Outcome = Denied
		d.Patch, d.Mutations = nil, nil
		d.FinalIPs = nil
		if len(denials) == 1 {
			d.Message = denials[0]
		} else {
			d.Message = "[" + strings.Join(denials, ", ") + "]"
		}
	case len(d.Patch) > 0:
		d.Outcome = Patched
		d.Message = fmt.Sprintf("assigned reserved %s", strings.Join(d.FinalIPs, ", "))
	case len(d.Warnings) > 0:
		d.Outcome = Warned
		d.Message = strings.Join(d.Warnings, "; ")
	default:
		d.Outcome = Allowed
		d.Message = d.Skipped
		for _, v := range d.Violations { // audit-only matches
			d.Message = strings.TrimPrefix(d.Message+"; audit: "+v.Message, "; ")
		}
	}
	return d.bound()
}
