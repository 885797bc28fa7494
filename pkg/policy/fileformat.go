package policy

import (
	"fmt"

	"sigs.k8s.io/yaml"
)

// LoadForTools loads --policy for `clusterip-policy review` and `clusterip-policy audit`: the
// ClusterIPPolicy object manifest or, unchanged, the policy file. For a
// file it also returns a note for stderr: the file's apiVersion
// (clusterip-policy/v1alpha1) keeps working in these tools, but the
// webhook's policy is the object now, and the note says how to convert.
// The note is one line of bounded length (the path is clipped).
func LoadForTools(path string) (*Policy, string, error) {
	p, err := LoadFileOrObject(path)
	if err != nil {
		return nil, "", err
	}
	data, err := readBounded(path, MaxPolicyBytes)
	if err != nil {
		return p, "", nil // it loaded a moment ago; no note is better than a wrong one
	}
	var head struct {
		APIVersion string `json:"apiVersion"`
	}
	if yaml.Unmarshal(data, &head) != nil || head.APIVersion != APIVersion {
		return p, "", nil
	}
	return p, FileFormatNote(path), nil
}

// FileFormatNote names the object's apiVersion and the conversion of a
// policy file at path into it.
func FileFormatNote(path string) string {
	return fmt.Sprintf("note: %q is a policy file (apiVersion %s), read as before; the webhook now takes its policy from the %s object (apiVersion %s/%s, named %s). "+
		"To convert: drop apiVersion and kind, indent the rest under spec:, and add apiVersion: %s/%s, kind: %s and metadata: {name: %s} "+
		"(docs/policy.md, \"The retired file format\")",
		Echo(path), APIVersion, Kind, ObjectGroup, ObjectVersion, ObjectName,
		ObjectGroup, ObjectVersion, Kind, ObjectName)
}
