package policy

import (
	"bytes"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
)

// A policy object file is parsed through its spec as JSON (what the
// apiserver would store), so a refusal's line numbers count in the spec
// re-rendered as YAML, not in the file the operator wrote. When a file's
// spec is an ordinary block mapping, specInPlace rebuilds a policy document
// whose every spec line sits on the line it has in the file: the spec's
// lines shifted left by its indentation, apiVersion and kind on their own
// lines, everything else blank. Parsing that document gives the same
// refusal with the file's line numbers.

var lineNumber = regexp.MustCompile(`line \d+`)

// withFileLines returns err, or the same refusal with line numbers counted
// in data when the spec can be laid out in place and that parse refuses it
// in the same words. Any other outcome keeps err: the message may then
// count lines in the rendered spec, but it never changes meaning.
func withFileLines(data []byte, err error) error {
	if err == nil || len(data) > MaxPolicyBytes || !lineNumber.MatchString(err.Error()) {
		return err
	}
	doc, ok := specInPlace(data)
	if !ok {
		return err
	}
	_, inPlace := Parse(doc)
	if inPlace == nil || lineNumber.ReplaceAllString(inPlace.Error(), "line") != lineNumber.ReplaceAllString(err.Error(), "line") {
		return err
	}
	return inPlace
}

// specInPlace lays the file's spec out as a policy document, line for line;
// false when the file's layout does not allow it (flow style, a spec on the
// spec key's own line, a line indented less than the spec's entries).
func specInPlace(data []byte) ([]byte, bool) {
	var root yaml.Node
	if yaml.Unmarshal(data, &root) != nil || len(root.Content) != 1 || root.Content[0].Kind != yaml.MappingNode {
		return nil, false
	}
	top := root.Content[0]
	if top.Style&yaml.FlowStyle != 0 {
		return nil, false
	}
	lines := strings.Split(string(data), "\n")
	out := make([]string, len(lines))
	var spec *yaml.Node
	specLine, apiLine, kindLine := 0, 0, 0
	end := len(lines) // the spec's block ends before the next top-level key
	for i := 0; i+1 < len(top.Content); i += 2 {
		k := top.Content[i]
		switch k.Value {
		case "spec":
			spec, specLine = top.Content[i+1], k.Line
		case "apiVersion":
			apiLine = k.Line
		case "kind":
			kindLine = k.Line
		}
	}
	if spec == nil || apiLine == 0 || kindLine == 0 || spec.Kind != yaml.MappingNode || spec.Style&yaml.FlowStyle != 0 || len(spec.Content) == 0 {
		return nil, false
	}
	for i := 0; i < len(top.Content); i += 2 {
		if l := top.Content[i].Line; l > specLine && l-1 < end {
			end = l - 1
		}
	}
	first := spec.Content[0]
	if first.Line <= specLine || first.Column < 2 {
		return nil, false
	}
	indent := first.Column - 1
	for n := first.Line; n <= end; n++ { // n counts from 1
		l := lines[n-1]
		trimmed := strings.TrimLeft(l, " ")
		switch {
		case trimmed == "" || strings.HasPrefix(trimmed, "#"):
		case len(l)-len(trimmed) < indent:
			return nil, false
		default:
			out[n-1] = l[indent:]
		}
	}
	if apiLine > first.Line && apiLine <= end || kindLine > first.Line && kindLine <= end {
		return nil, false
	}
	out[apiLine-1] = "apiVersion: " + APIVersion
	out[kindLine-1] = "kind: " + Kind
	return bytes.TrimRight([]byte(strings.Join(out, "\n")), "\n"), true
}
