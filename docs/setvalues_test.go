package docs

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// setFlag finds a helm value the docs tell users to give: --set, --set-json,
// --set-file or --set-string, then the key (quoted or not) up to its '='.
var setFlag = regexp.MustCompile(`--set(?:-json|-file|-string)?[ =]['"]?([A-Za-z][A-Za-z0-9_.\[\]-]*)=`)

// Every value a page tells users to --set is one the chart has: a key of
// charts/clusterip-policy/values.yaml (under a map the chart leaves open,
// such as podLabels, any key), so no page gives a value the chart ignores
// or refuses. The chart's schema rejects what values.yaml does not hold.
func TestEveryDocumentedSetValueIsTheCharts(t *testing.T) {
	var values map[string]any
	if err := yaml.Unmarshal([]byte(read(t, filepath.Join(root, "charts", "clusterip-policy", "values.yaml"))), &values); err != nil {
		t.Fatal(err)
	}
	pages := append(docFiles(t), filepath.Join(root, "charts", "clusterip-policy", "templates", "NOTES.txt"))
	seen := 0
	for _, page := range pages {
		for i, line := range strings.Split(read(t, page), "\n") {
			for _, m := range setFlag.FindAllStringSubmatch(line, -1) {
				seen++
				if err := valueKey(values, m[1]); err != nil {
					t.Errorf("%s:%d: --set %s: %v; fix the page or the chart", rel(page), i+1, m[1], err)
				}
			}
		}
	}
	if seen < 10 {
		t.Errorf("found %d --set values in the docs; the pattern no longer matches how they are written", seen)
	}
}

// valueKey reports whether key (dotted, as helm's --set spells it) names a
// value of values, or a key under a map values leaves empty, or one of a
// list's items.
func valueKey(values map[string]any, key string) error {
	var cur any = values
	parts := strings.Split(key, ".")
	for i, p := range parts {
		if _, isList := cur.([]any); isList {
			return nil // an item of a list (imagePullSecrets[0].name): its keys are the user's
		}
		if j := strings.IndexByte(p, '['); j > 0 {
			p = p[:j]
		}
		m, ok := cur.(map[string]any)
		if !ok {
			return fmt.Errorf("%s is not a map in values.yaml", strings.Join(parts[:i], "."))
		}
		next, ok := m[p]
		if !ok {
			if len(m) == 0 && i > 0 {
				return nil // an open map (podLabels: {}): any key
			}
			return fmt.Errorf("values.yaml has no %s", strings.Join(parts[:i+1], "."))
		}
		cur = next
	}
	return nil
}

func TestValueKeyFindsWhatIsMissing(t *testing.T) {
	values := map[string]any{"dns": map[string]any{"clusterIP": ""}, "podLabels": map[string]any{}, "replicas": 3, "imagePullSecrets": []any{}}
	for key, want := range map[string]string{
		"dns.clusterIP":            "",
		"podLabels.team":           "",
		"imagePullSecrets[0].name": "",
		"imagePullSecret[0].name":  "values.yaml has no imagePullSecret[0]",
		"dns.clusterIPs":           "values.yaml has no dns.clusterIPs",
		"replicas.count":           "replicas is not a map in values.yaml",
		"webhook.failures":         "values.yaml has no webhook",
	} {
		err := valueKey(values, key)
		if (err == nil) != (want == "") || (err != nil && err.Error() != want) {
			t.Errorf("valueKey(%s) = %v, want %q", key, err, want)
		}
	}
}
