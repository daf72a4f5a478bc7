package requestplane

import (
	"context"
	"io"
	"sync"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/enginetest"
	"github.com/tandemllm/tandem/planes/kvtransfer"
	rpv1 "github.com/tandemllm/tandem/planes/requestplane/proto/tandem/requestplane/v1"
	"github.com/tandemllm/tandem/tracing"
)

// useRecorder installs an SDK provider (every root sampled) whose ended
// spans the test reads.
func useRecorder(t *testing.T) *tracetest.SpanRecorder {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())))
	tracing.Use(tp)
	t.Cleanup(func() { tracing.Use(nil); _ = tp.Shutdown(context.Background()) })
	return rec
}

// The caller's span the tests' calls continue.
const tid, sid = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"

func callerSpan(t *testing.T, flags string) trace.SpanContext {
	sc, ok := tracing.ParseTraceparent("00-"+tid+"-"+sid+"-"+flags, "vendor=x")
	if !ok {
		t.Fatal("test traceparent refused")
	}
	return sc
}

// TestTraceContext: the worker's Generate span continues the caller's
// trace from the request's TraceContext (Tandem's client, which sends no
// traceparent header) or from a traceparent header (another gRPC client);
// a call with none, or with a malformed one, gets a root span and is
// served all the same; an unsampled caller's call records nothing.
func TestTraceContext(t *testing.T) {
	rec := useRecorder(t)

	var mu sync.Mutex
	var headers []string // traceparent headers the server received
	seen := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		md, _ := metadata.FromIncomingContext(ss.Context())
		mu.Lock()
		headers = append(headers, md.Get("traceparent")...)
		mu.Unlock()
		return h(srv, ss)
	}
	c := listen(t, NewServer(&enginetest.Scripted{Name: "m", Output: []engine.Token{7}}, nil, 0, grpc.StreamInterceptor(seen)))

	parent := func(flags string) trace.SpanContext { return callerSpan(t, flags) }
	viaClient := func(ctx context.Context) error {
		s, err := c.Generate(ctx, &engine.Request{ID: "r", Model: "m", Prompt: []engine.Token{1, 2}, MaxTokens: 1})
		if err != nil {
			return err
		}
		return drainAll(s.Recv)
	}
	raw := func(ctx context.Context, m *rpv1.TraceContext) error {
		s, err := rpv1.NewWorkerClient(c.Conn()).Generate(ctx, &rpv1.GenerateRequest{Id: "r", Model: "m", Prompt: []int32{1, 2}, MaxTokens: 1, Trace: m})
		if err != nil {
			return err
		}
		return drainAll(s.Recv)
	}
	for _, tc := range []struct {
		name       string
		call       func() error
		spans      int  // Generate spans recorded
		child      bool // under the caller's span sid, in trace tid
		wantHeader bool
		state      string // the span's tracestate
	}{
		{"request's trace context", func() error {
			return viaClient(trace.ContextWithRemoteSpanContext(context.Background(), parent("01")))
		}, 1, true, false, "vendor=x"},
		{"traceparent header", func() error {
			return raw(metadata.AppendToOutgoingContext(context.Background(), "traceparent", "00-"+tid+"-"+sid+"-01"), nil)
		}, 1, true, true, ""},
		{"unsampled traceparent header", func() error {
			return raw(metadata.AppendToOutgoingContext(context.Background(), "traceparent", "00-"+tid+"-"+sid+"-00"), nil)
		}, 0, false, true, ""},
		{"no trace context", func() error { return viaClient(context.Background()) }, 1, false, false, ""},
		{"malformed trace context", func() error {
			return raw(context.Background(), &rpv1.TraceContext{SpanId: 5, Flags: 1}) // zero trace id
		}, 1, false, false, ""},
		{"unsampled caller", func() error {
			return viaClient(trace.ContextWithRemoteSpanContext(context.Background(), parent("00")))
		}, 0, false, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec.Reset()
			mu.Lock()
			headers = nil
			mu.Unlock()
			if err := tc.call(); err != nil {
				t.Fatal(err)
			}
			var gen []sdktrace.ReadOnlySpan
			for _, s := range rec.Ended() {
				if s.Name() == "tandem.requestplane.v1.Worker/Generate" {
					gen = append(gen, s)
				}
			}
			if len(gen) != tc.spans {
				t.Fatalf("%d Generate spans, want %d", len(gen), tc.spans)
			}
			if tc.spans > 0 {
				s := gen[0]
				isChild := s.SpanContext().TraceID().String() == tid && s.Parent().SpanID().String() == sid && s.Parent().IsRemote()
				if isChild != tc.child {
					t.Errorf("span %v with parent %v: child of the caller's = %v, want %v", s.SpanContext().TraceID(), s.Parent().SpanID(), isChild, tc.child)
				}
				if tc.child && s.SpanKind() != trace.SpanKindServer {
					t.Errorf("span kind %v", s.SpanKind())
				}
				if got := s.SpanContext().TraceState().String(); got != tc.state {
					t.Errorf("tracestate %q, want %q", got, tc.state)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if got := len(headers) > 0; got != tc.wantHeader {
				t.Errorf("traceparent headers %q, want any: %v", headers, tc.wantHeader)
			}
		})
	}
}

// TestSideCallsCarryTrace: the disaggregation calls a frontend makes
// (Assess, Prefill) carry its trace context to the worker, whose server
// spans continue it.
func TestSideCallsCarryTrace(t *testing.T) {
	rec := useRecorder(t)
	pre, dec := startWorker(t, "p0", false), startWorker(t, "d0", true)
	ctx := trace.ContextWithRemoteSpanContext(context.Background(), callerSpan(t, "01"))
	p := tokens(100)
	if _, err := dec.side.Assess(ctx, p, 4); err != nil {
		t.Fatal(err)
	}
	if _, err := pre.side.PrefillAndSend(ctx, &engine.Request{ID: "r", Prompt: p, MaxTokens: 1}, kvtransfer.Peer{ID: "d0", Addr: dec.side.TransferAddr()}, 0); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"tandem.requestplane.v1.Worker/Assess", "tandem.requestplane.v1.Worker/Prefill"} {
		n := 0
		for _, s := range rec.Ended() {
			if s.Name() != name {
				continue
			}
			n++
			if s.SpanContext().TraceID().String() != tid || s.Parent().SpanID().String() != sid {
				t.Errorf("%s in trace %v under %v, want the caller's", name, s.SpanContext().TraceID(), s.Parent().SpanID())
			}
		}
		if n != 1 {
			t.Errorf("%d %s spans, want 1", n, name)
		}
	}
}

// drainAll receives until the stream ends: nil at io.EOF, else the error.
func drainAll[T any](recv func() (T, error)) error {
	for {
		if _, err := recv(); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
	}
}
