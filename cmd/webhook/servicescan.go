package main

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"

	"clusterip-policy/pkg/policy"
)

// scanServiceFields is the fast path of decodeServiceFields: it walks the
// object's bytes once, looking only at the members of metadata and spec
// that serviceFields holds, and skips everything else (managedFields,
// labels, ports: most of a Service's bytes) without decoding it.
// encoding/json would validate the whole object first and then walk it
// again with its general state machine.
//
// It gives up (ok false) on anything it does not handle exactly as
// encoding/json would: a key with an escape or a non-ASCII byte (which
// encoding/json folds by Unicode rules), a member of the wrong type, a
// malformed value. decodeServiceFields then decodes with encoding/json,
// which answers those with its own errors. FuzzScanServiceFields holds the
// two equal wherever the scan succeeds.
func scanServiceFields(raw []byte) (f serviceFields, ok bool) {
	s := scanner{data: raw}
	ok = s.object(func(key, value []byte) bool {
		switch {
		case bytes.EqualFold(key, []byte("metadata")):
			return scanMetadata(value, &f)
		case bytes.EqualFold(key, []byte("spec")):
			if isNull(value) {
				f.Spec = nil
				return true
			}
			if f.Spec == nil {
				f.Spec = &serviceSpecFields{}
			}
			return scanSpec(value, f.Spec)
		}
		return true
	})
	if !ok || !s.end() {
		return serviceFields{}, false
	}
	return f, true
}

func scanMetadata(value []byte, f *serviceFields) bool {
	if isNull(value) {
		return true // decoding null into a struct changes nothing
	}
	s := scanner{data: value}
	return s.object(func(key, value []byte) bool {
		switch {
		case bytes.EqualFold(key, []byte("name")):
			return scanString(value, &f.Metadata.Name)
		case bytes.EqualFold(key, []byte("namespace")):
			return scanString(value, &f.Metadata.Namespace)
		}
		return true
	}) && s.end()
}

func scanSpec(value []byte, spec *serviceSpecFields) bool {
	s := scanner{data: value}
	return s.object(func(key, value []byte) bool {
		switch {
		case bytes.EqualFold(key, []byte("type")):
			var t string
			if !scanString(value, &t) {
				return false
			}
			if !isNull(value) {
				spec.Type = corev1.ServiceType(t)
			}
			return true
		case bytes.EqualFold(key, []byte("clusterIP")):
			return scanString(value, &spec.ClusterIP)
		case bytes.EqualFold(key, []byte("clusterIPs")):
			return scanListHead(value, &spec.ClusterIPs)
		case bytes.EqualFold(key, []byte("ipFamilies")):
			return scanListHead(value, &spec.IPFamilies)
		case bytes.EqualFold(key, []byte("ipFamilyPolicy")):
			if isNull(value) {
				spec.IPFamilyPolicy = nil
				return true
			}
			var p string
			if !scanString(value, &p) {
				return false
			}
			policy := corev1.IPFamilyPolicy(p)
			spec.IPFamilyPolicy = &policy
			return true
		}
		return true
	}) && s.end()
}

// scanString stores a JSON string value in dst; null leaves dst as it is,
// as encoding/json does. A string with escapes or invalid UTF-8 (which
// encoding/json replaces) is decoded by encoding/json.
func scanString(value []byte, dst *string) bool {
	if isNull(value) {
		return true
	}
	if len(value) < 2 || value[0] != '"' {
		return false
	}
	body := value[1 : len(value)-1]
	if bytes.IndexByte(body, '\\') < 0 && utf8.Valid(body) {
		*dst = string(body)
		return true
	}
	v, err := unmarshalString(value)
	if err != nil {
		return false
	}
	*dst = v
	return true
}

// unmarshalString is encoding/json's decoding of a string, apart so that
// only a string that needs it pays for a variable on the heap.
//
//go:noinline
func unmarshalString(value []byte) (string, error) {
	var v string
	err := json.Unmarshal(value, &v)
	return v, err
}

// scanListHead is listHead.UnmarshalJSON without encoding/json: the
// number of entries, and the first policy.MaxClusterIPs of them, which
// must be strings (or null, which decodes as "").
func scanListHead(value []byte, l *listHead) bool {
	if isNull(value) {
		*l = listHead{}
		return true
	}
	s := scanner{data: value}
	if s.peek() != '[' {
		return false
	}
	next := listHead{head: make([]string, 0, policy.MaxClusterIPs)}
	ok := s.array(func(elem []byte) bool {
		if next.n < policy.MaxClusterIPs {
			var str string
			if !scanString(elem, &str) {
				return false
			}
			next.head = append(next.head, str)
		}
		next.n++
		return true
	}) && s.end()
	if ok {
		*l = next
	}
	return ok
}

func isNull(value []byte) bool { return string(value) == "null" }

// scanner walks a JSON text and checks its syntax as encoding/json does
// (it accepts what json.Valid accepts, nested at most maxScanDepth deep),
// without building anything.
type scanner struct {
	data  []byte
	i     int
	depth int
}

// maxScanDepth is encoding/json's own nesting limit; the scan gives up
// (and encoding/json reports the error) beyond it.
const maxScanDepth = 10000

