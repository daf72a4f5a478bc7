package requestplane

import (
	"context"
	"reflect"
	"testing"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/planes/kvtransfer"
	rpv1 "github.com/tandemllm/tandem/planes/requestplane/proto/tandem/requestplane/v1"
)

// overWire marshals m and unmarshals it into a fresh message of its type,
// as the two ends of a call do.
func overWire[M proto.Message](t testing.TB, m M) M {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	out := m.ProtoReflect().New().Interface().(M)
	if err := proto.Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRequestOverWire: every field of engine.Request crosses the wire as
// it was, kv_transfer_params and an explicit seed of 0 included.
func TestRequestOverWire(t *testing.T) {
	for _, tc := range []struct {
		name string
		req  engine.Request
	}{
		{"bare", engine.Request{Prompt: []engine.Token{1}}},
		{"full", engine.Request{ID: "x", Model: "m", Prompt: []engine.Token{0, 1, 1 << 30, -1}, MaxTokens: 7, MinTokens: 2, IgnoreEOS: true,
			StopTokens: []engine.Token{5}, Sampling: engine.Sampling{Temperature: 1.5, TopP: 0.5, TopK: 3, Seed: 1<<63 + 5, HasSeed: true},
			KVTransferParams: []byte(`{"do_remote_decode":true}`), Logprobs: true, TopLogprobs: 20}},
		{"seed zero", engine.Request{Prompt: []engine.Token{1}, Sampling: engine.Sampling{HasSeed: true}}},
		{"constraint", engine.Request{Prompt: []engine.Token{1}, Constraint: &engine.Constraint{Kind: engine.ConstraintJSONSchema, Spec: `{"type":"object"}`, Field: "response_format"}}},
		{"no seed", engine.Request{Prompt: []engine.Token{1}, Sampling: engine.Sampling{Temperature: 0.7}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := engineRequest(overWire(t, wireRequest(&tc.req)))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(*got, tc.req) {
				t.Fatalf("request arrived as %+v, sent %+v", *got, tc.req)
			}
		})
	}
}

func TestDeltaOverWire(t *testing.T) {
	for _, d := range []engine.Delta{
		{Tokens: []engine.Token{7}},
		{Tokens: []engine.Token{2, 3}, Finish: engine.FinishLength, PromptTokens: 400, CachedTokens: 384, KVTransferParams: []byte(`{"remote_block_ids":[1]}`)},
		{Finish: engine.FinishCancelled},
		{Tokens: []engine.Token{4, 5}, Logprobs: []engine.TokenLogprob{{Token: 4, Logprob: -0.5}, {Token: 5, Logprob: -2.25,
			Top: []engine.TopLogprob{{Token: 5, Logprob: -2.25}, {Token: 9, Logprob: -3}}}}},
	} {
		m := new(rpv1.Delta)
		setWireDelta(m, &d)
		if got := engineDelta(overWire(t, m)); !reflect.DeepEqual(got, d) {
			t.Fatalf("delta arrived as %+v, sent %+v", got, d)
		}
	}
}

func TestControlMessagesOverWire(t *testing.T) {
	info := engine.Info{Kind: "mocker", Model: "m", BlockSize: 16, ContextLength: 4096, KVCapacityTokens: 1 << 33, EOS: []engine.Token{2, 3}}
	if got := engineInfo(overWire(t, wireInfo(info))); !reflect.DeepEqual(got, info) {
		t.Fatalf("info %+v", got)
	}
	a := kvtransfer.Assessment{CachedTokens: 160, RunningDecodes: 3, UncachedSeconds: 0.25, TailSeconds: -1, ChunkTokens: 512}
	if got := engineAssessment(overWire(t, wireAssessment(a))); got != a {
		t.Fatalf("assessment %+v", got)
	}
	p := kvtransfer.Peer{ID: "d0", Addr: "h:9"}
	p.Token = []byte("tok")
	if got := enginePeer(overWire(t, wirePeer(p))); !reflect.DeepEqual(got, p) {
		t.Fatalf("peer %+v", got)
	}
	if got := enginePeer(nil); !reflect.DeepEqual(got, kvtransfer.Peer{}) {
		t.Fatalf("absent peer %+v", got)
	}
}

// TestCountsClamp: an engine-side count beyond int32 is clamped on the
// wire, never wrapped into a negative limit.
func TestCountsClamp(t *testing.T) {
	m := wireRequest(&engine.Request{MaxTokens: 1 << 40, MinTokens: -1 << 40})
	if m.MaxTokens != 1<<31-1 || m.MinTokens != -1<<31 {
		t.Fatalf("max %d min %d", m.MaxTokens, m.MinTokens)
	}
	if d := engineDelta(&rpv1.Delta{PromptTokens: -5, CachedTokens: -1}); d.PromptTokens != 0 || d.CachedTokens != 0 {
		t.Fatalf("negative counts read as %+v", d)
	}
}

// TestTooManyTokensRefused: a token list longer than maxTokens is refused
// before an engine sees it.
func TestTooManyTokensRefused(t *testing.T) {
	for _, m := range []*rpv1.GenerateRequest{
		{Prompt: make([]int32, maxTokens+1)},
		{Prompt: []int32{1}, StopTokens: make([]int32, maxTokens+1)},
	} {
		if _, err := engineRequest(m); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("err = %v, want InvalidArgument", err)
		}
	}
	if _, err := engineRequest(&rpv1.GenerateRequest{Prompt: make([]int32, maxTokens)}); err != nil {
		t.Fatalf("maxTokens refused: %v", err)
	}
}

