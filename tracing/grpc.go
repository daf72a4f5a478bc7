package tracing

import (
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc/stats"
)

// The request plane's calls that belong to a request. Background calls
// (Info, the link probes, health checks) are not traced: each would be a
// root trace of its own, burying requests in Jaeger.
var tracedMethods = []string{"/Generate", "/Assess", "/Prefill", "/TransferToken"}

func traced(info *stats.RPCTagInfo) bool {
	if !strings.HasPrefix(info.FullMethodName, "/tandem.requestplane.") {
		return false
	}
	for _, m := range tracedMethods {
		if strings.HasSuffix(info.FullMethodName, m) {
			return true
		}
	}
	return false
}

// ServerHandler and ClientHandler propagate the trace context in gRPC
// metadata (traceparent) and record one span per request-plane call. They
// are gRPC stats handlers, which otelgrpc recommends over its deprecated
// interceptors: they see streams and unary calls alike, whatever
// interceptors a caller chains.
func ServerHandler() stats.Handler {
	return otelgrpc.NewServerHandler(otelgrpc.WithFilter(traced), otelgrpc.WithPropagators(Propagator()))
}

// ClientHandler: see ServerHandler.
func ClientHandler() stats.Handler {
	return otelgrpc.NewClientHandler(otelgrpc.WithFilter(traced), otelgrpc.WithPropagators(Propagator()))
}
