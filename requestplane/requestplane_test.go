package requestplane

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/tandemllm/tandem/disagg"
	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/enginetest"
)

func serve(t *testing.T, eng engine.Engine) *Client {
	t.Helper()
	return serveWith(t, eng, nil)
}

// serveWith serves eng, and side when not nil, on a loopback request
// plane and returns a client of it.
func serveWith(t *testing.T, eng engine.Engine, side disagg.Side) *Client {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(eng, side)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	c, err := Dial(lis.Addr().String())
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
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
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
