package policy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sigsyaml "sigs.k8s.io/yaml"

	"clusterip-policy/pkg/apis/clusterippolicy/v1alpha1"
)

// The retired policy file format (apiVersion clusterip-policy/v1alpha1,
// the spec's fields at the top level) is read at the edge only: Parse
// decodes it strictly, as it always has, translates it into the
// ClusterIPPolicy spec and compiles that (Compile's checks, the file's
// lines). Messages name the fields as the file writes them, without spec.

// File is the policy file as written; field names are public API.
type File struct {
	APIVersion               string        `yaml:"apiVersion"`
	Kind                     string        `yaml:"kind"`
	ServiceCIDRs             []string      `yaml:"serviceCIDRs"`
	AllowedCIDRs             []string      `yaml:"allowedCIDRs"`
	ReserveKubernetesService *bool         `yaml:"reserveKubernetesService"`
	Reservations             []FileReserve `yaml:"reservations"`
	ReservedRanges           []FileRange   `yaml:"reservedRanges"`
	Enforcement              FileEnforce   `yaml:"enforcement"`
	Exemptions               FileExempt    `yaml:"exemptions"`
}

// FileReserve is one entry of reservations.
type FileReserve struct {
	IP      string `yaml:"ip"`
	Service string `yaml:"service"`
	Note    string `yaml:"note"`
}

// FileEnforce is the enforcement section.
type FileEnforce struct {
	Default string            `yaml:"default"`
	Rules   map[string]string `yaml:"rules"`
}

// FileExempt is the exemptions section.
type FileExempt struct {
	Namespaces []string `yaml:"namespaces"`
	Users      []string `yaml:"users"`
	Groups     []string `yaml:"groups"`
}

// FileRange is one entry of reservedRanges: cidr, or first and last.
type FileRange struct {
	CIDR              string        `yaml:"cidr"`
	First             string        `yaml:"first"`
	Last              string        `yaml:"last"`
	Namespaces        []string      `yaml:"namespaces"`
	NamespaceSelector *FileSelector `yaml:"namespaceSelector"`
	ServiceSelector   *FileSelector `yaml:"serviceSelector"`
	Note              string        `yaml:"note"`
}

// FileSelector is a Kubernetes label selector as written in the policy.
type FileSelector struct {
	MatchLabels      map[string]string `yaml:"matchLabels"`
	MatchExpressions []FileRequirement `yaml:"matchExpressions"`
}

// FileRequirement is one matchExpressions entry.
type FileRequirement struct {
	Key      string   `yaml:"key"`
	Operator string   `yaml:"operator"`
	Values   []string `yaml:"values"`
}

var yamlUnknownField = regexp.MustCompile(`line (\d+): field (\S+) not found in type \S+`)

// Parse decodes a policy file of the retired format strictly: an unknown
// field, a second document, a malformed CIDR or IP, or a policy that
// contradicts itself is an error that names the field and its line.
func Parse(data []byte) (*Policy, error) {
	if len(data) > MaxPolicyBytes {
		return nil, fmt.Errorf("the file is %d bytes, more than the limit of %d (1 MiB, a ConfigMap's limit); keep reservations and exemptions to what the cluster needs", len(data), MaxPolicyBytes)
	}
	var f File
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("the file is empty; it needs at least apiVersion: " + APIVersion + " and kind: " + Kind)
		}
		msg := strings.TrimPrefix(err.Error(), "yaml: unmarshal errors:\n  ")
		msg = yamlUnknownField.ReplaceAllString(msg, `line $1: unknown field "$2"`)
		return nil, errors.New(strings.TrimPrefix(msg, "yaml: "))
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, fmt.Errorf("line %d: a second YAML document; a policy file holds exactly one", extra.Line)
	}
	var root yaml.Node
	_ = yaml.Unmarshal(data, &root) // decoded above already; only for line numbers
	lines := yamlLines(&root)
	if f.APIVersion != APIVersion {
		return nil, fmt.Errorf("line %d: apiVersion %q is not supported; use %s", lines(fieldPath{{name: "apiVersion"}}), Echo(f.APIVersion), APIVersion)
	}
	if f.Kind != Kind {
		return nil, fmt.Errorf("line %d: kind %q is not supported; use %s", lines(fieldPath{{name: "kind"}}), Echo(f.Kind), Kind)
	}
	c := newCompiler(nil, lines)
	p := c.compile(f.spec())
	if err := c.err(); err != nil {
		return nil, err
	}
	p.Digest = digestOf(data)
	return p, nil
}

// spec translates the file into the ClusterIPPolicy spec, field for field.
func (f File) spec() v1alpha1.ClusterIPPolicySpec {
	s := v1alpha1.ClusterIPPolicySpec{
		ReserveKubernetesService: f.ReserveKubernetesService,
		Enforcement:              v1alpha1.Enforcement{Default: v1alpha1.Action(f.Enforcement.Default)},
		Exemptions:               v1alpha1.Exemptions{Namespaces: f.Exemptions.Namespaces, Users: f.Exemptions.Users, Groups: f.Exemptions.Groups},
	}
	for _, c := range f.ServiceCIDRs {
		s.ServiceCIDRs = append(s.ServiceCIDRs, v1alpha1.CIDR(c))
	}
	for _, c := range f.AllowedCIDRs {
		s.AllowedCIDRs = append(s.AllowedCIDRs, v1alpha1.CIDR(c))
	}
	for _, r := range f.Reservations {
		s.Reservations = append(s.Reservations, v1alpha1.Reservation{IP: v1alpha1.IPAddress(r.IP), Service: r.Service, Note: r.Note})
	}
	for _, r := range f.ReservedRanges {
		s.ReservedRanges = append(s.ReservedRanges, v1alpha1.ReservedRange{
			CIDR: v1alpha1.CIDR(r.CIDR), First: v1alpha1.IPAddress(r.First), Last: v1alpha1.IPAddress(r.Last),
			Namespaces: r.Namespaces, NamespaceSelector: r.NamespaceSelector.selector(), ServiceSelector: r.ServiceSelector.selector(), Note: r.Note,
		})
	}
	if f.Enforcement.Rules != nil {
		s.Enforcement.Rules = make(map[string]v1alpha1.Action, len(f.Enforcement.Rules))
		for id, a := range f.Enforcement.Rules {
			s.Enforcement.Rules[id] = v1alpha1.Action(a)
		}
	}
	return s
}

func (s *FileSelector) selector() *metav1.LabelSelector {
	if s == nil {
		return nil
	}
	ls := &metav1.LabelSelector{MatchLabels: s.MatchLabels}
	for _, e := range s.MatchExpressions {
		ls.MatchExpressions = append(ls.MatchExpressions, metav1.LabelSelectorRequirement{Key: e.Key, Operator: metav1.LabelSelectorOperator(e.Operator), Values: e.Values})
	}
	return ls
}

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
	if sigsyaml.Unmarshal(data, &head) != nil || head.APIVersion != APIVersion {
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
