// Package policy loads the ClusterIPPolicy file and decides, for each stage
// of admission, whether a Service's ClusterIPs are where the policy says.
// It is pure: no I/O beyond reading the policy file, no Kubernetes client.
package policy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/util/validation"

	"clusterip-policy/pkg/allocview"
)

// The policy file's apiVersion and kind; public API.
const (
	APIVersion = "clusterip-policy/v1alpha1"
	Kind       = "ClusterIPPolicy"
)

// RuleID names a rule; the IDs are public API (they appear in denials, the
// audit log, metrics and the enforcement section of the policy).
type RuleID string

const (
	RuleInvalidIP              RuleID = "invalid-ip"
	RuleOutsideServiceCIDRs    RuleID = "outside-service-cidrs"
	RuleReservedForOther       RuleID = "reserved-for-other"
	RuleStaticIPInDynamicBand  RuleID = "static-ip-in-dynamic-band"
	RuleAlreadyAllocated       RuleID = "already-allocated"
	MutationAssignReserved            = "assign-reserved"
	kubernetesServiceNamespace        = "default"
	kubernetesServiceName             = "kubernetes"
)

// KubernetesService is the Service the apiserver creates itself, through
// its loopback identity, which both webhooks exempt: no review of its
// create ever reaches the webhook.
var KubernetesService = Owner{kubernetesServiceNamespace, kubernetesServiceName}

// Rules lists every rule ID.
var Rules = []RuleID{RuleInvalidIP, RuleOutsideServiceCIDRs, RuleReservedForOther, RuleReservedRangeForOther, RuleStaticIPInDynamicBand, RuleAlreadyAllocated}

// Action is what a rule does when it matches.
type Action string

const (
	// ActionDeny refuses the request (the default).
	ActionDeny Action = "deny"
	// ActionWarn allows it and returns an admission warning to the client.
	ActionWarn Action = "warn"
	// ActionAudit allows it and only writes the audit log.
	ActionAudit Action = "audit"
)

// File is the policy file as written; field names are public API.
type File struct {
	APIVersion               string        `yaml:"apiVersion"`
	Kind                     string        `yaml:"kind"`
	ServiceCIDRs             []string      `yaml:"serviceCIDRs"`
	AllowedCIDRs             []string      `yaml:"allowedCIDRs"`
	ReserveKubernetesService *bool         `yaml:"reserveKubernetesService"`
	Reservations             []FileReserve `yaml:"reservations"`
	ReservedRanges           []FileRange   `yaml:"reservedRanges"`
	Enforcement              FileEnforce   `yaml:"enforcement"`
	Exemptions               FileExempt    `yaml:"exemptions"`
}

// FileReserve is one entry of reservations.
type FileReserve struct {
	IP      string `yaml:"ip"`
	Service string `yaml:"service"`
	Note    string `yaml:"note"`
}

// FileEnforce is the enforcement section.
type FileEnforce struct {
	Default string            `yaml:"default"`
	Rules   map[string]string `yaml:"rules"`
}

// FileExempt is the exemptions section.
type FileExempt struct {
	Namespaces []string `yaml:"namespaces"`
	Users      []string `yaml:"users"`
	Groups     []string `yaml:"groups"`
}

// Owner is a Service namespace/name.
type Owner struct {
	Namespace, Name string
}

func (o Owner) String() string { return o.Namespace + "/" + o.Name }

// Reservation binds an IP to its owner Service.
type Reservation struct {
	IP    netip.Addr
	Owner Owner
	Note  string
	// Implicit marks the first address of the apiserver's primary range,
	// held for default/kubernetes by reserveKubernetesService rather than by
	// an entry of the file.
	Implicit bool
}

// Policy is a loaded, validated policy. Immutable once loaded.
type Policy struct {
	ServiceCIDRs             []netip.Prefix
	AllowedCIDRs             []netip.Prefix
	ReserveKubernetesService bool
	Reservations             []Reservation
	// ReservedRanges are sorted by first address and never overlap.
	ReservedRanges   []ReservedRange
	DefaultAction    Action
	RuleActions      map[RuleID]Action
	ExemptNamespaces []string
	ExemptUsers      []string
	ExemptGroups     []string
	// Digest identifies the file's content (first 12 hex digits of SHA-256).
	Digest string

	byIP    map[netip.Addr]Reservation
	byOwner map[Owner][]Reservation
}

// Default is the policy in force with no file: deny everything the rules
// catch, reserve the first address of the primary range for
// default/kubernetes.
func Default() *Policy {
	p, err := Parse([]byte("apiVersion: " + APIVersion + "\nkind: " + Kind + "\n"))
	if err != nil {
		panic(err) // a constant input; covered by tests
	}
	return p
}

