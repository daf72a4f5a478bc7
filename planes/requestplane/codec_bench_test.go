package requestplane

import (
	"context"
	"io"
	"net"
	"runtime"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	gproto "google.golang.org/grpc/encoding/proto"

	"github.com/tandemllm/tandem/engine"
	rpv1 "github.com/tandemllm/tandem/planes/requestplane/proto/tandem/requestplane/v1"
)

// BenchmarkCodec prices the hot messages on each codec, in one run: a
// Generate request with 512 and 32k token ids (a 151k vocabulary's ids,
// as Qwen3's) and a Delta of one token, the per-token message. "hand" is
// the hand-written codec of earlier releases on the engine's types;
// "proto" is the generated code through gRPC's own codec, with the
// conversion to and from the engine's types that the request plane does.
// Each op encodes and decodes one message; wire-bytes is its size, and
// cpu-ns/op the benchmark thread's own CPU time per op (getrusage
// RUSAGE_THREAD, Linux), which a machine shared with other builds
// inflates far less than ns/op; compare the two codecs on it.
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
			defer threadCPU(b)()
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
			defer threadCPU(b)()
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

// threadCPU locks the benchmark to its OS thread and returns a func that
// reports the thread's CPU time per op (nothing where RUSAGE_THREAD is
// not supported).
func threadCPU(b *testing.B) func() {
	runtime.LockOSThread()
	const rusageThread = 1 // Linux's RUSAGE_THREAD
	cpu := func() (time.Duration, bool) {
		var ru syscall.Rusage
		if syscall.Getrusage(rusageThread, &ru) != nil {
			return 0, false
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
	}
	start, ok := cpu()
	return func() {
		end, _ := cpu()
		runtime.UnlockOSThread()
		if ok && b.N > 0 {
			b.ReportMetric(float64(end-start)/float64(b.N), "cpu-ns/op")
		}
	}
}

// BenchmarkRoundTrip prices the codecs where they run: one Generate over
// a loopback gRPC connection, client and server in this process, the
// engine streaming one token per Delta without computing. "hand" is the
// request plane of earlier releases (its service descriptor and codec,
// rebuilt here); "proto" is this release's Server and Client. cpu-µs/op
// is the process's CPU time per request, both ends and the GC included.
func BenchmarkRoundTrip(b *testing.B) {
	for _, tc := range []struct {
		name           string
		prompt, output int
	}{{"512-in-16-out", 512, 16}, {"32k-in-1-out", 32 << 10, 1}} {
		prompt := make([]engine.Token, tc.prompt)
		for i := range prompt {
			prompt[i] = engine.Token((i*7919 + 13) % 151_643)
		}
		eng := streamEngine(tc.output)
		req := &engine.Request{ID: "chatcmpl-6f1c2a", Model: "m", Prompt: prompt, MaxTokens: tc.output}
		b.Run(tc.name+"/hand", func(b *testing.B) {
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			gs := grpc.NewServer(grpc.ForceServerCodec(handCodec{}), grpc.MaxRecvMsgSize(maxMessage))
			gs.RegisterService(&legacyDesc, eng)
			go func() { _ = gs.Serve(lis) }()
			defer gs.Stop()
			cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
				grpc.WithDefaultCallOptions(grpc.ForceCodec(handCodec{}), grpc.MaxCallSendMsgSize(maxMessage)))
			if err != nil {
				b.Fatal(err)
			}
			defer cc.Close()
			roundTrips(b, func() int {
				cs, err := cc.NewStream(context.Background(), &legacyDesc.Streams[0], "/"+legacyService+"/Generate")
				if err != nil {
					b.Fatal(err)
				}
				if err := cs.SendMsg(req); err != nil {
					b.Fatal(err)
				}
				_ = cs.CloseSend()
				n := 0
				for {
					var d engine.Delta
					if err := cs.RecvMsg(&d); err == io.EOF {
						return n
					} else if err != nil {
						b.Fatal(err)
					}
					n += len(d.Tokens)
				}
			})
		})
		b.Run(tc.name+"/proto", func(b *testing.B) {
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			srv := NewServer(eng, nil, 0)
			go func() { _ = srv.Serve(lis) }()
			defer srv.Stop()
			c, err := Dial(lis.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			roundTrips(b, func() int {
				s, err := c.Generate(context.Background(), req)
				if err != nil {
					b.Fatal(err)
				}
				n := 0
				for {
					d, err := s.Recv()
					if err == io.EOF {
						return n
					} else if err != nil {
						b.Fatal(err)
					}
					n += len(d.Tokens)
				}
			})
		})
	}
}

func roundTrips(b *testing.B, one func() int) {
	for range 50 { // the connection, pools
		one()
	}
	cpu := func() time.Duration {
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	start := cpu()
	for b.Loop() {
		one()
	}
	b.ReportMetric(float64(cpu()-start)/1e3/float64(b.N), "cpu-µs/op")
}

// streamEngine streams n one-token Deltas per request, at once.
type streamEngine int

func (n streamEngine) Info() engine.Info { return engine.Info{Kind: "bench", ContextLength: 1 << 20} }
func (n streamEngine) Close() error      { return nil }
func (n streamEngine) Generate(_ context.Context, req *engine.Request) (engine.Stream, error) {
	return &countStream{left: int(n), prompt: len(req.Prompt)}, nil
}

type countStream struct{ left, prompt int }

func (s *countStream) Recv() (engine.Delta, error) {
	if s.left == 0 {
		return engine.Delta{}, io.EOF
	}
	s.left--
	d := engine.Delta{Tokens: []engine.Token{101_325}, PromptTokens: s.prompt}
	if s.left == 0 {
		d.Finish = engine.FinishLength
	}
	return d, nil
}

// legacyDesc is the Generate call of earlier releases' hand-written
// service descriptor, serving an engine.Engine.
var legacyDesc = grpc.ServiceDesc{
	ServiceName: legacyService,
	HandlerType: (*engine.Engine)(nil),
	Streams: []grpc.StreamDesc{{
		StreamName:    "Generate",
		ServerStreams: true,
		Handler: func(srv any, stream grpc.ServerStream) error {
			var req engine.Request
			if err := stream.RecvMsg(&req); err != nil {
				return err
			}
			s, err := srv.(engine.Engine).Generate(stream.Context(), &req)
			if err != nil {
				return toStatus(err)
			}
			for {
				d, err := s.Recv()
				if err == io.EOF {
					return nil
				}
				if err != nil {
					return toStatus(err)
				}
				if err := stream.SendMsg(&d); err != nil {
					return err
				}
			}
		},
	}},
}
