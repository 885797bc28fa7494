// Package policy loads the ClusterIPPolicy file and decides, for each stage
// of admission, whether a Service's ClusterIPs are where the policy says.
// It is pure: no I/O beyond reading the policy file, no Kubernetes client.
package policy

import (
	"fmt"
	"net/netip"
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
