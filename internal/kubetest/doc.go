// Package kubetest runs a real kube-apiserver for tests: the binary built by
// scripts/build-kube-apiserver.sh, on free loopback ports, over an embedded
// etcd (internal/etcdtest), with self-signed serving certificates, a token
// file and RBAC authorization. Tests that need it call Start, which skips
// the test with a message when the binary is absent.
//
// There is no controller-manager and no kubelet: nothing garbage-collects,
// creates the default ServiceAccount, or runs a pod. Start creates the
// ServiceAccounts that Pod admission requires, and a test that needs a pod
// to look running writes its status itself, as a kubelet would.
package kubetest
