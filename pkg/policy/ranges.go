package policy

import (
	"fmt"
	"math/big"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	"clusterip-policy/pkg/allocview"
)

// RuleReservedRangeForOther denies a Service that names an address of a
// reserved range its namespace (or the Service itself, by its labels) may
// not use. Public API, like every rule ID.
const RuleReservedRangeForOther RuleID = "reserved-range-for-other"

// Limits on reservedRanges, checked at load. The leader holds every free
// address of every range with one IPAddress object each, so the total is
// what bounds that work and the objects in etcd.
const (
	// MaxReservedRanges bounds the entries of reservedRanges.
	MaxReservedRanges = 64
	// MaxReservedRangeAddresses bounds the addresses of all ranges together.
	MaxReservedRangeAddresses = 4096
	// MaxRangeNamespaces bounds the namespaces one range lists.
	MaxRangeNamespaces = 100
	// MaxRangeNoteBytes bounds a range's note (refusals quote it).
	MaxRangeNoteBytes = 256
)

// FileRange is one entry of reservedRanges: cidr, or first and last.
type FileRange struct {
	CIDR              string        `yaml:"cidr"`
	First             string        `yaml:"first"`
	Last              string        `yaml:"last"`
	Namespaces        []string      `yaml:"namespaces"`
	NamespaceSelector *FileSelector `yaml:"namespaceSelector"`
	ServiceSelector   *FileSelector `yaml:"serviceSelector"`
	Note              string        `yaml:"note"`
}

// FileSelector is a Kubernetes label selector as written in the policy.
type FileSelector struct {
	MatchLabels      map[string]string `yaml:"matchLabels"`
	MatchExpressions []FileRequirement `yaml:"matchExpressions"`
}

// FileRequirement is one matchExpressions entry.
type FileRequirement struct {
	Key      string   `yaml:"key"`
	Operator string   `yaml:"operator"`
	Values   []string `yaml:"values"`
}

// ReservedRange is a loaded entry of reservedRanges: an inclusive band of
// addresses of one family, and who may use it.
type ReservedRange struct {
	// Index is the entry's position in reservedRanges, for messages.
	Index int
	// Band is the range's first and last address.
	Band allocview.Band
	// Written is the range as the policy gives it: a CIDR, or first-last.
	Written    string
	Namespaces []string
	// NamespaceSelector and ServiceSelector are nil when not set.
	NamespaceSelector labels.Selector
	ServiceSelector   labels.Selector
	Note              string
	// Size is how many addresses the range has (at most
	// MaxReservedRangeAddresses).
	Size int
}

// String names the range as the policy writes it, with its note:
// "10.96.0.16/28 (team payments)".
func (r ReservedRange) String() string {
	if r.Note == "" {
		return r.Written
	}
	return r.Written + " (" + r.Note + ")"
}

// Contains reports whether ip lies in the range.
func (r ReservedRange) Contains(ip netip.Addr) bool { return r.Band.Contains(ip) }

// NamespaceLabels returns the labels of a namespace, and whether it knows
// them. The webhook answers from its watch of the namespaces; offline tools
// know none.
type NamespaceLabels func(namespace string) (map[string]string, bool)

// Allows reports whether a Service in namespace, with serviceLabels, may
// use the range. A namespace whose labels are not known (offline, not yet
// watched, not created yet) is matched by the one label the apiserver gives
// every namespace, kubernetes.io/metadata.name, as the apiserver matches a
// webhook's namespaceSelector for a namespace it has not created.
func (r ReservedRange) Allows(namespace string, serviceLabels map[string]string, nsLabels NamespaceLabels) bool {
	if !r.allowsNamespace(namespace, nsLabels) {
		return false
	}
	return r.ServiceSelector == nil || r.ServiceSelector.Matches(labels.Set(serviceLabels))
}

func (r ReservedRange) allowsNamespace(namespace string, nsLabels NamespaceLabels) bool {
	if slices.Contains(r.Namespaces, namespace) {
		return true
	}
	if r.NamespaceSelector == nil {
		return false
	}
	var l map[string]string
	ok := false
	if nsLabels != nil {
		l, ok = nsLabels(namespace)
	}
	if !ok {
		l = map[string]string{corev1.LabelMetadataName: namespace}
	}
	return r.NamespaceSelector.Matches(labels.Set(l))
}

// Who describes who may use the range, for messages: "namespaces team-a,
// team-b or namespaces matching team=payments (Services matching app=db)".
func (r ReservedRange) Who() string {
	var parts []string
	if len(r.Namespaces) > 0 {
		parts = append(parts, "namespace "+JoinListed(r.Namespaces, ", "))
	}
	if r.NamespaceSelector != nil {
		parts = append(parts, "namespaces matching "+describeSelector(r.NamespaceSelector))
	}
	who := strings.Join(parts, " or ")
	if r.ServiceSelector != nil {
		who += " (Services matching " + describeSelector(r.ServiceSelector) + ")"
	}
	return who
}

