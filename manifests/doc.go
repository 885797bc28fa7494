// Package manifests is the home of the kustomize base and overlays that
// deploy the webhook, of the few names the binary, the manifests and the e2e
// harness share (shared.go: the endpoint paths, the YAML splitter), and of
// the tests that read the manifests:
// manifests_test.go decodes the base into typed objects, safety_test.go
// fails when a manifest loses a property that keeps the webhook safe to run
// (replicas, a PodDisruptionBudget, webhook timeouts and side effects,
// read-only RBAC, a restricted security context, ...), and overlays_test.go
// checks the overlays against the base. `go test ./manifests/` needs
// neither a cluster nor kubectl.
package manifests
