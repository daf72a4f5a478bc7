// Package e2e holds Tandem's system tests: they build the tandem binary
// once (TestMain), start it as a user does (serve, frontend, worker,
// planner processes on real sockets) and talk to the processes from
// outside: failover, disaggregation, the security review's attacks,
// observability, the official API clients, the planner against live
// servers.
//
// Under -short every test skips and the binary is not built; a test that
// needs an external tool (Jaeger, Prometheus, node, a kube-apiserver)
// skips when it is absent. The rss, netns and dockerfile build tags add
// the tests too heavy or too intrusive for every run, and -secure runs the
// multi-process tests with every protection on. docs/testing.md lists the
// switches.
package e2e
