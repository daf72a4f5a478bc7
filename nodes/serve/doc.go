// Package serve runs the whole system in one process: N worker nodes
// (package worker) and one frontend node (package frontend) over an
// in-process discovery registry (discovery.Mem), the same assembly as
// `tandem worker` and `tandem frontend` across processes. It is what
// `tandem serve` runs, and what tests and `tandem bench` start when they
// need a real Tandem to talk to.
//
// Workers are reached over the in-process transport by default: the
// frontend node resolves each worker's inproc:// address to its Generator
// and no byte crosses a socket. With RequestPlane "grpc" each worker node
// listens on a loopback gRPC port instead, which runs the same path as a
// multi-process deployment (used to measure the request plane's cost).
package serve
