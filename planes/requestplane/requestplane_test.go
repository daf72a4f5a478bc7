package requestplane

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/enginetest"
	"github.com/tandemllm/tandem/health"
	"github.com/tandemllm/tandem/planes/kvtransfer"
)

func serve(t *testing.T, eng engine.Engine) *Client {
	t.Helper()
	return serveWith(t, eng, nil)
}

// serveWith serves eng, and side when not nil, on a loopback request
// plane and returns a client of it.
func serveWith(t *testing.T, eng engine.Engine, side kvtransfer.Side) *Client {
	t.Helper()
	return serveVocab(t, eng, side, 0)
}

// serveVocab is serveWith with the server checking token ids against a
// vocabulary of vocab.
func serveVocab(t *testing.T, eng engine.Engine, side kvtransfer.Side, vocab int) *Client {
	t.Helper()
	return listen(t, NewServer(eng, side, vocab))
}

// listen serves srv on a loopback port until the test ends and returns a
// client of it, dialed with opts.
func listen(t *testing.T, srv *Server, opts ...grpc.DialOption) *Client {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	c, err := Dial(lis.Addr().String(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestGenerateOverGRPC(t *testing.T) {
	eng := &enginetest.Scripted{Name: "m", Output: []engine.Token{7, 8, 9}, Cached: 2}
	c := serve(t, eng)
	req := &engine.Request{ID: "r1", Model: "m", Prompt: []engine.Token{1, 2, 3}, MaxTokens: 5,
		Sampling: engine.Sampling{Temperature: 0.5, TopP: 0.9, TopK: 4, Seed: 42, HasSeed: true}, StopTokens: []engine.Token{99}}
	s, err := c.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	var toks []engine.Token
	var last engine.Delta
	for {
		d, err := s.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		toks = append(toks, d.Tokens...)
		last = d
	}
	if len(toks) != 5 || last.Finish != engine.FinishLength || last.CachedTokens != 2 || last.PromptTokens != 3 {
		t.Fatalf("tokens %v last %+v", toks, last)
	}
	got := eng.Requests()[0]
	if got.ID != "r1" || got.Sampling != req.Sampling || got.StopTokens[0] != 99 || got.MaxTokens != 5 {
		t.Fatalf("request arrived as %+v", got)
	}
	info, err := c.Info(context.Background())
	if err != nil || info.Model != "m" || info.ContextLength != 4096 {
		t.Fatalf("info %+v %v", info, err)
	}
}

func TestErrorsSurviveTheWire(t *testing.T) {
	c := serve(t, &enginetest.Scripted{Name: "m", Ctx: 8})
	_, err := c.Generate(context.Background(), &engine.Request{Prompt: make([]engine.Token, 10), MaxTokens: 1})
	if !errors.Is(err, engine.ErrPromptTooLong) {
		t.Fatalf("err = %v, want ErrPromptTooLong", err)
	}
}

func TestCancellationReachesEngine(t *testing.T) {
	eng := &enginetest.Scripted{Name: "m", Output: []engine.Token{1}, Delay: 5 * time.Millisecond}
	c := serve(t, eng)
	ctx, cancel := context.WithCancel(context.Background())
	s, err := c.Generate(ctx, &engine.Request{Prompt: []engine.Token{1}, MaxTokens: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); err != nil {
		t.Fatal(err)
	}
	cancel()
	deadline := time.Now().Add(time.Second)
	for eng.Live.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("engine still generating 1s after cancel")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestUnreachableWorkerIsUnavailable(t *testing.T) {
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := lis.Addr().String()
	lis.Close()
	c, err := Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// A refused connection fails at once; the deadline only keeps a
	// loaded machine from turning it into DeadlineExceeded.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = c.Generate(ctx, &engine.Request{Prompt: []engine.Token{1}, MaxTokens: 1})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
}

// TestLongPromptOverTheWire: a prompt of a million-token context fits a
// message (gRPC's default limit is 4 MiB).
func TestLongPromptOverTheWire(t *testing.T) {
	eng := &enginetest.Scripted{Name: "m", Output: []engine.Token{7}, Ctx: 1<<20 + 1}
	c := serve(t, eng)
	s, err := c.Generate(context.Background(), &engine.Request{Prompt: make([]engine.Token, 1<<20), MaxTokens: 1})
	if err != nil {
		t.Fatal(err)
	}
	if d, err := s.Recv(); err != nil || d.PromptTokens != 1<<20 {
		t.Fatalf("delta %+v, %v", d, err)
	}
}

// TestInterceptorsRun: interceptors given to NewServer and Dial run on
// the unary calls and on the Generate stream (the hand-written service
// descriptor of earlier releases dropped unary ones).
func TestInterceptorsRun(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]int{}
	note := func(kind, method string) {
		mu.Lock()
		seen[kind+" "+method]++
		mu.Unlock()
	}
	srv := NewServer(&enginetest.Scripted{Name: "m", Output: []engine.Token{7}}, nil, 0,
		grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			note("server-unary", info.FullMethod)
			return h(ctx, req)
		}),
		grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			note("server-stream", info.FullMethod)
			return h(srv, ss)
		}))
	c := listen(t, srv,
		grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			note("client-unary", method)
			return invoker(ctx, method, req, reply, cc, opts...)
		}),
		grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			note("client-stream", method)
			return streamer(ctx, desc, cc, method, opts...)
		}))
	if _, err := c.Info(context.Background()); err != nil {
		t.Fatal(err)
	}
	s, err := c.Generate(context.Background(), &engine.Request{Prompt: []engine.Token{1}, MaxTokens: 1})
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := s.Recv(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, k := range []string{"server-unary /" + ServiceName + "/Info", "client-unary /" + ServiceName + "/Info",
		"server-stream /" + ServiceName + "/Generate", "client-stream /" + ServiceName + "/Generate"} {
		if seen[k] != 1 {
			t.Errorf("%s ran %d times, want 1 (seen %v)", k, seen[k], seen)
		}
	}
}

