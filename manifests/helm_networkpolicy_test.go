package manifests

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The chart's optional NetworkPolicy admits the webhook port only from the
// peers given, keeps the probes and metrics reachable, selects exactly the
// webhook pods, and names ports the Deployment has. Off, nothing renders;
// on without peers, the chart refuses to render.
func TestChartNetworkPolicyAdmitsTheWebhookPortOnlyFromTheGivenPeers(t *testing.T) {
	if n := len(renderChart(t).objects.NetworkPolicies); n != 0 {
		t.Fatalf("default values render %d NetworkPolicies, want none", n)
	}
	_, err := helmTemplate(t, "--set", "networkPolicy.enabled=true")
	if err == nil || !strings.Contains(err.Error(), "networkPolicy.enabled: true needs networkPolicy.webhookFrom") {
		t.Fatalf("enabled without peers: %v, want a refusal naming networkPolicy.webhookFrom", err)
	}

	r := renderChart(t, "--set", "networkPolicy.enabled=true",
		"--set-json", `networkPolicy.webhookFrom=[{"ipBlock":{"cidr":"10.0.0.0/28"}}]`,
		"--set-json", `networkPolicy.metricsFrom=[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"monitoring"}}}]`)
	if len(r.objects.NetworkPolicies) != 1 || len(r.objects.Deployments) != 1 {
		t.Fatalf("%d NetworkPolicies, %d Deployments; want 1 and 1", len(r.objects.NetworkPolicies), len(r.objects.Deployments))
	}
	np, d := r.objects.NetworkPolicies[0], r.objects.Deployments[0]
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil {
		t.Fatal(err)
	}
	if !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Errorf("podSelector %v does not select the webhook pods %v", np.Spec.PodSelector, d.Spec.Template.Labels)
	}
	if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
		t.Errorf("policyTypes %v, want [Ingress] (egress is not restricted)", np.Spec.PolicyTypes)
	}
	named := map[string]bool{}
	for _, p := range d.Spec.Template.Spec.Containers[0].Ports {
		named[p.Name] = true
	}
	want := map[string][]networkingv1.NetworkPolicyPeer{
		"webhook": {{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/28"}}},
		"health":  nil,
		"metrics": {{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "monitoring"}}}},
	}
	got := map[string][]networkingv1.NetworkPolicyPeer{}
	for _, rule := range np.Spec.Ingress {
		if len(rule.Ports) != 1 || rule.Ports[0].Port == nil || rule.Ports[0].Port.Type != intstr.String || rule.Ports[0].Protocol == nil || *rule.Ports[0].Protocol != corev1.ProtocolTCP {
			t.Fatalf("ingress rule %+v: want one named TCP port", rule)
		}
		name := rule.Ports[0].Port.StrVal
		if !named[name] {
			t.Errorf("port %q is not a named port of the webhook container", name)
		}
		got[name] = rule.From
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ingress by port %+v, want %+v", got, want)
	}
	for _, sc := range safetyChecks {
		for _, p := range sc.check(r.objects) {
			t.Errorf("%s: %s", sc.name, p)
		}
	}
}
