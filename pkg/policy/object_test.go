package policy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"clusterip-policy/test/fixtures"
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
			"spec.reservations[1]: ",
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
	t.Run("the duplicate owner message names both entries by their fields", func(t *testing.T) {
		_, err := ParseObjectSpec([]byte(`{"reservations":[{"ip":"10.96.0.10","service":"kube-system/kube-dns"},{"ip":"10.96.0.10","service":"default/other"}]}`))
		if err == nil || !strings.Contains(err.Error(), "spec.reservations[1]: 10.96.0.10 is reserved for both kube-system/kube-dns (spec.reservations[0])") || !strings.Contains(err.Error(), "and default/other; an IP has one owner") {
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

func TestLoadFileOrObject(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	object := "apiVersion: clusterip-policy.io/v1alpha1\nkind: ClusterIPPolicy\nmetadata:\n  name: default\n  annotations: {a: b}\nspec:\n  reservations:\n  - ip: 10.96.0.10\n    service: kube-system/kube-dns\nstatus:\n  observedGeneration: 3\n"
	p, err := LoadFileOrObject(write("object.yaml", object))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Reservations) != 1 || p.Reservations[0].Owner.String() != "kube-system/kube-dns" {
		t.Fatalf("reservations %+v", p.Reservations)
	}
	file, err := LoadFileOrObject(write("file.yaml", "apiVersion: clusterip-policy/v1alpha1\nkind: ClusterIPPolicy\nreservations:\n- ip: 10.96.0.10\n  service: kube-system/kube-dns\n"))
	if err != nil || len(file.Reservations) != 1 {
		t.Fatalf("the file format: %v", err)
	}
	refused := map[string]struct{ text, want string }{
		"another name":    {strings.Replace(object, "name: default", "name: other", 1), `metadata.name "other": the webhook reads exactly one ClusterIPPolicy, named default`},
		"a misspelt spec": {strings.Replace(object, "spec:", "specs:", 1), `unknown field "specs"`},
		"another kind":    {strings.Replace(object, "kind: ClusterIPPolicy", "kind: Policy", 1), `kind "Policy" is not supported`},
		"two documents":   {object + "---\n" + object, "more than one YAML document"},
		"a duplicate owner": {strings.Replace(object, "status:", "  - ip: 10.96.0.10\n    service: default/web\nstatus:", 1),
			"policy object " + filepath.Join(dir, "bad.yaml") + ": spec.reservations[1] (line 10): 10.96.0.10 is reserved for both kube-system/kube-dns (spec.reservations[0], line 8) and default/web; an IP has one owner"},
		// The file's own line, not the line in the spec rendered as YAML.
		"an unknown field in the spec": {strings.Replace(object, "    service: kube-system/kube-dns\n", "    service: kube-system/kube-dns\n    note: dns\n    colour: blue\n", 1),
			"policy object " + filepath.Join(dir, "bad.yaml") + `: spec.reservations[0] (line 11): unknown field "colour"`},
		"a bad CIDR, indented by four": {strings.Replace(strings.ReplaceAll(object, "\n  ", "\n    "), "spec:\n", "spec:\n    # the cluster's range\n    allowedCIDRs: [10.96.0.0/33]\n", 1),
			"spec.allowedCIDRs[0] (line 8): "},
		"a bad file": {"apiVersion: clusterip-policy/v1alpha1\nkind: ClusterIPPolicy\nreservation: []\n", `line 3: unknown field "reservation"`},
	}
	for name, c := range refused {
		t.Run(name, func(t *testing.T) {
			_, err := LoadFileOrObject(write("bad.yaml", c.text))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want one containing %q", err, c.want)
			}
		})
	}
	if _, err := LoadFileOrObject(write("lead.yaml", "---\n"+object)); err != nil {
		t.Errorf("a leading document marker: %v", err)
	}
}

// A key written twice in the object file is refused, not merged (the
// second reservations list silently replacing the first).
func TestObjectFileRefusesADuplicateKey(t *testing.T) {
	file := fixtures.Policy("reservations:\n- {ip: 10.96.0.10, service: kube-system/kube-dns}\nreservations:\n- {ip: 10.96.0.11, service: default/web}\n")
	if p, err := ParseDocument([]byte(file)); err == nil || !strings.Contains(err.Error(), `"reservations" already set`) {
		t.Fatalf("loaded %+v, err %v; want the duplicate key refused", p, err)
	}
}