func describeSelector(s labels.Selector) string {
	if s.Empty() {
		return "{} (every one)"
	}
	return Clip(s.String(), MaxEchoBytes)
}

// ReservedRangeOf returns the reserved range holding ip. Ranges never
// overlap (the loader refuses it), so there is at most one.
func (p *Policy) ReservedRangeOf(ip netip.Addr) (ReservedRange, bool) {
	// Sorted by first address: the last range starting at or below ip is
	// the only one that can hold it.
	i, found := slices.BinarySearchFunc(p.ReservedRanges, ip, func(r ReservedRange, ip netip.Addr) int { return r.Band.First.Compare(ip) })
	if !found {
		i--
	}
	if i >= 0 && i < len(p.ReservedRanges) && p.ReservedRanges[i].Contains(ip) {
		return p.ReservedRanges[i], true
	}
	return ReservedRange{}, false
}

// compileRanges loads reservedRanges: each range's shape, its namespaces
// and selectors, then overlaps and the total size. ReservedRanges ends up
// sorted by first address.
func (p *Policy) compileRanges(in []FileRange, ln lines) error {
	total := 0
	for i, f := range in {
		where := fmt.Sprintf("reservedRanges[%d] (line %d)", i, ln.at("reservedRanges", i))
		r, err := p.compileRange(i, f)
		if err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		if total += r.Size; total > MaxReservedRangeAddresses {
			return fmt.Errorf("%s: %s brings reservedRanges to more than %d addresses in all (the leader holds each free one with an IPAddress object); make the ranges smaller, or reserve single addresses under reservations", where, r.Written, MaxReservedRangeAddresses)
		}
		p.ReservedRanges = append(p.ReservedRanges, r)
	}
	slices.SortFunc(p.ReservedRanges, func(a, b ReservedRange) int { return a.Band.First.Compare(b.Band.First) })
	for k := 1; k < len(p.ReservedRanges); k++ {
		a, b := p.ReservedRanges[k-1], p.ReservedRanges[k]
		if b.Band.First.Compare(a.Band.Last) <= 0 {
			first, second := a, b
			if first.Index > second.Index {
				first, second = second, first
			}
			return fmt.Errorf("reservedRanges[%d] (line %d): %s overlaps reservedRanges[%d] %s (line %d) from %s; an address belongs to one range: shrink or merge them",
				second.Index, ln.at("reservedRanges", second.Index), second.Written, first.Index, first.Written, ln.at("reservedRanges", first.Index), b.Band.First)
		}
	}
	return nil
}