// TestHealthService: grpc.health.v1, asked with its own generated client,
// says NOT_SERVING until the worker is ready, SERVING then, NOT_SERVING
// again once it drains; a watcher hears the drain and does not hold
// GracefulStop.
func TestHealthService(t *testing.T) {
	srv := NewServer(&enginetest.Scripted{Name: "m"}, nil, 0)
	c := listen(t, srv)
	hc := healthpb.NewHealthClient(c.Conn())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	check := func(service string, want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		if err != nil || r.Status != want {
			t.Fatalf("check %q: %v, %v; want %v", service, r.GetStatus(), err, want)
		}
	}
	for _, svc := range []string{"", ServiceName} {
		check(svc, healthpb.HealthCheckResponse_NOT_SERVING)
	}
	if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "other"}); status.Code(err) != codes.NotFound {
		t.Fatalf("unknown service: %v, want NotFound", err)
	}
	srv.SetServing(true)
	for _, svc := range []string{"", ServiceName} {
		check(svc, healthpb.HealthCheckResponse_SERVING)
	}
	w, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{Service: ServiceName})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := w.Recv(); err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("watch: %v, %v", r.GetStatus(), err)
	}
	srv.SetServing(false) // the drain starts
	if r, err := w.Recv(); err != nil || r.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("watch after the drain began: %v, %v", r.GetStatus(), err)
	}
	check("", healthpb.HealthCheckResponse_NOT_SERVING)
	// GracefulStop ends the watch (grpc-go's own would hold the drain
	// until the client leaves).
	stopped := make(chan struct{})
	go func() { srv.GracefulStop(); close(stopped) }()
	for {
		r, err := w.Recv()
		if err != nil {
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("watch ended with %v, want Unavailable", err)
			}
			break
		}
		if r.Status != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Fatalf("watch of a stopping server: %v", r.Status)
		}
	}
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("GracefulStop still waiting 5s after the watch ended")
	}
}

// TestOlderPeers: across the change to the .proto, peers of older
// releases get statuses that name the mismatch (docs/ARCHITECTURE.md,
// "Rolling upgrades"). An older frontend (the hand-written codec, the
// unversioned service) calling this worker is told which schema it
// serves; this frontend calling an older worker gets ErrSchema, which is
// ErrUnavailable, so the frontend routes around that worker.
func TestOlderPeers(t *testing.T) {
	srv := NewServer(&enginetest.Scripted{Name: "m", Output: []engine.Token{7}}, nil, 0)
	board := health.NewBoard(slog.New(slog.DiscardHandler), nil)
	srv.quiet = 100 * time.Millisecond
	health.Attach(srv, board, "w0")
	c := listen(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	old, err := c.cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, "/"+legacyService+"/Generate", grpc.ForceCodec(handCodec{}))
	if err != nil {
		t.Fatal(err)
	}
	if err := old.SendMsg(&engine.Request{Prompt: []engine.Token{1}, MaxTokens: 1}); err != nil {
		t.Fatal(err)
	}
	_ = old.CloseSend()
	err = old.RecvMsg(&engine.Delta{})
	if st := status.Convert(err); st.Code() != codes.Unimplemented || !strings.Contains(st.Message(), "tandem-rp1") || !strings.Contains(st.Message(), ServiceName) {
		t.Fatalf("older frontend got %v", err)
	}
	// The worker raises it, and clears it once older peers are quiet.
	if !board.IsActive(DiagSchemaMismatch, "w0") {
		t.Fatalf("%s not raised: %v", DiagSchemaMismatch, board.Active())
	}
	for deadline := time.Now().Add(3 * time.Second); board.IsActive(DiagSchemaMismatch, "w0"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s still raised 3 s after the last older call", DiagSchemaMismatch)
		}
	}

	// An older worker: its server forced the hand-written codec and knew
	// only the unversioned service.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(grpc.ForceServerCodec(handCodec{}))
	go func() { _ = gs.Serve(lis) }()
	defer gs.Stop()
	oc, err := Dial(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer oc.Close()
	_, err = oc.Generate(ctx, &engine.Request{Prompt: []engine.Token{1}, MaxTokens: 1})
	if !errors.Is(err, ErrSchema) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("older worker: %v, want ErrSchema", err)
	}
	if _, err := oc.Info(ctx); !errors.Is(err, ErrSchema) {
		t.Fatalf("older worker's Info: %v, want ErrSchema", err)
	}
}
