// Package e2e holds Tandem's system tests: they build the tandem binary
// once (TestMain), start it as a user does (serve, frontend, worker,
// planner processes on real sockets) and talk to the processes from
// outside: failover, disaggregation, the security review's attacks,
// observability, the official API clients, the planner against live
// servers.
//
// Heavy tests skip under -short; tests that need an external tool skip
// when it is absent. docs/testing.md lists the switches.
package e2e
