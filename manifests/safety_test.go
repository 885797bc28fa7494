package manifests

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	admv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"clusterip-policy/internal/names"
	"clusterip-policy/pkg/backstop"
	"clusterip-policy/pkg/policy"
)

// --- the safety checks: each returns what is wrong, nothing when all is well ---

type check func(o *objects) []string

func replicasAtLeastTwo(o *objects) []string {
	var p []string
	if len(o.Deployments) == 0 {
		p = append(p, "no Deployment")
	}
	for _, d := range o.Deployments {
		if d.Spec.Replicas == nil || *d.Spec.Replicas < 2 {
			n := int32(1) // the API's default
			if d.Spec.Replicas != nil {
				n = *d.Spec.Replicas
			}
			p = append(p, problemf("Deployment %s has %d replicas; at least 2 keep admission running through a restart", d.Name, n))
		}
	}
	return p
}

func hasPDB(o *objects) []string {
	var p []string
	for _, d := range o.Deployments {
		found := false
		for _, b := range o.PDBs {
			if b.Namespace != d.Namespace || !selects(b.Spec.Selector, d.Spec.Template.Labels) {
				continue
			}
			found = true
			replicas := int32(1)
			if d.Spec.Replicas != nil {
				replicas = *d.Spec.Replicas
			}
			switch {
			case b.Spec.MinAvailable != nil:
				if v, err := intstr.GetScaledValueFromIntOrPercent(b.Spec.MinAvailable, int(replicas), true); err != nil || v < 1 {
					p = append(p, problemf("PodDisruptionBudget %s: minAvailable %s protects no pod", b.Name, b.Spec.MinAvailable.String()))
				}
			case b.Spec.MaxUnavailable != nil:
				if v, err := intstr.GetScaledValueFromIntOrPercent(b.Spec.MaxUnavailable, int(replicas), true); err != nil || v >= int(replicas) {
					p = append(p, problemf("PodDisruptionBudget %s: maxUnavailable %s lets every one of the %d pods go at once", b.Name, b.Spec.MaxUnavailable.String(), replicas))
				}
			default:
				p = append(p, problemf("PodDisruptionBudget %s sets neither minAvailable nor maxUnavailable", b.Name))
			}
		}
		if !found {
			p = append(p, problemf("no PodDisruptionBudget selects the pods of Deployment %s", d.Name))
		}
	}
	return p
}

func spreadOverNodes(o *objects) []string {
	var p []string
	for _, d := range o.Deployments {
		spec := d.Spec.Template.Spec
		spread := false
		for _, c := range spec.TopologySpreadConstraints {
			if c.TopologyKey == "kubernetes.io/hostname" && c.MaxSkew >= 1 && selects(c.LabelSelector, d.Spec.Template.Labels) {
				spread = true
			}
		}
		if a := spec.Affinity; a != nil && a.PodAntiAffinity != nil {
			for _, t := range a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
				spread = spread || (t.TopologyKey == "kubernetes.io/hostname" && selects(t.LabelSelector, d.Spec.Template.Labels))
			}
			for _, w := range a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
				spread = spread || (w.PodAffinityTerm.TopologyKey == "kubernetes.io/hostname" && selects(w.PodAffinityTerm.LabelSelector, d.Spec.Template.Labels))
			}
		}
		if !spread {
			p = append(p, problemf("Deployment %s does not spread its pods over nodes (topology spread or anti-affinity on kubernetes.io/hostname)", d.Name))
		}
	}
	return p
}

func webhookTimeouts(o *objects) []string {
	var p []string
	for _, w := range o.webhooks() {
		if w.timeoutSeconds == nil {
			p = append(p, problemf("%s sets no timeoutSeconds", w.where))
		} else if s := *w.timeoutSeconds; s < 1 || s > 30 {
			p = append(p, problemf("%s: timeoutSeconds %d is outside 1..30", w.where, s))
		}
	}
	return p
}

func webhookSideEffects(o *objects) []string {
	var p []string
	for _, w := range o.webhooks() {
		// The mutating webhook deletes a reservation hold (an IPAddress of
		// ours) before an owner's create, never on a dry run (see
		// internal/controllers/holds); the validating one changes nothing.
		want, why := admv1.SideEffectClassNone, "dry-run requests reach it, and it changes nothing"
		if w.mutating {
			want, why = admv1.SideEffectClassNoneOnDryRun, "it releases a reservation hold for an owner's create, never on a dry run"
		}
		if w.sideEffects == nil || *w.sideEffects != want {
			p = append(p, problemf("%s: sideEffects must be %s (%s)", w.where, want, why))
		}
	}
	return p
}

func webhookReviewVersions(o *objects) []string {
	var p []string
	for _, w := range o.webhooks() {
		if !slices.Equal(w.admissionReviewVersions, []string{"v1"}) {
			p = append(p, problemf("%s: admissionReviewVersions %v, want [v1]", w.where, w.admissionReviewVersions))
		}
	}
	return p
}

func webhookFailurePolicy(o *objects) []string {
	var p []string
	for _, w := range o.webhooks() {
		if w.failurePolicy == nil {
			p = append(p, problemf("%s leaves failurePolicy to the API default; choose it", w.where))
		}
	}
	return p
}

func webhookRules(o *objects) []string {
	p := append(hasServiceCIDRWebhook(o), hasPolicyObjectWebhook(o)...)
	for _, w := range o.webhooks() {
		if w.name == serviceCIDRWebhook {
			p = append(p, serviceCIDRRules(w)...)
			continue
		}
		if w.name == policyObjectWebhook {
			p = append(p, policyObjectRules(w)...)
			continue
		}
		if len(w.rules) == 0 {
			p = append(p, problemf("%s has no rules", w.where))
		}
		for _, r := range w.rules {
			if !slices.Equal(r.APIGroups, []string{""}) || !slices.Equal(r.APIVersions, []string{"v1"}) || !slices.Equal(r.Resources, []string{"services"}) {
				p = append(p, problemf("%s matches groups %q versions %q resources %q; want only core v1 services", w.where, r.APIGroups, r.APIVersions, r.Resources))
			}
			if len(r.Operations) == 0 {
				p = append(p, problemf("%s matches no operation", w.where))
			}
			for _, op := range r.Operations {
				if op != admv1.Create && op != admv1.Update {
					p = append(p, problemf("%s matches operation %s, which allocates no ClusterIP", w.where, op))
				}
			}
		}
	}
	return p
}

// webhookNamespaces checks the namespaceSelector by evaluating it against
// the label the apiserver sets on every namespace.
func webhookNamespaces(o *objects) []string {
	var p []string
	for _, w := range o.webhooks() {
		if clusterScoped(w) {
			continue // cluster-scoped objects: a namespaceSelector never applies (serviceCIDRRules and policyObjectRules hold scope Cluster)
		}
		sel := w.namespaceSelector
		if sel == nil {
			sel = &metav1.LabelSelector{} // the API default: every namespace
		}
		s, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil {
			p = append(p, problemf("%s: namespaceSelector: %v", w.where, err))
			continue
		}
		ns := func(name string) labels.Set { return labels.Set{"kubernetes.io/metadata.name": name} }
		if s.Matches(ns(ownNamespace)) {
			p = append(p, problemf("%s covers its own namespace %s: the webhook's own Service would need the webhook", w.where, ownNamespace))
		}
		for _, covered := range []string{"kube-system", "default"} {
			if !s.Matches(ns(covered)) {
				p = append(p, problemf("%s leaves namespace %s uncovered", w.where, covered))
			}
		}
	}
	return p
}

// webhookDefaultKubernetes holds the exemption of default/kubernetes to
// the apiserver's own writes (its loopback identity), with request.name
// guarded: a CREATE with generateName has no name yet, and an unguarded
// access fails to evaluate and rejects the request.
func webhookDefaultKubernetes(o *objects) []string {
	var p []string
	for _, w := range o.webhooks() {
		if w.name == serviceCIDRWebhook {
			p = append(p, serviceCIDRDefaultExempt(w)...)
			continue
		}
		if w.name == policyObjectWebhook {
			continue // no Service, no ServiceCIDR: nothing the apiserver writes itself
		}
		exempt := false
		for _, mc := range w.matchConditions {
			e := strings.Join(strings.Fields(mc.Expression), " ")
			if !(strings.HasPrefix(e, "!(") && strings.Contains(e, "request.namespace == 'default'") && strings.Contains(e, "request.name == 'kubernetes'")) {
				continue
			}
			exempt = true
			if !strings.Contains(e, "has(request.name) && request.name == 'kubernetes'") {
				p = append(p, problemf("%s: matchCondition %s reads request.name without has(request.name); a generateName create has none and would be rejected", w.where, mc.Name))
			}
			if !strings.Contains(e, "request.userInfo.username == 'system:apiserver'") {
				p = append(p, problemf("%s: matchCondition %s exempts default/kubernetes for every user; exempt only the apiserver's loopback identity system:apiserver", w.where, mc.Name))
			}
		}
		if !exempt {
			p = append(p, problemf("%s has no matchCondition exempting default/kubernetes, which the apiserver must be able to recreate", w.where))
		}
	}
	return p
}

