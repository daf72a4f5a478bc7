// Package netnstest runs code inside a named Linux network namespace
// (ip netns add NAME), for the tests that put workers, frontends and
// strangers on separate namespaces linked by veth pairs (nodes/serve's slow
// link, e2e's attacks across namespaces).
package netnstest
