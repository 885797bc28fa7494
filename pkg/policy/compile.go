package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"clusterip-policy/pkg/allocview"
	"clusterip-policy/pkg/apis/clusterippolicy/v1alpha1"
)

// MaxErrors bounds the refusals one load reports: a spec with thousands of
// bad entries gets a message of bounded length that says how many more
// there are.
const MaxErrors = 8

// fieldPath names a field of a policy the way the apiserver's field errors
// do (k8s.io/apimachinery/pkg/util/validation/field):
// spec.reservations[3].ip, spec.enforcement.rules[invalid-ip]. It keeps its
// steps, unlike field.Path, so that a policy file's line can be found by
// walking them through the file's YAML node tree.
type fieldPath []pathStep

type pathStep struct {
	name  string // a field, or a map key when isKey
	index int    // a list index, when name is "" and not isKey
	isKey bool
}

func (p fieldPath) Child(name string) fieldPath { return append(slices.Clip(p), pathStep{name: name}) }
func (p fieldPath) Index(i int) fieldPath       { return append(slices.Clip(p), pathStep{index: i}) }
func (p fieldPath) Key(k string) fieldPath {
	return append(slices.Clip(p), pathStep{name: k, isKey: true})
}

// String renders the path; a name that is not plain (a hostile map key) is
// quoted and clipped, so that no control character reaches a message.
func (p fieldPath) String() string {
	var b strings.Builder
	for _, s := range p {
		switch {
		case s.isKey:
			b.WriteString("[" + fieldName(Echo(s.name)) + "]")
		case s.name == "":
			b.WriteString("[" + strconv.Itoa(s.index) + "]")
		default:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(fieldName(Echo(s.name)))
		}
	}
	return b.String()
}

// FieldError is one refusal of a policy: the field it concerns, the line of
// the policy's file when the policy came from one (0 otherwise), and what
// is wrong with it and the fix.
type FieldError struct {
	Field  string
	Line   int
	Detail string
}

func (e *FieldError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s (line %d): %s", e.Field, e.Line, e.Detail)
	}
	return e.Field + ": " + e.Detail
}

// ErrorList is every refusal of one load, at most MaxErrors of them kept;
// Total counts them all.
type ErrorList struct {
	Errors []*FieldError
	Total  int
}

func (l *ErrorList) Error() string {
	if l.Total == 1 && len(l.Errors) == 1 {
		return l.Errors[0].Error()
	}
	parts := make([]string, len(l.Errors))
	for i, e := range l.Errors {
		parts[i] = e.Error()
	}
	s := fmt.Sprintf("%d errors: %s", l.Total, strings.Join(parts, "; "))
	if more := l.Total - len(l.Errors); more > 0 {
		s += fmt.Sprintf("; and %d more", more)
	}
	return s
}

// locator returns the line of a field in the file a policy was read from,
// or 0 when it is not there.
type locator func(fieldPath) int

// compiler collects the refusals of one load.
type compiler struct {
	root   fieldPath // spec for the object; empty for the retired file
	locate locator   // nil when there is no file
	errs   ErrorList
	// reservationOf is the index in reservations of each address added, for
	// the messages of the entries after it.
	reservationOf map[netip.Addr]int
}

func newCompiler(root fieldPath, locate locator) *compiler {
	return &compiler{root: root, locate: locate, reservationOf: map[netip.Addr]int{}}
}

func (c *compiler) line(path fieldPath) int {
	if c.locate == nil {
		return 0
	}
	return c.locate(path)
}

// fail records a refusal of the field at path.
func (c *compiler) fail(path fieldPath, format string, args ...any) {
	c.failLine(path, c.line(path), format, args...)
}

// failLine records a refusal of the field at path, found at line (a
// field's unknown key is on a line of its own).
func (c *compiler) failLine(path fieldPath, line int, format string, args ...any) {
	c.errs.Total++
	if len(c.errs.Errors) < MaxErrors {
		c.errs.Errors = append(c.errs.Errors, &FieldError{Field: path.String(), Line: line, Detail: fmt.Sprintf(format, args...)})
	}
}

func (c *compiler) failed() bool { return c.errs.Total > 0 }

