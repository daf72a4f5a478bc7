// Package engine defines the seam between a worker and whatever produces
// tokens: the simulated mocker, the native Go transformer, or an adapter to
// an external server. Everything above this package (worker, request plane,
// router, frontend) speaks only these types, so an in-process engine and a
// remote worker reached over the request plane are interchangeable.
//
// The package also provides Pipe, the one-way mailbox engines use to hand
// tokens to a consumer without ever blocking their scheduler loop.
package engine
