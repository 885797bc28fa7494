package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Names of the API, as kubectl and the webhook address it. They are public:
// RBAC rules, the webhook configuration and users' scripts name them.
const (
	Group    = "clusterip-policy.io"
	Version  = "v1alpha1"
	Kind     = "ClusterIPPolicy"
	Resource = "clusterippolicies"
	Singular = "clusterippolicy"
	// ShortName is what `kubectl get cipp` accepts.
	ShortName = "cipp"
	// Category groups the object with the rest of the project's resources
	// (`kubectl get clusterip-policy`).
	Category = "clusterip-policy"
	// ObjectName is the one ClusterIPPolicy the webhook reads; the schema
	// refuses any other name, so policies never combine.
	ObjectName = "default"
)

// ClusterIPPolicy says where Service ClusterIPs may go in this cluster: the
// Service ranges that may be used, addresses reserved for one Service each,
// and what each rule does when a request breaks it. The webhook reads the
// one object named default (with --policy-source=crd) and reports in its
// status which generation is in force.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,path=clusterippolicies,singular=clusterippolicy,shortName=cipp,categories=clusterip-policy
// +kubebuilder:subresource:status
// +kubebuilder:validation:XValidation:rule="self.metadata.name == 'default'",message="the webhook reads exactly one ClusterIPPolicy, named default; put every reservation and exemption in it"
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Generation",type=integer,JSONPath=`.metadata.generation`
// +kubebuilder:printcolumn:name="In-Force",type=integer,JSONPath=`.status.generationInForce`,description="The generation of the spec the webhook enforces; behind Generation while a refused spec waits for a fix."
// +kubebuilder:printcolumn:name="Violations",type=integer,JSONPath=`.status.audit.violatingServices`,description="Existing Services that break the policy, as the last periodic audit counted them."
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Reachable",type=string,JSONPath=`.status.conditions[?(@.type=="WebhookReachable")].status`,description="True while the leader's probe proves the apiservers reach both Service webhooks; the condition's message says whether they are armed (failurePolicy Fail) or still Ignore. Check an install with kubectl wait --for=condition=WebhookReachable clusterippolicy/default."
// +kubebuilder:printcolumn:name="Backstop",type=string,JSONPath=`.status.conditions[?(@.type=="BackstopInForce")].status`,description="True while the apiserver enforces the policy's backstop in-process (ValidatingAdmissionPolicies), with or without the webhook."
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ClusterIPPolicy struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the policy. It is required: without it the webhook would put
	// its built-in default policy in force and drop every reservation; an
	// empty policy is `spec: {}`.
	// +required
	Spec ClusterIPPolicySpec `json:"spec"`

	// status is written by the webhook: what became of each generation of
	// the spec, and what the periodic audit and the managed matchConditions
	// say about it.
	// +optional
	Status ClusterIPPolicyStatus `json:"status,omitempty"`
}

// ClusterIPPolicyList is a list of ClusterIPPolicy objects.
//
// +kubebuilder:object:root=true
type ClusterIPPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterIPPolicy `json:"items"`
}

