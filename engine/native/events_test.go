package native

import (
	"context"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/kvcache"
	"github.com/tandemllm/tandem/planes/kvevents"
)

// TestKVEventsLikeTheMocker: with KV events on, the native engine publishes
// vLLM's wire format over ZMQ, and its BlockStored hashes are vLLM's
// sha256_cbor chain over the prompt's full blocks, the same hashes the
// mocker publishes for the same tokens.
func TestKVEventsLikeTheMocker(t *testing.T) {
	m := tinyModel(t, nil)
	e := newEngine(t, m, Options{KVEvents: kvevents.EngineConfig{Enabled: true, Endpoint: "tcp://127.0.0.1:0", Format: kvevents.FormatMap}})
	if e.KVEventsEndpoint() == "" {
		t.Fatal("no endpoint bound")
	}
	ctx, cancel := context.WithCancel(context.Background())
	sub := zmq4.NewSub(ctx)
	t.Cleanup(func() { cancel(); sub.Close() })
	if err := sub.Dial(e.KVEventsEndpoint()); err != nil {
		t.Fatal(err)
	}
	if err := sub.SetOption(zmq4.OptionSubscribe, ""); err != nil {
		t.Fatal(err)
	}
	msgs := make(chan zmq4.Msg, 64)
	go func() {
		for {
			msg, err := sub.Recv()
			if err != nil {
				return
			}
			msgs <- msg
		}
	}()
	// ZMQ drops what a subscriber was not yet connected for: probe first.
	joined := false
	for deadline := time.Now().Add(5 * time.Second); !joined && time.Now().Before(deadline); {
		e.events.Publish([]byte("probe"))
		select {
		case <-msgs:
			joined = true
		case <-time.After(20 * time.Millisecond):
		}
	}
	if !joined {
		t.Fatal("subscriber never joined")
	}
	time.Sleep(50 * time.Millisecond)
	for len(msgs) > 0 {
		<-msgs
	}

	prompt := make([]engine.Token, 40) // two full blocks of 16
	for i := range prompt {
		prompt[i] = engine.Token(3 + i)
	}
	s, err := e.Generate(context.Background(), &engine.Request{Prompt: prompt, MaxTokens: 1})
	if err != nil {
		t.Fatal(err)
	}
	collect(t, s)

	h := kvevents.NewVLLMHasher("")
	var want []uint64
	var parent kvcache.BlockHash
	for b := 0; b < 2; b++ {
		parent = h.Hash(parent, prompt[16*b:16*(b+1)])
		want = append(want, parent.Uint64())
	}
	var got []uint64
	for len(got) < 2 {
		select {
		case msg := <-msgs:
			batch, err := kvevents.DecodeBatch(msg.Frames[2])
			if err != nil {
				t.Fatalf("undecodable batch: %v", err)
			}
			for _, ev := range batch.Events {
				if ev.Type == kvevents.TypeBlockStored {
					for _, bh := range ev.BlockHashes {
						got = append(got, bh.V)
					}
				}
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("BlockStored for %v never arrived (got %v)", want, got)
		}
	}
	if got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("hashes %v, want vLLM's %v", got, want)
	}
}
