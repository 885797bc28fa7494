// Package framework runs a throw-away control plane on loopback for the
// end-to-end tests and for `make up`: etcd, one or more kube-apiservers and one
// or more clusterip-policy webhook processes (the real `bin/clusterip-policy serve`),
// with every certificate made by the project's certs package.
//
// Everything listens on 127.0.0.1 on ports picked at run time, lives in one
// directory (etcd data, certificates, kubeconfigs, policies, one log file per
// process), and is stopped by killing each process group. No
// kube-controller-manager and no kubelet run: ServiceCIDR objects without a
// Ready condition count as active, and Pods never start.
//
// The functions return errors rather than taking a *testing.T so that the
// local-cluster command shares them; the tests wrap them in helpers.
package framework
