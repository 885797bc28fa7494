package policy

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// A rule is added as a RuleID constant and in Rules (or, for a rule only
// the audit reports, AuditRules): the lists the documentation checks
// (docs: TestEveryRuleIsOnEachOfItsPages) and the enforcement section read.
// A constant left out of both fails here.
func TestEveryRuleIDIsListed(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	decl := regexp.MustCompile(`(?m)^\s*(?:const\s+)?(Rule\w+)\s+RuleID\s*=\s*"([^"]+)"`)
	found := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range decl.FindAllStringSubmatch(string(src), -1) {
			found++
			id := RuleID(m[2])
			if !slices.Contains(Rules, id) && !slices.Contains(AuditRules, id) {
				t.Errorf("%s (%s, in %s) is in neither Rules nor AuditRules: add it to the list of the stage that reports it", m[1], id, f)
			}
		}
	}
	if found < len(Rules) {
		t.Fatalf("found %d RuleID constants, fewer than the %d of Rules: the pattern no longer matches how they are declared", found, len(Rules))
	}
}
