//go:build e2e

package e2e

import (
	"encoding/json"
	"os"
	"testing"
)

// TestTheAPIServerIsTheVersionUnderTest pins what a run of the smoke subset
// against several Kubernetes releases (`make e2e-versions`,
// hack/e2e-versions.sh) claims: with $E2E_KUBE_VERSION set, the apiserver
// the tests talk to must report exactly that version, so a stale or wrong
// E2E_BIN_DIR cannot pass as the release it names. kubectl from the same
// directory must report it too.
func TestTheAPIServerIsTheVersionUnderTest(t *testing.T) {
	c := shared(t)
	got, err := c.Client(0).Discovery().ServerVersion()
	if err != nil {
		t.Fatalf("ask the apiserver its version: %v", err)
	}
	ctx := testContext(t, 30e9)
	client, _, err := c.Kubectl(ctx, "", "version", "--client", "-o", "json")
	if err != nil {
		t.Fatalf("kubectl version --client: %v", err)
	}
	t.Logf("e2e: versions: kube-apiserver %s, kubectl %s", got.GitVersion, kubectlVersion(client))
	want := os.Getenv("E2E_KUBE_VERSION")
	if want == "" {
		t.Skip("E2E_KUBE_VERSION is not set: nothing to compare with")
	}
	if got.GitVersion != want {
		t.Fatalf("the apiserver reports %s, want %s (E2E_KUBE_VERSION); E2E_BIN_DIR=%q holds another build", got.GitVersion, want, os.Getenv("E2E_BIN_DIR"))
	}
	if kv := kubectlVersion(client); kv != want {
		t.Fatalf("kubectl reports %s, want %s (E2E_KUBE_VERSION)", kv, want)
	}
}

// kubectlVersion reads clientVersion.gitVersion from `kubectl version
// --client -o json`.
func kubectlVersion(out string) string {
	var v struct {
		ClientVersion struct {
			GitVersion string `json:"gitVersion"`
		} `json:"clientVersion"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil || v.ClientVersion.GitVersion == "" {
		return "unknown"
	}
	return v.ClientVersion.GitVersion
}
