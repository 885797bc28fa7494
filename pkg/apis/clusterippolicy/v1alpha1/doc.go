// Package v1alpha1 is the ClusterIPPolicy API (group clusterip-policy.io,
// version v1alpha1) as commented Go types. The CustomResourceDefinition in
// manifests/base/crd.yaml and the chart's crds/ is generated from them by
// controller-gen (make generate), so the field documentation `kubectl
// explain clusterippolicy.spec` prints and the validations the apiserver
// applies at apply time come from the comments and markers here, and a test
// (manifests/crd_generated_test.go) fails when the committed CRD differs
// from what controller-gen makes of them.
//
// The package imports only apimachinery's meta types: the webhook's policy
// engine (pkg/policy) does not import it and stays free of API machinery;
// the webhook uses these types to read and write the object's status.
//
// +kubebuilder:object:generate=false
// +groupName=clusterip-policy.io
package v1alpha1
