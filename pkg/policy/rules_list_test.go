package policy

import (
	"go/ast"
	"go/parser"
	"go/token"
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

// The CRD's description of enforcement.rules lists the rule IDs; it is
// generated from the doc comment of v1alpha1.Enforcement.Rules (make
// generate; the manifests' tests refuse a stale CRD), so holding that
// comment to Rules keeps `kubectl explain` and the schema's description
// naming every rule, and no retired one.
func TestTheCRDDescriptionNamesEveryRule(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, filepath.Join("..", "apis", "clusterippolicy", "v1alpha1", "types.go"), nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var doc string
	ast.Inspect(f, func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok || ts.Name.Name != "Enforcement" {
			return true
		}
		for _, field := range ts.Type.(*ast.StructType).Fields.List {
			if len(field.Names) == 1 && field.Names[0].Name == "Rules" {
				doc = field.Doc.Text()
			}
		}
		return false
	})
	m := regexp.MustCompile(`rule ID \(([^)]*)\)`).FindStringSubmatch(strings.Join(strings.Fields(doc), " "))
	if m == nil {
		t.Fatalf("the doc comment of Enforcement.Rules no longer lists the rule IDs as \"rule ID (a, b, ...)\":\n%s", doc)
	}
	var listed []RuleID
	for _, id := range strings.Split(m[1], ",") {
		listed = append(listed, RuleID(strings.TrimSpace(id)))
	}
	if !slices.Equal(listed, Rules) {
		t.Fatalf("the doc comment of Enforcement.Rules (the CRD's description) lists %v; policy.Rules is %v: list the rules in the same order there and run make generate", listed, Rules)
	}
}
