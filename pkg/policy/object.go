package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
	sigsyaml "sigs.k8s.io/yaml"

	"clusterip-policy/pkg/apis/clusterippolicy/v1alpha1"
)

// The ClusterIPPolicy custom resource (manifests/base/crd.yaml); public API.
const (
	ObjectGroup    = "clusterip-policy.io"
	ObjectVersion  = "v1alpha1"
	ObjectResource = "clusterippolicies"
	// ObjectName is the one policy object the webhook reads; the CRD's
	// schema refuses any other name, so there is never a question of how
	// several would combine.
	ObjectName = "default"
)

// specPath is where the spec's fields sit in the object.
var specPath = fieldPath{{name: "spec"}}

// ParseObjectSpec loads the spec of a ClusterIPPolicy object (its JSON, as
// the apiserver serves it): decoded strictly into the typed spec (an
// unknown field is refused, naming its path) and compiled by Compile, so
// every refusal names its field (spec.reservations[3].ip). The Digest is
// that of the spec rendered as YAML with sorted keys after the two lines
// apiVersion and kind, as it has been since the spec was the policy file's
// body, so that a policy keeps its digest across versions.
func ParseObjectSpec(spec []byte) (*Policy, error) {
	return parseSpec(spec, nil)
}

// parseSpec is ParseObjectSpec; lines, when not nil, finds the line of a
// field in the object manifest file the spec was read from.
func parseSpec(spec []byte, lines locator) (*Policy, error) {
	if len(spec) > MaxPolicyBytes {
		return nil, fmt.Errorf("the spec is %d bytes, more than the limit of %d; keep reservations and exemptions to what the cluster needs", len(spec), MaxPolicyBytes)
	}
	var fields map[string]any
	if len(spec) > 0 && string(spec) != "null" {
		if err := json.Unmarshal(spec, &fields); err != nil {
			return nil, fmt.Errorf("the spec is not a JSON object: %w", err)
		}
	}
	c := newCompiler(specPath, lines)
	for _, k := range []string{"apiVersion", "kind"} {
		if _, ok := fields[k]; ok {
			c.fail(specPath.Child(k), "not a field of the spec; the object's own apiVersion is %s/%s", ObjectGroup, ObjectVersion)
		}
	}
	// Strict: a misspelt field would otherwise load as if it were absent
	// (a reservation dropped without a word).
	var unknown []fieldPath
	pruneUnknown(cloneJSON(fields), reflect.TypeFor[v1alpha1.ClusterIPPolicySpec](), specPath, &unknown)
	slices.SortFunc(unknown, func(a, b fieldPath) int {
		if d := c.line(a) - c.line(b); d != 0 {
			return d
		}
		return strings.Compare(a.String(), b.String())
	})
	for _, u := range unknown {
		c.failLine(u[:len(u)-1], c.line(u), "unknown field %q", Echo(u[len(u)-1].name))
	}
	if err := c.err(); err != nil {
		return nil, err
	}
	var typed v1alpha1.ClusterIPPolicySpec
	if fields != nil {
		if err := json.Unmarshal(spec, &typed); err != nil {
			var te *json.UnmarshalTypeError
			if errors.As(err, &te) && te.Field != "" {
				// encoding/json names the field without list indexes
				// (spec.reservations.ip): its line is that of the list.
				path := slices.Clone(specPath)
				for _, name := range strings.Split(te.Field, ".") {
					path = path.Child(name)
				}
				return nil, &FieldError{Field: path.String(), Line: c.line(path), Detail: fmt.Sprintf("is a %s; it must be %s", te.Value, schemaKind(te.Type))}
			}
			return nil, fmt.Errorf("spec: %w", err)
		}
	}
	p := c.compile(typed)
	if err := c.err(); err != nil {
		return nil, err
	}
	body := []byte{}
	if len(fields) > 0 {
		var err error
		if body, err = sigsyaml.Marshal(fields); err != nil {
			return nil, fmt.Errorf("the spec cannot be rendered for its digest: %w", err)
		}
	}
	p.Digest = digestOf(append([]byte("apiVersion: "+APIVersion+"\nkind: "+Kind+"\n"), body...))
	return p, nil
}

// cloneJSON copies the maps and lists of v, which pruneUnknown edits.
func cloneJSON(v any) any {
	switch v := v.(type) {
	case map[string]any:
		if v == nil {
			return v
		}
		m := make(map[string]any, len(v))
		for k, x := range v {
			m[k] = cloneJSON(x)
		}
		return m
	case []any:
		l := make([]any, len(v))
		for i, x := range v {
			l[i] = cloneJSON(x)
		}
		return l
	}
	return v
}

// LoadFileOrObject is LoadFile, under the name the commands still call.
func LoadFileOrObject(path string) (*Policy, error) { return LoadFile(path) }

// parseObject loads the object manifest file: decoded strictly (an unknown
// field is refused) and its spec compiled by Compile; each refusal gives
// the field's line in the file, found through the file's YAML node tree.
func parseObject(data []byte) (*Policy, error) {
	if len(data) > MaxPolicyBytes {
		return nil, fmt.Errorf("the file is %d bytes, more than the limit of %d (1 MiB, a ConfigMap's limit); keep reservations and exemptions to what the cluster needs", len(data), MaxPolicyBytes)
	}
	if docs := bytes.Count(append([]byte("\n"), data...), []byte("\n---")); docs > 1 || (docs == 1 && !bytes.HasPrefix(bytes.TrimLeft(data, " \t\r\n"), []byte("---"))) {
		return nil, errors.New("more than one YAML document; a policy object file holds exactly one")
	}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, err
	}
	lines := yamlLines(&root)
	doc, err := sigsyaml.YAMLToJSONStrict(data) // a key written twice is refused, not merged
	if err != nil {
		return nil, err
	}
	var obj struct {
		APIVersion string          `json:"apiVersion"`
		Kind       string          `json:"kind"`
		Metadata   map[string]any  `json:"metadata"`
		Spec       json.RawMessage `json:"spec"`
		Status     json.RawMessage `json:"status"` // as kubectl get -o yaml shows it; ignored
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&obj); err != nil {
		var top map[string]any
		if json.Unmarshal(doc, &top) == nil {
			var unknown []fieldPath
			for k := range top {
				if !slices.Contains([]string{"apiVersion", "kind", "metadata", "spec", "status"}, k) {
					unknown = append(unknown, fieldPath{{name: k}})
				}
			}
			if len(unknown) > 0 {
				// The first in the file, so that the same file is refused
				// with the same message.
				u := slices.MinFunc(unknown, func(a, b fieldPath) int { return lines(a) - lines(b) })
				return nil, fmt.Errorf("line %d: unknown field %q; a %s has apiVersion, kind, metadata, spec and status", lines(u), u.String(), Kind)
			}
		}
		return nil, err
	}
	name, _ := obj.Metadata["name"].(string)
	if obj.Kind != Kind {
		return nil, fmt.Errorf("kind %q is not supported; use %s", Echo(obj.Kind), Kind)
	}
	if name != ObjectName {
		return nil, fmt.Errorf("metadata.name %q: the webhook reads exactly one %s, named %s; rename it", Echo(name), Kind, ObjectName)
	}
	return parseSpec(obj.Spec, lines)
}

// schemaKind names what a field of the spec holds, in the schema's words.
func schemaKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice:
		return "a list"
	case reflect.Struct, reflect.Map, reflect.Pointer:
		return "an object"
	}
	return t.Kind().String()
}
