package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"sigs.k8s.io/yaml"
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

// ParseObjectSpec loads the spec of a ClusterIPPolicy object (its JSON, as
// the apiserver serves it) through the same loader as a policy file, so
// every refusal carries the same message and names the same entry. The spec
// holds the file's fields without apiVersion and kind; line numbers in a
// message count in the spec rendered as YAML with sorted keys, after the
// two lines apiVersion and kind.
func ParseObjectSpec(spec []byte) (*Policy, error) {
	if len(spec) > MaxPolicyBytes {
		return nil, fmt.Errorf("the spec is %d bytes, more than the limit of %d; keep reservations and exemptions to what the cluster needs", len(spec), MaxPolicyBytes)
	}
	fields := map[string]any{}
	if len(spec) > 0 && string(spec) != "null" {
		if err := json.Unmarshal(spec, &fields); err != nil {
			return nil, fmt.Errorf("the spec is not a JSON object: %w", err)
		}
	}
	for _, k := range []string{"apiVersion", "kind"} {
		if _, ok := fields[k]; ok {
			return nil, fmt.Errorf("spec.%s: not a field of the spec; the object's own apiVersion is %s/%s", k, ObjectGroup, ObjectVersion)
		}
	}
	body := []byte{}
	if len(fields) > 0 {
		var err error
		if body, err = yaml.Marshal(fields); err != nil {
			return nil, fmt.Errorf("the spec cannot be rendered as a policy: %w", err)
		}
	}
	doc := append([]byte("apiVersion: "+APIVersion+"\nkind: "+Kind+"\n"), body...)
	return Parse(doc)
}

// LoadFileOrObject is LoadFile, under the name the commands still call.
func LoadFileOrObject(path string) (*Policy, error) { return LoadFile(path) }

func parseObject(data []byte) (*Policy, error) {
	if docs := bytes.Count(append([]byte("\n"), data...), []byte("\n---")); docs > 1 || (docs == 1 && !bytes.HasPrefix(bytes.TrimLeft(data, " \t\r\n"), []byte("---"))) {
		return nil, errors.New("more than one YAML document; a policy object file holds exactly one")
	}
	var obj struct {
		APIVersion string          `json:"apiVersion"`
		Kind       string          `json:"kind"`
		Metadata   map[string]any  `json:"metadata"`
		Spec       json.RawMessage `json:"spec"`
		Status     json.RawMessage `json:"status"` // as kubectl get -o yaml shows it; ignored
	}
	// Strict: a misspelt spec would otherwise load as the default policy.
	if err := yaml.UnmarshalStrict(data, &obj); err != nil {
		return nil, err
	}
	name, _ := obj.Metadata["name"].(string)
	if obj.Kind != Kind {
		return nil, fmt.Errorf("kind %q is not supported; use %s", Echo(obj.Kind), Kind)
	}
	if name != ObjectName {
		return nil, fmt.Errorf("metadata.name %q: the webhook reads exactly one %s, named %s; rename it", Echo(name), Kind, ObjectName)
	}
	p, err := ParseObjectSpec(obj.Spec)
	return p, withFileLines(data, err)
}
