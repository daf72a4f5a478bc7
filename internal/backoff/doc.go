// Package backoff is the one retry delay of Tandem's loops: exponential
// growth from a base to a ceiling, full jitter above the base, a reset
// once the thing retried works again, and a sleep that ends with its
// context.
//
// Jitter is there because the loops that use it (the KV event
// subscriber's reconnects, the discovery registries' retries, the
// router's quarantine of an unreachable worker) run in many processes at
// once against one peer: after a worker or etcd restarts, un-jittered
// retries from every frontend arrive in lockstep, each wave a little
// larger than the last ("Exponential Backoff And Jitter", AWS
// Architecture Blog, 2015:
// https://aws.amazon.com/blogs/architecture/exponential-backoff-and-jitter/).
//
// Delays are drawn from [Base, ceiling] rather than the blog's
// [0, ceiling]: a zero delay would turn a refused connection into a busy
// loop and a zero quarantine into none.
package backoff
