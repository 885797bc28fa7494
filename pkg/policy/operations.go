package policy

import (
	"fmt"
	"slices"
)

// AllocatingOperations are the admission operations that can allocate a
// ClusterIP, and so the only ones either stage reviews; any other is
// allowed untouched (a configuration that also sent DELETE must not make
// every delete fail on a missing object).
//
// The same filter is written twice more, on purpose: the webhook
// configurations (manifests/base/webhook-configurations.yaml) send only
// these operations (rules[].operations), and the validating webhook's
// matchCondition allocating-requests-only narrows UPDATE the way
// validateSkips does, so that a Service update that cannot allocate still
// goes through while the webhook is down. The mutating webhook gets every
// UPDATE from its static conditions (a later mutating admission may give
// an UPDATE an address, and the apiserver reinvokes only a webhook it
// called first); the managed condition narrows them as mutateSkips does
// (pkg/matchconditions AllocatingUpdate). TestManifestFiltersOperationsAsGoDoes
// holds the manifest and this file equal; test/e2e/matchconditions_test.go
// evaluates the expressions on a real apiserver.
var AllocatingOperations = []Operation{Create, Update}

// OperationSkip says why op is not reviewed, or "" when it may allocate.
func OperationSkip(op Operation) string {
	if slices.Contains(AllocatingOperations, op) {
		return ""
	}
	return fmt.Sprintf("operation %s allocates no IP", op)
}