func (p *Policy) compileRange(i int, f FileRange) (ReservedRange, error) {
	r := ReservedRange{Index: i, Note: f.Note}
	switch {
	case f.CIDR != "" && (f.First != "" || f.Last != ""):
		return r, fmt.Errorf("gives both cidr %q and first/last; give the range one way", Echo(f.CIDR))
	case f.CIDR != "":
		pfx, err := allocview.ParsePrefix(f.CIDR)
		if err != nil {
			return r, fmt.Errorf("cidr %w", err)
		}
		if capped := hostBits(pfx); capped > 12 {
			return r, fmt.Errorf("cidr %s has %s addresses, more than the limit of %d for all ranges together; use a smaller prefix (/%d or longer)", pfx, bigCount(pfx), MaxReservedRangeAddresses, pfx.Addr().BitLen()-12)
		}
		r.Band = allocview.Band{First: pfx.Addr(), Last: lastOf(pfx)}
		r.Written = pfx.String()
	case f.First != "" && f.Last != "":
		first, err := allocview.ParseIP(f.First)
		if err != nil {
			return r, fmt.Errorf("first %w", err)
		}
		last, err := allocview.ParseIP(f.Last)
		if err != nil {
			return r, fmt.Errorf("last %w", err)
		}
		if first.Is4() != last.Is4() {
			return r, fmt.Errorf("first %s and last %s are of different IP families; a range holds one family (write one range per family)", first, last)
		}
		if last.Less(first) {
			return r, fmt.Errorf("last %s is below first %s; swap them", last, first)
		}
		r.Band = allocview.Band{First: first, Last: last}
		r.Written = first.String() + "-" + last.String()
	case f.First != "" || f.Last != "":
		return r, fmt.Errorf("needs both first and last (or a cidr instead), such as first: 10.96.0.20, last: 10.96.0.59")
	default:
		return r, fmt.Errorf("gives no range; set cidr (such as 10.96.0.16/28) or first and last")
	}
	n, ok := bandSize(r.Band, MaxReservedRangeAddresses)
	if !ok {
		return r, fmt.Errorf("%s has more than %d addresses, the limit for all ranges together; make it smaller, or reserve single addresses under reservations", r.Written, MaxReservedRangeAddresses)
	}
	r.Size = n
	if len(p.AllowedCIDRs) > 0 && !slices.ContainsFunc(p.AllowedCIDRs, func(a netip.Prefix) bool { return a.Contains(r.Band.First) && a.Contains(r.Band.Last) }) {
		return r, fmt.Errorf("%s is not wholly inside one of allowedCIDRs, so part of it could never be used; fix the range or allowedCIDRs", r.Written)
	}
	if len(f.Note) > MaxRangeNoteBytes {
		return r, fmt.Errorf("note is %d bytes, more than the limit of %d; refusals quote it, so keep it to a few words", len(f.Note), MaxRangeNoteBytes)
	}
	if len(f.Namespaces) > MaxRangeNamespaces {
		return r, fmt.Errorf("namespaces: %d entries, more than the limit of %d; label the namespaces and use namespaceSelector", len(f.Namespaces), MaxRangeNamespaces)
	}
	for j, ns := range f.Namespaces {
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return r, fmt.Errorf("namespaces[%d]: %q is not a namespace name: %s", j, Echo(ns), errs[0])
		}
	}
	r.Namespaces = f.Namespaces
	var err error
	if r.NamespaceSelector, err = compileSelector("namespaceSelector", f.NamespaceSelector); err != nil {
		return r, err
	}
	if r.ServiceSelector, err = compileSelector("serviceSelector", f.ServiceSelector); err != nil {
		return r, err
	}
	if len(r.Namespaces) == 0 && r.NamespaceSelector == nil {
		return r, fmt.Errorf("%s names no namespace that may use it; add namespaces (such as [team-a]) or a namespaceSelector (such as {matchLabels: {team: a}}; {} for every namespace)", r.Written)
	}
	return r, nil
}

// compileSelector parses a label selector as the apiserver does; nil stays
// nil (not set), {} selects everything.
func compileSelector(field string, s *FileSelector) (labels.Selector, error) {
	if s == nil {
		return nil, nil
	}
	ls := &metav1.LabelSelector{MatchLabels: s.MatchLabels}
	for _, e := range s.MatchExpressions {
		ls.MatchExpressions = append(ls.MatchExpressions, metav1.LabelSelectorRequirement{Key: e.Key, Operator: metav1.LabelSelectorOperator(e.Operator), Values: e.Values})
	}
	sel, err := metav1.LabelSelectorAsSelector(ls)
	if err != nil {
		return nil, fmt.Errorf("%s: %s; write it as a Kubernetes label selector, such as {matchLabels: {team: a}}", field, Clip(err.Error(), MaxMessageBytes/2))
	}
	return sel, nil
}

// hostBits is how many host bits a prefix has.
func hostBits(p netip.Prefix) int { return p.Addr().BitLen() - p.Bits() }

func bigCount(p netip.Prefix) string {
	return new(big.Int).Lsh(big.NewInt(1), uint(hostBits(p))).String()
}

// lastOf is the last address of p.
func lastOf(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	host := hostBits(p)
	for k := len(b) - 1; k >= 0 && host > 0; k-- {
		n := min(host, 8)
		b[k] |= byte(1<<n - 1)
		host -= n
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// bandSize counts the addresses of b, and says false when there are more
// than limit; the work is bounded whatever the band (an IPv6 band may span
// 2^128 addresses).
func bandSize(b allocview.Band, limit int) (int, bool) {
	f, l := b.First.As16(), b.Last.As16()
	d := new(big.Int).Sub(new(big.Int).SetBytes(l[:]), new(big.Int).SetBytes(f[:]))
	d.Add(d, big.NewInt(1))
	if !d.IsInt64() || d.Int64() > int64(limit) {
		return 0, false
	}
	return int(d.Int64()), true
}

// FitReservedRanges checks each reserved range against the active ranges
// rs (the cluster's, at apply time): a range must lie wholly inside one of
// them, or the allocator never hands out its addresses anyway and the
// range reserves nothing. The error names the range and the fix.
func FitReservedRanges(p *Policy, rs allocview.RangeSet) error {
	for _, r := range p.ReservedRanges {
		if !slices.ContainsFunc(rs.Active, func(a allocview.ActiveRange) bool {
			return a.Contains(r.Band.First) && a.Contains(r.Band.Last)
		}) {
			return fmt.Errorf("reservedRanges[%d]: %s is not wholly inside one active Service range (%s); choose a range inside one of them", r.Index, r.Written, rs.Describe())
		}
	}
	return nil
}
