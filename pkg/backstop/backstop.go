// Package backstop compiles the policy into the ValidatingAdmissionPolicies
// (and, where the apiserver serves them, a MutatingAdmissionPolicy) that the
// apiserver enforces in-process, with no webhook involved: the part of the
// policy that holds while the apiservers cannot reach a replica (unarmed,
// break-glass, a provider's firewall, pods that never start).
//
// What it carries is what needs no live call to judge, from the policy and
// the active ranges the leader compiles it with (docs/backstop.md lists the
// rules and what stays the webhook's alone):
//
//   - a ServiceCIDR outside allowedCIDRs, or whose dynamic band covers the
//     static band of another active range (the ServiceCIDR door);
//   - a Service address outside allowedCIDRs;
//   - a reserved address taken by a Service that is not its owner;
//   - an address of a reserved range taken by a Service the range does not
//     admit (namespace, namespaceSelector, serviceSelector);
//   - with MutatingAdmissionPolicy served: an address named in a dynamic
//     band, which a MutatingAdmissionPolicy records before allocation (the
//     validating side sees only the allocated address).
//
// Every denial equals the webhook's on the same request (policy.Validate,
// policy.Mutate for the recorded addresses, policy.ReviewServiceCIDR): the
// tests evaluate both on random requests with the apiserver's own CEL
// compiler and evaluator. It is pure: it builds objects, it writes nothing.
package backstop

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"clusterip-policy/pkg/allocview"
	"clusterip-policy/pkg/policy"
)

// Names of what the leader writes. Each policy and its binding share one
// name: NamePrefix, the resource and the action its rules take. The set of
// names is fixed (Names), so RBAC can grant exactly these.
const (
	NamePrefix = "clusterip-policy-backstop-"
	// RecordName is the MutatingAdmissionPolicy (and binding) that
	// records the addresses a Service request names.
	RecordName = NamePrefix + "record-requested-ips"
	// RecordAnnotation is where it records them: the addresses the
	// request named before allocation, comma-separated, as the request
	// spelled them. The apiserver writes it on every create or allocating
	// update that names an address, and removes it from one that names
	// none, so a client's own value never survives admission.
	RecordAnnotation = "clusterip-policy.io/requested-cluster-ips"
	// DigestAnnotation carries Set.Digest on every object written, and
	// PolicyDigestAnnotation the digest of the policy compiled.
	DigestAnnotation       = "clusterip-policy.io/backstop-digest"
	PolicyDigestAnnotation = "clusterip-policy.io/policy-digest"
)

// Resources the backstop guards, as in the policies' rules.
const (
	Services     = "services"
	ServiceCIDRs = "servicecidrs"
)

// Names lists every name a policy or binding of the backstop can have.
func Names() []string {
	var out []string
	for _, r := range []string{Services, ServiceCIDRs} {
		for _, a := range []policy.Action{policy.ActionDeny, policy.ActionWarn, policy.ActionAudit} {
			out = append(out, name(r, a))
		}
	}
	return append(out, RecordName)
}

func name(resource string, a policy.Action) string { return NamePrefix + resource + "-" + string(a) }

// Bounds of what is encoded. Past them a rule is left to the webhook and
// Set.Left says so; no rule is ever encoded partly.
const (
	// MaxRanges bounds the active ranges a rule that needs them encodes
	// (the same bound as the policy's CIDR lists).
	MaxRanges = policy.MaxPolicyCIDRs
	// MaxNetworks bounds the known ranges whose network address a dry run
	// may show as its placeholder (active and excluded).
	MaxNetworks = 256
	// MaxExpressionBytes keeps each expression below the 100,000 code
	// points the apiserver's CEL parser accepts; the reservations are
	// split over several variables of at most this size.
	MaxExpressionBytes = 90_000
	// MaxObjectBytes keeps each policy object inside etcd's default
	// request limit (1.5 MiB) and the apiserver's 3 MiB body limit. A
	// policy object is at most 1 MiB, and its reservations take fewer
	// bytes in CEL than in YAML.
	MaxObjectBytes = 1_400_000
)

// maxObjectBytes is MaxObjectBytes; a test lowers it to see a rule left out.
var maxObjectBytes = MaxObjectBytes

// Input is what one compilation reads.
type Input struct {
	// Policy is the policy in force.
	Policy *policy.Policy
	// Ranges are the active ranges the webhook decides with
	// (policy.Env.Ranges()).
	Ranges allocview.RangeSet
	// NamespaceSelector is the Service webhooks' namespaceSelector: the
	// bindings match the same namespaces, so the backstop never judges a
	// Service the webhook is never asked about. Nil: every namespace.
	NamespaceSelector *metav1.LabelSelector
	// Mutating says the apiserver serves admissionregistration.k8s.io/v1
	// MutatingAdmissionPolicy: only then is static-ip-in-dynamic-band
	// carried for Services.
	Mutating bool
	// Labels go on every object written (the leader finds its own by
	// them).
	Labels map[string]string
}

// Carried is one rule the backstop enforces.
type Carried struct {
	Resource string
	Rule     policy.RuleID
	Action   policy.Action
	// Name is the policy and binding that carry it.
	Name string
}

