package manifests

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"clusterip-policy/pkg/policy"
)

// policyObject is a ClusterIPPolicy as the manifests write it; the spec is
// checked by the webhook's own loader (policy.ParseObjectSpec), not here.
type policyObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              json.RawMessage `json:"spec"`
}

// policyFromObject says whether the webhook container takes its policy
// from the ClusterIPPolicy object (--policy-source=crd, the base) rather
// than a file (manifests/components/policy-file).
func policyFromObject(c *corev1.Container) bool {
	v, ok := flagValue(c, "policy-source")
	return ok && v == "crd"
}

// policyObjectSource checks the object mode: no --policy beside
// --policy-source=crd (the webhook refuses both), no policy ConfigMap
// mounted that nothing reads, and exactly one ClusterIPPolicy, named
// default, that the webhook's loader accepts, or the pods never get ready.
func policyObjectSource(o *objects, c *corev1.Container) []string {
	var p []string
	if file, ok := flagValue(c, "policy"); ok {
		p = append(p, problemf("--policy=%s beside --policy-source=crd: the webhook refuses both; drop --policy", file))
	}
	for _, m := range c.VolumeMounts {
		if m.Name == "policy" {
			p = append(p, problemf("the webhook container mounts volume %q at %s, but reads its policy from the ClusterIPPolicy object", m.Name, m.MountPath))
		}
	}
	var named []*policyObject
	for _, po := range o.Policies {
		if po.Name == policy.ObjectName {
			named = append(named, po)
		} else {
			p = append(p, problemf("ClusterIPPolicy %q: the webhook reads exactly one, named %s", po.Name, policy.ObjectName))
		}
	}
	switch {
	case len(named) == 0:
		p = append(p, problemf("--policy-source=crd, but the manifests hold no ClusterIPPolicy %s: the pods would never get ready", policy.ObjectName))
	case len(named) > 1:
		p = append(p, problemf("%d ClusterIPPolicy objects named %s", len(named), policy.ObjectName))
	default:
		if _, err := policy.ParseObjectSpec(named[0].Spec); err != nil {
			p = append(p, problemf("ClusterIPPolicy %s: spec does not load: %v", policy.ObjectName, err))
		}
	}
	return p
}

// sameJSON says whether two JSON documents hold the same value.
func sameJSON(a, b json.RawMessage) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}

// policyFileComponent switches the base to the policy file (the ConfigMap).
const policyFileComponent = "components/policy-file"

// Both policy sources keep every safety property: the base (the object) and
// the base with components/policy-file (the ConfigMap), which must also
// drop the object and run with --policy in the ConfigMap's mount.
func TestPolicyFileComponentKeepsTheBaseSafe(t *testing.T) {
	o := withComponent(t, policyFileComponent)
	for _, sc := range safetyChecks {
		t.Run(sc.name, func(t *testing.T) {
			for _, p := range sc.check(o) {
				t.Error(p)
			}
		})
	}
	_, c, err := o.webhookContainer()
	if err != nil {
		t.Fatal(err)
	}
	if policyFromObject(c) || len(o.Policies) != 0 || len(o.ConfigMaps) != 1 {
		t.Errorf("with %s: --policy-source=crd %v, %d ClusterIPPolicy objects, %d ConfigMaps; want the file, no object, the ConfigMap", policyFileComponent, policyFromObject(c), len(o.Policies), len(o.ConfigMaps))
	}
}

// The policy checks fail on a broken copy of either source.
func TestPolicyChecksCatchBrokenSources(t *testing.T) {
	ctr := func(o *objects) *corev1.Container { return &o.Deployments[0].Spec.Template.Spec.Containers[0] }
	setArg := func(c *corev1.Container, name, value string) {
		for i, a := range c.Args {
			if strings.HasPrefix(a, "--"+name+"=") {
				c.Args[i] = "--" + name + "=" + value
			}
		}
	}
	fromBase := func(t *testing.T) *objects { return loadBase(t) }
	fromFile := func(t *testing.T) *objects { return withComponent(t, policyFileComponent) }
	cases := []struct {
		name    string
		load    func(*testing.T) *objects
		check   check
		breakIt func(o *objects)
		want    string
	}{
		{"rejects an object whose spec the loader refuses (a duplicate owner)", fromBase, policyMount,
			func(o *objects) {
				o.Policies[0].Spec = json.RawMessage(`{"reservations":[{"ip":"10.96.0.10","service":"kube-system/kube-dns"},{"ip":"10.96.0.10","service":"default/web"}]}`)
			}, "an IP has one owner"},
		{"rejects --policy-source=crd without the object", fromBase, policyMount,
			func(o *objects) { o.Policies = nil }, "no ClusterIPPolicy default"},
		{"rejects a second policy object", fromBase, policyMount,
			func(o *objects) {
				extra := *o.Policies[0]
				extra.Name = "extra"
				o.Policies = append(o.Policies, &extra)
			}, `ClusterIPPolicy "extra"`},
		{"rejects --policy beside --policy-source=crd", fromBase, policyMount,
			func(o *objects) { ctr(o).Args = append(ctr(o).Args, "--policy=/etc/clusterip-policy/policy.yaml") }, "the webhook refuses both"},
		{"rejects the policy ConfigMap mounted with subPath", fromFile, policyMount,
			func(o *objects) {
				for i := range ctr(o).VolumeMounts {
					if ctr(o).VolumeMounts[i].Name == "policy" {
						ctr(o).VolumeMounts[i].SubPath = policyKey
					}
				}
			}, "subPath"},
		{"rejects a --policy outside the ConfigMap mount", fromFile, policyMount,
			func(o *objects) { setArg(ctr(o), "policy", "/policy.yaml") }, "not policy.yaml"},
		{"rejects a policy file that does not load", fromFile, policyParses,
			func(o *objects) {
				o.ConfigMaps[0].Data[policyKey] = "apiVersion: clusterip-policy.io/v1alpha1\nkind: ClusterIPPolicy\nmetadata: {name: default}\nspec: {reservations: [{ip: 10.96.0.300, service: a/b}]}\n"
			}, "does not load"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { checkCatches(t, tc.load(t), tc.check, tc.breakIt, tc.want) })
	}
}

// The chart's policy value, the object manifest, becomes the object or the
// ConfigMap's document, and the webhook's loader accepts what comes out.
func TestChartPolicyValueForEitherSource(t *testing.T) {
	for _, vs := range []struct {
		name string
		args []string
	}{
		{"the example as the object", []string{"--set-file", "policy=../examples/clusterippolicy.yaml"}},
		{"the example as the ConfigMap's document", []string{"--set", "policySource=file", "--set-file", "policy=../examples/clusterippolicy.yaml"}},
	} {
		t.Run(vs.name, func(t *testing.T) {
			o := renderChart(t, vs.args...).objects
			for _, check := range []check{policyMount, policyParses} {
				for _, p := range check(o) {
					t.Error(p)
				}
			}
			var got string
			switch {
			case len(o.Policies) == 1:
				got = string(o.Policies[0].Spec)
			case len(o.ConfigMaps) == 1:
				got = o.ConfigMaps[0].Data[policyKey]
			default:
				t.Fatalf("%d policy objects and %d ConfigMaps rendered", len(o.Policies), len(o.ConfigMaps))
			}
			if !strings.Contains(got, "kube-system/kube-dns") {
				t.Errorf("the rendered policy lacks the example's reservation:\n%s", got)
			}
		})
	}
}