// ref names another entry in a message: "spec.reservations[0]", with its
// line when there is a file: "spec.reservations[0], line 8".
func (c *compiler) ref(path fieldPath) string {
	if l := c.line(path); l > 0 {
		return fmt.Sprintf("%s, line %d", path, l)
	}
	return path.String()
}

// lineNote is " (line 8)" for another entry named in a message, or ""
// without a file.
func (c *compiler) lineNote(path fieldPath) string {
	if l := c.line(path); l > 0 {
		return fmt.Sprintf(" (line %d)", l)
	}
	return ""
}

func (c *compiler) err() error {
	if !c.failed() {
		return nil
	}
	return &c.errs
}

// Compile validates the spec of a ClusterIPPolicy and compiles it into the
// policy the decisions read. Every refusal names its field
// (spec.reservations[3].ip: ...) and the fix; the error is an *ErrorList
// of all of them (at most MaxErrors kept). The Digest identifies the spec
// as its JSON; the loaders of a document (ParseObjectSpec, LoadFile) set it
// from what they read instead, as they always have.
func Compile(spec v1alpha1.ClusterIPPolicySpec) (*Policy, error) {
	c := newCompiler(fieldPath{{name: "spec"}}, nil)
	p := c.compile(spec)
	if err := c.err(); err != nil {
		return nil, err
	}
	canonical, err := json.Marshal(spec)
	if err != nil {
		return nil, fmt.Errorf("spec: cannot be rendered as JSON: %w", err)
	}
	p.Digest = digestOf(canonical)
	return p, nil
}

func digestOf(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:6])
}

// compile checks the spec section by section. A section whose entries
// depend on another (a reservation on allowedCIDRs) is checked only when
// that one loaded, so that one mistake is reported once.
func (c *compiler) compile(spec v1alpha1.ClusterIPPolicySpec) *Policy {
	p := &Policy{
		ReserveKubernetesService: spec.ReserveKubernetesService == nil || *spec.ReserveKubernetesService,
		DefaultAction:            ActionDeny,
		RuleActions:              map[RuleID]Action{},
		ExemptNamespaces:         spec.Exemptions.Namespaces,
		ExemptUsers:              spec.Exemptions.Users,
		ExemptGroups:             spec.Exemptions.Groups,
		byIP:                     map[netip.Addr]Reservation{},
		byOwner:                  map[Owner][]Reservation{},
	}
	if c.checkCounts(spec); c.failed() {
		return nil // the lists are too long to walk
	}
	p.ServiceCIDRs = c.parseCIDRs(c.root.Child("serviceCIDRs"), spec.ServiceCIDRs)
	p.AllowedCIDRs = c.parseCIDRs(c.root.Child("allowedCIDRs"), spec.AllowedCIDRs)
	if !c.failed() {
		for i, r := range spec.Reservations {
			p.addReservation(c, c.root.Child("reservations").Index(i), r)
		}
		p.compileRanges(c, spec.ReservedRanges)
	}
	p.compileEnforcement(c, spec.Enforcement)
	for i, ns := range spec.Exemptions.Namespaces {
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			c.fail(c.root.Child("exemptions").Child("namespaces").Index(i), "%q is not a namespace name: %s", Echo(ns), errs[0])
		}
	}
	return p
}

// checkCounts refuses a spec whose lists are longer than the limits.
func (c *compiler) checkCounts(spec v1alpha1.ClusterIPPolicySpec) {
	exemptions := c.root.Child("exemptions")
	for _, l := range []struct {
		path fieldPath
		n    int
		max  int
	}{
		{c.root.Child("serviceCIDRs"), len(spec.ServiceCIDRs), MaxPolicyCIDRs},
		{c.root.Child("allowedCIDRs"), len(spec.AllowedCIDRs), MaxPolicyCIDRs},
		{c.root.Child("reservations"), len(spec.Reservations), MaxReservations},
		{c.root.Child("reservedRanges"), len(spec.ReservedRanges), MaxReservedRanges},
		{exemptions.Child("namespaces"), len(spec.Exemptions.Namespaces), MaxExemptions},
		{exemptions.Child("users"), len(spec.Exemptions.Users), MaxExemptions},
		{exemptions.Child("groups"), len(spec.Exemptions.Groups), MaxExemptions},
	} {
		if l.n > l.max {
			c.fail(l.path, "%d entries, more than the limit of %d; list what the cluster needs (a CIDR covers many addresses, a group many users)", l.n, l.max)
		}
	}
}

