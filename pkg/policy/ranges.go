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
	"clusterip-policy/pkg/apis/clusterippolicy/v1alpha1"
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
func (p *Policy) compileRanges(c *compiler, in []v1alpha1.ReservedRange) {
	path := c.root.Child("reservedRanges")
	total, bad := 0, false
	for i, f := range in {
		r, ok := p.compileRange(c, path.Index(i), i, f)
		if !ok {
			bad = true
			continue
		}
		if total += r.Size; total > MaxReservedRangeAddresses {
			c.fail(path.Index(i), "%s brings reservedRanges to more than %d addresses in all (the leader holds each free one with an IPAddress object); make the ranges smaller, or reserve single addresses under reservations", r.Written, MaxReservedRangeAddresses)
			return
		}
		p.ReservedRanges = append(p.ReservedRanges, r)
	}
	if bad {
		return // an overlap with a range that did not load would be a guess
	}
	slices.SortFunc(p.ReservedRanges, func(a, b ReservedRange) int { return a.Band.First.Compare(b.Band.First) })
	for k := 1; k < len(p.ReservedRanges); k++ {
		a, b := p.ReservedRanges[k-1], p.ReservedRanges[k]
		if b.Band.First.Compare(a.Band.Last) <= 0 {
			first, second := a, b
			if first.Index > second.Index {
				first, second = second, first
			}
			c.fail(path.Index(second.Index), "%s overlaps %s %s%s from %s; an address belongs to one range: shrink or merge them",
				second.Written, path.Index(first.Index), first.Written, c.lineNote(path.Index(first.Index)), b.Band.First)
		}
	}
}

// compileRange checks one entry of reservedRanges; false when it is
// refused (the refusal recorded in c).
func (p *Policy) compileRange(c *compiler, path fieldPath, i int, f v1alpha1.ReservedRange) (ReservedRange, bool) {
	r := ReservedRange{Index: i, Note: f.Note}
	switch {
	case f.CIDR != "" && (f.First != "" || f.Last != ""):
		c.fail(path, "gives both cidr %q and first/last; give the range one way", Echo(string(f.CIDR)))
		return r, false
	case f.CIDR != "":
		pfx, err := allocview.ParsePrefix(string(f.CIDR))
		if err != nil {
			c.fail(path.Child("cidr"), "%s", err)
			return r, false
		}
		if capped := hostBits(pfx); capped > 12 {
			c.fail(path.Child("cidr"), "%s has %s addresses, more than the limit of %d for all ranges together; use a smaller prefix (/%d or longer)", pfx, bigCount(pfx), MaxReservedRangeAddresses, pfx.Addr().BitLen()-12)
			return r, false
		}
		r.Band = allocview.Band{First: pfx.Addr(), Last: lastOf(pfx)}
		r.Written = pfx.String()
	case f.First != "" && f.Last != "":
		first, err := allocview.ParseIP(string(f.First))
		if err != nil {
			c.fail(path.Child("first"), "%s", err)
			return r, false
		}
		last, err := allocview.ParseIP(string(f.Last))
		if err != nil {
			c.fail(path.Child("last"), "%s", err)
			return r, false
		}
		if first.Is4() != last.Is4() {
			c.fail(path, "first %s and last %s are of different IP families; a range holds one family (write one range per family)", first, last)
			return r, false
		}
		if last.Less(first) {
			c.fail(path, "last %s is below first %s; swap them", last, first)
			return r, false
		}
		r.Band = allocview.Band{First: first, Last: last}
		r.Written = first.String() + "-" + last.String()
	case f.First != "" || f.Last != "":
		c.fail(path, "needs both first and last (or a cidr instead), such as first: 10.96.0.20, last: 10.96.0.59")
		return r, false
	default:
		c.fail(path, "gives no range; set cidr (such as 10.96.0.16/28) or first and last")
		return r, false
	}
	n, ok := bandSize(r.Band, MaxReservedRangeAddresses)
	if !ok {
		c.fail(path, "%s has more than %d addresses, the limit for all ranges together; make it smaller, or reserve single addresses under reservations", r.Written, MaxReservedRangeAddresses)
		return r, false
	}
	r.Size = n
	if len(p.AllowedCIDRs) > 0 && !slices.ContainsFunc(p.AllowedCIDRs, func(a netip.Prefix) bool { return a.Contains(r.Band.First) && a.Contains(r.Band.Last) }) {
		c.fail(path, "%s is not wholly inside one of allowedCIDRs, so part of it could never be used; fix the range or allowedCIDRs", r.Written)
		return r, false
	}
	if len(f.Note) > MaxRangeNoteBytes {
		c.fail(path.Child("note"), "is %d bytes, more than the limit of %d; refusals quote it, so keep it to a few words", len(f.Note), MaxRangeNoteBytes)
		return r, false
	}
	if len(f.Namespaces) > MaxRangeNamespaces {
		c.fail(path.Child("namespaces"), "%d entries, more than the limit of %d; label the namespaces and use namespaceSelector", len(f.Namespaces), MaxRangeNamespaces)
		return r, false
	}
	ok = true
	for j, ns := range f.Namespaces {
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			c.fail(path.Child("namespaces").Index(j), "%q is not a namespace name: %s", Echo(ns), errs[0])
			ok = false
		}
	}
	r.Namespaces = f.Namespaces
	var err error
	if r.NamespaceSelector, err = compileSelector(f.NamespaceSelector); err != nil {
		c.fail(path.Child("namespaceSelector"), "%s", err)
		ok = false
	}
	if r.ServiceSelector, err = compileSelector(f.ServiceSelector); err != nil {
		c.fail(path.Child("serviceSelector"), "%s", err)
		ok = false
	}
	if ok && len(r.Namespaces) == 0 && r.NamespaceSelector == nil {
		c.fail(path, "%s names no namespace that may use it; add namespaces (such as [team-a]) or a namespaceSelector (such as {matchLabels: {team: a}}; {} for every namespace)", r.Written)
		ok = false
	}
	return r, ok
}

// compileSelector parses a label selector as the apiserver does; nil stays
// nil (not set), {} selects everything.
func compileSelector(s *metav1.LabelSelector) (labels.Selector, error) {
	if s == nil {
		return nil, nil
	}
	sel, err := metav1.LabelSelectorAsSelector(s)
	if err != nil {
		return nil, fmt.Errorf("%s; write it as a Kubernetes label selector, such as {matchLabels: {team: a}}", Clip(err.Error(), MaxMessageBytes/2))
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
			return &FieldError{Field: specPath.Child("reservedRanges").Index(r.Index).String(), Detail: fmt.Sprintf("%s is not wholly inside one active Service range (%s); choose a range inside one of them", r.Written, rs.Describe())}
		}
	}
	return nil
}
