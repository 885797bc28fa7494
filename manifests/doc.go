// Package manifests holds no code: it is the home of the kustomize base and
// overlays that deploy the webhook, and of manifests_test.go, which fails
// when a manifest loses a property that keeps the webhook safe to run
// (replicas, a PodDisruptionBudget, webhook timeouts and side effects,
// read-only RBAC, a restricted security context, ...). `go test ./manifests/`
// needs neither a cluster nor kubectl.
package manifests
