package backstop

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"unicode"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
)

// quote writes s as a single-quoted CEL string literal. Everything that is
// not printable ASCII, and the quote and backslash themselves, is escaped,
// so a note or a label value can never end the literal early.
func quote(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('\'')
	for _, r := range s {
		switch {
		case r == '\\' || r == '\'':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x80 && unicode.IsPrint(r):
			b.WriteRune(r)
		case r <= 0xFFFF:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
	}
	b.WriteByte('\'')
	return b.String()
}

// quoteList writes ss as a CEL list of string literals: ['a', 'b'].
func quoteList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = quote(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// prefixStrings writes prefixes as their canonical strings.
func prefixStrings(ps []netip.Prefix) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return out
}

// inPrefixes is true when the IP string expression ipExpr lies in one of
// prefixes; false for an empty list. ipExpr must hold a string isIP accepts.
func inPrefixes(ipExpr string, prefixes []netip.Prefix) string {
	switch len(prefixes) {
	case 0:
		return "false"
	case 1:
		return fmt.Sprintf("cidr(%s).containsIP(%s)", quote(prefixes[0].String()), ipExpr)
	}
	return fmt.Sprintf("%s.exists(p, cidr(p).containsIP(%s))", quoteList(prefixStrings(prefixes)), ipExpr)
}

// selectorCEL is true when the labels map expression labelsExpr (which may
// be absent: hasLabels guards it) matches sel, as labels.Selector.Matches
// does. nil or empty selects everything. A requirement of another kind
// than a label selector can hold is an error: the rule is then left to the
// webhook rather than encoded wrong.
func selectorCEL(sel labels.Selector, labelsExpr, hasLabels string) (string, error) {
	if sel == nil || sel.Empty() {
		return "true", nil
	}
	reqs, _ := sel.Requirements()
	var parts []string
	has := func(k string) string { return fmt.Sprintf("(%s && %s in %s)", hasLabels, quote(k), labelsExpr) }
	val := func(k string) string { return fmt.Sprintf("%s[%s]", labelsExpr, quote(k)) }
	for _, r := range reqs {
		k := r.Key()
		vals := r.ValuesUnsorted()
		slices.Sort(vals)
		switch r.Operator() {
		case selection.Equals, selection.DoubleEquals, selection.In:
			parts = append(parts, fmt.Sprintf("(%s && %s in %s)", has(k), val(k), quoteList(vals)))
		case selection.NotEquals, selection.NotIn:
			parts = append(parts, fmt.Sprintf("(!%s || !(%s in %s))", has(k), val(k), quoteList(vals)))
		case selection.Exists:
			parts = append(parts, has(k))
		case selection.DoesNotExist:
			parts = append(parts, "!"+has(k))
		default:
			// Gt and Lt: node affinity has them, a label selector
			// (metav1.LabelSelectorAsSelector) never makes them.
			return "", fmt.Errorf("selector %s: operator %s has no CEL form here", sel, r.Operator())
		}
	}
	return "(" + strings.Join(parts, " && ") + ")", nil
}