// mutateEveryUpdate holds that the mutating Service webhook's static
// conditions skip no UPDATE (only the apiserver's own write of
// default/kubernetes): the apiserver reinvokes a mutating webhook only if
// it called it in the first round, so a static condition that skips a
// label-only UPDATE lets another mutating admission that runs after ours
// add a second address ours never sees. The managed condition
// (--manage-match-conditions) narrows UPDATEs while no such admission
// exists (pkg/matchconditions AllocatingUpdate).
func mutateEveryUpdate(o *objects) []string {
	var p []string
	for _, w := range o.webhooks() {
		if !w.mutating {
			continue
		}
		for _, mc := range w.matchConditions {
			if mc.Name != "not-default-kubernetes" {
				p = append(p, problemf("%s: matchCondition %s may skip an UPDATE that a later mutating admission turns into one that allocates, and the apiserver would then never reinvoke the webhook; leave UPDATEs to the managed condition", w.where, mc.Name))
			}
		}
	}
	return p
}

func webhookClientConfig(o *objects) []string {
	var p []string
	for _, w := range o.webhooks() {
		ref := w.clientConfig.Service
		if ref == nil || w.clientConfig.URL != nil {
			p = append(p, problemf("%s must call the webhook through its Service, not a URL", w.where))
			continue
		}
		want := ValidatePath
		switch {
		case w.mutating:
			want = MutatePath
		case w.name == serviceCIDRWebhook:
			want = ValidateServiceCIDRPath
		case w.name == policyObjectWebhook:
			want = ValidatePolicyObjectPath
		}
		if ref.Path == nil || *ref.Path != want {
			p = append(p, problemf("%s calls path %v, want %s", w.where, ptrString(ref.Path), want))
		}
		port := int32(443)
		if ref.Port != nil {
			port = *ref.Port
		}
		found := false
		for _, s := range o.Services {
			if s.Namespace == ref.Namespace && s.Name == ref.Name {
				for _, sp := range s.Spec.Ports {
					found = found || sp.Port == port
				}
			}
		}
		if !found {
			p = append(p, problemf("%s calls Service %s/%s port %d, which the manifests do not define", w.where, ref.Namespace, ref.Name, port))
		}
	}
	return p
}

func ptrString(s *string) string {
	if s == nil {
		return "<none>"
	}
	return *s
}

func webhookMatchAndReinvoke(o *objects) []string {
	var p []string
	for _, w := range o.webhooks() {
		if w.matchPolicy == nil || *w.matchPolicy != admv1.Equivalent {
			p = append(p, problemf("%s: matchPolicy must be Equivalent", w.where))
		}
		if w.mutating && (w.reinvocationPolicy == nil || *w.reinvocationPolicy != admv1.IfNeededReinvocationPolicy) {
			p = append(p, problemf("%s: reinvocationPolicy must be IfNeeded, or a later mutating webhook can undo the reserved IP", w.where))
		}
	}
	return p
}

// rbacGrant is one thing the webhook may do, and why; rbacExact allows
// nothing else. Widen this only together with the code that needs it.
type rbacGrant struct {
	kind, group, resource string // kind: ClusterRole, or Role (in the webhook's namespace)
	verbs                 []string
	why                   string
	// names, when set, are the only objects the grant may name, and it
	// must name some (resourceNames).
	names []string
}

