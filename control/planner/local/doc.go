// Package local is the planner's actuator for workers on this host: a
// supervisor that starts and stops `tandem worker` processes, one set of
// arguments per pool. A worker it removes gets SIGTERM and is waited for:
// `tandem worker` deregisters, keeps serving through --deregister-delay
// while frontends hear of it, finishes its streams (up to its
// --drain-timeout) and exits, so removal fails no request. Only past the
// supervisor's own StopTimeout does it SIGKILL.
package local
