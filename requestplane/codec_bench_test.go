package requestplane

import (
	"testing"

	"google.golang.org/grpc/encoding"
	gproto "google.golang.org/grpc/encoding/proto"

	"github.com/tandemllm/tandem/engine"
	rpv1 "github.com/tandemllm/tandem/requestplane/proto/tandem/requestplane/v1"
)

// BenchmarkCodec prices the hot messages on each codec, in one run: a
// Generate request with 512 and 32k token ids (a 151k vocabulary's ids,
// as Qwen3's) and a Delta of one token, the per-token message. "hand" is
// the hand-written codec of earlier releases on the engine's types;
// "proto" is the generated code through gRPC's own codec, with the
// conversion to and from the engine's types that the request plane does.
// Each op encodes and decodes one message; wire-bytes is its size.
func BenchmarkCodec(b *testing.B) {
	grpcProto := encoding.GetCodecV2(gproto.Name)
	prompt := func(n int) []engine.Token {
		p := make([]engine.Token, n)
		for i := range p {
			p[i] = engine.Token((i*7919 + 13) % 151_643)
		}
		return p
	}
	req := func(n int) *engine.Request {
		return &engine.Request{ID: "chatcmpl-6f1c2a", Model: "qwen3-0.6b", Prompt: prompt(n), MaxTokens: 128,
			StopTokens: []engine.Token{151_645}, Sampling: engine.Sampling{Temperature: 0.7, TopP: 0.95, TopK: 20}}
	}
	delta := &engine.Delta{Tokens: []engine.Token{101_325}, PromptTokens: 512, CachedTokens: 496}
	for _, tc := range []struct {
		name string
		req  *engine.Request
	}{{"generate-512", req(512)}, {"generate-32k", req(32 << 10)}, {"delta-1", nil}} {
		b.Run(tc.name+"/hand", func(b *testing.B) {
			var v, out any = tc.req, &engine.Request{}
			if tc.req == nil {
				v, out = delta, &engine.Delta{}
			}
			var size int
			b.ReportAllocs()
			for b.Loop() {
				buf, err := handCodec{}.Marshal(v)
				if err != nil {
					b.Fatal(err)
				}
				if err := (handCodec{}).Unmarshal(buf, out); err != nil {
					b.Fatal(err)
				}
				size = len(buf)
			}
			b.ReportMetric(float64(size), "wire-bytes")
		})
		b.Run(tc.name+"/proto", func(b *testing.B) {
			var size int
			b.ReportAllocs()
			for b.Loop() {
				if tc.req != nil {
					buf, err := grpcProto.Marshal(wireRequest(tc.req))
					if err != nil {
						b.Fatal(err)
					}
					var m rpv1.GenerateRequest
					if err := grpcProto.Unmarshal(buf, &m); err != nil {
						b.Fatal(err)
					}
					if _, err := engineRequest(&m); err != nil {
						b.Fatal(err)
					}
					size = buf.Len()
					buf.Free()
					continue
				}
				m := new(rpv1.Delta)
				setWireDelta(m, delta)
				buf, err := grpcProto.Marshal(m)
				if err != nil {
					b.Fatal(err)
				}
				var back rpv1.Delta
				if err := grpcProto.Unmarshal(buf, &back); err != nil {
					b.Fatal(err)
				}
				_ = engineDelta(&back)
				size = buf.Len()
				buf.Free()
			}
			b.ReportMetric(float64(size), "wire-bytes")
		})
	}
}
