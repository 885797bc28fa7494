package policy

import (
	"strings"
	"testing"
)

func TestParseObjectSpec(t *testing.T) {
	t.Run("the file's fields load as they do from a file", func(t *testing.T) {
		p, err := ParseObjectSpec([]byte(`{"serviceCIDRs":["10.96.0.0/16"],"reservations":[{"ip":"10.96.0.10","service":"kube-system/kube-dns","note":"cluster DNS"}],"enforcement":{"default":"warn"}}`))
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Reservations) != 1 || p.Reservations[0].IP.String() != "10.96.0.10" || p.Reservations[0].Owner.String() != "kube-system/kube-dns" {
			t.Fatalf("reservations %+v", p.Reservations)
		}
		if p.DefaultAction != ActionWarn {
			t.Fatalf("default action %q, want warn", p.DefaultAction)
		}
	})
	t.Run("an empty spec is the default policy", func(t *testing.T) {
		for _, spec := range []string{"", "null", "{}"} {
			p, err := ParseObjectSpec([]byte(spec))
			if err != nil {
				t.Fatalf("%q: %v", spec, err)
			}
			if !p.ReserveKubernetesService || p.DefaultAction != ActionDeny {
				t.Fatalf("%q: %+v is not the default policy", spec, p)
			}
		}
	})
	refused := map[string]struct{ spec, want string }{
		"a duplicate owner names both entries": {
			`{"reservations":[{"ip":"10.96.0.10","service":"kube-system/kube-dns"},{"ip":"10.96.0.10","service":"default/other"}]}`,
			"reservations[1] (line ",
		},
		"a reservation outside allowedCIDRs": {
			`{"allowedCIDRs":["10.96.0.0/16"],"reservations":[{"ip":"10.0.0.10","service":"a/b"}]}`,
			"10.0.0.10 is outside allowedCIDRs",
		},
		"an unknown field":       {`{"reservation":[]}`, `unknown field "reservation"`},
		"apiVersion in the spec": {`{"apiVersion":"clusterip-policy/v1alpha1"}`, "spec.apiVersion: not a field of the spec"},
		"not an object":          {`[1]`, "the spec is not a JSON object"},
		"a bad action":           {`{"enforcement":{"default":"block"}}`, `"block"`},
	}
	for name, c := range refused {
		t.Run(name, func(t *testing.T) {
			_, err := ParseObjectSpec([]byte(c.spec))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want one containing %q", err, c.want)
			}
		})
	}
	t.Run("the duplicate owner message is the file's", func(t *testing.T) {
		_, err := ParseObjectSpec([]byte(`{"reservations":[{"ip":"10.96.0.10","service":"kube-system/kube-dns"},{"ip":"10.96.0.10","service":"default/other"}]}`))
		if err == nil || !strings.Contains(err.Error(), "10.96.0.10 is reserved for both kube-system/kube-dns (reservations[0], line ") || !strings.Contains(err.Error(), "and default/other; an IP has one owner") {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("a spec over the limit", func(t *testing.T) {
		_, err := ParseObjectSpec([]byte(`{"x":"` + strings.Repeat("a", MaxPolicyBytes) + `"}`))
		if err == nil || !strings.Contains(err.Error(), "more than the limit") {
			t.Fatalf("err %v", err)
		}
	})
}
