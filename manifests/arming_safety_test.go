package manifests

import (
	"slices"

	admv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"clusterip-policy/internal/names"
)

// hasBoolFlag reports whether c passes the boolean flag --name (or
// --name=true).
func hasBoolFlag(c *corev1.Container, name string) bool {
	args := append(slices.Clone(c.Command), c.Args...)
	return slices.Contains(args, "--"+name) || slices.Contains(args, "--"+name+"=true")
}

// serviceWebhooksArming holds the failurePolicy of the Service webhooks to
// how the Deployment runs: with --arm-failure-policy they are registered
// not armed (Ignore), the leader arms them once its probe proves the
// apiserver reaches a ready replica, and so the manifests must also run
// the periodic audit (it names what was admitted unchecked meanwhile) and
// let the leader send its probe (create on Services in namespace default,
// a dry run). Without the flag nobody arms them, so they must be Fail. The
// ServiceCIDR webhook is never armed by the leader: Fail.
func serviceWebhooksArming(o *objects) []string {
	var p []string
	arm, audit := false, false
	for _, d := range o.Deployments {
		for i := range d.Spec.Template.Spec.Containers {
			c := &d.Spec.Template.Spec.Containers[i]
			arm = arm || hasBoolFlag(c, "arm-failure-policy")
			if v, ok := flagValue(c, "audit-interval"); ok && v != "0" && v != "0s" {
				audit = true
			}
		}
	}
	for _, w := range o.webhooks() {
		want, why := admv1.Fail, "nobody arms it (no --arm-failure-policy), so it must be Fail: with Ignore a create sent while the webhook is down is admitted unchecked"
		switch {
		case w.name == serviceCIDRWebhook:
			why = "the leader never arms the ServiceCIDR webhook, and a ServiceCIDR outside policy would make ordinary creates fail"
		case w.name == policyObjectWebhook:
			continue // policyObjectFailOpen
		case arm:
			want, why = admv1.Ignore, "the leader arms it (--arm-failure-policy): registered with Fail, every Service create would fail until the first replica is ready"
		}
		if w.failurePolicy == nil || *w.failurePolicy != want {
			p = append(p, problemf("%s: failurePolicy must be %s: %s", w.where, want, why))
		}
	}
	if !arm {
		return p
	}
	if !audit {
		p = append(p, problemf("the Deployment runs --arm-failure-policy without --audit-interval: nothing would name what is admitted unchecked while the Service webhooks are not armed"))
	}
	probeRole := ""
	for _, r := range o.Roles {
		if r.Namespace != names.ProbeNamespace {
			continue
		}
		for _, rule := range r.Rules {
			if slices.Contains(rule.APIGroups, "") && slices.Contains(rule.Resources, "services") && slices.Contains(rule.Verbs, "create") {
				probeRole = r.Name
			}
		}
	}
	if probeRole == "" {
		return append(p, problemf("no Role in namespace %s grants create on services: the leader's reachability probe (a dry run) would be forbidden and the Service webhooks never armed", names.ProbeNamespace))
	}
	for _, d := range o.Deployments {
		sa := d.Spec.Template.Spec.ServiceAccountName
		if !slices.ContainsFunc(o.RoleBindings, func(b *rbacv1.RoleBinding) bool {
			return b.Namespace == names.ProbeNamespace && b.RoleRef.Kind == "Role" && b.RoleRef.Name == probeRole &&
				slices.ContainsFunc(b.Subjects, func(s rbacv1.Subject) bool {
					return s.Kind == "ServiceAccount" && s.Namespace == d.Namespace && s.Name == sa
				})
		}) {
			p = append(p, problemf("no RoleBinding in %s binds Role %s (the reachability probe) to ServiceAccount %s/%s", names.ProbeNamespace, probeRole, d.Namespace, sa))
		}
	}
	return p
}