var rbacGrants = []rbacGrant{
	{"ClusterRole", "networking.k8s.io", "servicecidrs", []string{"get", "list", "watch"}, "the view of the active Service ranges", nil},
	{"ClusterRole", "networking.k8s.io", "ipaddresses", []string{"get", "list", "watch", "create", "delete"}, "the view of allocated addresses; create and delete: reservation holds (--hold-reservations), only IPAddresses labelled managed-by clusterip-policy.io", nil},
	{"ClusterRole", "", "services", []string{"get", "list"}, "get: the holds' leader re-holds a reserved address only while its owner Service does not exist; list: the leader's periodic audit (--audit-interval) reads the existing Services", nil},
	{"ClusterRole", "events.k8s.io", "events", []string{"create"}, "the periodic audit's Warning Event on each offending Service; it never updates or deletes one (it deduplicates itself)", nil},
	{"ClusterRole", "authentication.k8s.io", "tokenreviews", []string{"create"}, "--metrics-secure (the chart's metrics.secure): the apiserver authenticates each new scrape token", nil},
	{"ClusterRole", "authorization.k8s.io", "subjectaccessreviews", []string{"create"}, "--metrics-secure (the chart's metrics.secure): the apiserver says whether the token's user may get /metrics", nil},
	{"ClusterRole", "wgpolicyk8s.io", "policyreports", []string{"list", "create", "update", "delete"}, "--policy-reports: the periodic audit's PolicyReport in each namespace with findings (list: its own, by label; delete: once the namespace has none)", nil},
	{"ClusterRole", "clusterip-policy.io", "clusterippolicies", []string{"get", "list", "watch"}, "the policy object (--policy-source=crd)", nil},
	{"ClusterRole", "clusterip-policy.io", "clusterippolicies/status", []string{"update"}, "the policy object's status: whether its generation is in force, and why not; never its spec", nil},
	{"Role", "coordination.k8s.io", "leases", []string{"get", "create", "update"}, "the Lease that elects the one replica keeping the holds and running the periodic audit", nil},
	{"Role in default", "", "services", []string{"create"}, "--arm-failure-policy: the leader's reachability probe, a server-side dry-run create of a headless Service in namespace default (RBAC cannot grant a dry run alone; the webhook sends no other create)", nil},
	{"ClusterRole", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", []string{"get", "update", "list", "watch"}, "--manage-match-conditions: the leader rewrites its one matchCondition of the named configuration; --certificate-source=managed: the caBundle of its webhooks (get: an update carries the object as read; list, watch by name: a reverted caBundle is written again at once)", []string{"clusterip-policy"}},
	{"ClusterRole", "admissionregistration.k8s.io", "validatingwebhookconfigurations", []string{"get", "update", "list", "watch"}, "--manage-match-conditions: the leader rewrites its one matchCondition of the named configuration; --certificate-source=managed: the caBundle of its webhooks (get: an update carries the object as read; list, watch by name: a reverted caBundle is written again at once)", []string{"clusterip-policy"}},
	{"Role", "", "secrets", []string{"create"}, "--certificate-source=managed: the leader creates the serving Secret and the CA's Secret (RBAC sees no name on a create)", nil},
	{"Role", "", "secrets", []string{"get", "list", "watch", "update"}, "--certificate-source=managed: every replica watches the serving Secret by name; the leader renews both Secrets", []string{"clusterip-policy-webhook-tls", "clusterip-policy-webhook-ca"}},
	{"ClusterRole", "", "namespaces", []string{"list", "watch"}, "the holds and the periodic audit skip the namespaces the Service webhooks' namespaceSelector leaves out, which they match against the namespaces' labels (internal/judged)", nil},
	{"ClusterRole", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", []string{"list", "watch"}, "--manage-match-conditions: the leader sends every create to the mutating webhook while another mutating webhook can act on Services (reinvocation reaches only webhooks called in the first round)", nil},
	{"ClusterRole", "admissionregistration.k8s.io", "mutatingadmissionpolicies", []string{"list", "watch"}, "--manage-match-conditions: as for the other mutating webhooks, the MutatingAdmissionPolicies that can act on Services", nil},
	{"ClusterRole", "admissionregistration.k8s.io", "validatingadmissionpolicies", backstopVerbs, "--backstop: the leader applies the backstop's policies (server-side apply; creating a missing one is authorized as a create of its name) and deletes one the policy no longer needs", backstopNames},
	{"ClusterRole", "admissionregistration.k8s.io", "validatingadmissionpolicybindings", append(slices.Clone(backstopVerbs), "update"), "--backstop: their bindings, by name; one that exists is updated at the version read, so a break-glass deleting it meanwhile is never undone", backstopNames},
	{"ClusterRole", "admissionregistration.k8s.io", "mutatingadmissionpolicies", backstopVerbs, "--backstop: the record of the addresses a request names", []string{backstop.RecordName}},
	{"ClusterRole", "admissionregistration.k8s.io", "mutatingadmissionpolicybindings", backstopVerbs, "--backstop: its binding", []string{backstop.RecordName}},
}

var (
	backstopVerbs = []string{"get", "create", "patch", "delete"}
	// backstopNames are the backstop's validating policies and bindings.
	backstopNames = slices.DeleteFunc(backstop.Names(), func(n string) bool { return n == backstop.RecordName })
)

func rbacExact(o *objects) []string {
	var p []string
	check := func(kind, where string, rule rbacv1.PolicyRule) {
		if len(rule.NonResourceURLs) > 0 {
			p = append(p, problemf("%s grants non-resource URLs %q", where, rule.NonResourceURLs))
		}
		for _, g := range rule.APIGroups {
			for _, res := range rule.Resources {
				// A resource may have a grant by name and one without
				// (mutatingwebhookconfigurations: get/update ours, list/watch
				// all): the rule is held to the one of its kind.
				named := len(rule.ResourceNames) > 0
				i := slices.IndexFunc(rbacGrants, func(x rbacGrant) bool {
					return x.kind == kind && x.group == g && x.resource == res && (x.names != nil) == named
				})
				if i < 0 {
					i = slices.IndexFunc(rbacGrants, func(x rbacGrant) bool { return x.kind == kind && x.group == g && x.resource == res })
				}
				if i < 0 {
					p = append(p, problemf("%s grants resource %q of API group %q; the webhook needs only servicecidrs and ipaddresses (networking.k8s.io), services (get, list), namespaces (list, watch), events (events.k8s.io, create), clusterippolicies (get, list, watch) and their status (update), and, in a Role, its Lease", where, res, g))
					continue
				}
				for _, v := range rule.Verbs {
					if !slices.Contains(rbacGrants[i].verbs, v) {
						p = append(p, problemf("%s grants verb %q on %s; the webhook needs only %q there (%s)", where, v, res, rbacGrants[i].verbs, rbacGrants[i].why))
					}
				}
				if names := rbacGrants[i].names; names != nil {
					if len(rule.ResourceNames) == 0 {
						p = append(p, problemf("%s grants %s without resourceNames; name only %q (%s)", where, res, names, rbacGrants[i].why))
					}
					for _, n := range rule.ResourceNames {
						if !slices.Contains(names, n) {
							p = append(p, problemf("%s grants %s named %q; the webhook needs only %q", where, res, n, names))
						}
					}
				}
			}
		}
	}
	for _, r := range o.ClusterRoles {
		if aggregated(r) {
			continue // the tenants' roles: tenantRoles checks them
		}
		if isMetricsReader(r) {
			continue // for the scrapers, bound to none of ours
		}
		for _, rule := range r.Rules {
			check("ClusterRole", "ClusterRole "+r.Name, rule)
		}
	}
	for _, r := range o.Roles {
		kind := "Role"
		switch r.Namespace {
		case ownNamespace:
		case names.ProbeNamespace:
			kind = "Role in default"
		default:
			p = append(p, problemf("Role %s/%s is outside the webhook's namespace %s (and namespace %s, where the reachability probe is sent)", r.Namespace, r.Name, ownNamespace, names.ProbeNamespace))
		}
		for _, rule := range r.Rules {
			check(kind, "Role "+r.Namespace+"/"+r.Name, rule)
		}
	}
	return p
}

// rbacRoleBinding: the Lease Role is bound to the Deployment's service
// account in its own namespace.
func rbacRoleBinding(o *objects) []string {
	var p []string
	for _, d := range o.Deployments {
		sa := d.Spec.Template.Spec.ServiceAccountName
		bound := false
		for _, b := range o.RoleBindings {
			roleExists := b.RoleRef.Kind == "Role" && slices.ContainsFunc(o.Roles, func(r *rbacv1.Role) bool { return r.Name == b.RoleRef.Name && r.Namespace == b.Namespace })
			for _, s := range b.Subjects {
				bound = bound || (roleExists && b.Namespace == d.Namespace && s.Kind == "ServiceAccount" && s.Namespace == d.Namespace && s.Name == sa)
			}
		}
		if !bound {
			p = append(p, problemf("no RoleBinding in %s binds a Role of the manifests (the holds' Lease) to ServiceAccount %s/%s", d.Namespace, d.Namespace, sa))
		}
	}
	return p
}

// aggregated reports whether r is aggregated into a built-in role (a
// tenant's role), rather than one the webhook is bound to.
func aggregated(r *rbacv1.ClusterRole) bool {
	for k := range r.Labels {
		if strings.HasPrefix(k, "rbac.authorization.k8s.io/aggregate-to-") {
			return true
		}
	}
	return false
}

// tenantRoles: the roles aggregated into the built-in ones touch only the
// policy object; what reaches view and edit only reads it; nothing binds
// them to the webhook.
func tenantRoles(o *objects) []string {
	var p []string
	for _, r := range o.ClusterRoles {
		if !aggregated(r) {
			continue
		}
		readOnly := r.Labels["rbac.authorization.k8s.io/aggregate-to-view"] == "true" || r.Labels["rbac.authorization.k8s.io/aggregate-to-edit"] == "true"
		for _, rule := range r.Rules {
			for _, g := range rule.APIGroups {
				if g != "clusterip-policy.io" {
					p = append(p, problemf("ClusterRole %s, aggregated into the built-in roles, grants API group %q; it may grant only clusterip-policy.io", r.Name, g))
				}
			}
			for _, v := range rule.Verbs {
				if readOnly && !slices.Contains([]string{"get", "list", "watch"}, v) {
					p = append(p, problemf("ClusterRole %s is aggregated into view or edit and grants %q: tenants may only read the policy", r.Name, v))
				}
			}
		}
		for _, b := range o.ClusterRoleBindings {
			if b.RoleRef.Name == r.Name {
				p = append(p, problemf("ClusterRoleBinding %s binds the tenants' ClusterRole %s", b.Name, r.Name))
			}
		}
	}
	return p
}

func rbacBinding(o *objects) []string {
	var p []string
	for _, d := range o.Deployments {
		sa := d.Spec.Template.Spec.ServiceAccountName
		if sa == "" {
			p = append(p, problemf("Deployment %s runs as the default service account", d.Name))
			continue
		}
		if !slices.ContainsFunc(o.ServiceAccounts, func(s *corev1.ServiceAccount) bool { return s.Namespace == d.Namespace && s.Name == sa }) {
			p = append(p, problemf("ServiceAccount %s/%s is not in the manifests", d.Namespace, sa))
		}
		bound := false
		for _, b := range o.ClusterRoleBindings {
			roleExists := b.RoleRef.Kind == "ClusterRole" && slices.ContainsFunc(o.ClusterRoles, func(r *rbacv1.ClusterRole) bool { return r.Name == b.RoleRef.Name })
			for _, s := range b.Subjects {
				bound = bound || (roleExists && s.Kind == "ServiceAccount" && s.Namespace == d.Namespace && s.Name == sa)
			}
		}
		if !bound {
			p = append(p, problemf("no ClusterRoleBinding binds a ClusterRole of the manifests to ServiceAccount %s/%s", d.Namespace, sa))
		}
	}
	return p
}

func noRoot(o *objects) []string {
	var p []string
	for _, c := range o.containers() {
		nonRoot, user := (*bool)(nil), (*int64)(nil)
		if sc := c.pod.SecurityContext; sc != nil {
			nonRoot, user = sc.RunAsNonRoot, sc.RunAsUser
		}
		if sc := c.c.SecurityContext; sc != nil {
			if sc.RunAsNonRoot != nil {
				nonRoot = sc.RunAsNonRoot
			}
			if sc.RunAsUser != nil {
				user = sc.RunAsUser
			}
		}
		if nonRoot == nil || !*nonRoot {
			p = append(p, problemf("%s may run as root: runAsNonRoot is not true", c.where))
		}
		if user != nil && *user == 0 {
			p = append(p, problemf("%s runs as user 0", c.where))
		}
	}
	return p
}

func noPrivilegeEscalation(o *objects) []string {
	var p []string
	for _, c := range o.containers() {
		sc := c.c.SecurityContext
		if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			p = append(p, problemf("%s: allowPrivilegeEscalation must be false", c.where))
		}
		if sc != nil && sc.Privileged != nil && *sc.Privileged {
			p = append(p, problemf("%s is privileged", c.where))
		}
	}
	return p
}

func readOnlyRoot(o *objects) []string {
	var p []string
	for _, c := range o.containers() {
		if sc := c.c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			p = append(p, problemf("%s: readOnlyRootFilesystem must be true", c.where))
		}
	}
	return p
}

