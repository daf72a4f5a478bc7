package worker

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/tandemllm/tandem/control/discovery"
	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/mocker"
	"github.com/tandemllm/tandem/planes/requestplane"
	"github.com/tandemllm/tandem/tokenizer"
)

func newMocker(t *testing.T, model *tokenizer.Model, events bool) engine.Engine {
	t.Helper()
	cfg := mocker.DefaultConfig()
	cfg.Model = model.Name
	cfg.EOS = model.Tokenizer.EOS()
	cfg.Vocabulary = model.Tokenizer.Encode(mocker.DefaultText)
	cfg.Speedup = 10
	cfg.KVEvents.Enabled = events
	cfg.KVEvents.Endpoint = "tcp://127.0.0.1:0"
	e, err := mocker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestRecordDescribesEngine: the record carries what a frontend routes
// and pairs on.
func TestRecordDescribesEngine(t *testing.T) {
	model, err := tokenizer.Default()
	if err != nil {
		t.Fatal(err)
	}
	for _, events := range []bool{true, false} {
		e := newMocker(t, model, events)
		cfg := DefaultConfig()
		cfg.ID, cfg.Version, cfg.DeregisterDelay = "w1", "v-test", 0
		w, err := Start(context.Background(), cfg, e, model, Options{Registry: discovery.NewMem(), Logger: slog.New(slog.DiscardHandler), InProcess: true})
		if err != nil {
			t.Fatal(err)
		}
		rec := w.Record()
		if err := w.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		info := e.Info()
		if rec.Model != model.Name || rec.Engine != "mocker" || rec.Version != "v-test" ||
			rec.CapacityBlocks != info.KVCapacityTokens/info.BlockSize || rec.KVLayout.BlockSize != info.BlockSize ||
			rec.KVLayout.TokenizerHash != model.Tokenizer.Fingerprint() || rec.KVLayout.EngineLayout != e.(engine.KVPort).KVLayout() {
			t.Fatalf("record %+v does not describe the engine %+v", rec, info)
		}
		if (rec.KVEvents.Endpoint != "") != events || (events && rec.KVEvents.Format != "map") {
			t.Fatalf("events %v: kv_events %+v", events, rec.KVEvents)
		}
	}
}

// TestShutdownDeregistersFirst: on shutdown the record goes before the
// request plane stops, and a stream in flight still finishes.
func TestShutdownDeregistersFirst(t *testing.T) {
	model, err := tokenizer.Default()
	if err != nil {
		t.Fatal(err)
	}
	reg := discovery.NewMem()
	cfg := DefaultConfig()
	cfg.ID, cfg.DeregisterDelay = "w1", 50*time.Millisecond
	log := slog.New(slog.DiscardHandler)
	w, err := Start(context.Background(), cfg, newMocker(t, model, true), model, Options{Registry: reg, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := reg.Records()["w1"]; !ok {
		t.Fatal("not registered")
	}
	c, err := requestplane.Dial(w.Record().RequestPlane)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := c.Generate(context.Background(), &engine.Request{Prompt: model.Tokenizer.Encode("hello there"), MaxTokens: 60, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var order []string
	note := func(s string) { mu.Lock(); order = append(order, s); mu.Unlock() }
	watchCtx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	go func() {
		_ = reg.Watch(watchCtx, func(e discovery.Event) {
			if e.Type == discovery.EventDelete {
				note("deregistered")
			}
		})
	}()
	// grpc.health.v1 on the request plane: SERVING once registered, and
	// NOT_SERVING as soon as the drain starts, while streams still run.
	hw, err := healthpb.NewHealthClient(c.Conn()).Watch(watchCtx, &healthpb.HealthCheckRequest{Service: requestplane.ServiceName})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := hw.Recv(); err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health of a registered worker: %v, %v", r.GetStatus(), err)
	}
	time.Sleep(20 * time.Millisecond)
	shut := make(chan error, 1)
	go func() { shut <- w.Shutdown(context.Background()) }()
	if r, err := hw.Recv(); err != nil || r.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("health of a draining worker: %v, %v", r.GetStatus(), err)
	}
	note("not serving")
	tokens := 0
	for {
		d, err := s.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("in-flight stream cut after %d tokens: %v", tokens, err)
		}
		tokens += len(d.Tokens)
	}
	note("stream finished")
	if err := <-shut; err != nil {
		t.Fatal(err)
	}
	if tokens != 60 {
		t.Fatalf("%d tokens, want 60", tokens)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(order) != 3 || order[2] != "stream finished" || !slices.Contains(order, "deregistered") {
		t.Fatalf("order %v: want deregistration and NOT_SERVING before the stream ends", order)
	}
	// The frontend retries exactly this error elsewhere.
	if _, err := c.Generate(context.Background(), &engine.Request{Prompt: []engine.Token{1, 2}, MaxTokens: 1}); !errors.Is(err, requestplane.ErrUnavailable) {
		t.Fatalf("a stopped worker answered %v, want ErrUnavailable", err)
	}
}