// LoadFile reads the policy at path: the ClusterIPPolicy object manifest
// (apiVersion clusterip-policy.io/v1alpha1), loaded exactly as the webhook
// loads the object from the apiserver, so `review`, `audit`, the ConfigMap
// mode and the object mode read one document. A file in the retired policy
// file format (apiVersion clusterip-policy/v1alpha1) still loads; the tools
// print FileFormatNote for it. Errors name the file.
func LoadFile(path string) (*Policy, error) {
	data, err := readBounded(path, MaxPolicyBytes)
	if err != nil {
		return nil, fmt.Errorf("read policy: %w", err)
	}
	p, object, err := parseDocument(data)
	if err != nil && object {
		return nil, fmt.Errorf("policy object %s: %w", path, err)
	}
	if err != nil {
		return nil, fmt.Errorf("policy %s: %w", path, err)
	}
	return p, nil
}

// ParseDocument parses what LoadFile reads: the object manifest, or a
// document in the retired file format.
func ParseDocument(data []byte) (*Policy, error) {
	p, _, err := parseDocument(data)
	return p, err
}

// parseDocument also says whether data is the object manifest.
func parseDocument(data []byte) (p *Policy, object bool, err error) {
	var head struct {
		APIVersion string `yaml:"apiVersion"`
	}
	if yaml.Unmarshal(data, &head) == nil && head.APIVersion == ObjectGroup+"/"+ObjectVersion {
		p, err = parseObject(data)
		return p, true, err
	}
	p, err = Parse(data)
	return p, false, err
}

var yamlUnknownField = regexp.MustCompile(`line (\d+): field (\S+) not found in type \S+`)

// Parse decodes a policy strictly: an unknown field, a second document, a
// malformed CIDR or IP, or a policy that contradicts itself is an error that
// names the line and the entry.
func Parse(data []byte) (*Policy, error) {
	if len(data) > MaxPolicyBytes {
		return nil, fmt.Errorf("the file is %d bytes, more than the limit of %d (1 MiB, a ConfigMap's limit); keep reservations and exemptions to what the cluster needs", len(data), MaxPolicyBytes)
	}
	var f File
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("the file is empty; it needs at least apiVersion: " + APIVersion + " and kind: " + Kind)
		}
		msg := strings.TrimPrefix(err.Error(), "yaml: unmarshal errors:\n  ")
		msg = yamlUnknownField.ReplaceAllString(msg, `line $1: unknown field "$2"`)
		return nil, errors.New(strings.TrimPrefix(msg, "yaml: "))
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, fmt.Errorf("line %d: a second YAML document; a policy file holds exactly one", extra.Line)
	}
	var root yaml.Node
	_ = yaml.Unmarshal(data, &root) // decoded above already; only for line numbers
	return compile(f, lines{&root}, data)
}

func compile(f File, ln lines, data []byte) (*Policy, error) {
	sum := sha256.Sum256(data)
	p := &Policy{
		ReserveKubernetesService: f.ReserveKubernetesService == nil || *f.ReserveKubernetesService,
		DefaultAction:            ActionDeny,
		RuleActions:              map[RuleID]Action{},
		ExemptNamespaces:         f.Exemptions.Namespaces,
		ExemptUsers:              f.Exemptions.Users,
		ExemptGroups:             f.Exemptions.Groups,
		Digest:                   hex.EncodeToString(sum[:6]),
		byIP:                     map[netip.Addr]Reservation{},
		byOwner:                  map[Owner][]Reservation{},
	}
	if f.APIVersion != APIVersion {
		return nil, fmt.Errorf("line %d: apiVersion %q is not supported; use %s", ln.at("apiVersion"), f.APIVersion, APIVersion)
	}
	if f.Kind != Kind {
		return nil, fmt.Errorf("line %d: kind %q is not supported; use %s", ln.at("kind"), f.Kind, Kind)
	}
	if err := checkCounts(f, ln); err != nil {
		return nil, err
	}
	var err error
	if p.ServiceCIDRs, err = parseCIDRs("serviceCIDRs", f.ServiceCIDRs, ln); err != nil {
		return nil, err
	}
	if p.AllowedCIDRs, err = parseCIDRs("allowedCIDRs", f.AllowedCIDRs, ln); err != nil {
		return nil, err
	}
	for i, r := range f.Reservations {
		if err := p.addReservation(i, r, ln); err != nil {
			return nil, err
		}
	}
	if err := p.compileRanges(f.ReservedRanges, ln); err != nil {
		return nil, err
	}
	if err := p.compileEnforcement(f.Enforcement, ln); err != nil {
		return nil, err
	}
	for i, ns := range f.Exemptions.Namespaces {
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return nil, fmt.Errorf("exemptions.namespaces[%d] (line %d): %q is not a namespace name: %s", i, ln.at("exemptions", "namespaces", i), ns, errs[0])
		}
	}
	return p, nil
}