// ClusterIPPolicySpec is the policy. The schema refuses at apply time what
// it can express (address and CIDR syntax, the enforcement actions, sizes);
// the rest (one owner per address, reservations inside allowedCIDRs) the
// webhook's loader checks, at apply time through the webhook
// validate-clusterippolicies.clusterip-policy.io, and reports in the status.
type ClusterIPPolicySpec struct {
	// serviceCIDRs are the Service ranges to use where the cluster serves no
	// ServiceCIDR objects (an older cluster) and for `review` and `audit`
	// offline; a cluster's ServiceCIDR objects take precedence.
	// Example: [10.96.0.0/16].
	// +optional
	// +kubebuilder:validation:MaxItems=64
	ServiceCIDRs []CIDR `json:"serviceCIDRs,omitempty"`

	// allowedCIDRs, when set, are the only ranges Services may use: a
	// ServiceCIDR object counts only where it lies inside one of them, and
	// creating one outside them is refused. Leave it unset to accept every
	// ServiceCIDR the cluster has. Example: [10.96.0.0/12].
	// +optional
	// +kubebuilder:validation:MaxItems=64
	AllowedCIDRs []CIDR `json:"allowedCIDRs,omitempty"`

	// reserveKubernetesService holds the first address of each active range
	// for default/kubernetes (the apiserver's own Service). Default: true.
	// +optional
	ReserveKubernetesService *bool `json:"reserveKubernetesService,omitempty"`

	// reservations bind an address to the one Service that may have it;
	// any other Service asking for it is refused (reserved-for-other), and
	// the owner gets it when it asks for no address. One owner per address;
	// an owner may hold one address per IP family.
	// +optional
	// +kubebuilder:validation:MaxItems=10000
	Reservations []Reservation `json:"reservations,omitempty"`

	// reservedRanges are ranges inside the active Service ranges that the
	// apiserver's allocator never hands out (the leader holds their free
	// addresses) and that only the namespaces each names may use, by
	// naming an address in clusterIP. A Service of any other namespace
	// naming one is refused (reserved-range-for-other). A reservation of a
	// single address may lie inside a range: its owner alone may have that
	// address. At most 4096 addresses in all ranges together.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	ReservedRanges []ReservedRange `json:"reservedRanges,omitempty"`

	// enforcement says what each rule does when a request breaks it.
	// +optional
	Enforcement Enforcement `json:"enforcement,omitempty"`

	// exemptions are namespaces, users and groups the policy does not
	// apply to.
	// +optional
	Exemptions Exemptions `json:"exemptions,omitempty"`
}

// CIDR is a range in CIDR notation, such as 10.96.0.0/16 or fd00::/108.
//
// +kubebuilder:validation:MaxLength=64
// +kubebuilder:validation:XValidation:rule="isCIDR(self)",message="is not a CIDR such as 10.96.0.0/16"
type CIDR string

// IPAddress is one address, such as 10.96.0.10 or fd00::a.
//
// +kubebuilder:validation:MaxLength=64
// +kubebuilder:validation:XValidation:rule="isIP(self)",message="is not an IP address such as 10.96.0.10"
type IPAddress string

// Reservation binds one address to one Service.
type Reservation struct {
	// ip is the reserved address, in either band of an active range.
	// Example: 10.96.0.10.
	// +required
	IP IPAddress `json:"ip"`

	// service is the owner, as namespace/name. Example: kube-system/kube-dns.
	// +required
	// +kubebuilder:validation:MaxLength=317
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?/[a-z]([-a-z0-9]*[a-z0-9])?$`
	Service string `json:"service"`

	// note is free text for the people who read the policy (why the
	// address is reserved); the webhook does not read it.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Note string `json:"note,omitempty"`
}

// ReservedRange is a block of Service addresses set aside for some
// namespaces: given as cidr, or as first and last (inclusive), in either
// IP family, inside one active range. Who may use it: a Service whose
// namespace is listed in namespaces or matches namespaceSelector and, when
// serviceSelector is set, whose labels match it too.
//
// +kubebuilder:validation:XValidation:rule="has(self.cidr) != (has(self.first) || has(self.last))",message="give the range as cidr, or as first and last, not both"
// +kubebuilder:validation:XValidation:rule="has(self.first) == has(self.last)",message="a range given by addresses needs both first and last"
// +kubebuilder:validation:XValidation:rule="(has(self.namespaces) && size(self.namespaces) > 0) || has(self.namespaceSelector)",message="name the namespaces that may use the range (namespaces, namespaceSelector or both)"
type ReservedRange struct {
	// cidr is the range in CIDR notation. Example: 10.96.0.16/28.
	// +optional
	CIDR CIDR `json:"cidr,omitempty"`

	// first is the range's first address, with last. Example: 10.96.0.20.
	// +optional
	First IPAddress `json:"first,omitempty"`

	// last is the range's last address (inclusive), with first, of the
	// same IP family and not below it. Example: 10.96.0.59.
	// +optional
	Last IPAddress `json:"last,omitempty"`

	// namespaces whose Services may use the range.
	// +optional
	// +kubebuilder:validation:MaxItems=100
	// +kubebuilder:validation:items:MaxLength=63
	Namespaces []string `json:"namespaces,omitempty"`

	// namespaceSelector selects, by their labels, more namespaces whose
	// Services may use the range. Example: {matchLabels: {team: payments}}.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`

	// serviceSelector, when set, narrows use to the Services (of those
	// namespaces) whose labels it matches.
	// +optional
	ServiceSelector *metav1.LabelSelector `json:"serviceSelector,omitempty"`

	// note is free text naming what the range is for; refusals quote it.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Note string `json:"note,omitempty"`
}