// Set is what the leader writes: every object, and what they carry.
type Set struct {
	Policies         []admissionregistrationv1.ValidatingAdmissionPolicy
	Bindings         []admissionregistrationv1.ValidatingAdmissionPolicyBinding
	MutatingPolicies []admissionregistrationv1.MutatingAdmissionPolicy
	MutatingBindings []admissionregistrationv1.MutatingAdmissionPolicyBinding
	Carried          []Carried
	// Left names each rule the backstop does not carry, and why (the
	// policy has nothing for it, a bound was hit, the apiserver lacks
	// MutatingAdmissionPolicy).
	Left []string
	// Digest identifies the objects' content (first 12 hex digits of
	// SHA-256).
	Digest string
}

// Compile builds the backstop for in. It never returns a partial rule: a
// rule that would pass a bound is left out and named in Set.Left. The error
// is for an input that cannot be compiled at all (no policy).
func Compile(in Input) (Set, error) {
	if in.Policy == nil {
		return Set{}, fmt.Errorf("no policy to compile")
	}
	c := compiler{in: in, p: in.Policy, rs: in.Ranges}
	var s Set
	for _, g := range []group{c.services(), c.serviceCIDRs()} {
		s.Left = append(s.Left, g.left...)
		for _, a := range []policy.Action{policy.ActionDeny, policy.ActionWarn, policy.ActionAudit} {
			vs := g.byAction[a]
			if len(vs) == 0 {
				continue
			}
			n := name(g.resource, a)
			pol := c.validatingPolicy(n, g, vs)
			if size := objectSize(pol); size > maxObjectBytes {
				for _, v := range vs {
					s.Left = append(s.Left, fmt.Sprintf("%s on %s: the compiled policy is %d bytes, more than the limit of %d", v.rule, g.resource, size, maxObjectBytes))
				}
				continue
			}
			s.Policies = append(s.Policies, pol)
			s.Bindings = append(s.Bindings, c.validatingBinding(n, g, a))
			for _, v := range vs {
				s.Carried = append(s.Carried, Carried{Resource: g.resource, Rule: v.rule, Action: a, Name: n})
			}
		}
	}
	if slices.ContainsFunc(s.Carried, func(k Carried) bool {
		return k.Resource == Services && k.Rule == policy.RuleStaticIPInDynamicBand
	}) {
		s.MutatingPolicies = []admissionregistrationv1.MutatingAdmissionPolicy{c.recordPolicy()}
		s.MutatingBindings = []admissionregistrationv1.MutatingAdmissionPolicyBinding{c.recordBinding()}
	}
	s.Digest = digest(s)
	for i := range s.Policies {
		c.annotate(&s.Policies[i].ObjectMeta, s.Digest)
		c.annotate(&s.Bindings[i].ObjectMeta, s.Digest)
	}
	for i := range s.MutatingPolicies {
		c.annotate(&s.MutatingPolicies[i].ObjectMeta, s.Digest)
		c.annotate(&s.MutatingBindings[i].ObjectMeta, s.Digest)
	}
	return s, nil
}

// NeedsJudging is the one matchCondition of the Services policies: the
// plainly-dynamic skip, the webhooks' own conditions and the policy's
// exemptions, joined.
const NeedsJudging = "needs-judging"

// oneCondition joins conditions into one matchCondition named name, each
// term in its order: the apiserver evaluates every matchCondition of a
// policy before it looks at any result, while CEL's && stops at the first
// false term, so the commonest request costs its first term alone
// (BenchmarkValidatingADynamicCreate). The outcome is the same: any false
// term skips the request whatever the others give, errors included, as
// any false condition does; an error and no false fails the request as the
// policy's failurePolicy says, in both forms. Conditions that would not
// fit one expression are left apart.
func oneCondition(name string, conds []admissionregistrationv1.MatchCondition) []admissionregistrationv1.MatchCondition {
	if len(conds) < 2 {
		return conds
	}
	terms := make([]string, len(conds))
	for i, m := range conds {
		terms[i] = "(" + m.Expression + ")"
	}
	e := strings.Join(terms, " && ")
	if len(e) > MaxExpressionBytes {
		return conds
	}
	return []admissionregistrationv1.MatchCondition{{Name: name, Expression: e}}
}

// compiler holds one compilation's input.
type compiler struct {
	in Input
	p  *policy.Policy
	rs allocview.RangeSet
}

// group is the rules of one resource, by action, and the CEL they share.
type group struct {
	resource        string
	rules           []admissionregistrationv1.NamedRuleWithOperations
	matchConditions []admissionregistrationv1.MatchCondition
	variables       []admissionregistrationv1.Variable
	byAction        map[policy.Action][]validation
	left            []string
	// parts are the variables a variable is assembled from (the
	// reservations' maps): a rule that needs the one needs them too.
	parts map[string][]string
	// namespaced: the binding copies the webhooks' namespaceSelector.
	namespaced bool
}

// validation is one rule's CEL check.
type validation struct {
	rule       policy.RuleID
	expression string
	message    string
	// needs names the group's variables it reads (with those they
	// read); vars are its own, written after them.
	needs []string
	vars  []admissionregistrationv1.Variable
}

