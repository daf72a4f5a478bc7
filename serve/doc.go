// Package serve assembles the whole system in one process: frontend,
// router, and N workers each hosting an engine. It is what `tandem serve`
// runs, and what tests and `tandem bench` start when they need a real
// Tandem to talk to.
//
// Workers are reached in-process by default: the router holds each engine
// as an engine.Generator and no byte crosses a socket. With RequestPlane
// "grpc" each worker is served on a loopback gRPC port instead, which runs
// the same path as a multi-process deployment (used to measure the request
// plane's cost).
package serve
