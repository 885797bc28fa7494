package policy

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"clusterip-policy/pkg/apis/clusterippolicy/v1alpha1"
)

// maxNewerFields bounds the names SplitNewerFields reports, so a spec
// with many unknown keys yields a bounded warning.
const maxNewerFields = 8

// SplitNewerFields returns the spec without the fields this version's
// policy schema does not have, and their paths (spec.x.y, list entries as
// [i]; at most maxNewerFields named, then "..."). It is for a spec the
// apiserver has already checked against the installed CRD: the CRD prunes
// every field its schema lacks, so a field that reaches the webhook but
// that this version does not know was added by a newer CRD, and the
// replica judging it is older than the chart being installed (a rolling
// upgrade). A policy file is still read strictly (Parse): there an unknown
// field is a typo.
func SplitNewerFields(spec []byte) (known []byte, newer []string, err error) {
	if len(spec) > MaxPolicyBytes {
		return spec, nil, nil // ParseObjectSpec refuses it with its own message
	}
	var v any
	if len(spec) == 0 || string(spec) == "null" {
		return spec, nil, nil
	}
	if err := json.Unmarshal(spec, &v); err != nil {
		return spec, nil, nil // ParseObjectSpec says what is wrong with it
	}
	var found []fieldPath
	v = pruneUnknown(v, reflect.TypeFor[v1alpha1.ClusterIPPolicySpec](), fieldPath{{name: "spec"}}, &found)
	if len(found) == 0 {
		return spec, nil, nil
	}
	paths := make([]string, len(found))
	for i, p := range found {
		paths[i] = p.String()
	}
	if known, err = json.Marshal(v); err != nil {
		return nil, nil, fmt.Errorf("the spec without %s cannot be rendered: %w", strings.Join(paths, ", "), err)
	}
	sort.Strings(paths)
	return known, ClipList(paths, maxNewerFields), nil
}

// pruneUnknown removes from v (JSON decoded into any) the object keys t
// has no json-tagged field for, recursing into structs, pointers to
// structs and slices of them; maps (enforcement.rules, matchLabels) are
// kept whole. apiVersion and kind at the top of a spec are left to
// ParseObjectSpec to refuse with its own message.
func pruneUnknown(v any, t reflect.Type, path fieldPath, paths *[]fieldPath) any {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			return v
		}
		fields := map[string]reflect.Type{}
		for i := range t.NumField() {
			f := t.Field(i)
			if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name != "" && name != "-" {
				fields[name] = f.Type
			}
		}
		for k, sub := range m {
			ft, ok := fields[k]
			if !ok {
				if len(path) == 1 && (k == "apiVersion" || k == "kind") {
					continue
				}
				*paths = append(*paths, path.Child(k))
				delete(m, k)
				continue
			}
			m[k] = pruneUnknown(sub, ft, path.Child(k), paths)
		}
		return m
	case reflect.Slice:
		l, ok := v.([]any)
		if !ok {
			return v
		}
		for i := range l {
			l[i] = pruneUnknown(l[i], t.Elem(), path.Index(i), paths)
		}
		return l
	default:
		return v
	}
}

// fieldName is k as a path element, quoted when it is not a plain name so
// that a hostile key cannot put control characters into a warning.
func fieldName(k string) string {
	for _, r := range k {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return strconv.QuoteToASCII(k)
		}
	}
	return k
}
