// Build tooling only: helm-docs at a pinned release, kept apart from the
// product's go.mod so the webhook does not inherit its dependency graph.
module clusterip-policy/tools/helm-docs

go 1.26.0

require github.com/norwoodj/helm-docs v1.14.2