func dropAllCapabilities(o *objects) []string {
	var p []string
	for _, c := range o.containers() {
		sc := c.c.SecurityContext
		if sc == nil || sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
			p = append(p, problemf("%s must drop ALL capabilities", c.where))
		} else if len(sc.Capabilities.Add) > 0 {
			p = append(p, problemf("%s adds capabilities %v", c.where, sc.Capabilities.Add))
		}
	}
	return p
}

func seccompRuntimeDefault(o *objects) []string {
	var p []string
	for _, c := range o.containers() {
		var prof *corev1.SeccompProfile
		if sc := c.pod.SecurityContext; sc != nil {
			prof = sc.SeccompProfile
		}
		if sc := c.c.SecurityContext; sc != nil && sc.SeccompProfile != nil {
			prof = sc.SeccompProfile
		}
		if prof == nil || prof.Type != corev1.SeccompProfileTypeRuntimeDefault {
			p = append(p, problemf("%s does not run under the RuntimeDefault seccomp profile", c.where))
		}
	}
	return p
}

func probes(o *objects) []string {
	_, c, err := o.webhookContainer()
	if err != nil {
		return []string{err.Error()}
	}
	addr, ok := flagValue(c, "health-probe-bind-address")
	if !ok {
		return []string{"the webhook container sets no --health-probe-bind-address"}
	}
	health, err := bindPort(addr)
	if err != nil {
		return []string{"--health-probe-bind-address: " + err.Error()}
	}
	var p []string
	for _, pr := range []struct {
		kind  string
		probe *corev1.Probe
		path  string
	}{{"readinessProbe", c.ReadinessProbe, "/readyz"}, {"livenessProbe", c.LivenessProbe, "/healthz"}} {
		if pr.probe == nil || pr.probe.HTTPGet == nil {
			p = append(p, problemf("the webhook container has no HTTP %s", pr.kind))
			continue
		}
		if pr.probe.HTTPGet.Path != pr.path {
			p = append(p, problemf("%s probes %s, want %s", pr.kind, pr.probe.HTTPGet.Path, pr.path))
		}
		if port, ok := containerPort(c, pr.probe.HTTPGet.Port); !ok || port != health {
			p = append(p, problemf("%s probes port %s, not the health port %d", pr.kind, pr.probe.HTTPGet.Port.String(), health))
		}
	}
	return p
}

// mountFor returns the mounts of the volume that matches and the volume.
func mountsOf(d *appsv1.Deployment, c *corev1.Container, match func(corev1.Volume) bool) (*corev1.Volume, []corev1.VolumeMount) {
	for i, v := range d.Spec.Template.Spec.Volumes {
		if !match(v) {
			continue
		}
		var ms []corev1.VolumeMount
		for _, m := range c.VolumeMounts {
			if m.Name == v.Name {
				ms = append(ms, m)
			}
		}
		return &d.Spec.Template.Spec.Volumes[i], ms
	}
	return nil, nil
}

func policyMount(o *objects) []string {
	d, c, err := o.webhookContainer()
	if err != nil {
		return []string{err.Error()}
	}
	if policyFromObject(c) {
		return policyObjectSource(o, c)
	}
	v, mounts := mountsOf(d, c, func(v corev1.Volume) bool { return v.ConfigMap != nil && v.ConfigMap.Name == policyConfigMap })
	if v == nil || len(mounts) == 0 {
		return []string{"the webhook container does not mount ConfigMap " + policyConfigMap}
	}
	var p []string
	for _, m := range mounts {
		if m.SubPath != "" || m.SubPathExpr != "" {
			p = append(p, problemf("ConfigMap %s is mounted with subPath at %s: edits would never reach the pod", policyConfigMap, m.MountPath))
		}
	}
	file, ok := flagValue(c, "policy")
	if !ok {
		return append(p, "the webhook container sets no --policy")
	}
	if filepath.Dir(file) != filepath.Clean(mounts[0].MountPath) || filepath.Base(file) != policyKey {
		p = append(p, problemf("--policy=%s is not %s in the ConfigMap mount %s", file, policyKey, mounts[0].MountPath))
	}
	if len(v.ConfigMap.Items) > 0 {
		p = append(p, "the ConfigMap volume selects items; mount every key under its own name")
	}
	return p
}

func policyParses(o *objects) []string {
	if _, c, err := o.webhookContainer(); err == nil && policyFromObject(c) {
		return nil // policyMount loads the object (policyObjectSource)
	}
	for _, cm := range o.ConfigMaps {
		if cm.Namespace == ownNamespace && cm.Name == policyConfigMap {
			data, ok := cm.Data[policyKey]
			if !ok {
				return []string{problemf("ConfigMap %s has no key %s", policyConfigMap, policyKey)}
			}
			if _, err := policy.ParseDocument([]byte(data)); err != nil {
				return []string{problemf("ConfigMap %s: %s does not load: %v", policyConfigMap, policyKey, err)}
			}
			return nil
		}
	}
	return []string{problemf("no ConfigMap %s/%s", ownNamespace, policyConfigMap)}
}

func certMount(o *objects) []string {
	d, c, err := o.webhookContainer()
	if err != nil {
		return []string{err.Error()}
	}
	if src, _ := flagValue(c, "certificate-source"); src == "managed" {
		// The Secret is read through the API; a mount of it would be the
		// kubelet's late copy, and --cert-dir is refused with managed.
		var p []string
		if dir, ok := flagValue(c, "cert-dir"); ok {
			p = append(p, problemf("--cert-dir=%q with --certificate-source=managed: the webhook refuses to start; drop one", dir))
		}
		if v, _ := mountsOf(d, c, func(v corev1.Volume) bool { return v.Secret != nil && v.Secret.SecretName == tlsSecret }); v != nil {
			p = append(p, problemf("Secret %s is mounted, but --certificate-source=managed reads it through the API", tlsSecret))
		}
		if !slices.ContainsFunc(o.Roles, func(r *rbacv1.Role) bool {
			return slices.ContainsFunc(r.Rules, func(rule rbacv1.PolicyRule) bool { return slices.Contains(rule.ResourceNames, tlsSecret) })
		}) {
			p = append(p, problemf("--certificate-source=managed, but no Role grants the webhook its Secret %s", tlsSecret))
		}
		return p
	}
	// The Secret is clusterip-policy-webhook-tls, or the chart's
	// certificate.existingSecret: whichever Secret volume --cert-dir names.
	dir, _ := flagValue(c, "cert-dir")
	var p []string
	for _, m := range c.VolumeMounts {
		if filepath.Clean(m.MountPath) != filepath.Clean(dir) {
			continue
		}
		v, _ := mountsOf(d, c, func(v corev1.Volume) bool { return v.Name == m.Name })
		if v == nil || v.Secret == nil {
			return []string{problemf("--cert-dir=%q is mounted from volume %s, which is not a Secret", dir, m.Name)}
		}
		if m.SubPath != "" || m.SubPathExpr != "" {
			p = append(p, problemf("Secret %s is mounted with subPath: a rotated certificate would never reach the pod", v.Secret.SecretName))
		}
		return p
	}
	return []string{problemf("the webhook container does not mount a Secret at --cert-dir=%q", dir)}
}

func gracefulShutdown(o *objects) []string {
	d, c, err := o.webhookContainer()
	if err != nil {
		return []string{err.Error()}
	}
	v, ok := flagValue(c, "shutdown-delay")
	if !ok {
		return []string{"the webhook container sets no --shutdown-delay: it would stop while still in the Service's endpoints"}
	}
	delay, err := time.ParseDuration(v)
	if err != nil {
		return []string{"--shutdown-delay: " + err.Error()}
	}
	var longest time.Duration
	for _, w := range o.webhooks() {
		if w.timeoutSeconds != nil {
			longest = max(longest, time.Duration(*w.timeoutSeconds)*time.Second)
		}
	}
	grace := time.Duration(defaultGraceSecs) * time.Second
	if s := d.Spec.Template.Spec.TerminationGracePeriodSeconds; s != nil {
		grace = time.Duration(*s) * time.Second
	}
	if grace < delay+longest {
		return []string{problemf("terminationGracePeriodSeconds %s is less than --shutdown-delay %s plus the longest review %s: in-flight reviews would be killed", grace, delay, longest)}
	}
	return nil
}

func resourcesSet(o *objects) []string {
	var p []string
	for _, c := range o.containers() {
		r := c.c.Resources
		if r.Requests.Cpu().IsZero() || r.Requests.Memory().IsZero() {
			p = append(p, problemf("%s requests no CPU or no memory", c.where))
		}
		if r.Limits.Memory().IsZero() {
			p = append(p, problemf("%s has no memory limit", c.where))
		} else if r.Requests.Memory().Cmp(*r.Limits.Memory()) > 0 {
			p = append(p, problemf("%s requests more memory than its limit", c.where))
		}
	}
	return p
}

