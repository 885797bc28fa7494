package policy

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"clusterip-policy/pkg/apis/clusterippolicy/v1alpha1"
	"clusterip-policy/test/fixtures"
)

func TestCompileTheTypedSpec(t *testing.T) {
	p, err := Compile(v1alpha1.ClusterIPPolicySpec{
		AllowedCIDRs:   []v1alpha1.CIDR{"10.96.0.0/12"},
		Reservations:   []v1alpha1.Reservation{{IP: "10.96.0.10", Service: "kube-system/kube-dns", Note: "cluster DNS"}},
		ReservedRanges: []v1alpha1.ReservedRange{{CIDR: "10.96.0.16/28", NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}}},
		Enforcement:    v1alpha1.Enforcement{Default: "warn", Rules: map[string]v1alpha1.Action{"already-allocated": "audit"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Reservations) != 1 || p.Reservations[0].Owner != (Owner{"kube-system", "kube-dns"}) || len(p.ReservedRanges) != 1 || p.ReservedRanges[0].Size != 16 {
		t.Fatalf("compiled %+v", p)
	}
	if p.ActionFor(RuleAlreadyAllocated) != ActionAudit || p.ActionFor(RuleInvalidIP) != ActionWarn || p.Digest == "" {
		t.Fatalf("actions %v default %v digest %q", p.RuleActions, p.DefaultAction, p.Digest)
	}
}

// Every refusal names its field path as the apiserver's field errors do,
// and all of them are reported, not the first only.
func TestCompileNamesEveryRefusalByItsField(t *testing.T) {
	_, err := Compile(v1alpha1.ClusterIPPolicySpec{
		Reservations: []v1alpha1.Reservation{
			{IP: "10.96.0.10", Service: "kube-system/kube-dns"},
			{IP: "10.96.0.300", Service: "a/b"},
			{IP: "10.96.0.11", Service: "just-a-name"},
			{IP: "10.96.0.10", Service: "default/web"},
		},
		Enforcement: v1alpha1.Enforcement{Rules: map[string]v1alpha1.Action{"static-ip": "warn", "invalid-ip": "allow"}},
		Exemptions:  v1alpha1.Exemptions{Namespaces: []string{"Legacy"}},
	})
	var list *ErrorList
	if !errors.As(err, &list) {
		t.Fatalf("err %v (%T), want an *ErrorList", err, err)
	}
	want := []string{
		`spec.reservations[1].ip: "10.96.0.300" is not an IP address`,
		`spec.reservations[2].service: "just-a-name" is not namespace/name, such as kube-system/kube-dns`,
		`spec.reservations[3]: 10.96.0.10 is reserved for both kube-system/kube-dns (spec.reservations[0]) and default/web; an IP has one owner`,
		`spec.enforcement.rules[invalid-ip]: "allow" is not an action; use deny, warn or audit`,
		`spec.enforcement.rules[static-ip]: "static-ip" is not a rule; the rules are invalid-ip,`,
		`spec.exemptions.namespaces[0]: "Legacy" is not a namespace name`,
	}
	if list.Total != len(want) || len(list.Errors) != len(want) {
		t.Fatalf("%d errors, want %d: %v", list.Total, len(want), err)
	}
	for i, w := range want {
		if got := list.Errors[i].Error(); !strings.HasPrefix(got, w) {
			t.Errorf("error %d = %q, want it to start with %q", i, got, w)
		}
	}
	if !strings.HasPrefix(err.Error(), "6 errors: spec.reservations[1].ip: ") {
		t.Errorf("message %q", err)
	}
}

// A spec with thousands of bad entries gets a bounded message that says
// how many more there are.
func TestCompileCapsTheErrors(t *testing.T) {
	var spec v1alpha1.ClusterIPPolicySpec
	for i := range MaxReservations {
		spec.Reservations = append(spec.Reservations, v1alpha1.Reservation{IP: v1alpha1.IPAddress(fmt.Sprintf("10.96.0.%d%s", i, strings.Repeat("x", 200))), Service: "a/b"})
	}
	_, err := Compile(spec)
	var list *ErrorList
	if !errors.As(err, &list) || list.Total != MaxReservations || len(list.Errors) != MaxErrors {
		t.Fatalf("err %v", err)
	}
	msg := err.Error()
	if !strings.HasSuffix(msg, fmt.Sprintf("; and %d more", MaxReservations-MaxErrors)) || len(msg) > MaxErrors*(MaxEchoBytes+200) {
		t.Fatalf("message of %d bytes: %.300s...%s", len(msg), msg, msg[len(msg)-40:])
	}
}

// A refusal in an object manifest file names the field and its line in
// the file, whatever the layout: found through the file's YAML node tree.
func TestObjectFileRefusalsGiveTheFilesLine(t *testing.T) {
	tests := []struct{ name, file, want string }{
		{"block style", fixtures.Policy("allowedCIDRs: [10.96.0.0/12]\nreservations:\n- ip: 10.96.0.10\n  service: kube-system/kube-dns\n- service: default/web\n  ip: 10.96.0.10\n"),
			"spec.reservations[1] (line 10): 10.96.0.10 is reserved for both kube-system/kube-dns (spec.reservations[0], line 8) and default/web; an IP has one owner"},
		{"the field's own line", fixtures.Policy("reservations:\n- service: default/web\n  ip: 10.96.0.300\n"),
			`spec.reservations[0].ip (line 8): "10.96.0.300" is not an IP address`},
		{"flow style", "apiVersion: clusterip-policy.io/v1alpha1\nkind: ClusterIPPolicy\nmetadata: {name: default}\nspec: {reservations: [{ip: 10.96.0.10, service: a/b},\n  {ip: 10.96.0.10, service: c/d}]}\n",
			"spec.reservations[1] (line 5): 10.96.0.10 is reserved for both a/b (spec.reservations[0], line 4) and c/d"},
		{"spec first, keys out of order", "spec:\n  enforcement:\n    default: block\nmetadata:\n  name: default\nkind: ClusterIPPolicy\napiVersion: clusterip-policy.io/v1alpha1\n",
			`spec.enforcement.default (line 3): "block" is not an action`},
		{"an unknown field", fixtures.Policy("exemptions:\n  namespaces: [a]\n  user: [b]\n"),
			`spec.exemptions (line 8): unknown field "user"`},
		{"a value of the wrong type", fixtures.Policy("reservations:\n- ip: 10.96.0.10\n  service: kube-system/kube-dns\n  note: 5\n"),
			`spec.reservations.note (line 6): is a number; it must be a string`},
		{"an unknown field at the top", "apiVersion: clusterip-policy.io/v1alpha1\nkind: ClusterIPPolicy\nmetadata: {name: default}\nspec: {}\nstatsu: {}\n",
			`line 5: unknown field "statsu"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseDocument([]byte(tt.file))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err %v\nwant one containing %q", err, tt.want)
			}
		})
	}
}

// The object file, its spec as the apiserver serves it and the typed spec
// load the same policy; the file and the served spec keep one digest.
func TestTheObjectLoadsAlikeFromEachSource(t *testing.T) {
	spec := "allowedCIDRs: [10.96.0.0/12]\nreservations:\n- {ip: 10.96.0.10, service: kube-system/kube-dns}\nenforcement: {default: warn}\n"
	fromFile := fixtures.MustPolicy(t, ParseDocument, spec)
	fromSpec, err := ParseObjectSpec([]byte(`{"reservations":[{"service":"kube-system/kube-dns","ip":"10.96.0.10"}],"enforcement":{"default":"warn"},"allowedCIDRs":["10.96.0.0/12"]}`))
	if err != nil {
		t.Fatal(err)
	}
	typed, err := Compile(v1alpha1.ClusterIPPolicySpec{AllowedCIDRs: []v1alpha1.CIDR{"10.96.0.0/12"}, Reservations: []v1alpha1.Reservation{{IP: "10.96.0.10", Service: "kube-system/kube-dns"}}, Enforcement: v1alpha1.Enforcement{Default: "warn"}})
	if err != nil {
		t.Fatal(err)
	}
	if fromFile.Digest != fromSpec.Digest {
		t.Errorf("digest of the file %s, of the served spec %s", fromFile.Digest, fromSpec.Digest)
	}
	for _, p := range []*Policy{fromSpec, typed} {
		if p.DefaultAction != fromFile.DefaultAction || len(p.Reservations) != 1 || p.Reservations[0] != fromFile.Reservations[0] || p.AllowedCIDRs[0] != fromFile.AllowedCIDRs[0] {
			t.Errorf("%+v differs from the file's %+v", p, fromFile)
		}
	}
}

// A hostile key or value reaches a refusal quoted and clipped: no control
// character, no unbounded echo.
func TestCompileQuotesHostileNames(t *testing.T) {
	key := "\x1b[2J" + strings.Repeat("k", 5000) + "\n"
	_, err := Compile(v1alpha1.ClusterIPPolicySpec{Enforcement: v1alpha1.Enforcement{Rules: map[string]v1alpha1.Action{key: "warn"}}})
	if err == nil {
		t.Fatal("an unknown rule was accepted")
	}
	if msg := err.Error(); strings.ContainsAny(msg, "\x1b\n") || len(msg) > 2*MaxEchoBytes+400 {
		t.Fatalf("message of %d bytes with a control character or unclipped: %.200q", len(msg), msg)
	}
	spec := `{"reservations":[{"ip":"10.96.0.10","service":"a/b","` + key[:4] + `x\n":1}]}`
	_, err = ParseObjectSpec([]byte(strings.ReplaceAll(spec, "\x1b", `\u001b`)))
	if err == nil || strings.ContainsAny(err.Error(), "\x1b\n") || !strings.Contains(err.Error(), "spec.reservations[0]: unknown field") {
		t.Fatalf("err %q", err)
	}
}
