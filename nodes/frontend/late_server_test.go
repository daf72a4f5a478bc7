package frontend

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tandemllm/tandem/control/discovery"
	"github.com/tandemllm/tandem/engine/upstream"
	"github.com/tandemllm/tandem/engine/upstream/standin"
	"github.com/tandemllm/tandem/health"
	"github.com/tandemllm/tandem/nodes/worker"
	"github.com/tandemllm/tandem/tokenizer"
)

// TestLateServerContextReachesFrontend: a `tandem worker` (a worker node
// on the gRPC request plane, registered through the file backend as from
// another process) fronts an upstream server that answers only after the
// worker registered. When it answers, the worker publishes the server's
// context in its record, and the frontend node's /v1/models and prompt
// length check follow it, with the worker still routed.
func TestLateServerContextReachesFrontend(t *testing.T) {
	def, err := tokenizer.Default()
	if err != nil {
		t.Fatal(err)
	}
	model := *def
	model.Name = "m.gguf"
	dir := t.TempDir()
	board := health.NewBoard(quiet, nil)
	openFile := func() *discovery.File {
		f, err := discovery.NewFile(discovery.FileConfig{Dir: dir, PollInterval: 10 * time.Millisecond,
			Common: discovery.Common{TTL: time.Second, Board: board, Logger: quiet}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.Close() })
		return f
	}
	cfg := DefaultConfig()
	cfg.HTTPAddr = "127.0.0.1:0"
	fe, err := Start(context.Background(), cfg, &model, Options{Registry: openFile(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fe.Shutdown(context.Background()) })

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lateAddr := lis.Addr().String()
	lis.Close()
	eng, err := upstream.New(context.Background(), upstream.Config{URL: "http://" + lateAddr, API: upstream.APILlamaCpp, Model: model.Name,
		Codec: model.Tokenizer, HealthInterval: -1, MetricsInterval: -1, ConnectInterval: 20 * time.Millisecond, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	wc := worker.DefaultConfig()
	wc.ID, wc.DeregisterDelay, wc.AdvertiseHost = "w-late", 0, "127.0.0.1"
	w, err := worker.Start(context.Background(), wc, eng, &model, worker.Options{Registry: openFile(), Logger: quiet})
	if err != nil {
		_ = eng.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Shutdown(context.Background()) })
	waitFor(t, "the worker's admission", func() bool { return len(fe.Members()) == 1 })
	if got := maxModelLen(t, fe.URL()); got != tokenizer.DefaultContextLength {
		t.Fatalf("/v1/models max_model_len %d before the server answered, want the model's %d", got, tokenizer.DefaultContextLength)
	}

	late, err := standin.StartLlamaCpp(standin.LlamaCppOptions{Model: model.Name, NCtx: 512, Slots: 1, Addr: lateAddr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { late.Close() })
	waitFor(t, "/v1/models to report the late server's context", func() bool { return maxModelLen(t, fe.URL()) == 512 })
	if got := w.Record().ContextLength; got != 512 {
		t.Fatalf("the worker's record carries context %d, want the server's 512", got)
	}
	if got := fe.Members(); len(got) != 1 || got[0] != "w-late" {
		t.Fatalf("members %v after the record changed, want [w-late]", got)
	}
	// The length check follows too: a prompt past 512 tokens is refused.
	body := `{"model":"m.gguf","prompt":"` + strings.Repeat("hello ", 600) + `","max_tokens":1}`
	resp, err := http.Post(fe.URL()+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("a prompt past the late server's context: %s, want 413", resp.Status)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func maxModelLen(t *testing.T, base string) int {
	t.Helper()
	resp, err := http.Get(base + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list struct {
		Data []struct {
			MaxModelLen int `json:"max_model_len"`
		} `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&list); err != nil || len(list.Data) != 1 {
		t.Fatalf("/v1/models: %+v %v", list, err)
	}
	return list.Data[0].MaxModelLen
}
