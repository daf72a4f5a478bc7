// Package requestplanev1 is the request plane's schema, version 1: the Go
// code protoc generates from requestplane.proto beside this file (messages
// and the Worker service's client and server). Only this file is written
// by hand; scripts/gen-proto.sh regenerates the rest, and CI fails when
// the committed code is stale. Package requestplane puts the engine's
// types on it.
package requestplanev1