func serviceRoutesToWebhook(o *objects) []string {
	d, c, err := o.webhookContainer()
	if err != nil {
		return []string{err.Error()}
	}
	v, ok := flagValue(c, "port")
	if !ok {
		return []string{"the webhook container sets no --port"}
	}
	want, err := strconv.ParseInt(v, 10, 32)
	if err != nil {
		return []string{"--port: " + err.Error()}
	}
	var p []string
	for _, w := range o.webhooks() {
		ref := w.clientConfig.Service
		if ref == nil {
			continue // webhookClientConfig reports it
		}
		for _, s := range o.Services {
			if s.Namespace != ref.Namespace || s.Name != ref.Name {
				continue
			}
			if !selects(&metav1.LabelSelector{MatchLabels: s.Spec.Selector}, d.Spec.Template.Labels) {
				p = append(p, problemf("Service %s does not select the pods of Deployment %s", s.Name, d.Name))
			}
			for _, sp := range s.Spec.Ports {
				if ref.Port != nil && sp.Port != *ref.Port {
					continue
				}
				if port, ok := containerPort(c, sp.TargetPort); !ok || int64(port) != want {
					p = append(p, problemf("Service %s port %d goes to targetPort %s, not the webhook's --port %d", s.Name, sp.Port, sp.TargetPort.String(), want))
				}
			}
		}
	}
	return p
}

// installLabel is the label a two-step install filters on: apply
// everything but the webhook configurations, wait for ready pods, then apply
// the rest (docs/install.md).
const installLabel = "app.kubernetes.io/component"

func (o *objects) metas() []metav1.ObjectMeta {
	var out []metav1.ObjectMeta
	for _, x := range o.Namespaces {
		out = append(out, x.ObjectMeta)
	}
	for _, x := range o.ServiceAccounts {
		out = append(out, x.ObjectMeta)
	}
	for _, x := range o.ConfigMaps {
		out = append(out, x.ObjectMeta)
	}
	for _, x := range o.Services {
		out = append(out, x.ObjectMeta)
	}
	for _, x := range o.Deployments {
		out = append(out, x.ObjectMeta)
	}
	for _, x := range o.PDBs {
		out = append(out, x.ObjectMeta)
	}
	for _, x := range o.ClusterRoles {
		out = append(out, x.ObjectMeta)
	}
	for _, x := range o.ClusterRoleBindings {
		out = append(out, x.ObjectMeta)
	}
	for _, x := range o.Roles {
		out = append(out, x.ObjectMeta)
	}
	for _, x := range o.RoleBindings {
		out = append(out, x.ObjectMeta)
	}
	for _, x := range o.Policies {
		out = append(out, x.ObjectMeta)
	}
	for _, x := range o.ResourceQuotas {
		out = append(out, x.ObjectMeta)
	}
	return out
}

func webhookConfigurationsApplyLast(o *objects) []string {
	var p []string
	for _, c := range o.Mutating {
		if c.Labels[installLabel] != "webhook-configuration" {
			p = append(p, problemf("MutatingWebhookConfiguration %s lacks %s=webhook-configuration", c.Name, installLabel))
		}
	}
	for _, c := range o.Validating {
		if c.Labels[installLabel] != "webhook-configuration" {
			p = append(p, problemf("ValidatingWebhookConfiguration %s lacks %s=webhook-configuration", c.Name, installLabel))
		}
	}
	for _, m := range o.metas() {
		if m.Labels[installLabel] == "webhook-configuration" {
			p = append(p, problemf("%s carries %s=webhook-configuration and would be held back by a two-step install", m.Name, installLabel))
		}
	}
	return p
}

var safetyChecks = []struct {
	name  string
	check check
}{
	{"runs at least two replicas", replicasAtLeastTwo},
	{"has a PodDisruptionBudget for the webhook pods", hasPDB},
	{"spreads the replicas over nodes", spreadOverNodes},
	{"gives every webhook a timeout of 1 to 30 seconds", webhookTimeouts},
	{"declares the mutating webhook free of side effects on dry runs and the validating one free of any", webhookSideEffects},
	{"speaks only admission.k8s.io/v1", webhookReviewVersions},
	{"chooses a failurePolicy for every webhook", webhookFailurePolicy},
	{"registers the Service webhooks not armed (Ignore) only where the leader arms them, with the audit and the probe's RBAC", serviceWebhooksArming},
	{"matches only creates and updates of Services", webhookRules},
	{"checks the policy object fail-open, cluster-wide", policyObjectFailOpen},
	{"keeps the webhook's own namespace out and kube-system in", webhookNamespaces},
	{"exempts default/kubernetes from every webhook, for the apiserver's own writes only", webhookDefaultKubernetes},
	{"calls the mutating webhook on every UPDATE, so a later mutator's change reinvokes it", mutateEveryUpdate},
	{"calls the webhook Service on the webhook paths", webhookClientConfig},
	{"matches equivalent versions and reinvokes the mutating webhook", webhookMatchAndReinvoke},
	{"grants exactly what the view and the reservation holds need", rbacExact},
	{"binds the role to the Deployment's service account", rbacBinding},
	{"binds the Lease role to the Deployment's service account in its namespace", rbacRoleBinding},
	{"runs no container as root", noRoot},
	{"lets no container escalate privileges", noPrivilegeEscalation},
	{"gives every container a read-only root filesystem", readOnlyRoot},
	{"drops every capability", dropAllCapabilities},
	{"runs every container under the RuntimeDefault seccomp profile", seccompRuntimeDefault},
	{"probes /readyz and /healthz on the health port", probes},
	{"mounts the policy ConfigMap as a directory, not with subPath, or reads the one ClusterIPPolicy, which loads", policyMount},
	{"ships a policy that loads", policyParses},
	{"reads the serving certificate through the API (managed), or mounts it where --cert-dir points", certMount},
	{"gives the shutdown delay and in-flight reviews time before SIGKILL", gracefulShutdown},
	{"sets resource requests and a memory limit", resourcesSet},
	{"routes the webhook Service to the webhook port", serviceRoutesToWebhook},
	{"labels the webhook configurations, and only them, for a two-step install", webhookConfigurationsApplyLast},
	{"bounds the probe's create right to dry runs with an admission policy", probeDryRunOnly},
	{"gives tenants read access to the policy through the built-in roles, no more", tenantRoles},
}

// probeDryRunOnly: where a Role lets the webhook create Services in
// default (the reachability probe, a dry run; RBAC cannot grant a dry run
// alone), a ValidatingAdmissionPolicy bound in default with Deny must
// refuse every Service write of the webhook's service account that is not
// a dry run.
func probeDryRunOnly(o *objects) []string {
	if !slices.ContainsFunc(o.Roles, func(r *rbacv1.Role) bool { return r.Namespace == names.ProbeNamespace }) {
		return nil
	}
	sa := fmt.Sprintf("system:serviceaccount:%s:%s", ownNamespace, o.Deployments[0].Spec.Template.Spec.ServiceAccountName)
	for _, p := range o.AdmissionPolicies {
		namesSA := false
		for _, m := range p.Spec.MatchConditions {
			namesSA = namesSA || strings.Contains(m.Expression, "request.userInfo.username == '"+sa+"'")
		}
		dry := slices.ContainsFunc(p.Spec.Validations, func(v admv1.Validation) bool { return v.Expression == "has(request.dryRun) && request.dryRun" })
		writes := p.Spec.MatchConstraints != nil && slices.ContainsFunc(p.Spec.MatchConstraints.ResourceRules, func(r admv1.NamedRuleWithOperations) bool {
			return slices.Contains(r.Resources, "services") && slices.Contains(r.Operations, admv1.Create)
		})
		if p.Spec.FailurePolicy == nil || *p.Spec.FailurePolicy != admv1.Fail || !namesSA || !dry || !writes {
			continue
		}
		for _, b := range o.AdmissionBindings {
			if b.Spec.PolicyName == p.Name && slices.Equal(b.Spec.ValidationActions, []admv1.ValidationAction{admv1.Deny}) &&
				b.Spec.MatchResources != nil && b.Spec.MatchResources.NamespaceSelector != nil &&
				b.Spec.MatchResources.NamespaceSelector.MatchLabels[corev1.LabelMetadataName] == names.ProbeNamespace {
				return nil
			}
		}
	}
	return []string{problemf("a Role lets %s create Services in %s, and no ValidatingAdmissionPolicy (failurePolicy Fail, bound there with Deny) refuses its writes that are not dry runs: a stolen token could create real Services", sa, names.ProbeNamespace)}
}