func parseCIDRs(field string, in []string, ln lines) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(in))
	for i, s := range in {
		p, err := allocview.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("%s[%d] (line %d): %w", field, i, ln.at(field, i), err)
		}
		if p.Addr().Is6() && p.Bits() < 64 && field == "serviceCIDRs" {
			return nil, fmt.Errorf("%s[%d] (line %d): %s is larger than /64, which the apiserver refuses for IPv6 Service ranges", field, i, ln.at(field, i), p)
		}
		out = append(out, p)
	}
	return out, nil
}

func (p *Policy) addReservation(i int, r FileReserve, ln lines) error {
	where := fmt.Sprintf("reservations[%d] (line %d)", i, ln.at("reservations", i))
	if r.IP == "" {
		return fmt.Errorf("%s: ip is missing; give the reserved address, such as 10.96.0.10", where)
	}
	ip, err := allocview.ParseIP(r.IP)
	if err != nil {
		return fmt.Errorf("%s: ip %w", where, err)
	}
	owner, err := parseOwner(r.Service)
	if err != nil {
		return fmt.Errorf("%s: service %w", where, err)
	}
	if prev, dup := p.byIP[ip]; dup {
		j := slices.IndexFunc(p.Reservations, func(x Reservation) bool { return x.IP == ip })
		if prev.Owner == owner {
			return fmt.Errorf("%s: %s for %s is listed twice (also reservations[%d], line %d); remove one", where, ip, owner, j, ln.at("reservations", j))
		}
		return fmt.Errorf("%s: %s is reserved for both %s (reservations[%d], line %d) and %s; an IP has one owner", where, ip, prev.Owner, j, ln.at("reservations", j), owner)
	}
	for _, prev := range p.byOwner[owner] {
		if allocview.FamilyOf(prev.IP) == allocview.FamilyOf(ip) {
			j := slices.IndexFunc(p.Reservations, func(x Reservation) bool { return x.IP == prev.IP })
			return fmt.Errorf("%s: %s already holds %s %s (reservations[%d], line %d); a Service holds at most one IP per family", where, owner, allocview.FamilyOf(ip), prev.IP, j, ln.at("reservations", j))
		}
	}
	if len(p.AllowedCIDRs) > 0 && !slices.ContainsFunc(p.AllowedCIDRs, func(a netip.Prefix) bool { return a.Contains(ip) }) {
		return fmt.Errorf("%s: %s is outside allowedCIDRs, so it could never be used; fix the ip or allowedCIDRs", where, ip)
	}
	for _, c := range p.ServiceCIDRs {
		if r, err := allocview.NewRange("serviceCIDRs", c); err == nil && r.Band(ip) == allocview.Unusable {
			return fmt.Errorf("%s: %s is the network or broadcast address of %s and can never be assigned", where, ip, c)
		}
	}
	res := Reservation{IP: ip, Owner: owner, Note: r.Note}
	p.Reservations = append(p.Reservations, res)
	p.byIP[ip] = res
	p.byOwner[owner] = append(p.byOwner[owner], res)
	return nil
}

// parseOwner parses "namespace/name" as a Service reference.
func parseOwner(s string) (Owner, error) {
	ns, name, ok := strings.Cut(s, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return Owner{}, fmt.Errorf("%q is not namespace/name, such as kube-system/kube-dns", s)
	}
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return Owner{}, fmt.Errorf("%q: namespace %q is invalid: %s", s, ns, errs[0])
	}
	if errs := validation.IsDNS1035Label(name); len(errs) > 0 {
		return Owner{}, fmt.Errorf("%q: Service name %q is invalid: %s", s, name, errs[0])
	}
	return Owner{ns, name}, nil
}

func parseAction(s string) (Action, bool) {
	switch a := Action(s); a {
	case ActionDeny, ActionWarn, ActionAudit:
		return a, true
	}
	return "", false
}

