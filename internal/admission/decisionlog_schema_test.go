package admission

import (
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"clusterip-policy/test/e2e/framework"
)

// The decision log line's keys are public API and are defined once, by
// decisionLine.fields. Two other places name them: docs/observability.md's
// table ("The decision log") documents every key, and the e2e harness
// (framework.Decision) parses some of them. This test holds both to it.
func TestDecisionLogKeysAreTheDocumentedOnes(t *testing.T) {
	var keys []string
	for _, f := range (decisionLine{}).fields() {
		keys = append(keys, f.Key)
	}

	page, err := os.ReadFile("../../docs/observability.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(page), "## The decision log\n")
	if !ok {
		t.Fatal(`docs/observability.md has no "## The decision log" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var documented []string
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		first := strings.Split(line, "|")[1]
		for _, m := range regexp.MustCompile("`([A-Za-z]+)`").FindAllStringSubmatch(first, -1) {
			documented = append(documented, m[1])
		}
	}
	if !slices.Equal(documented, keys) {
		t.Errorf("docs/observability.md documents the decision log keys\n %v\nthe webhook writes\n %v\n(in that order)", documented, keys)
	}

	ty := reflect.TypeFor[framework.Decision]()
	for i := range ty.NumField() {
		tag, _, _ := strings.Cut(ty.Field(i).Tag.Get("json"), ",")
		if tag == "-" || tag == "msg" || tag == "ts" { // the logger's own keys
			continue
		}
		if !slices.Contains(keys, tag) {
			t.Errorf("framework.Decision.%s parses %q, which the webhook does not write", ty.Field(i).Name, tag)
		}
	}
}
