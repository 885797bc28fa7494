package policy

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"clusterip-policy/test/fixtures"
)

// FuzzParse: any file is either a policy or an error, never a panic.
// `go test -fuzz FuzzParse ./pkg/policy` explores beyond the seeds.
func FuzzParse(f *testing.F) {
	f.Add("apiVersion: clusterip-policy/v1alpha1\nkind: ClusterIPPolicy\n" + dnsPolicy)
	f.Add("apiVersion: clusterip-policy/v1alpha1\nkind: ClusterIPPolicy\nallowedCIDRs: [10.96.0.0/12]\nenforcement: {default: warn, rules: {invalid-ip: audit}}\n")
	f.Add("reservations: [{ip: '::ffff:1.2.3.4', service: a/b}]")
	f.Add("- - -\n")
	f.Fuzz(func(t *testing.T, body string) {
		p, err := Parse([]byte(body))
		if (p == nil) == (err == nil) {
			t.Fatalf("Parse returned policy %v and error %v", p, err)
		}
	})
}

// FuzzParseDocument feeds object manifests, whose refusals find their
// lines in the file's YAML node tree: whatever the layout (flow style,
// anchors, keys in any order), exactly one of a policy and an error comes
// back, and no refusal names a line past the file's end.
func FuzzParseDocument(f *testing.F) {
	f.Add("apiVersion: clusterip-policy.io/v1alpha1\nkind: ClusterIPPolicy\nmetadata: {name: default}\nspec:\n  reservations:\n  - ip: 10.96.0.10\n    service: a/b\n    colour: x\n")
	f.Add("apiVersion: clusterip-policy.io/v1alpha1\nkind: ClusterIPPolicy\nmetadata: {name: default}\nspec: {allowedCIDRs: [1.2.3.4/33]}\n")
	f.Add("spec:\n    a: 1\n  b: 2\nkind: ClusterIPPolicy\napiVersion: clusterip-policy.io/v1alpha1\nmetadata:\n  name: default\n")
	f.Add("apiVersion: clusterip-policy.io/v1alpha1\nkind: ClusterIPPolicy\nmetadata: {name: default}\nspec:\n  reservations: &r\n  - ip: 10.96.0.10\n    service: a/b\n  exemptions: {namespaces: *r}\n")
	f.Fuzz(func(t *testing.T, body string) {
		p, err := ParseDocument([]byte(body))
		if (p == nil) == (err == nil) {
			t.Fatalf("ParseDocument returned policy %v and error %v", p, err)
		}
		var list *ErrorList
		if errors.As(err, &list) {
			for _, e := range list.Errors {
				if e.Line > strings.Count(body, "\n")+1 {
					t.Fatalf("%v names line %d of a file of %d lines", e, e.Line, strings.Count(body, "\n")+1)
				}
			}
		}
	})
}

// FuzzMutateAndValidate: any requested IPs get a decision with a message,
// never a panic, and a denial always names a rule.
func FuzzMutateAndValidate(f *testing.F) {
	f.Add("10.96.0.10", "", "kube-system/kube-dns")
	f.Add("10.96.200.5", "fd00:10:96::5000", "default/web")
	f.Add("fd00:10:96:0::a", "10.96.0.0", "default/web")
	f.Add("None", "", "default/web")
	f.Add("::ffff:10.96.0.1", "1.2.3.4%eth0", "default/web")
	env := Env{Policy: fixtures.MustPolicy(f, ParseDocument, dnsPolicy), Snapshot: makeSnapshot(dualStack, "10.96.0.20=default/other")}
	f.Fuzz(func(t *testing.T, ip1, ip2, owner string) {
		o, err := parseOwner(owner)
		if err != nil {
			o = Owner{"default", "web"}
		}
		var ips []string
		for _, ip := range []string{ip1, ip2} {
			if ip != "" && !strings.ContainsAny(ip, "\x00") {
				ips = append(ips, ip)
			}
		}
		svc := fixtures.Service(o.Namespace, o.Name, fixtures.WithClusterIPs(ips...))
		for _, req := range []Request{{Operation: Create, Service: svc}, {Operation: Create, Service: svc, DryRun: true}, {Operation: Update, Service: svc, OldService: fixtures.Service(o.Namespace, o.Name, fixtures.WithType(corev1.ServiceTypeExternalName))}} {
			for _, d := range []Decision{Mutate(env, req), Validate(env, req)} {
				if !d.Allowed() && (len(d.Rules()) == 0 || d.Message == "") {
					t.Fatalf("%s denied %v without a rule or message: %+v", d.Stage, ips, d)
				}
			}
		}
	})
}