func TestBaseIsSafe(t *testing.T) {
	o := loadBase(t)
	for _, sc := range safetyChecks {
		t.Run(sc.name, func(t *testing.T) {
			for _, p := range sc.check(o) {
				t.Error(p)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// The checks are only worth something if they fail: each case breaks one
// property of the real base and expects the check to say so.
func TestChecksCatchUnsafeManifests(t *testing.T) {
	deploy := func(o *objects) *appsv1.Deployment { return o.Deployments[0] }
	pod := func(o *objects) *corev1.PodSpec { return &o.Deployments[0].Spec.Template.Spec }
	ctr := func(o *objects) *corev1.Container { return &o.Deployments[0].Spec.Template.Spec.Containers[0] }
	mwh := func(o *objects) *admv1.MutatingWebhook { return &o.Mutating[0].Webhooks[0] }
	vwh := func(o *objects) *admv1.ValidatingWebhook { return &o.Validating[0].Webhooks[0] }
	cwh := func(o *objects) *admv1.ValidatingWebhook {
		i := slices.IndexFunc(o.Validating[0].Webhooks, func(w admv1.ValidatingWebhook) bool { return w.Name == serviceCIDRWebhook })
		return &o.Validating[0].Webhooks[i]
	}
	pwh := func(o *objects) *admv1.ValidatingWebhook {
		i := slices.IndexFunc(o.Validating[0].Webhooks, func(w admv1.ValidatingWebhook) bool { return w.Name == policyObjectWebhook })
		return &o.Validating[0].Webhooks[i]
	}
	setArg := func(c *corev1.Container, name, value string) {
		for i, a := range c.Args {
			if strings.HasPrefix(a, "--"+name+"=") {
				c.Args[i] = "--" + name + "=" + value
			}
		}
	}
	cases := []struct {
		name    string
		check   check
		breakIt func(o *objects)
		want    string
	}{
		{"rejects a Deployment with fewer than two replicas", replicasAtLeastTwo,
			func(o *objects) { deploy(o).Spec.Replicas = ptr(int32(1)) }, "1 replicas"},
		{"rejects a Deployment that leaves replicas to the default of one", replicasAtLeastTwo,
			func(o *objects) { deploy(o).Spec.Replicas = nil }, "1 replicas"},
		{"rejects manifests without a PodDisruptionBudget", hasPDB,
			func(o *objects) { o.PDBs = nil }, "no PodDisruptionBudget"},
		{"rejects a PodDisruptionBudget that selects other pods", hasPDB,
			func(o *objects) { o.PDBs[0].Spec.Selector.MatchLabels = map[string]string{"app": "other"} }, "no PodDisruptionBudget"},
		{"rejects a PodDisruptionBudget that lets every pod go", hasPDB,
			func(o *objects) { o.PDBs[0].Spec.MaxUnavailable = ptr(intstr.FromString("100%")) }, "every one"},
		{"rejects a PodDisruptionBudget with neither bound", hasPDB,
			func(o *objects) { o.PDBs[0].Spec.MaxUnavailable, o.PDBs[0].Spec.MinAvailable = nil, nil }, "neither"},
		{"rejects replicas that may share a node", spreadOverNodes,
			func(o *objects) { pod(o).TopologySpreadConstraints, pod(o).Affinity = nil, nil }, "spread"},
		{"rejects a webhook without timeoutSeconds", webhookTimeouts,
			func(o *objects) { vwh(o).TimeoutSeconds = nil }, "no timeoutSeconds"},
		{"rejects a webhook timeout beyond 30 seconds", webhookTimeouts,
			func(o *objects) { mwh(o).TimeoutSeconds = ptr(int32(31)) }, "outside 1..30"},
		{"rejects a webhook with side effects", webhookSideEffects,
			func(o *objects) { mwh(o).SideEffects = ptr(admv1.SideEffectClassSome) }, "sideEffects"},
		{"rejects a webhook without sideEffects", webhookSideEffects,
			func(o *objects) { vwh(o).SideEffects = nil }, "sideEffects"},
		{"rejects admissionReviewVersions other than v1", webhookReviewVersions,
			func(o *objects) { vwh(o).AdmissionReviewVersions = []string{"v1", "v1beta1"} }, "want [v1]"},
		{"rejects a webhook that leaves failurePolicy to the default", webhookFailurePolicy,
			func(o *objects) { mwh(o).FailurePolicy = nil }, "failurePolicy"},
		{"rejects a Service webhook registered with Fail where the leader arms it", serviceWebhooksArming,
			func(o *objects) { vwh(o).FailurePolicy = ptr(admv1.Fail) }, "failurePolicy must be Ignore: the leader arms it"},
		{"rejects Service webhooks left at Ignore when nobody arms them", serviceWebhooksArming,
			func(o *objects) {
				ctr(o).Args = slices.DeleteFunc(ctr(o).Args, func(a string) bool { return a == "--arm-failure-policy" })
			}, "failurePolicy must be Fail: nobody arms it"},
		{"rejects a ServiceCIDR webhook at Ignore", serviceWebhooksArming,
			func(o *objects) { cwh(o).FailurePolicy = ptr(admv1.Ignore) }, "the leader never arms the ServiceCIDR webhook"},
		{"rejects arming without the periodic audit", serviceWebhooksArming,
			func(o *objects) { setArg(ctr(o), "audit-interval", "0") }, "without --audit-interval"},
		{"rejects arming without the probe's Role in default", serviceWebhooksArming,
			func(o *objects) {
				o.Roles = slices.DeleteFunc(o.Roles, func(r *rbacv1.Role) bool { return r.Namespace == "default" })
			}, "no Role in namespace default grants create on services"},
		{"rejects arming whose probe Role is bound to someone else", serviceWebhooksArming,
			func(o *objects) {
				for _, b := range o.RoleBindings {
					if b.Namespace == "default" {
						b.Subjects[0].Name = "other"
					}
				}
			}, "no RoleBinding in default binds Role clusterip-policy-webhook-probe"},
		{"rejects a probe Role that may also delete Services", rbacExact,
			func(o *objects) {
				for _, r := range o.Roles {
					if r.Namespace == "default" {
						r.Rules[0].Verbs = append(r.Rules[0].Verbs, "delete")
					}
				}
			}, `verb "delete" on services`},
		{"rejects a Role in another namespace", rbacExact,
			func(o *objects) {
				o.Roles = append(o.Roles, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "kube-system"}})
			}, "Role kube-system/x is outside the webhook's namespace"},
		{"rejects a webhook that matches Pods too", webhookRules,
			func(o *objects) { mwh(o).Rules[0].Resources = []string{"services", "pods"} }, "resources"},
		{"rejects a webhook that matches deletes", webhookRules,
			func(o *objects) { vwh(o).Rules[0].Operations = append(vwh(o).Rules[0].Operations, admv1.Delete) }, "DELETE"},
		{"rejects configurations without the policy-object webhook", webhookRules,
			func(o *objects) {
				o.Validating[0].Webhooks = slices.DeleteFunc(o.Validating[0].Webhooks, func(w admv1.ValidatingWebhook) bool { return w.Name == policyObjectWebhook })
			}, "no webhook " + policyObjectWebhook},
		{"rejects a policy-object webhook that also matches the status subresource", webhookRules,
			func(o *objects) {
				pwh(o).Rules[0].Resources = []string{"clusterippolicies", "clusterippolicies/status"}
			}, "must match exactly CREATE and UPDATE of clusterip-policy.io/v1alpha1 clusterippolicies"},
		{"rejects a policy-object webhook that matches deletes", webhookRules,
			func(o *objects) { pwh(o).Rules[0].Operations = append(pwh(o).Rules[0].Operations, admv1.Delete) }, "must match exactly"},
		{"rejects a policy-object webhook that fails closed", policyObjectFailOpen,
			func(o *objects) { pwh(o).FailurePolicy = ptr(admv1.Fail) }, "failurePolicy must be Ignore"},
		{"rejects a policy-object webhook with a namespaceSelector", policyObjectFailOpen,
			func(o *objects) { pwh(o).NamespaceSelector = &metav1.LabelSelector{} }, "namespaceSelector"},
		{"rejects a policy-object webhook on the Service path", webhookClientConfig,
			func(o *objects) { pwh(o).ClientConfig.Service.Path = ptr(ValidatePath) }, "want " + ValidatePolicyObjectPath},
		{"rejects a webhook that covers its own namespace", webhookNamespaces,
			func(o *objects) { mwh(o).NamespaceSelector = nil }, "its own namespace"},
		{"rejects a webhook that leaves kube-system out", webhookNamespaces,
			func(o *objects) {
				vwh(o).NamespaceSelector.MatchExpressions[0].Values = []string{ownNamespace, "kube-system"}
			}, "kube-system uncovered"},
		{"rejects a webhook that does not exempt default/kubernetes", webhookDefaultKubernetes,
			func(o *objects) { vwh(o).MatchConditions = nil }, "default/kubernetes"},
		{"rejects an exemption of default/kubernetes that reads request.name unguarded", webhookDefaultKubernetes,
			func(o *objects) {
				mwh(o).MatchConditions[0].Expression = "!(request.namespace == 'default' && request.name == 'kubernetes')"
			}, "without has(request.name)"},
		{"rejects an exemption of default/kubernetes for every user", webhookDefaultKubernetes,
			func(o *objects) {
				vwh(o).MatchConditions[0].Expression = "!(request.namespace == 'default' && has(request.name) && request.name == 'kubernetes')"
			}, "system:apiserver"},
		{"rejects a mutating webhook whose static conditions skip label-only updates", mutateEveryUpdate,
			func(o *objects) {
				mwh(o).MatchConditions = append(mwh(o).MatchConditions, admv1.MatchCondition{Name: "allocating-requests-only", Expression: "request.operation != 'UPDATE' || (has(oldObject.spec) && has(oldObject.spec.type) && oldObject.spec.type == 'ExternalName')"})
			}, "never reinvoke"},
		{"rejects a webhook called on the wrong path", webhookClientConfig,
			func(o *objects) { mwh(o).ClientConfig.Service.Path = ptr(ValidatePath) }, "want " + MutatePath},
		{"rejects a webhook called through a Service the manifests lack", webhookClientConfig,
			func(o *objects) { vwh(o).ClientConfig.Service.Name = "elsewhere" }, "do not define"},
		{"rejects a ServiceCIDR webhook that also matches servicecidrs/status", webhookRules,
			func(o *objects) { cwh(o).Rules[0].Resources = []string{"servicecidrs", "servicecidrs/status"} }, "exactly"},
		{"rejects a ServiceCIDR webhook that also matches IPAddresses", webhookRules,
			func(o *objects) { cwh(o).Rules[0].Resources = []string{"servicecidrs", "ipaddresses"} }, "exactly"},
		{"rejects a ServiceCIDR webhook that matches every version", webhookRules,
			func(o *objects) { cwh(o).Rules[0].APIVersions = []string{"*"} }, "exactly"},
		{"rejects a ServiceCIDR webhook that matches deletes", webhookRules,
			func(o *objects) { cwh(o).Rules[0].Operations = append(cwh(o).Rules[0].Operations, admv1.Delete) }, "exactly"},
		{"rejects a ServiceCIDR webhook with a second rule", webhookRules,
			func(o *objects) { cwh(o).Rules = append(cwh(o).Rules, cwh(o).Rules[0]) }, "exactly"},
		{"rejects a ServiceCIDR webhook whose scope is not Cluster", webhookRules,
			func(o *objects) { cwh(o).Rules[0].Scope = ptr(admv1.AllScopes) }, "exactly"},
		{"rejects configurations without the ServiceCIDR webhook", webhookRules,
			func(o *objects) { o.Validating[0].Webhooks = o.Validating[0].Webhooks[:1] }, "no webhook " + serviceCIDRWebhook},
		{"rejects a ServiceCIDR webhook that does not exempt the apiserver's default ServiceCIDR", webhookDefaultKubernetes,
			func(o *objects) { cwh(o).MatchConditions = cwh(o).MatchConditions[1:] }, "default ServiceCIDR"},
		{"rejects an exemption of the default ServiceCIDR for every user", webhookDefaultKubernetes,
			func(o *objects) {
				cwh(o).MatchConditions[0].Expression = "!(has(request.name) && request.name == 'kubernetes')"
			}, "system:apiserver"},
		{"rejects an exemption of the default ServiceCIDR that reads request.name unguarded", webhookDefaultKubernetes,
			func(o *objects) {
				cwh(o).MatchConditions[0].Expression = "!(request.name == 'kubernetes' && has(request.userInfo.username) && request.userInfo.username == 'system:apiserver')"
			}, "without has(request.name)"},
		{"rejects a ServiceCIDR webhook called on the Service path", webhookClientConfig,
			func(o *objects) { cwh(o).ClientConfig.Service.Path = ptr(ValidatePath) }, "want " + ValidateServiceCIDRPath},
		{"rejects a mutating webhook that is not reinvoked", webhookMatchAndReinvoke,
			func(o *objects) { mwh(o).ReinvocationPolicy = ptr(admv1.NeverReinvocationPolicy) }, "IfNeeded"},
		{"rejects exact version matching", webhookMatchAndReinvoke,
			func(o *objects) { vwh(o).MatchPolicy = ptr(admv1.Exact) }, "Equivalent"},
		{"rejects RBAC that may create ServiceCIDRs", rbacExact,
			func(o *objects) {
				o.ClusterRoles[0].Rules[0].Verbs = append(o.ClusterRoles[0].Rules[0].Verbs, "create")
			}, `"create"`},
		{"rejects RBAC with a wildcard verb", rbacExact,
			func(o *objects) { o.ClusterRoles[0].Rules[0].Verbs = []string{"*"} }, `"*"`},
		{"rejects a namespaced Role over IPAddresses", rbacExact,
			func(o *objects) {
				o.Roles = append(o.Roles, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: ownNamespace},
					Rules: []rbacv1.PolicyRule{{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"ipaddresses"}, Verbs: []string{"delete"}}}})
			}, `grants resource "ipaddresses"`},
		{"rejects RBAC that may update every webhook configuration", rbacExact,
			func(o *objects) {
				o.ClusterRoles[0].Rules = append(o.ClusterRoles[0].Rules, rbacv1.PolicyRule{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"validatingwebhookconfigurations"}, Verbs: []string{"update"}})
			}, "without resourceNames"},
		{"rejects RBAC that may update another webhook configuration", rbacExact,
			func(o *objects) {
				o.ClusterRoles[0].Rules = append(o.ClusterRoles[0].Rules, rbacv1.PolicyRule{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"mutatingwebhookconfigurations"}, ResourceNames: []string{"someone-else"}, Verbs: []string{"update"}})
			}, `named "someone-else"`},
		{"rejects RBAC that may update every mutating webhook configuration", rbacExact,
			func(o *objects) {
				o.ClusterRoles[0].Rules = append(o.ClusterRoles[0].Rules, rbacv1.PolicyRule{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"mutatingwebhookconfigurations"}, Verbs: []string{"list", "update"}})
			}, `verb "update" on mutatingwebhookconfigurations`},
		{"rejects RBAC that may write MutatingAdmissionPolicies", rbacExact,
			func(o *objects) {
				o.ClusterRoles[0].Rules = append(o.ClusterRoles[0].Rules, rbacv1.PolicyRule{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"mutatingadmissionpolicies"}, Verbs: []string{"create"}})
			}, `verb "create" on mutatingadmissionpolicies`},
		{"rejects RBAC that may patch the webhook configurations", rbacExact,
			func(o *objects) {
				o.ClusterRoles[0].Rules = append(o.ClusterRoles[0].Rules, rbacv1.PolicyRule{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"mutatingwebhookconfigurations"}, ResourceNames: []string{"clusterip-policy"}, Verbs: []string{"patch"}})
			}, `"patch"`},
		{"rejects RBAC that may update IPAddresses", rbacExact,
			func(o *objects) {
				o.ClusterRoles[0].Rules = append(o.ClusterRoles[0].Rules, rbacv1.PolicyRule{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"ipaddresses"}, Verbs: []string{"update"}})
			}, `"update"`},
		{"rejects RBAC that may delete Services", rbacExact,
			func(o *objects) {
				o.ClusterRoles[0].Rules = append(o.ClusterRoles[0].Rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"delete"}})
			}, `"delete"`},
		{"rejects RBAC that may change or delete Events", rbacExact,
			func(o *objects) {
				o.ClusterRoles[0].Rules = append(o.ClusterRoles[0].Rules, rbacv1.PolicyRule{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"patch", "delete"}})
			}, `"patch"`},
		{"rejects RBAC on core Events (the audit writes events.k8s.io ones)", rbacExact,
			func(o *objects) {
				o.ClusterRoles[0].Rules = append(o.ClusterRoles[0].Rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create"}})
			}, `resource "events" of API group ""`},
		{"rejects RBAC that may watch Services", rbacExact,
			func(o *objects) {
				o.ClusterRoles[0].Rules = append(o.ClusterRoles[0].Rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"watch"}})
			}, `"watch"`},
		{"rejects a Lease grant cluster-wide", rbacExact,
			func(o *objects) {
				o.ClusterRoles[0].Rules = append(o.ClusterRoles[0].Rules, rbacv1.PolicyRule{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get"}})
			}, `"leases"`},
		{"rejects a Lease role in another namespace", rbacExact,
			func(o *objects) { o.Roles[0].Namespace = "kube-system" }, "outside the webhook's namespace"},
		{"rejects the Lease role moved to the probe's namespace", rbacExact,
			func(o *objects) { o.Roles[0].Namespace = "default" }, `grants resource "leases"`},
		{"rejects a Lease role bound to no one", rbacRoleBinding,
			func(o *objects) { o.RoleBindings = nil }, "no RoleBinding"},
		{"rejects a mutating webhook declared free of side effects", webhookSideEffects,
			func(o *objects) { mwh(o).SideEffects = ptr(admv1.SideEffectClassNone) }, "NoneOnDryRun"},
		{"rejects a validating webhook with side effects on dry runs", webhookSideEffects,
			func(o *objects) { vwh(o).SideEffects = ptr(admv1.SideEffectClassNoneOnDryRun) }, "sideEffects must be None"},
		{"rejects RBAC that reads Secrets", rbacExact,
			func(o *objects) {
				o.ClusterRoles[0].Rules = append(o.ClusterRoles[0].Rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}})
			}, `"secrets"`},
		{"rejects a binding to another service account", rbacBinding,
			func(o *objects) { o.ClusterRoleBindings[0].Subjects[0].Namespace = "default" }, "no ClusterRoleBinding"},
		{"rejects a container that may run as root", noRoot,
			func(o *objects) { pod(o).SecurityContext.RunAsNonRoot = nil; ctr(o).SecurityContext.RunAsNonRoot = nil }, "may run as root"},
		{"rejects a container that overrides the pod's runAsNonRoot", noRoot,
			func(o *objects) { ctr(o).SecurityContext.RunAsNonRoot = ptr(false) }, "may run as root"},
		{"rejects a container that runs as user 0", noRoot,
			func(o *objects) { ctr(o).SecurityContext.RunAsUser = ptr(int64(0)) }, "user 0"},
		{"rejects an init container that may run as root", noRoot,
			func(o *objects) {
				pod(o).SecurityContext.RunAsNonRoot = nil
				pod(o).InitContainers = []corev1.Container{{Name: "setup"}}
			}, "init container setup may run as root"},
		{"rejects a container that may escalate privileges", noPrivilegeEscalation,
			func(o *objects) { ctr(o).SecurityContext.AllowPrivilegeEscalation = nil }, "allowPrivilegeEscalation"},
		{"rejects a privileged container", noPrivilegeEscalation,
			func(o *objects) { ctr(o).SecurityContext.Privileged = ptr(true) }, "privileged"},
		{"rejects a writable root filesystem", readOnlyRoot,
			func(o *objects) { ctr(o).SecurityContext.ReadOnlyRootFilesystem = ptr(false) }, "readOnlyRootFilesystem"},
		{"rejects a container that keeps its capabilities", dropAllCapabilities,
			func(o *objects) { ctr(o).SecurityContext.Capabilities.Drop = nil }, "drop ALL"},
		{"rejects a container that adds a capability", dropAllCapabilities,
			func(o *objects) { ctr(o).SecurityContext.Capabilities.Add = []corev1.Capability{"NET_ADMIN"} }, "NET_ADMIN"},
		{"rejects a container without a seccomp profile", seccompRuntimeDefault,
			func(o *objects) {
				pod(o).SecurityContext.SeccompProfile = nil
				ctr(o).SecurityContext.SeccompProfile = nil
			}, "RuntimeDefault"},
		{"rejects an Unconfined seccomp profile", seccompRuntimeDefault,
			func(o *objects) {
				ctr(o).SecurityContext.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
			}, "RuntimeDefault"},
		{"rejects a readiness probe on the wrong path", probes,
			func(o *objects) { ctr(o).ReadinessProbe.HTTPGet.Path = "/healthz" }, "want /readyz"},
		{"rejects a liveness probe on the metrics port", probes,
			func(o *objects) { ctr(o).LivenessProbe.HTTPGet.Port = intstr.FromString("metrics") }, "not the health port"},
		{"rejects a container without a liveness probe", probes,
			func(o *objects) { ctr(o).LivenessProbe = nil }, "no HTTP livenessProbe"},
		{"rejects a --cert-dir where the Secret is not mounted", certMount,
			func(o *objects) {
				setArg(ctr(o), "certificate-source", "file")
				ctr(o).Args = append(ctr(o).Args, "--cert-dir=/certs")
			}, "does not mount a Secret at --cert-dir"},
		{"rejects --cert-dir beside --certificate-source=managed", certMount,
			func(o *objects) { ctr(o).Args = append(ctr(o).Args, "--cert-dir=/tls") }, "the webhook refuses to start"},
		{"rejects managed certificates without the Role on their Secret", certMount,
			func(o *objects) {
				o.Roles = slices.DeleteFunc(o.Roles, func(r *rbacv1.Role) bool { return r.Name == "clusterip-policy-webhook-certificates" })
			}, "no Role grants the webhook its Secret"},
		{"rejects a grace period shorter than the shutdown delay and a review", gracefulShutdown,
			func(o *objects) { pod(o).TerminationGracePeriodSeconds = ptr(int64(5)) }, "in-flight reviews would be killed"},
		{"rejects a webhook without a shutdown delay", gracefulShutdown,
			func(o *objects) {
				ctr(o).Args = slices.DeleteFunc(ctr(o).Args, func(a string) bool { return strings.HasPrefix(a, "--shutdown-delay") })
			}, "no --shutdown-delay"},
		{"rejects a container without a memory limit", resourcesSet,
			func(o *objects) { ctr(o).Resources.Limits = nil }, "no memory limit"},
		{"rejects a container without requests", resourcesSet,
			func(o *objects) { ctr(o).Resources.Requests = nil }, "requests no CPU"},
		{"rejects a Service whose targetPort misses the webhook", serviceRoutesToWebhook,
			func(o *objects) { o.Services[0].Spec.Ports[0].TargetPort = intstr.FromInt32(8443) }, "targetPort 8443"},
		{"rejects a webhook configuration a two-step install would apply first", webhookConfigurationsApplyLast,
			func(o *objects) { delete(o.Validating[0].Labels, installLabel) }, "lacks"},
		{"rejects a Deployment a two-step install would hold back", webhookConfigurationsApplyLast,
			func(o *objects) { deploy(o).Labels[installLabel] = "webhook-configuration" }, "held back"},
		{"rejects a view role that may edit the policy", tenantRoles,
			func(o *objects) {
				for _, r := range o.ClusterRoles {
					if r.Name == "clusterip-policy-view" {
						r.Rules[0].Verbs = append(r.Rules[0].Verbs, "update")
					}
				}
			}, "tenants may only read"},
		{"rejects a probe Role without the dry-run-only policy", probeDryRunOnly,
			func(o *objects) { o.AdmissionBindings = nil }, "no ValidatingAdmissionPolicy"},
		{"rejects a dry-run-only policy that lets real creates through", probeDryRunOnly,
			func(o *objects) { o.AdmissionPolicies[0].Spec.Validations[0].Expression = "true" }, "stolen token"},
		{"rejects a Service that selects other pods", serviceRoutesToWebhook,
			func(o *objects) { o.Services[0].Spec.Selector = map[string]string{"app": "other"} }, "does not select"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { checkCatches(t, loadBase(t), tc.check, tc.breakIt, tc.want) })
	}
}

