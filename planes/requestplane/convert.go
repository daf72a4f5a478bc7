package requestplane

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"

	"go.opentelemetry.io/otel/trace"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/planes/kvtransfer"
	rpv1 "github.com/tandemllm/tandem/planes/requestplane/proto/tandem/requestplane/v1"
	"github.com/tandemllm/tandem/tracing"
)

// Conversions between the engine's types and the wire's. Token lists are
// handed over, not copied: engine.Token is int32, the type protoc-gen-go
// gives a repeated int32 field, so a prompt of 32k ids costs nothing here.
// The encoding itself is gRPC's protobuf codec, with no hand-written fast
// path: BenchmarkCodec and BenchmarkRoundTrip measured protobuf a little
// above the earlier hand-written codec's CPU per loopback Generate, with
// the same end-to-end latency: too little to keep a second wire format
// (docs/benchmarks/requestplane.md).

// maxTokens bounds a token list taken off the wire (a prompt, stop
// tokens), so that a peer cannot hand an engine more than any context
// holds: 4 Mi ids, four times a million-token context.
const maxTokens = 1 << 22

// maxMessage bounds one request-plane message: maxTokens ids at up to 4
// bytes each (ids below 2^28 as varints; every vocabulary in use is below
// 2^21, 3 bytes) plus room, instead of gRPC's 4 MiB default, which a
// million-token prompt would exceed.
const maxMessage = 4*maxTokens + 1<<20

// int32Of narrows an engine-side count to a wire field. Counts beyond
// int32 are clamped rather than wrapped: a wrapped max_tokens would turn a
// huge limit into a negative one.
func int32Of(n int) int32 {
	return int32(max(math.MinInt32, min(n, math.MaxInt32)))
}

// wireRequest writes r for the wire. A Seed without HasSeed is not sent:
// the engine picks its own seed then, whatever the field holds.
func wireRequest(r *engine.Request) *rpv1.GenerateRequest {
	m := &rpv1.GenerateRequest{
		Id: r.ID, Model: r.Model, Prompt: r.Prompt,
		MaxTokens: int32Of(r.MaxTokens), MinTokens: int32Of(r.MinTokens), IgnoreEos: r.IgnoreEOS,
		StopTokens: r.StopTokens, KvTransferParams: r.KVTransferParams,
		Logprobs: r.Logprobs, TopLogprobs: int32Of(r.TopLogprobs),
	}
	if s := r.Sampling; s != (engine.Sampling{}) {
		m.Sampling = &rpv1.Sampling{Temperature: s.Temperature, TopP: s.TopP, TopK: int32Of(s.TopK)}
		if s.HasSeed {
			m.Sampling.Seed = &s.Seed
		}
	}
	if c := r.Constraint; c != nil {
		m.Constraint = &rpv1.Constraint{Kind: string(c.Kind), Spec: c.Spec, Field: c.Field}
	}
	return m
}

