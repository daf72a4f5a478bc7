// Package kubetest runs a real kube-apiserver for tests: the binary built by
// scripts/build-kube.sh kube-apiserver, on free loopback ports, over an
// embedded etcd (internal/etcdtest), with self-signed serving certificates,
// a token file and RBAC authorization. Tests that need it call Start, which
// skips the test with a message when the binary is absent. Tests talk to it
// through Client (internal/kubeapi with create, get, update, patch, delete
// and list verbs on objects as JSON, Object) and Apply, InstallCRDs and
// DryRunIn (YAML files, kinds resolved through the server's discovery), so
// the main module's tests link no client-go; the operator's module builds
// client-go configs from URL, Token and CA.
//
// Server.StartControllerManager adds kube-controller-manager (built by
// scripts/build-kube.sh kube-controller-manager) with the controllers a test
// names: the garbage collector (deletion by owner references), the
// EndpointSlice controller. Without it nothing garbage-collects or writes
// EndpointSlices. There is never a kubelet or a scheduler: nothing creates
// the default ServiceAccount or runs a pod. Start creates the
// ServiceAccounts that Pod admission requires, and a test that needs a pod
// to look running writes its status itself, as a kubelet would.
package kubetest
