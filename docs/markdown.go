// Package docs holds the repository's documentation and the Markdown rules
// its tests check it by: GitHub's heading anchors, relative links and the
// commands shown in shell blocks. manifests uses Anchors to check that every
// alert's runbook_url names a heading that exists.
package docs

import (
	"fmt"
	"regexp"
	"strings"
	"unicode"
)

// Anchors returns the anchor of every heading in a Markdown document, as
// GitHub renders them: the heading's text without inline markup, lower case,
// every character that is not a letter, digit, space, hyphen or underscore
// dropped, spaces turned into hyphens; a repeated anchor gets -1, -2, ...
// "## The apiserver's audit log (`--audit-log-path`)" gives
// "the-apiservers-audit-log---audit-log-path".
func Anchors(markdown string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, l := range outsideFences(markdown) {
		m := heading.FindStringSubmatch(l.text)
		if m == nil {
			continue
		}
		a := Anchor(m[1])
		if n := seen[a]; n > 0 {
			seen[a] = n + 1
			a = fmt.Sprintf("%s-%d", a, n)
		} else {
			seen[a] = 1
		}
		out[a] = true
	}
	return out
}

var (
	heading    = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	inlineLink = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	// A link target in running text: [text](target), not an image.
	linkTarget = regexp.MustCompile(`(?:^|[^!])\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	codeSpan   = regexp.MustCompile("`[^`]*`")
)

// Anchor is the anchor GitHub gives one heading's text.
func Anchor(text string) string {
	text = inlineLink.ReplaceAllString(text, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Line is one line of a document, with its 1-based number.
type Line struct {
	Number int
	text   string
}

// outsideFences returns the lines that are not inside a fenced code block.
func outsideFences(markdown string) []Line {
	var out []Line
	fence := ""
	for i, l := range strings.Split(markdown, "\n") {
		t := strings.TrimLeft(l, " ")
		if fence != "" {
			if strings.HasPrefix(t, fence) && strings.TrimSpace(strings.TrimLeft(t, fence[:1])) == "" {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~") {
			fence = t[:3]
			continue
		}
		out = append(out, Line{Number: i + 1, text: l})
	}
	return out
}

// Link is a link target found in running text.
type Link struct {
	Line   int
	Target string
}

// Links returns the link targets of a document, leaving out code blocks and
// code spans (a `[x](y)` there is an example, not a link).
func Links(markdown string) []Link {
	var out []Link
	for _, l := range outsideFences(markdown) {
		text := codeSpan.ReplaceAllString(l.text, "")
		for _, m := range linkTarget.FindAllStringSubmatch(text, -1) {
			out = append(out, Link{Line: l.Number, Target: m[1]})
		}
	}
	return out
}

// Block is a fenced code block: its info string (sh, yaml, ...), the line
// its first content line is on, and its lines.
type Block struct {
	Info  string
	Line  int
	Lines []string
}

// Blocks returns the fenced code blocks of a document.
func Blocks(markdown string) []Block {
	var out []Block
	var cur *Block
	fence := ""
	for i, l := range strings.Split(markdown, "\n") {
		t := strings.TrimLeft(l, " ")
		if cur != nil {
			if strings.HasPrefix(t, fence) && strings.TrimSpace(strings.TrimLeft(t, fence[:1])) == "" {
				out = append(out, *cur)
				cur, fence = nil, ""
				continue
			}
			// An indented block (inside a list item) is indented as a whole.
			cur.Lines = append(cur.Lines, l)
			continue
		}
		if strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~") {
			fence = t[:3]
			cur = &Block{Info: strings.TrimSpace(t[3:]), Line: i + 2}
		}
	}
	return out
}

// Commands returns the command lines of a shell block: for sh, bash and
// shell, every line that is not a comment, continuation lines (ending in a
// backslash) joined and a trailing " # comment" dropped; for console, the
// lines after a "$ " prompt. Whitespace runs become one space. Other blocks
// hold no commands.
func Commands(b Block) []string {
	var out []string
	switch b.Info {
	case "sh", "bash", "shell":
		joined := ""
		for _, l := range b.Lines {
			l = strings.TrimSpace(l)
			if joined == "" && (l == "" || strings.HasPrefix(l, "#")) {
				continue
			}
			if strings.HasSuffix(l, `\`) {
				joined += strings.TrimSuffix(l, `\`) + " "
				continue
			}
			out = append(out, normalize(stripComment(joined+l)))
			joined = ""
		}
		if joined != "" {
			out = append(out, normalize(joined))
		}
	case "console":
		for _, l := range b.Lines {
			l = strings.TrimSpace(l)
			if c, ok := strings.CutPrefix(l, "$ "); ok {
				out = append(out, normalize(stripComment(c)))
			}
		}
	}
	return out
}

// trailingComment is " # ..." after a command; a # inside quotes is rare in
// our commands and none is followed by a space.
var trailingComment = regexp.MustCompile(`\s+#\s.*$`)

func stripComment(s string) string { return trailingComment.ReplaceAllString(s, "") }

func normalize(s string) string { return strings.Join(strings.Fields(s), " ") }

// Span is a code span of running text (`...`), with its line.
type Span struct {
	Line int
	Text string
}

// CodeSpans returns the code spans of running text: those on one line
// outside fenced code blocks, their text with whitespace runs made one
// space. A span broken across lines is not read.
func CodeSpans(markdown string) []Span {
	var out []Span
	for _, l := range outsideFences(markdown) {
		for _, m := range codeSpan.FindAllString(l.text, -1) {
			if t := normalize(strings.Trim(m, "`")); t != "" {
				out = append(out, Span{Line: l.Number, Text: t})
			}
		}
	}
	return out
}
