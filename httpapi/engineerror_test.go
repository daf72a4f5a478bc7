package httpapi

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/enginetest"
)

type promptOnly struct{ error }

func (promptOnly) PromptTooLong() bool { return true }
func (p promptOnly) Unwrap() error     { return p.error }

// TestEngineErrorParam: an engine's refusal of the prompt's own length
// (an upstream server's context) used to be labelled param max_tokens;
// it now names the prompt's field, and only a prompt-plus-output refusal
// names max_tokens.
func TestEngineErrorParam(t *testing.T) {
	s := &Server{}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{promptOnly{fmt.Errorf("x: %w", engine.ErrPromptTooLong)}, "messages"},
		{fmt.Errorf("wrapped: %w", promptOnly{fmt.Errorf("x: %w", engine.ErrPromptTooLong)}), "messages"},
		{fmt.Errorf("x: %w", engine.ErrPromptTooLong), "max_tokens"},
	} {
		e := s.engineError(tc.err, "messages")
		if e.Param != tc.want {
			t.Fatalf("%v: param %v, want %s", tc.err, e.Param, tc.want)
		}
	}
}

// TestClientAbortIsNotInterrupted: a client that closes its stream used
// to log a stream_interrupted warning, as if the worker had broken it.
func TestClientAbortIsNotInterrupted(t *testing.T) {
	eng := &enginetest.Scripted{Name: "m", Output: toks("abcdefgh"), Delay: 10 * time.Millisecond}
	f := newFixture(t, 4096, map[string]engine.Generator{"w0": eng})
	var logs syncBuf
	f.srv.log = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, cancel := context.WithCancel(t.Context())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.url+"/v1/completions",
		strings.NewReader(`{"model":"m","prompt":"hi","max_tokens":200,"stream":true}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	cancel()
	resp.Body.Close()
	deadline := time.Now().Add(3 * time.Second)
	for !strings.Contains(logs.String(), "the client closed the stream") {
		if time.Now().After(deadline) {
			t.Fatalf("logs:\n%s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if strings.Contains(logs.String(), DiagStreamInterrupted) {
		t.Fatalf("a client abort logged %s:\n%s", DiagStreamInterrupted, logs.String())
	}
}

type syncBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
