package policy

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Bounds on everything a decision echoes from its input. A request can be
// as large as the apiserver's 3 MiB body limit (and a request sent straight
// to the webhook larger still), so no message, list or value taken from it
// may grow with it: each is cut, with a visible marker saying how much was
// left out.
const (
	// MaxEchoBytes bounds one value quoted from a request (an IP, a name, a
	// user, an operation) in a message or the audit log.
	MaxEchoBytes = 128
	// MaxListed bounds the items listed from a list of any length (requested
	// IPs, active ranges, static bands, violations, warnings).
	MaxListed = 4
	// MaxMessageBytes bounds a decision's message and each warning.
	MaxMessageBytes = 2048
)

// Clip returns s cut to max bytes (on a rune boundary), followed by a
// marker naming what was left out: `aaaa... (1234 more bytes)`. A string
// at most clipSlack bytes over max is kept whole, so clipping a clipped
// string again keeps it as it is (and its count right).
func Clip(s string, max int) string {
	if len(s) <= max+clipSlack {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "... (" + strconv.Itoa(len(s)-cut) + " more bytes)"
}

// clipSlack is room for the marker Clip appends (at most 27 bytes).
const clipSlack = 32

// Echo clips a value quoted from a request to MaxEchoBytes.
func Echo(s string) string { return Clip(s, MaxEchoBytes) }

// ClipList returns at most max items of list, each clipped to MaxEchoBytes;
// when items were left out the last element says how many:
// `["10.96.0.5", "10.96.0.5", "... (49998 more)"]`.
func ClipList(list []string, max int) []string {
	if len(list) <= max && !slices.ContainsFunc(list, func(s string) bool { return len(s) > MaxEchoBytes+clipSlack }) {
		return list // nothing to cut: no copy on the common path
	}
	n := min(len(list), max)
	out := make([]string, 0, n+1)
	for _, s := range list[:n] {
		out = append(out, Echo(s))
	}
	if len(list) > n {
		out = append(out, fmt.Sprintf("... (%d more)", len(list)-n))
	}
	return out
}

// JoinListed joins at most MaxListed items with sep, naming how many more
// there are: `a, b, c, d and 12 more`.
func JoinListed(items []string, sep string) string {
	if len(items) <= MaxListed {
		return strings.Join(items, sep)
	}
	return strings.Join(items[:MaxListed], sep) + fmt.Sprintf(" and %d more", len(items)-MaxListed)
}

// quoteList renders a list the way the apiserver's field errors render a
// value: `["10.96.0.5","10.96.0.6"]`, clipped to MaxListed items.
func quoteList(list []string) string {
	shown := ClipList(list, MaxListed)
	parts := make([]string, len(shown))
	for i, s := range shown {
		parts[i] = strconv.Quote(s)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// bound caps what a finished decision carries, whatever produced it: the
// message, the warnings, the violations and the IP lists. With the shape
// check in front (at most two IPs reach the per-IP rules) these caps are
// never reached by a real request; they hold the output bounded if a future
// rule forgets to.
func (d Decision) bound() Decision {
	d.Message = Clip(d.Message, MaxMessageBytes)
	if len(d.Warnings) > MaxListed {
		more := len(d.Warnings) - MaxListed
		d.Warnings = append(d.Warnings[:MaxListed:MaxListed], fmt.Sprintf("... (%d more warnings)", more))
	}
	for i, w := range d.Warnings {
		d.Warnings[i] = Clip(w, MaxMessageBytes)
	}
	if len(d.Violations) > MaxListed {
		d.Violations = d.Violations[:MaxListed:MaxListed]
	}
	d.RequestedIPs = ClipList(d.RequestedIPs, MaxListed)
	d.FinalIPs = ClipList(d.FinalIPs, MaxListed)
	return d
}