func (g *group) add(p *policy.Policy, v validation) {
	if g.byAction == nil {
		g.byAction = map[policy.Action][]validation{}
	}
	a := p.ActionFor(v.rule)
	g.byAction[a] = append(g.byAction[a], v)
}

func (c compiler) objectMeta(n string) metav1.ObjectMeta {
	labels := map[string]string{}
	for k, v := range c.in.Labels {
		labels[k] = v
	}
	return metav1.ObjectMeta{Name: n, Labels: labels}
}

func (c compiler) annotate(m *metav1.ObjectMeta, d string) {
	m.Annotations = map[string]string{DigestAnnotation: d, PolicyDigestAnnotation: c.p.Digest}
}

func (c compiler) validatingPolicy(n string, g group, vs []validation) admissionregistrationv1.ValidatingAdmissionPolicy {
	fail := admissionregistrationv1.Fail
	equivalent := admissionregistrationv1.Equivalent
	pol := admissionregistrationv1.ValidatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: "ValidatingAdmissionPolicy"},
		ObjectMeta: c.objectMeta(n),
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			// Fail: every expression is guarded (isIP, has) and bounded,
			// and the tests evaluate them on random requests without an
			// error; an error that still happens refuses, as the webhook's
			// own failurePolicy does once armed.
			FailurePolicy: &fail,
			MatchConstraints: &admissionregistrationv1.MatchResources{
				MatchPolicy:   &equivalent,
				ResourceRules: g.rules,
			},
			MatchConditions: g.matchConditions,
		},
	}
	// Only the variables its rules read: a policy of one warned rule
	// does not carry every reservation.
	var needs []string
	for _, v := range vs {
		for _, n := range v.needs {
			needs = append(needs, n)
			needs = append(needs, g.parts[n]...)
		}
	}
	for _, gv := range g.variables {
		if slices.Contains(needs, gv.Name) {
			pol.Spec.Variables = append(pol.Spec.Variables, gv)
		}
	}
	for _, v := range vs {
		pol.Spec.Variables = append(pol.Spec.Variables, v.vars...)
	}
	for _, v := range vs {
		reason := metav1.StatusReasonInvalid
		pol.Spec.Validations = append(pol.Spec.Validations, admissionregistrationv1.Validation{
			Expression:        v.expression,
			MessageExpression: v.message,
			Message:           fmt.Sprintf("refused by the clusterip-policy backstop, rule %s", v.rule),
			Reason:            &reason,
		})
	}
	return pol
}

func (c compiler) validatingBinding(n string, g group, a policy.Action) admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	b := admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: "ValidatingAdmissionPolicyBinding"},
		ObjectMeta: c.objectMeta(n),
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        n,
			ValidationActions: []admissionregistrationv1.ValidationAction{validationAction(a)},
		},
	}
	if g.namespaced && c.in.NamespaceSelector != nil {
		b.Spec.MatchResources = &admissionregistrationv1.MatchResources{NamespaceSelector: c.in.NamespaceSelector.DeepCopy()}
	}
	return b
}

// validationAction is the binding's action for a rule's action: deny
// refuses, warn returns an admission warning, audit writes only the
// apiserver's audit log, as the webhook does with each.
func validationAction(a policy.Action) admissionregistrationv1.ValidationAction {
	switch a {
	case policy.ActionWarn:
		return admissionregistrationv1.Warn
	case policy.ActionAudit:
		return admissionregistrationv1.Audit
	}
	return admissionregistrationv1.Deny
}

// digest hashes the objects as they will be written (before the digest
// annotation itself is added).
func digest(s Set) string {
	b, _ := json.Marshal([]any{s.Policies, s.Bindings, s.MutatingPolicies, s.MutatingBindings})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:6])
}

func objectSize(o any) int {
	b, _ := json.Marshal(o)
	return len(b)
}

// exemptions are the policy's exemptions as matchConditions: an exempt
// request is not judged at all, as the webhook skips it.
func (c compiler) exemptions(namespaced bool) []admissionregistrationv1.MatchCondition {
	var out []admissionregistrationv1.MatchCondition
	if namespaced && len(c.p.ExemptNamespaces) > 0 {
		out = append(out, admissionregistrationv1.MatchCondition{Name: "not-exempt-namespace",
			Expression: fmt.Sprintf("!has(request.namespace) || !(request.namespace in %s)", quoteList(c.p.ExemptNamespaces))})
	}
	if len(c.p.ExemptUsers) > 0 {
		out = append(out, admissionregistrationv1.MatchCondition{Name: "not-exempt-user",
			Expression: fmt.Sprintf("!has(request.userInfo.username) || !(request.userInfo.username in %s)", quoteList(c.p.ExemptUsers))})
	}
	if len(c.p.ExemptGroups) > 0 {
		out = append(out, admissionregistrationv1.MatchCondition{Name: "not-exempt-group",
			Expression: fmt.Sprintf("!has(request.userInfo.groups) || !request.userInfo.groups.exists(g, g in %s)", quoteList(c.p.ExemptGroups))})
	}
	return out
}