func (p *Policy) compileEnforcement(e FileEnforce, ln lines) error {
	if e.Default != "" {
		a, ok := parseAction(e.Default)
		if !ok {
			return fmt.Errorf("enforcement.default (line %d): %q is not an action; use deny, warn or audit", ln.at("enforcement", "default"), e.Default)
		}
		p.DefaultAction = a
	}
	for id, s := range e.Rules {
		line := ln.at("enforcement", "rules", id)
		if !slices.Contains(Rules, RuleID(id)) {
			return fmt.Errorf("enforcement.rules (line %d): %q is not a rule; the rules are %s", line, id, joinRules(Rules))
		}
		a, ok := parseAction(s)
		if !ok {
			return fmt.Errorf("enforcement.rules.%s (line %d): %q is not an action; use deny, warn or audit", id, line, s)
		}
		p.RuleActions[RuleID(id)] = a
	}
	return nil
}

func joinRules(ids []RuleID) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = string(id)
	}
	return strings.Join(s, ", ")
}

// ActionFor is the action of rule.
func (p *Policy) ActionFor(rule RuleID) Action {
	if a, ok := p.RuleActions[rule]; ok {
		return a
	}
	return p.DefaultAction
}

// Exempt says why a request is exempt from the policy, or "" if it is not.
func (p *Policy) Exempt(namespace, user string, groups []string) string {
	switch {
	case slices.Contains(p.ExemptNamespaces, namespace):
		return fmt.Sprintf("namespace %s is exempt by the policy", namespace)
	case user != "" && slices.Contains(p.ExemptUsers, user):
		return fmt.Sprintf("user %s is exempt by the policy", user)
	}
	if len(p.ExemptGroups) == 0 {
		return ""
	}
	// A request may name any number of groups: look each up once in a set
	// rather than scanning the policy's list for every one.
	exempt := make(map[string]bool, len(p.ExemptGroups))
	for _, g := range p.ExemptGroups {
		exempt[g] = true
	}
	for _, g := range groups {
		if exempt[g] {
			return fmt.Sprintf("group %s is exempt by the policy", g)
		}
	}
	return ""
}

// ReservedOwner returns the reservation holding ip, explicit or (for the
// address the apiserver gives default/kubernetes: the first of its primary
// range, not of every ServiceCIDR) implicit for default/kubernetes. An
// explicit entry wins over the implicit one.
func (p *Policy) ReservedOwner(ip netip.Addr, rs allocview.RangeSet) (Reservation, bool) {
	if r, ok := p.byIP[ip]; ok {
		return r, true
	}
	if p.ReserveKubernetesService {
		if first, name, ok := rs.KubernetesServiceIP(); ok && first == ip {
			return Reservation{IP: ip, Owner: KubernetesService, Note: "first address of " + name, Implicit: true}, true
		}
	}
	return Reservation{}, false
}

// ReservationsOf returns the IPs reserved for owner, at most one per family.
// It is nil (no map built) for the many Services that own none.
func (p *Policy) ReservationsOf(owner Owner, rs allocview.RangeSet) map[allocview.Family]Reservation {
	isKubernetes := p.ReserveKubernetesService && owner == KubernetesService
	if len(p.byOwner[owner]) == 0 && !isKubernetes {
		return nil
	}
	out := map[allocview.Family]Reservation{}
	for _, r := range p.byOwner[owner] {
		out[allocview.FamilyOf(r.IP)] = r
	}
	if isKubernetes {
		if first, name, ok := rs.KubernetesServiceIP(); ok {
			if _, taken := out[allocview.FamilyOf(first)]; !taken {
				out[allocview.FamilyOf(first)] = Reservation{IP: first, Owner: owner, Note: "first address of " + name, Implicit: true}
			}
		}
	}
	return out
}

// lines finds the line of a value in the decoded YAML, for messages.
type lines struct{ root *yaml.Node }

// at walks path (map keys as strings, sequence indexes as ints) and
// returns the line of the node it reaches, or of the deepest node found.
func (l lines) at(path ...any) int {
	n := l.root
	if n == nil || len(n.Content) == 0 {
		return 0
	}
	n = n.Content[0] // the document's root node
	line := n.Line
	for _, step := range path {
		var next *yaml.Node
		switch s := step.(type) {
		case string:
			if n.Kind == yaml.MappingNode {
				for i := 0; i+1 < len(n.Content); i += 2 {
					if n.Content[i].Value == s {
						next = n.Content[i+1]
						line = n.Content[i].Line
						break
					}
				}
			}
		case int:
			if n.Kind == yaml.SequenceNode && s < len(n.Content) {
				next = n.Content[s]
				line = next.Line
			}
		}
		if next == nil {
			return line
		}
		n = next
	}
	return line
}