// Action is what a rule does when a request breaks it: deny refuses the
// request, warn allows it with an admission warning, audit allows it and
// only logs it.
//
// +kubebuilder:validation:Enum=deny;warn;audit
type Action string

// Enforcement says what each rule does.
type Enforcement struct {
	// default is the action of every rule not named in rules. Default:
	// deny. Start with warn when rolling out, and move to deny once
	// `audit` finds nothing.
	// +optional
	Default Action `json:"default,omitempty"`

	// rules overrides the action per rule ID (invalid-ip,
	// outside-service-cidrs, reserved-for-other, reserved-range-for-other,
	// static-ip-in-dynamic-band, already-allocated). Example: {static-ip-in-dynamic-band: warn}.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	Rules map[string]Action `json:"rules,omitempty"`
}

// Exemptions are requests the policy does not apply to.
type Exemptions struct {
	// namespaces whose Services are not checked.
	// +optional
	// +kubebuilder:validation:MaxItems=1000
	// +kubebuilder:validation:items:MaxLength=63
	Namespaces []string `json:"namespaces,omitempty"`

	// users (as the apiserver authenticates them) whose requests are not
	// checked. Example: system:serviceaccount:kube-system:my-operator.
	// +optional
	// +kubebuilder:validation:MaxItems=1000
	// +kubebuilder:validation:items:MaxLength=1024
	Users []string `json:"users,omitempty"`

	// groups whose members' requests are not checked.
	// +optional
	// +kubebuilder:validation:MaxItems=1000
	// +kubebuilder:validation:items:MaxLength=1024
	Groups []string `json:"groups,omitempty"`
}

// Condition types of the status.
const (
	// ConditionReady is True while the object's current generation is in
	// force, False while it is refused (reason Refused; the last good
	// generation stays in force).
	ConditionReady = "Ready"
	// ConditionAudited is True after a periodic audit of the existing
	// Services found none breaking the policy, False when it found some
	// (reason ViolationsFound) and Unknown while no audit ran under the
	// generation in force.
	ConditionAudited = "Audited"
	// ConditionMatchConditionsInForce is True while the managed
	// matchConditions of both webhook configurations encode the generation
	// in force (status.matchConditions.generation equals
	// status.generationInForce), False while they lag (reason Lagging) or
	// while the apiserver refuses the leader's write of them (reason
	// WriteFailed, the message carrying the apiserver's reason).
	ConditionMatchConditionsInForce = "MatchConditionsInForce"
	// ConditionWebhookReachable is True while the leader's reachability
	// probe (--arm-failure-policy; a server-side dry-run create the
	// apiserver must send to both Service webhooks) was answered by both,
	// False when it was not (reason Unreachable; ProbeRefused when another
	// admission step refused the dry run before a webhook could answer it,
	// which also keeps that webhook from being armed; ProbeFailed when the
	// dry run itself failed; NotRegistered while the configurations do not
	// exist), the message saying which webhook and whether its
	// failurePolicy is armed (Fail) or still Ignore.
	ConditionWebhookReachable = "WebhookReachable"
	// ConditionBackstopInForce is True while the ValidatingAdmissionPolicies
	// the leader compiles from the policy (the backstop, --backstop) are
	// written and bound and encode the generation in force; False while
	// they lag (Lagging), while the leader cannot write them
	// (WriteFailed, CompileFailed), or while they are lifted on purpose
	// (Lifted: the break-glass deleted their bindings with the webhook
	// configurations).
	ConditionBackstopInForce = "BackstopInForce"
)