// engineRequest turns a request taken off the wire into the engine's.
// It is the one place where the worker side checks what a peer sent,
// before any engine sees it; its errors are gRPC statuses.
func engineRequest(m *rpv1.GenerateRequest) (*engine.Request, error) {
	if m == nil {
		return nil, status.Error(codes.InvalidArgument, "requestplane: no request")
	}
	if len(m.Prompt) > maxTokens || len(m.StopTokens) > maxTokens {
		return nil, status.Error(codes.InvalidArgument, fmt.Sprintf("requestplane: %d prompt and %d stop tokens: at most %d each", len(m.Prompt), len(m.StopTokens), maxTokens))
	}
	r := &engine.Request{
		ID: m.Id, Model: m.Model, Prompt: m.Prompt,
		MaxTokens: int(m.MaxTokens), MinTokens: int(m.MinTokens), IgnoreEOS: m.IgnoreEos,
		StopTokens: m.StopTokens, KVTransferParams: nilIfEmpty(m.KvTransferParams),
		Logprobs: m.Logprobs, TopLogprobs: int(m.TopLogprobs),
	}
	if m.TopLogprobs < 0 || m.TopLogprobs > engine.MaxTopLogprobs {
		return nil, status.Error(codes.InvalidArgument, fmt.Sprintf("requestplane: top_logprobs %d is outside [0,%d]", m.TopLogprobs, engine.MaxTopLogprobs))
	}
	if s := m.Sampling; s != nil {
		r.Sampling = engine.Sampling{Temperature: s.Temperature, TopP: s.TopP, TopK: int(s.TopK)}
		if s.Seed != nil {
			r.Sampling.Seed, r.Sampling.HasSeed = *s.Seed, true
		}
	}
	if c := m.Constraint; c != nil {
		if len(c.Spec) > maxConstraintSpec || len(c.Kind) > 64 || len(c.Field) > 256 {
			return nil, status.Error(codes.InvalidArgument, fmt.Sprintf("requestplane: constraint of %d bytes: at most %d", len(c.Spec), maxConstraintSpec))
		}
		r.Constraint = &engine.Constraint{Kind: engine.ConstraintKind(c.Kind), Spec: c.Spec, Field: c.Field}
	}
	return r, nil
}

// maxConstraintSpec bounds a structured-output constraint's spec (the
// frontend's own limit).
const maxConstraintSpec = 1 << 20

// setWireDelta fills m (reused across a stream's Deltas: Send encodes
// before it returns) from d.
func setWireDelta(m *rpv1.Delta, d *engine.Delta) {
	m.Tokens, m.Finish = d.Tokens, string(d.Finish)
	m.PromptTokens, m.CachedTokens = int32Of(d.PromptTokens), int32Of(d.CachedTokens)
	m.KvTransferParams = d.KVTransferParams
	m.Logprobs = m.Logprobs[:0]
	for _, lp := range d.Logprobs {
		w := &rpv1.TokenLogprob{Token: lp.Token, Logprob: lp.Logprob}
		if len(lp.Top) > 0 {
			w.Top = make([]*rpv1.TopLogprob, len(lp.Top))
			for i, t := range lp.Top {
				w.Top[i] = &rpv1.TopLogprob{Token: t.Token, Logprob: t.Logprob}
			}
		}
		m.Logprobs = append(m.Logprobs, w)
	}
	if len(m.Logprobs) == 0 {
		m.Logprobs = nil
	}
}

// checkDeltaLogprobs bounds what a worker may send beside its tokens: at
// most one entry per token, at most engine.MaxTopLogprobs alternatives
// each.
func checkDeltaLogprobs(m *rpv1.Delta) error {
	if len(m.Logprobs) > len(m.Tokens) {
		return fmt.Errorf("requestplane: the worker sent %d logprobs for %d tokens", len(m.Logprobs), len(m.Tokens))
	}
	for _, lp := range m.Logprobs {
		if len(lp.GetTop()) > engine.MaxTopLogprobs {
			return fmt.Errorf("requestplane: the worker sent %d alternatives for a position; at most %d", len(lp.GetTop()), engine.MaxTopLogprobs)
		}
	}
	return nil
}

func engineDelta(m *rpv1.Delta) engine.Delta {
	return engine.Delta{
		Tokens: m.Tokens, Finish: engine.FinishReason(m.Finish),
		PromptTokens: int(max(0, m.PromptTokens)), CachedTokens: int(max(0, m.CachedTokens)),
		KVTransferParams: nilIfEmpty(m.KvTransferParams),
		Logprobs:         engineLogprobs(m.Logprobs),
	}
}

func engineLogprobs(w []*rpv1.TokenLogprob) []engine.TokenLogprob {
	if len(w) == 0 {
		return nil
	}
	out := make([]engine.TokenLogprob, len(w))
	for i, lp := range w {
		out[i] = engine.TokenLogprob{Token: lp.GetToken(), Logprob: lp.GetLogprob()}
		if top := lp.GetTop(); len(top) > 0 {
			out[i].Top = make([]engine.TopLogprob, len(top))
			for k, t := range top {
				out[i].Top[k] = engine.TopLogprob{Token: t.GetToken(), Logprob: t.GetLogprob()}
			}
		}
	}
	return out
}

