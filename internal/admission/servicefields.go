package admission

import (
	"encoding/json"
	"fmt"

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
// The lists are decoded as listHead (admission_limits.go): their length
// and first policy.MaxClusterIPs entries, so a hostile list of 50,000
// entries is counted, never built.
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
		// it anyway: it goes into the response and the audit line.
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