func (s *scanner) space() {
	for s.i < len(s.data) {
		switch s.data[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// end reports whether only white space is left.
func (s *scanner) end() bool {
	s.space()
	return s.i == len(s.data)
}

func (s *scanner) peek() byte {
	if s.i < len(s.data) {
		return s.data[s.i]
	}
	return 0
}

// object calls member for each member of the object at the scanner's
// position, in order, with the key's bytes (without quotes) and the
// value's bytes. It returns false on a malformed object, a key with an
// escape or a non-ASCII byte, or when member returns false. With a nil
// member it only skips the object, and any key goes.
func (s *scanner) object(member func(key, value []byte) bool) bool {
	s.space()
	if s.peek() != '{' {
		return false
	}
	if s.depth++; s.depth > maxScanDepth {
		return false
	}
	defer func() { s.depth-- }()
	s.i++
	s.space()
	if s.peek() == '}' {
		s.i++
		return true
	}
	for {
		s.space()
		if s.peek() != '"' {
			return false
		}
		if member == nil {
			if !s.str() {
				return false
			}
			s.space()
			if s.peek() != ':' {
				return false
			}
			s.i++
			s.space()
			if !s.value() {
				return false
			}
			s.space()
			switch s.peek() {
			case ',':
				s.i++
				continue
			case '}':
				s.i++
				return true
			}
			return false
		}
		start := s.i + 1
		end := start
		for end < len(s.data) && s.data[end] != '"' {
			if c := s.data[end]; c == '\\' || c >= utf8.RuneSelf || c < 0x20 {
				return false
			}
			end++
		}
		if end >= len(s.data) {
			return false
		}
		key := s.data[start:end]
		s.i = end + 1
		s.space()
		if s.peek() != ':' {
			return false
		}
		s.i++
		s.space()
		vstart := s.i
		if !s.value() || !member(key, s.data[vstart:s.i]) {
			return false
		}
		s.space()
		switch s.peek() {
		case ',':
			s.i++
		case '}':
			s.i++
			return true
		default:
			return false
		}
	}
}

// array calls elem for each element of the array at the scanner's
// position, with the element's bytes; with a nil elem it only skips the
// array.
func (s *scanner) array(elem func(value []byte) bool) bool {
	if s.depth++; s.depth > maxScanDepth {
		return false
	}
	defer func() { s.depth-- }()
	s.i++ // [
	s.space()
	if s.peek() == ']' {
		s.i++
		return true
	}
	for {
		s.space()
		start := s.i
		if !s.value() || (elem != nil && !elem(s.data[start:s.i])) {
			return false
		}
		s.space()
		switch s.peek() {
		case ',':
			s.i++
		case ']':
			s.i++
			return true
		default:
			return false
		}
	}
}

// value skips one value.
func (s *scanner) value() bool {
	switch c := s.peek(); {
	case c == '"':
		return s.str()
	case c == '{':
		return s.object(nil)
	case c == '[':
		return s.array(nil)
	case c == '-' || (c >= '0' && c <= '9'):
		return s.number()
	}
	for _, lit := range []string{"true", "false", "null"} {
		if bytes.HasPrefix(s.data[s.i:], []byte(lit)) {
			s.i += len(lit)
			return true
		}
	}
	return false
}

// plainInString marks the bytes a string may hold as they are: all but
// the quote, the backslash and control characters.
var plainInString = func() (t [256]bool) {
	for c := 0x20; c < len(t); c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// str skips a string: no control characters, only JSON's escapes.
func (s *scanner) str() bool {
	s.i++ // the opening quote
	for s.i < len(s.data) {
		for s.i < len(s.data) && plainInString[s.data[s.i]] {
			s.i++ // the common case, one table lookup a byte
		}
		if s.i >= len(s.data) {
			return false
		}
		c := s.data[s.i]
		switch {
		case c == '"':
			s.i++
			return true
		case c < 0x20:
			return false
		case c == '\\':
			s.i++
			switch s.peek() {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i++
			case 'u':
				if s.i+5 > len(s.data) {
					return false
				}
				for _, h := range s.data[s.i+1 : s.i+5] {
					if !isHex(h) {
						return false
					}
				}
				s.i += 5
			default:
				return false
			}
		default:
			s.i++
		}
	}
	return false
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

// number skips a number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *scanner) number() bool {
	if s.peek() == '-' {
		s.i++
	}
	switch c := s.peek(); {
	case c == '0':
		s.i++
	case c >= '1' && c <= '9':
		s.digits()
	default:
		return false
	}
	if s.peek() == '.' {
		s.i++
		if !s.digits() {
			return false
		}
	}
	if c := s.peek(); c == 'e' || c == 'E' {
		s.i++
		if c := s.peek(); c == '+' || c == '-' {
			s.i++
		}
		if !s.digits() {
			return false
		}
	}
	return true
}

// digits skips one or more digits.
func (s *scanner) digits() bool {
	start := s.i
	for c := s.peek(); c >= '0' && c <= '9'; c = s.peek() {
		s.i++
	}
	return s.i > start
}