// FuzzDecode fuzzes what a worker and a client decode off the wire: the
// generated protobuf decoders and the conversions after them. Whatever
// decodes must convert, and what converts must encode and decode again
// (a request's trace context too, when it is valid).
func FuzzDecode(f *testing.F) {
	seeds := []proto.Message{
		wireRequest(&engine.Request{ID: "a", Prompt: []engine.Token{1, 2}, Sampling: engine.Sampling{Seed: 3, HasSeed: true}, KVTransferParams: []byte(`{}`)}),
		&rpv1.Delta{Tokens: []int32{3}, Finish: "stop", CachedTokens: 16},
		&rpv1.AssessRequest{Prompt: []int32{1, 2, 3}, Tail: 2},
		&rpv1.PrefillRequest{Request: wireRequest(&engine.Request{ID: "r", Prompt: []engine.Token{4}}), Peer: &rpv1.Peer{Id: "d", Addr: "h:1"}, From: 1},
		&rpv1.LinkRequest{Peer: &rpv1.Peer{Id: "d", Addr: "h:1"}},
		&rpv1.PrefillReply{Blocks: 3, Bytes: 1 << 20, Code: "kv_transfer_failed"},
		&rpv1.GenerateRequest{Id: "t", Prompt: []int32{1}, Trace: &rpv1.TraceContext{TraceIdHigh: 1, TraceIdLow: 2, SpanId: 3, Flags: 1, Tracestate: "k=v"}},
	}
	for _, m := range seeds {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var gr rpv1.GenerateRequest
		if proto.Unmarshal(b, &gr) == nil {
			if sc := spanContext(gr.GetTrace()); sc.IsValid() {
				back := spanContext(wireTrace(trace.ContextWithRemoteSpanContext(context.Background(), sc)))
				if !back.Equal(sc) {
					t.Fatalf("trace context %v came back as %v", sc, back)
				}
			}
			if r, err := engineRequest(&gr); err == nil {
				back, err := engineRequest(overWire(t, wireRequest(r)))
				if err != nil || !reflect.DeepEqual(back, r) {
					t.Fatalf("request %+v came back as %+v (%v)", r, back, err)
				}
			}
		}
		var d rpv1.Delta
		if proto.Unmarshal(b, &d) == nil {
			ed := engineDelta(&d)
			m := new(rpv1.Delta)
			setWireDelta(m, &ed)
			if back := engineDelta(overWire(t, m)); !reflect.DeepEqual(back, ed) {
				t.Fatalf("delta %+v came back as %+v", ed, back)
			}
		}
		var pr rpv1.PrefillRequest
		if proto.Unmarshal(b, &pr) == nil {
			_, _ = engineRequest(pr.GetRequest())
			_ = enginePeer(pr.Peer)
		}
		for _, m := range []proto.Message{&rpv1.AssessRequest{}, &rpv1.LinkRequest{}, &rpv1.LinkReply{}, &rpv1.PrefillReply{}, &rpv1.EngineInfo{}, &rpv1.Assessment{}} {
			_ = proto.Unmarshal(b, m)
		}
	})
}

// TestServiceName: the name health checks use is the generated service's.
func TestServiceName(t *testing.T) {
	if ServiceName != rpv1.Worker_ServiceDesc.ServiceName {
		t.Fatalf("ServiceName %q, the .proto's service %q", ServiceName, rpv1.Worker_ServiceDesc.ServiceName)
	}
}