// nilIfEmpty keeps "no kv_transfer_params" nil on both sides of the wire
// (proto3 cannot tell an empty bytes field from an absent one).
func nilIfEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

func wireInfo(i engine.Info) *rpv1.EngineInfo {
	return &rpv1.EngineInfo{Kind: i.Kind, Model: i.Model, BlockSize: int32Of(i.BlockSize), ContextLength: int32Of(i.ContextLength),
		KvCapacityTokens: int64(i.KVCapacityTokens), Eos: i.EOS}
}

func engineInfo(m *rpv1.EngineInfo) engine.Info {
	return engine.Info{Kind: m.Kind, Model: m.Model, BlockSize: int(m.BlockSize), ContextLength: int(m.ContextLength),
		KVCapacityTokens: int(min(m.KvCapacityTokens, math.MaxInt)), EOS: m.Eos}
}

func wireAssessment(a kvtransfer.Assessment) *rpv1.Assessment {
	return &rpv1.Assessment{CachedTokens: int32Of(a.CachedTokens), RunningDecodes: int32Of(a.RunningDecodes),
		UncachedSeconds: a.UncachedSeconds, TailSeconds: a.TailSeconds, ChunkTokens: int32Of(a.ChunkTokens)}
}

func engineAssessment(m *rpv1.Assessment) kvtransfer.Assessment {
	return kvtransfer.Assessment{CachedTokens: int(m.CachedTokens), RunningDecodes: int(m.RunningDecodes),
		UncachedSeconds: m.UncachedSeconds, TailSeconds: m.TailSeconds, ChunkTokens: int(m.ChunkTokens)}
}

func wirePeer(p kvtransfer.Peer) *rpv1.Peer {
	return &rpv1.Peer{Id: p.ID, Addr: p.Addr, Token: p.Token}
}

// enginePeer reads a peer (a missing one is the zero Peer, which the
// transfer node refuses with its own code).
func enginePeer(m *rpv1.Peer) kvtransfer.Peer {
	return kvtransfer.Peer{ID: m.GetId(), Addr: m.GetAddr(), Token: m.GetToken()}
}

// callRequest is req as a call sends it (Generate, Prefill): the wire
// request with ctx's trace context.
func callRequest(ctx context.Context, req *engine.Request) *rpv1.GenerateRequest {
	m := wireRequest(req)
	m.Trace = wireTrace(ctx)
	return m
}

// wireTrace is ctx's span context as a request carries it, nil when ctx
// has none. An unsampled one travels too, so that a client's trace id
// reaches the worker's log lines with tracing off.
func wireTrace(ctx context.Context) *rpv1.TraceContext {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return nil
	}
	tid, sid := sc.TraceID(), sc.SpanID()
	return &rpv1.TraceContext{
		TraceIdHigh: binary.BigEndian.Uint64(tid[:8]), TraceIdLow: binary.BigEndian.Uint64(tid[8:]),
		SpanId: binary.BigEndian.Uint64(sid[:]), Flags: uint32(sc.TraceFlags() & (trace.FlagsSampled | trace.FlagsRandom)),
		Tracestate: sc.TraceState().String(),
	}
}

// spanContext is the caller's span context a request carried: invalid
// when it carried none or a malformed one (a request is not refused for
// its trace context; it starts a trace of its own instead).
func spanContext(m *rpv1.TraceContext) trace.SpanContext {
	if m == nil {
		return trace.SpanContext{}
	}
	var tid trace.TraceID
	var sid trace.SpanID
	binary.BigEndian.PutUint64(tid[:8], m.TraceIdHigh)
	binary.BigEndian.PutUint64(tid[8:], m.TraceIdLow)
	binary.BigEndian.PutUint64(sid[:], m.SpanId)
	sc, _ := tracing.RemoteSpanContext(tid, sid, m.Flags, m.Tracestate)
	return sc
}
