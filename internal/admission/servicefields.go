package admission

import (
	"encoding/json"
	"fmt"
	"reflect"

	corev1 "k8s.io/api/core/v1"

	"clusterip-policy/pkg/policy"
)

// serviceFields is the part of a Service that a decision reads: its name,
// and the spec fields that say which addresses it asks for. Decoding only
// these (instead of the whole corev1.Service, whose managedFields, ports
// and labels are most of the bytes and most of the allocations) is what
// keeps a review cheap; pkg/policy reads nothing else (Spec.Type,
// ClusterIP, ClusterIPs, IPFamilies, IPFamilyPolicy, Name, Namespace).
//
// The lists are decoded as listHead (the Service list decoder, below):
// their length and first policy.MaxClusterIPs entries, so a hostile list
// of 50,000 entries is counted, never built.
type serviceFields struct {
	Metadata struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
		// Annotations holds the one annotation the webhook reads, the
		// reachability probe's id (probe.go); the others are skipped, not
		// built.
		Annotations struct {
			Probe string `json:"clusterip-policy.io/reachability-probe"`
		} `json:"annotations"`
	} `json:"metadata"`
	// Spec is nil when the object has none: the webhook's patch adds to
	// /spec, so a Service without one (which no apiserver sends) is refused.
	Spec *serviceSpecFields `json:"spec"`
}

type serviceSpecFields struct {
	Type           corev1.ServiceType     `json:"type"`
	ClusterIP      string                 `json:"clusterIP"`
	ClusterIPs     listHead               `json:"clusterIPs"`
	IPFamilies     listHead               `json:"ipFamilies"`
	IPFamilyPolicy *corev1.IPFamilyPolicy `json:"ipFamilyPolicy"`
}

// decodeServiceFields decodes the fields a decision needs from a Service
// in an admission request.
func decodeServiceFields(raw []byte) (serviceFields, error) {
	if len(raw) == 0 {
		return serviceFields{}, fmt.Errorf("the admission request carries no object")
	}
	var f serviceFields
	if err := json.Unmarshal(raw, &f); err != nil {
		// A decoding error quotes at most a type and a field path, but clip
		// it anyway: it goes into the response and the decision log line.
		return serviceFields{}, fmt.Errorf("decode the Service in the admission request: %s", policy.Clip(err.Error(), policy.MaxMessageBytes))
	}
	return f, nil
}

// complete reports whether the lists were decoded whole (no more entries
// than policy.MaxClusterIPs), so that service() is the Service as sent.
func (f serviceFields) complete() bool {
	return f.Spec == nil || (f.Spec.ClusterIPs.n == len(f.Spec.ClusterIPs.head) && f.Spec.IPFamilies.n == len(f.Spec.IPFamilies.head))
}

// service is the Service as a decision sees it: the decoded fields in a
// corev1.Service, everything else left empty. Call it on complete fields.
func (f serviceFields) service() *corev1.Service {
	svc := &corev1.Service{}
	svc.Name, svc.Namespace = f.Metadata.Name, f.Metadata.Namespace
	if s := f.Spec; s != nil {
		svc.Spec.Type, svc.Spec.ClusterIP, svc.Spec.IPFamilyPolicy = s.Type, s.ClusterIP, s.IPFamilyPolicy
		svc.Spec.ClusterIPs = s.ClusterIPs.head
		if s.IPFamilies.head != nil {
			svc.Spec.IPFamilies = make([]corev1.IPFamily, len(s.IPFamilies.head))
			for i, fam := range s.IPFamilies.head {
				svc.Spec.IPFamilies[i] = corev1.IPFamily(fam)
			}
		}
	}
	return svc
}

// The Service list decoder: clusterIPs and ipFamilies, counted and cut.

// listHead is a JSON array of strings decoded as its length and its first
// policy.MaxClusterIPs entries.
type listHead struct {
	n    int
	head []string
}

func (l *listHead) UnmarshalJSON(data []byte) error {
	*l = listHead{} // a later duplicate key replaces an earlier one, as for a slice
	if string(data) == "null" {
		return nil
	}
	if len(data) > 0 && data[0] != '[' {
		// The error a []string field gets; the decoder adds the field path.
		return &json.UnmarshalTypeError{Value: jsonKind(data[0]), Type: reflect.TypeFor[[]string]()}
	}
	n, cut, err := countElements(data, policy.MaxClusterIPs)
	if err != nil {
		return err
	}
	l.n = n
	// data[:cut] is "[" and the first entries; close it and decode those.
	return json.Unmarshal(append(data[:cut:cut], ']'), &l.head)
}

// jsonKind names the kind of the JSON value starting with c, as
// encoding/json's type errors do.
func jsonKind(c byte) string {
	switch c {
	case '"':
		return "string"
	case '{':
		return "object"
	case 't', 'f':
		return "bool"
	}
	return "number"
}

// countElements counts the entries of the JSON array data (already checked
// to be valid JSON by the decoder) and returns the offset just past the
// first keep entries.
func countElements(data []byte, keep int) (n, cut int, err error) {
	if len(data) < 2 || data[0] != '[' {
		return 0, 0, fmt.Errorf("expected a list, got %s", policy.Echo(string(data)))
	}
	depth, inString, escaped, empty := 0, false, false, true
	cut = len(data) - 1 // before the closing bracket
	for i := 1; i < len(data)-1; i++ {
		c := data[i]
		switch {
		case inString && escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case inString && c == '"':
			inString = false
		case inString:
		case c == '"':
			inString, empty = true, false
		case c == '[' || c == '{':
			depth, empty = depth+1, false
		case c == ']' || c == '}':
			depth--
		case c == ',' && depth == 0:
			n++
			if n == keep {
				cut = i
			}
		case c != ' ' && c != '\t' && c != '\n' && c != '\r':
			empty = false
		}
	}
	if empty {
		return 0, 1, nil
	}
	return n + 1, cut, nil
}