// ClusterIPPolicyStatus is what the webhook reports. One replica writes it:
// the one holding the leader Lease (--leader-election-lease).
type ClusterIPPolicyStatus struct {
	// observedGeneration is the generation of the spec the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// generationInForce is the generation of the spec the webhook enforces;
	// behind observedGeneration while a refused spec waits for a fix, 0
	// while no generation has loaded.
	// +optional
	GenerationInForce int64 `json:"generationInForce,omitempty"`

	// policyDigest identifies the policy in force, as the webhook's audit
	// log (policyDigest) and the webhook configurations' annotation
	// clusterip-policy.io/match-conditions-policy name it.
	// +optional
	PolicyDigest string `json:"policyDigest,omitempty"`

	// conditions: Ready (the current generation is in force), Audited (the
	// last periodic audit found no existing Service breaking the policy)
	// and MatchConditionsInForce (the managed matchConditions encode the
	// generation in force).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// audit is the result of the last periodic audit (--audit-interval);
	// absent while none has run.
	// +optional
	Audit *AuditStatus `json:"audit,omitempty"`

	// matchConditions says which policy the managed matchConditions
	// (--manage-match-conditions) encode; absent while they are not managed.
	// +optional
	MatchConditions *MatchConditionsStatus `json:"matchConditions,omitempty"`

	// backstop says what the ValidatingAdmissionPolicies the leader writes
	// (--backstop) encode: the rules the apiserver enforces in-process,
	// whether or not it can reach the webhook. Absent while the backstop
	// is off or not yet written.
	// +optional
	Backstop *BackstopStatus `json:"backstop,omitempty"`
}

// BackstopStatus says what the backstop encodes.
type BackstopStatus struct {
	// generation is the generation of the spec the backstop encodes, 0 if
	// it encodes a policy this object never had in force.
	// +optional
	Generation int64 `json:"generation,omitempty"`

	// policyDigest is the digest of the policy it encodes, as on the
	// policies' annotation clusterip-policy.io/policy-digest.
	// +optional
	PolicyDigest string `json:"policyDigest,omitempty"`

	// rules are the rules it carries, each as "resource/rule=action"
	// (services/reserved-for-other=deny).
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=128
	Rules []string `json:"rules,omitempty"`

	// left are the rules the webhook alone enforces, and why (the
	// policy has nothing for the rule, a bound was reached, the apiserver
	// does not serve MutatingAdmissionPolicy).
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=512
	Left []string `json:"left,omitempty"`
}

// AuditStatus is the result of one periodic audit of the existing Services.
type AuditStatus struct {
	// time is when the audit listed the Services.
	// +required
	Time metav1.Time `json:"time"`

	// policyGeneration is the generation of the spec the audit checked
	// against.
	// +optional
	PolicyGeneration int64 `json:"policyGeneration,omitempty"`

	// violatingServices is how many existing Services break the policy
	// (each counted once, whatever the number of findings); `clusterip-policy audit`
	// and the Warning Events on those Services name them.
	// +required
	// +kubebuilder:validation:Minimum=0
	ViolatingServices int64 `json:"violatingServices"`

	// findings counts the findings by rule ID, as the metric
	// clusterip_policy_existing_violations{rule} does.
	// +optional
	// +kubebuilder:validation:MaxProperties=16
	Findings map[string]int64 `json:"findings,omitempty"`
}

// MatchConditionsStatus says which policy the managed matchConditions
// encode: the apiservers apply it to the requests the conditions skip.
type MatchConditionsStatus struct {
	// generation is the generation of the spec the conditions encode, 0 if
	// they encode a policy this object never had in force (written by a
	// replica with another spec, or before this object existed).
	// +optional
	Generation int64 `json:"generation,omitempty"`

	// policyDigest is the digest of the policy they encode, as in the
	// configurations' annotation clusterip-policy.io/match-conditions-policy.
	// +optional
	PolicyDigest string `json:"policyDigest,omitempty"`
}