func (c *compiler) parseCIDRs(path fieldPath, in []v1alpha1.CIDR) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(in))
	for i, s := range in {
		p, err := allocview.ParsePrefix(string(s))
		if err != nil {
			c.fail(path.Index(i), "%s", err)
			continue
		}
		if p.Addr().Is6() && p.Bits() < 64 && path[len(path)-1].name == "serviceCIDRs" {
			c.fail(path.Index(i), "%s is larger than /64, which the apiserver refuses for IPv6 Service ranges", p)
			continue
		}
		out = append(out, p)
	}
	return out
}

// addReservation checks one entry of reservations against itself, the
// entries before it and allowedCIDRs, and adds it when it passes.
func (p *Policy) addReservation(c *compiler, path fieldPath, r v1alpha1.Reservation) {
	if r.IP == "" {
		c.fail(path.Child("ip"), "required; give the reserved address, such as 10.96.0.10")
		return
	}
	ip, err := allocview.ParseIP(string(r.IP))
	if err != nil {
		c.fail(path.Child("ip"), "%s", err)
		return
	}
	owner, err := parseOwner(r.Service)
	if err != nil {
		c.fail(path.Child("service"), "%s", err)
		return
	}
	reservations := c.root.Child("reservations")
	if prev, dup := p.byIP[ip]; dup {
		if prev.Owner == owner {
			c.fail(path, "%s for %s is listed twice (also %s); remove one", ip, owner, c.ref(reservations.Index(c.reservationOf[ip])))
			return
		}
		c.fail(path, "%s is reserved for both %s (%s) and %s; an IP has one owner", ip, prev.Owner, c.ref(reservations.Index(c.reservationOf[ip])), owner)
		return
	}
	for _, prev := range p.byOwner[owner] {
		if allocview.FamilyOf(prev.IP) == allocview.FamilyOf(ip) {
			c.fail(path, "%s already holds %s %s (%s); a Service holds at most one IP per family", owner, allocview.FamilyOf(ip), prev.IP, c.ref(reservations.Index(c.reservationOf[prev.IP])))
			return
		}
	}
	if len(p.AllowedCIDRs) > 0 && !slices.ContainsFunc(p.AllowedCIDRs, func(a netip.Prefix) bool { return a.Contains(ip) }) {
		c.fail(path.Child("ip"), "%s is outside allowedCIDRs, so it could never be used; fix the ip or allowedCIDRs", ip)
		return
	}
	for _, cidr := range p.ServiceCIDRs {
		if r, err := allocview.NewRange("serviceCIDRs", cidr); err == nil && r.Band(ip) == allocview.Unusable {
			c.fail(path.Child("ip"), "%s is the network or broadcast address of %s and can never be assigned", ip, cidr)
			return
		}
	}
	res := Reservation{IP: ip, Owner: owner, Note: r.Note}
	p.Reservations = append(p.Reservations, res)
	c.reservationOf[ip] = path[len(path)-1].index
	p.byIP[ip] = res
	p.byOwner[owner] = append(p.byOwner[owner], res)
}

func (p *Policy) compileEnforcement(c *compiler, e v1alpha1.Enforcement) {
	path := c.root.Child("enforcement")
	if e.Default != "" {
		if a, ok := parseAction(string(e.Default)); ok {
			p.DefaultAction = a
		} else {
			c.fail(path.Child("default"), "%q is not an action; use deny, warn or audit", Echo(string(e.Default)))
		}
	}
	// Sorted, so that the same spec is refused with the same message.
	ids := make([]string, 0, len(e.Rules))
	for id := range e.Rules {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		if !slices.Contains(Rules, RuleID(id)) {
			c.fail(path.Child("rules").Key(id), "%q is not a rule; the rules are %s", Echo(id), joinRules(Rules))
			continue
		}
		a, ok := parseAction(string(e.Rules[id]))
		if !ok {
			c.fail(path.Child("rules").Key(id), "%q is not an action; use deny, warn or audit", Echo(string(e.Rules[id])))
			continue
		}
		p.RuleActions[RuleID(id)] = a
	}
}
