package matchconditions

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
)

// Why other mutating admission matters: the apiserver reinvokes a mutating
// webhook only if it called it in the first round (k8s.io/apiserver,
// webhook/mutating/dispatcher.go: "a webhook will not be called for the
// first time" on reinvocation). When the managed condition skips ours for a
// plain create, a mutating webhook or MutatingAdmissionPolicy that acts
// after ours and sets spec.clusterIP (a Kyverno mutate rule, an injector) is
// never seen by our mutating stage, and the validating stage cannot tell an
// address such a webhook set from one the allocator picked. So while any
// other mutating admission can select Service CREATEs, the mutating
// condition sends every CREATE (CallEveryCreate); the webhook is then
// called in round 1 and reinvoked (reinvocationPolicy IfNeeded) like under
// the static conditions.

// Mutator is another mutating admission that may act on Services: a webhook
// of a MutatingWebhookConfiguration or a MutatingAdmissionPolicy, by name
// and the rules that select its requests.
type Mutator struct {
	// Name says which one it is for the log and the docs:
	// "MutatingWebhookConfiguration a/webhook.example.com" or
	// "MutatingAdmissionPolicy p".
	Name  string
	Rules []admissionregistrationv1.RuleWithOperations
}

// maxMutatorNames bounds the names kept for the log line and the metric;
// the count stays exact.
const maxMutatorNames = 10

// SelectsServiceCreate reports whether one of m's rules selects a CREATE or
// an UPDATE of a core/v1 Service: either can be given an address after ours
// ran, and ours is reinvoked only if the first round called it. Only the rules are read: selectors, matchConditions
// and policy bindings narrow a mutator further, but an expression of
// someone else's that we cannot evaluate is taken as matching, so a
// mistake here costs a webhook call, never a skipped one.
func (m Mutator) SelectsServiceCreate() bool {
	return slices.ContainsFunc(m.Rules, ruleSelectsServiceCreate)
}

// ruleSelectsServiceCreate follows the apiserver's rule matcher
// (k8s.io/apiserver admission/plugin/webhook/predicates/rules): "*" or the
// exact value for operations, groups and versions; for resources, the part
// before "/" is "*" or "services" and the part after it (a subresource) is
// absent or "*" ("services/*" and "*/*" select the Service itself too);
// scope "*", "Namespaced" or unset.
func ruleSelectsServiceCreate(r admissionregistrationv1.RuleWithOperations) bool {
	op := slices.ContainsFunc(r.Operations, func(o admissionregistrationv1.OperationType) bool {
		return o == admissionregistrationv1.OperationAll || o == admissionregistrationv1.Create || o == admissionregistrationv1.Update
	})
	group := slices.ContainsFunc(r.APIGroups, func(g string) bool { return g == "*" || g == "" })
	version := slices.ContainsFunc(r.APIVersions, func(v string) bool { return v == "*" || v == "v1" })
	resource := slices.ContainsFunc(r.Resources, func(res string) bool {
		name, sub, _ := strings.Cut(res, "/")
		return (name == "*" || name == "services") && (sub == "" || sub == "*")
	})
	scope := r.Scope == nil || *r.Scope == admissionregistrationv1.AllScopes || *r.Scope == admissionregistrationv1.NamespacedScope
	return op && group && version && resource && scope
}

// WebhookMutators lists the webhooks of the configurations as Mutators,
// leaving out ours (configuration ourConfig, webhook ourWebhook).
func WebhookMutators(cfgs []*admissionregistrationv1.MutatingWebhookConfiguration, ourConfig, ourWebhook string) []Mutator {
	var out []Mutator
	for _, c := range cfgs {
		for _, w := range c.Webhooks {
			if c.Name == ourConfig && w.Name == ourWebhook {
				continue
			}
			out = append(out, Mutator{Name: "MutatingWebhookConfiguration " + c.Name + "/" + w.Name, Rules: w.Rules})
		}
	}
	return out
}

// ServiceMutators returns how many of ms select Service CREATEs, and the
// names of the first few of them in sorted order.
func ServiceMutators(ms []Mutator) (int, []string) {
	var names []string
	for _, m := range ms {
		if m.SelectsServiceCreate() {
			names = append(names, m.Name)
		}
	}
	slices.Sort(names)
	n := len(names)
	if n > maxMutatorNames {
		names = names[:maxMutatorNames]
	}
	return n, names
}

// CallEveryCreate returns c with a mutating condition that sends every
// request: for when another mutating admission may set a ClusterIP after
// ours, or when it cannot be told whether one can. The validating
// condition stays: the validating stage sees the final object whatever
// set it.
func (c Conditions) CallEveryCreate() Conditions {
	c.Mutating = "true"
	c.Owners, c.OwnersCapped = nil, true
	c.Digest = digest(c.Mutating, c.Validating)
	return c
}

func digest(mutating, validating string) string {
	sum := sha256.Sum256([]byte(mutating + "\x00" + validating))
	return hex.EncodeToString(sum[:6])
}
