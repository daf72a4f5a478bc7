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
	"github.com/tandemllm/tandem/kvtransfer"
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

func TestCodecRoundTrip(t *testing.T) {
	req := engine.Request{ID: "x", Model: "m", Prompt: []engine.Token{0, 1, 1 << 30}, MaxTokens: 7, MinTokens: 2, IgnoreEOS: true,
		StopTokens: []engine.Token{5}, Sampling: engine.Sampling{Temperature: 1.5, TopP: 0.5, TopK: 3, Seed: 1<<63 + 5, HasSeed: true}}
	b, err := codec{}.Marshal(&req)
	if err != nil {
		t.Fatal(err)
	}
	var back engine.Request
	if err := (codec{}).Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.ID != req.ID || back.Sampling != req.Sampling || len(back.Prompt) != 3 || back.Prompt[2] != 1<<30 || !back.IgnoreEOS || back.MinTokens != 2 {
		t.Fatalf("got %+v", back)
	}
	for i := 0; i < len(b); i++ {
		if err := (codec{}).Unmarshal(b[:i], &back); err == nil {
			t.Fatalf("truncated at %d accepted", i)
		}
	}
}

// TestCodecKVTransferParams: vLLM's kv_transfer_params cross the request
// plane both ways, and version-1 messages (older peers, no params) still
// decode.
func TestCodecKVTransferParams(t *testing.T) {
	params := []byte(`{"do_remote_decode":true}`)
	req := engine.Request{ID: "x", Prompt: []engine.Token{1}, KVTransferParams: params}
	b, _ := codec{}.Marshal(&req)
	var back engine.Request
	if err := (codec{}).Unmarshal(b, &back); err != nil || string(back.KVTransferParams) != string(params) {
		t.Fatalf("request params %q, %v", back.KVTransferParams, err)
	}
	d := engine.Delta{Tokens: []engine.Token{2}, Finish: "length", KVTransferParams: []byte(`{"remote_block_ids":[1]}`)}
	db, _ := codec{}.Marshal(&d)
	var dback engine.Delta
	if err := (codec{}).Unmarshal(db, &dback); err != nil || string(dback.KVTransferParams) != string(d.KVTransferParams) {
		t.Fatalf("delta params %q, %v", dback.KVTransferParams, err)
	}
	if b[0] != 2 || db[0] != 2 {
		t.Fatalf("messages with params written as versions %d, %d", b[0], db[0])
	}
	// Without params a message is version 1, byte for byte what an older
	// peer writes and reads.
	plain, _ := codec{}.Marshal(&engine.Request{ID: "x", Prompt: []engine.Token{1}})
	if plain[0] != 1 {
		t.Fatalf("a request without params is version %d", plain[0])
	}
	back = engine.Request{}
	if err := (codec{}).Unmarshal(plain, &back); err != nil || back.ID != "x" || back.KVTransferParams != nil {
		t.Fatalf("version 1: %+v, %v", back, err)
	}
	if err := (codec{}).Unmarshal(append([]byte{9}, plain[1:]...), &back); err == nil {
		t.Fatal("unknown version accepted")
	}
}

func FuzzCodec(f *testing.F) {
	b, _ := codec{}.Marshal(&engine.Request{ID: "a", Prompt: []engine.Token{1, 2}})
	f.Add(b)
	d, _ := codec{}.Marshal(&engine.Delta{Tokens: []engine.Token{3}, Finish: "stop", CachedTokens: 16})
	f.Add(d)
	a, _ := codec{}.Marshal(&assessRequest{Prompt: []engine.Token{1, 2, 3}, Tail: 2})
	f.Add(a)
	p, _ := codec{}.Marshal(&pushRequest{Request: engine.Request{ID: "r", Prompt: []engine.Token{4}}, Peer: kvtransfer.Peer{ID: "d", Addr: "h:1"}, From: 1})
	f.Add(p)
	pt, _ := codec{}.Marshal(&pushRequest{Request: engine.Request{ID: "r", Prompt: []engine.Token{4}}, Peer: kvtransfer.Peer{ID: "d", Addr: "h:1", Token: make([]byte, 56)}, From: 1})
	f.Add(pt)
	f.Fuzz(func(t *testing.T, b []byte) {
		var r engine.Request
		if codec.Unmarshal(codec{}, b, &r) == nil {
			out, _ := codec{}.Marshal(&r)
			var r2 engine.Request
			if err := (codec{}).Unmarshal(out, &r2); err != nil {
				t.Fatalf("re-decode: %v", err)
			}
		}
		var dl engine.Delta
		_ = codec{}.Unmarshal(b, &dl)
		var ar assessRequest
		if codec.Unmarshal(codec{}, b, &ar) == nil {
			out, _ := codec{}.Marshal(&ar)
			if err := (codec{}).Unmarshal(out, &assessRequest{}); err != nil {
				t.Fatalf("re-decode assess: %v", err)
			}
		}
		var pr pushRequest
		if codec.Unmarshal(codec{}, b, &pr) == nil {
			out, _ := codec{}.Marshal(&pr)
			if err := (codec{}).Unmarshal(out, &pushRequest{}); err != nil {
				t.Fatalf("re-decode push: %v", err)
			}
		}
		for _, v := range []any{&linkReply{}, &pushReply{}, &linkRequest{}, &keyReply{}} {
			_ = codec{}.Unmarshal(b, v)
		}
	})
}
