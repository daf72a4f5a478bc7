package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"sort"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/tandemllm/tandem/disagg"
	"github.com/tandemllm/tandem/tracing"
)

// useRecorder makes every tracer in the process record into an in-memory
// recorder at ratio, until the test ends.
func useRecorder(tb testing.TB, ratio float64) *tracetest.SpanRecorder {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))))
	tracing.Use(tp)
	tb.Cleanup(func() { tracing.Use(nil); _ = tp.Shutdown(context.Background()) })
	return rec
}

const clientTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"

func postTraced(t *testing.T, url, path string, body any) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, url+path, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Traceparent", "00-"+clientTraceID+"-00f067aa0ba902b7-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, out)
	}
}

// spansOf waits for the request's spans to end and returns them by name.
func spansOf(t *testing.T, rec *tracetest.SpanRecorder, want ...string) map[string]sdktrace.ReadOnlySpan {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := map[string]sdktrace.ReadOnlySpan{}
		for _, s := range rec.Ended() {
			if s.SpanContext().TraceID().String() == clientTraceID {
				got[s.Name()] = s
			}
		}
		missing := slices.DeleteFunc(slices.Clone(want), func(n string) bool { _, ok := got[n]; return ok })
		if len(missing) == 0 {
			return got
		}
		if time.Now().After(deadline) {
			names := make([]string, 0, len(got))
			for n := range got {
				names = append(names, n)
			}
			sort.Strings(names)
			t.Fatalf("spans %v missing from the client's trace (have %v)", missing, names)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestTracingAcrossRequestPlane: a client's traceparent continues through
// the frontend's spans, over the gRPC request plane (client and server
// spans), with the router's decision on the route span.
func TestTracingAcrossRequestPlane(t *testing.T) {
	rec := useRecorder(t, 1)
	cfg := DefaultConfig()
	cfg.Workers, cfg.RequestPlane, cfg.RouterMode = 2, "grpc", "kv"
	sys := startTest(t, cfg, defaultTestEngines)
	postTraced(t, sys.URL(), "/v1/chat/completions", map[string]any{"model": "tandem-mock", "max_tokens": 4,
		"messages": []map[string]string{{"role": "user", "content": "hello"}}})
	got := spansOf(t, rec, tracing.SpanHTTP, tracing.SpanTemplate, tracing.SpanTokenize, tracing.SpanQueue, tracing.SpanRoute,
		tracing.SpanFirstToken, tracing.SpanStream, "tandem.requestplane.v1.Worker/Generate")
	root := got[tracing.SpanHTTP]
	if root.Parent().SpanID().String() != "00f067aa0ba902b7" {
		t.Errorf("http.request's parent is %v, want the client's span", root.Parent().SpanID())
	}
	for _, n := range []string{tracing.SpanTemplate, tracing.SpanTokenize, tracing.SpanQueue, tracing.SpanRoute, tracing.SpanFirstToken, tracing.SpanStream} {
		if got[n].Parent().SpanID() != root.SpanContext().SpanID() {
			t.Errorf("%s is not a child of http.request", n)
		}
	}
	// Order: template, tokenize, queue, route, first token, stream.
	order := []string{tracing.SpanTemplate, tracing.SpanTokenize, tracing.SpanQueue, tracing.SpanRoute, tracing.SpanFirstToken, tracing.SpanStream}
	for i := 1; i < len(order); i++ {
		if got[order[i]].StartTime().Before(got[order[i-1]].EndTime()) {
			t.Errorf("%s starts before %s ends", order[i], order[i-1])
		}
	}
	attrs := map[string]string{}
	for _, a := range got[tracing.SpanRoute].Attributes() {
		attrs[string(a.Key)] = a.Value.Emit()
	}
	if attrs[tracing.AttrCandidates] != "2" || attrs[tracing.AttrReason] == "" || attrs[tracing.AttrWorker] == "" {
		t.Errorf("route span attributes %v", attrs)
	}
	// The worker's server span of the gRPC call, under the frontend's
	// first_token span (the client side records no span of its own: the
	// trace context rides in the request, tracing.StartCall).
	var gen []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "tandem.requestplane.v1.Worker/Generate" && s.SpanContext().TraceID().String() == clientTraceID {
			gen = append(gen, s)
		}
	}
	if len(gen) != 1 {
		t.Fatalf("%d Generate spans in the trace, want the server's", len(gen))
	}
	if gen[0].Parent().SpanID() != got[tracing.SpanFirstToken].SpanContext().SpanID() || !gen[0].Parent().IsRemote() {
		t.Errorf("the Generate span's parent %v is not the frontend's first_token span", gen[0].Parent().SpanID())
	}
}

// TestTracingDisagg: a disaggregated request's trace holds the decider's
// span with both estimates, the prefill leg and the KV transfer with its
// bytes and throughput.
func TestTracingDisagg(t *testing.T) {
	rec := useRecorder(t, 1)
	cfg := DefaultConfig()
	cfg.RouterMode = "kv"
	cfg.Disagg = DisaggConfig{PrefillWorkers: 1, DecodeWorkers: 1, Settings: disagg.Settings{Mode: "always"}}
	sys := startTest(t, cfg, seedEngines)
	postTraced(t, sys.URL(), "/v1/completions", map[string]any{"model": "tandem-mock", "prompt": ids(700, 3), "max_tokens": 2, "ignore_eos": true})
	got := spansOf(t, rec, tracing.SpanHTTP, tracing.SpanDisagg, tracing.SpanPrefill, tracing.SpanKVTransfer, tracing.SpanStream)
	attrs := func(name string) map[string]string {
		m := map[string]string{}
		for _, a := range got[name].Attributes() {
			m[string(a.Key)] = a.Value.Emit()
		}
		return m
	}
	if d := attrs(tracing.SpanDisagg); d[tracing.AttrChoice] != "remote" || d[tracing.AttrLocalSeconds] == "" || d[tracing.AttrRemoteSeconds] == "" {
		t.Errorf("disagg.decide attributes %v", d)
	}
	if x := attrs(tracing.SpanKVTransfer); x[tracing.AttrBytes] == "0" || x[tracing.AttrBytes] == "" || x[tracing.AttrThroughput] == "" {
		t.Errorf("kv_transfer attributes %v", x)
	}
	if got[tracing.SpanKVTransfer].Parent().SpanID() != got[tracing.SpanDisagg].SpanContext().SpanID() {
		t.Errorf("kv_transfer is not under disagg.decide")
	}
}

// TestTracingOffPropagates: with no provider, no span is recorded and the
// client's trace id still reaches the worker across the request plane.
func TestTracingOffPropagates(t *testing.T) {
	tracing.Use(nil)
	cfg := DefaultConfig()
	cfg.Workers, cfg.RequestPlane = 1, "grpc"
	var seen []string
	cfg.Dispatch.MaxRetries = 0
	sys := startTest(t, cfg, func(m *tokenizerModel) EngineFactory {
		return func(int) (engineEngine, error) {
			e, err := newInstantEngine(m)
			return traceSpy{Engine: e, seen: &seen}, err
		}
	})
	postTraced(t, sys.URL(), "/v1/completions", map[string]any{"model": "tandem-mock", "prompt": "hi", "max_tokens": 1})
	if len(seen) != 1 || seen[0] != clientTraceID {
		t.Fatalf("the worker saw trace ids %v, want the client's", seen)
	}
}
