package main

import (
	"slices"
	"testing"

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