// checkCatches holds a check to its word: it passes the unbroken objects,
// and once breakIt has broken them it reports a problem mentioning want.
func checkCatches(t *testing.T, o *objects, check func(*objects) []string, breakIt func(*objects), want string) {
	t.Helper()
	if p := check(o); len(p) > 0 {
		t.Fatalf("the check fails on the unbroken manifests already: %v", p)
	}
	breakIt(o)
	p := check(o)
	if len(p) == 0 {
		t.Fatal("the check found nothing wrong")
	}
	if !slices.ContainsFunc(p, func(s string) bool { return strings.Contains(s, want) }) {
		t.Errorf("no problem mentions %q; got %q", want, p)
	}
}

// metricsReaderRole is the ClusterRole the chart renders with
// metrics.secure for the scrapers of --metrics-secure.
const metricsReaderRole = "clusterip-policy-metrics-reader"

// isMetricsReader is the scrapers' ClusterRole: its name, and get on the
// non-resource URL /metrics and nothing else. A role of that name granting
// more is held to rbacExact like the webhook's.
func isMetricsReader(r *rbacv1.ClusterRole) bool {
	return r.Name == metricsReaderRole && len(r.Rules) == 1 && len(r.Rules[0].APIGroups) == 0 && len(r.Rules[0].Resources) == 0 &&
		slices.Equal(r.Rules[0].NonResourceURLs, []string{"/metrics"}) && slices.Equal(r.Rules[0].Verbs, []string{"get"})
}
