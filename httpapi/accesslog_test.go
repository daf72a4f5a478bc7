package httpapi

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandemllm/tandem/dispatch"
	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/enginetest"
	"github.com/tandemllm/tandem/health"
	"github.com/tandemllm/tandem/router"
	"github.com/tandemllm/tandem/tokenizer"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestAccessLog: a served request and a refused one each leave one info
// line with the request's id, model, worker, status, tokens, cached, TTFT
// and duration; NoAccessLog leaves none.
func TestAccessLog(t *testing.T) {
	for _, off := range []bool{false, true} {
		var logs lockedBuffer
		log := slog.New(slog.NewTextHandler(&logs, nil))
		reg := prometheus.NewRegistry()
		r := router.New(&router.RoundRobin{}, reg)
		cfg := DefaultConfig()
		cfg.NoAccessLog = off
		board := health.NewBoard(log, reg)
		s := New(cfg, dispatch.New(dispatch.DefaultConfig(), r, board, reg, log), board, reg, log)
		s.AddModel(&tokenizer.Model{Name: "m", Tokenizer: byteTok{}, Template: chatML{}, ContextLength: 4096})
		eng := &enginetest.Scripted{Name: "m", Output: toks("Hello there"), EOS: []engine.Token{tokEnd}, Cached: 4}
		r.AddWorker(router.Worker{ID: "w7", Model: "m", Gen: eng, Info: engine.Info{Kind: "scripted"}})
		hs := httptest.NewServer(s.Handler())
		post := func(body string) int {
			resp, err := http.Post(hs.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp.StatusCode
		}
		if code := post(`{"model":"m","max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`); code != 200 {
			t.Fatalf("status %d", code)
		}
		if code := post(`{"model":"m","max_tokens":100000,"messages":[{"role":"user","content":"hi"}]}`); code != 400 {
			t.Fatalf("status %d", code)
		}
		hs.Close()
		var lines []string
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "msg=request ") {
				lines = append(lines, l)
			}
		}
		if off {
			if len(lines) != 0 {
				t.Fatalf("access log off, yet:\n%s", strings.Join(lines, "\n"))
			}
			continue
		}
		if len(lines) != 2 {
			t.Fatalf("want 2 access lines, got:\n%s", logs.String())
		}
		for _, w := range []string{"level=INFO", "endpoint=chat", "model=m", "worker=w7", "status=200", "completion_tokens=3", "cached_tokens=4", "ttft=", "finish=length", "duration="} {
			if !strings.Contains(lines[0], w) {
				t.Errorf("served line lacks %q: %s", w, lines[0])
			}
		}
		if !strings.Contains(lines[0], "prompt_tokens=") || strings.Contains(lines[0], "request_id=\"\"") {
			t.Errorf("served line: %s", lines[0])
		}
		if !strings.Contains(lines[1], "status=400") || !strings.Contains(lines[1], "model=m") {
			t.Errorf("refused line: %s", lines[1])
		}
	}
}
