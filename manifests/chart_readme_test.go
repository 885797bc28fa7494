package manifests

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"clusterip-policy/internal/testutil"
)

// The chart's README.md is what helm-docs writes from values.yaml's "# --"
// comments: a value added or reworded without `make generate` fails here,
// so the README never documents values the chart no longer has.
func TestChartREADMEIsGeneratedFromTheValues(t *testing.T) {
	gen, err := filepath.Abs(filepath.Join("..", ".local", "bin", "helm-docs"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(gen); err != nil {
		testutil.MissingTool(t, "no helm-docs at %s (run make tools): %v", gen, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join("..", "hack", "generate-chart-readme.sh"), "--dry-run")
	cmd.Env = append(os.Environ(), "HELM_DOCS="+gen)
	want, err := cmd.Output()
	if err != nil {
		t.Fatalf("hack/generate-chart-readme.sh --dry-run: %v", err)
	}
	got, err := os.ReadFile(filepath.Join(chartDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Error("charts/clusterip-policy/README.md is not what helm-docs writes from values.yaml; run make generate and commit the result")
	}
}
