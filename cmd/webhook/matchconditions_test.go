package main

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes/fake"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"clusterip-policy/pkg/matchconditions"
)

func conds(names ...string) []admissionregistrationv1.MatchCondition {
	var out []admissionregistrationv1.MatchCondition
	for _, n := range names {
		out = append(out, admissionregistrationv1.MatchCondition{Name: n, Expression: n + "-expr"})
	}
	return out
}

func names(cs []admissionregistrationv1.MatchCondition) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}

func TestSetConditionTouchesOnlyTheManagedOne(t *testing.T) {
	static := conds("not-default-kubernetes", "allocating-requests-only")
	added, changed, err := setCondition(static, "x")
	if err != nil || !changed || !slices.Equal(names(added), []string{"not-default-kubernetes", "allocating-requests-only", matchconditions.Name}) {
		t.Fatalf("add: %v %v %v", names(added), changed, err)
	}
	if names(static)[len(static)-1] != "allocating-requests-only" || len(static) != 2 {
		t.Fatal("the input list was modified")
	}
	same, changed, _ := setCondition(added, "x")
	if changed || len(same) != 3 {
		t.Fatalf("same expression reported as a change: %v", names(same))
	}
	replaced, changed, _ := setCondition(added, "y")
	if !changed || replaced[2].Expression != "y" || added[2].Expression != "x" || replaced[0] != static[0] || replaced[1] != static[1] {
		t.Fatalf("replace: %+v (input now %+v)", replaced, added)
	}
	removed, changed, _ := setCondition(replaced, "")
	if !changed || !slices.Equal(names(removed), names(static)) || len(replaced) != 3 {
		t.Fatalf("remove: %v, input %v", names(removed), names(replaced))
	}
	if _, changed, _ := setCondition(static, ""); changed {
		t.Fatal("removing an absent condition reported a change")
	}
	full := conds()
	for i := range maxMatchConditions {
		full = append(full, admissionregistrationv1.MatchCondition{Name: string(rune('a'+i%26)) + string(rune('a'+i/26)), Expression: "true"})
	}
	if _, _, err := setCondition(full, "x"); err == nil {
		t.Fatal("a 65th condition was accepted")
	}
}

func TestSetAnnotations(t *testing.T) {
	var m metav1.ObjectMeta
	if !setAnnotations(&m, map[string]string{conditionsDigestAnnotation: "a"}) || m.Annotations[conditionsDigestAnnotation] != "a" {
		t.Fatal("not set")
	}
	if setAnnotations(&m, map[string]string{conditionsDigestAnnotation: "a"}) {
		t.Fatal("unchanged reported as changed")
	}
	if !setAnnotations(&m, map[string]string{conditionsDigestAnnotation: ""}) || len(m.Annotations) != 0 {
		t.Fatal("not removed")
	}
}

func testConfigurations() (*admissionregistrationv1.MutatingWebhookConfiguration, *admissionregistrationv1.ValidatingWebhookConfiguration) {
	ca := []byte("injected-by-cert-manager")
	m := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "clusterip-policy", Annotations: map[string]string{"cert-manager.io/inject-ca-from": "x/y"}},
		Webhooks: []admissionregistrationv1.MutatingWebhook{
			{Name: mutatingServiceWebhook, ClientConfig: admissionregistrationv1.WebhookClientConfig{CABundle: ca}, MatchConditions: conds("not-default-kubernetes", "allocating-requests-only")},
		},
	}
	v := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "clusterip-policy"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{
			{Name: validatingServiceWebhook, ClientConfig: admissionregistrationv1.WebhookClientConfig{CABundle: ca}, MatchConditions: conds("not-default-kubernetes", "allocating-requests-only")},
			{Name: "validate-servicecidrs.clusterip-policy.io", ClientConfig: admissionregistrationv1.WebhookClientConfig{CABundle: ca}, MatchConditions: conds("not-default-servicecidr")},
		},
	}
	return m, v
}

func TestWriteChangesOnlyTheManagedConditionAndAnnotations(t *testing.T) {
	m0, v0 := testConfigurations()
	client := fake.NewClientset(m0.DeepCopy(), v0.DeepCopy())
	k := &conditionKeeper{client: client, o: matchConditionOptions{manage: true, mutating: "clusterip-policy", validating: "clusterip-policy"}, log: logr.Discard()}
	ctx := context.Background()
	c := matchconditions.Conditions{Mutating: "request.operation != 'CREATE'", Validating: "true", Digest: "d1"}
	changed, err := k.write(ctx, c, "p1")
	if err != nil || !changed {
		t.Fatalf("write: %v, changed %v", err, changed)
	}
	m, _ := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "clusterip-policy", metav1.GetOptions{})
	v, _ := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "clusterip-policy", metav1.GetOptions{})
	if got := names(m.Webhooks[0].MatchConditions); !slices.Equal(got, []string{"not-default-kubernetes", "allocating-requests-only", matchconditions.Name}) || m.Webhooks[0].MatchConditions[2].Expression != c.Mutating {
		t.Fatalf("mutating conditions %v", m.Webhooks[0].MatchConditions)
	}
	if got := names(v.Webhooks[1].MatchConditions); !slices.Equal(got, []string{"not-default-servicecidr"}) {
		t.Fatalf("the ServiceCIDR webhook was touched: %v", got)
	}
	if string(m.Webhooks[0].ClientConfig.CABundle) != "injected-by-cert-manager" || string(v.Webhooks[1].ClientConfig.CABundle) != "injected-by-cert-manager" {
		t.Fatal("caBundle lost")
	}
	if m.Annotations["cert-manager.io/inject-ca-from"] != "x/y" || m.Annotations[conditionsPolicyAnnotation] != "p1" || v.Annotations[conditionsDigestAnnotation] != "d1" {
		t.Fatalf("annotations %v / %v", m.Annotations, v.Annotations)
	}
	if changed, err := k.write(ctx, c, "p1"); err != nil || changed {
		t.Fatalf("an unchanged write: %v, changed %v", err, changed)
	}
	if changed, err := k.write(ctx, c, "p2"); err != nil || !changed {
		t.Fatalf("a new policy digest alone: %v, changed %v", err, changed)
	}
	k.removeManaged(ctx)
	m, _ = client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "clusterip-policy", metav1.GetOptions{})
	v, _ = client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "clusterip-policy", metav1.GetOptions{})
	if !slices.Equal(names(m.Webhooks[0].MatchConditions), names(m0.Webhooks[0].MatchConditions)) || !slices.Equal(names(v.Webhooks[0].MatchConditions), names(v0.Webhooks[0].MatchConditions)) {
		t.Fatalf("after removal: %v / %v", names(m.Webhooks[0].MatchConditions), names(v.Webhooks[0].MatchConditions))
	}
	if _, ok := m.Annotations[conditionsPolicyAnnotation]; ok || m.Annotations["cert-manager.io/inject-ca-from"] != "x/y" {
		t.Fatalf("annotations after removal: %v", m.Annotations)
	}
}

func TestWriteRefusesAConfigurationWithoutOurWebhook(t *testing.T) {
	m0, v0 := testConfigurations()
	v0.Webhooks = v0.Webhooks[1:]
	client := fake.NewClientset(m0, v0)
	k := &conditionKeeper{client: client, o: matchConditionOptions{manage: true, mutating: "clusterip-policy", validating: "clusterip-policy"}, log: logr.Discard()}
	_, err := k.write(context.Background(), matchconditions.Conditions{Mutating: "true", Validating: "true", Digest: "d"}, "p")
	if err == nil || !strings.Contains(err.Error(), "has no webhook "+validatingServiceWebhook) {
		t.Fatalf("err %v", err)
	}
}
