package mocker

import (
	"bytes"
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/kvcache"
	"github.com/tandemllm/tandem/planes/kvevents"
)

// The §1.8 block hashes of tokens 1..8 in blocks of 4 under sha256_cbor.
const (
	h0 = 9561501211280363793
	h1 = 15292913576410714033
)

type subscriber struct {
	t  *testing.T
	ch chan zmq4.Msg
}

// subscribe joins a worker's PUB socket, publishing probes until one
// arrives (ZMQ drops what a subscriber was not yet connected for).
func subscribe(t *testing.T, e *Engine) *subscriber {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	sub := zmq4.NewSub(ctx)
	t.Cleanup(func() { cancel(); sub.Close() })
	if err := sub.Dial(e.KVEventsEndpoint()); err != nil {
		t.Fatal(err)
	}
	if err := sub.SetOption(zmq4.OptionSubscribe, ""); err != nil {
		t.Fatal(err)
	}
	s := &subscriber{t: t, ch: make(chan zmq4.Msg, 1024)}
	go func() {
		for {
			m, err := sub.Recv()
			if err != nil {
				close(s.ch)
				return
			}
			s.ch <- m
		}
	}()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(5 * time.Second)
	var probes uint64 // accepted probes; the worker is idle, so they take seqs 0..probes-1
	for {
		select {
		case m := <-s.ch:
			// Drain the probes still queued or in flight, so the caller's
			// first message is its own.
			for binary.BigEndian.Uint64(m.Frames[1]) != probes-1 {
				m = <-s.ch
			}
			return s
		case <-tick.C:
			if e.pub.Publish([]byte("probe")) {
				probes++
			}
		case <-deadline:
			t.Fatal("subscriber never joined")
		}
	}
}

func (s *subscriber) next() ([]byte, *kvevents.Batch) {
	s.t.Helper()
	select {
	case m := <-s.ch:
		b, err := kvevents.DecodeBatch(m.Frames[2])
		if err != nil {
			s.t.Fatalf("payload does not decode: %v", err)
		}
		return m.Frames[2], b
	case <-time.After(5 * time.Second):
		s.t.Fatal("no event batch")
	}
	return nil, nil
}

func TestKVEventsAreVLLMBytes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		format kvevents.Format
		shape  func(*kvevents.Event)
	}{
		{"map", kvevents.FormatMap, func(e *kvevents.Event) {
			e.GroupIdx = kvevents.Int(0)
			if e.Type == kvevents.TypeBlockStored {
				e.ExtraKeys = make([][]byte, len(e.BlockHashes))
				e.KVCacheSpecKind = "full_attention"
			}
		}},
		{"array", kvevents.FormatArray, func(*kvevents.Event) {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Three blocks of 4: the first request's two full blocks fill
			// most of it, the second request evicts them.
			e := newTest(t, Config{Instant: true, BlockSize: 4, NumBlocks: 3, KVEvents: KVEventsConfig{
				Enabled: true, Format: tc.format, Endpoint: "tcp://127.0.0.1:0"}})
			sub := subscribe(t, e)

			generate(t, e, &engine.Request{Prompt: []engine.Token{1, 2, 3, 4, 5, 6, 7, 8, 9}, MaxTokens: 1})
			payload, got := sub.next()
			stored := kvevents.Event{Type: kvevents.TypeBlockStored,
				BlockHashes: []kvevents.Hash{kvevents.IntHash(h0), kvevents.IntHash(h1)},
				TokenIDs:    []int32{1, 2, 3, 4, 5, 6, 7, 8}, BlockSize: 4, Medium: "GPU"}
			tc.shape(&stored)
			want := &kvevents.Batch{TS: got.TS, DataParallelRank: kvevents.Int(0), Events: []kvevents.Event{stored}}
			if wb := kvevents.EncodeBatch(want, tc.format); !bytes.Equal(payload, wb) {
				t.Fatalf("BlockStored batch\n got %x\nwant %x", payload, wb)
			}

			// 11 new tokens need all three blocks: the two cached ones are
			// evicted, tail first, each in its own BlockRemoved, and the new
			// prompt's full blocks are stored in the same step's batch.
			generate(t, e, &engine.Request{Prompt: prompt(50, 11), MaxTokens: 1})
			payload, got = sub.next()
			var wantEvents []kvevents.Event
			for _, h := range []uint64{h1, h0} {
				ev := kvevents.Event{Type: kvevents.TypeBlockRemoved, BlockHashes: []kvevents.Hash{kvevents.IntHash(h)}, Medium: "GPU"}
				tc.shape(&ev)
				wantEvents = append(wantEvents, ev)
			}
			hasher := kvevents.NewVLLMHasher("")
			n0 := hasher.Hash(kvcache.BlockHash{}, prompt(50, 4))
			n1 := hasher.Hash(n0, prompt(54, 4))
			stored = kvevents.Event{Type: kvevents.TypeBlockStored,
				BlockHashes: []kvevents.Hash{kvevents.IntHash(n0.Uint64()), kvevents.IntHash(n1.Uint64())},
				TokenIDs:    prompt(50, 8), BlockSize: 4, Medium: "GPU"}
			tc.shape(&stored)
			want = &kvevents.Batch{TS: got.TS, DataParallelRank: kvevents.Int(0), Events: append(wantEvents, stored)}
			if wb := kvevents.EncodeBatch(want, tc.format); !bytes.Equal(payload, wb) {
				t.Fatalf("eviction batch\n got %x\nwant %x", payload, wb)
			}

			if err := e.ResetPrefixCache(context.Background()); err != nil {
				t.Fatal(err)
			}
			_, got = sub.next()
			if len(got.Events) != 1 || got.Events[0].Type != kvevents.TypeAllBlocksCleared {
				t.Fatalf("reset: %+v", got.Events)
			}
		})
	}
}

func TestKVEventsBytesHashesAndReplay(t *testing.T) {
	e := newTest(t, Config{Instant: true, BlockSize: 4, KVEvents: KVEventsConfig{
		Enabled: true, BytesHashes: true, Topic: "kv-events", ReplayAuth: true,
		Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0"}})
	sub := subscribe(t, e)
	first := e.PublisherStats().Published
	generate(t, e, &engine.Request{Prompt: []engine.Token{1, 2, 3, 4, 5, 6, 7, 8, 9}, MaxTokens: 1})
	payload, got := sub.next()
	ev := got.Events[0]
	if len(ev.BlockHashes) != 2 || len(ev.BlockHashes[0].Bytes) != 32 || ev.BlockHashes[0].V != h0 || ev.BlockHashes[1].V != h1 {
		t.Fatalf("bytes hashes: %+v", ev.BlockHashes)
	}

	// A subscriber that missed the batch gets it back byte for byte, if
	// it presents the replay token (events with token ids carry prompts).
	tok := e.KVEventsReplayToken()
	if len(tok) == 0 {
		t.Fatal("events with token ids and no replay token")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dealer := zmq4.NewDealer(ctx)
	defer dealer.Close()
	if err := dealer.Dial(e.KVEventsReplayEndpoint()); err != nil {
		t.Fatal(err)
	}
	if err := dealer.SendMulti(zmq4.NewMsgFrom([]byte{}, binary.BigEndian.AppendUint64(nil, first), tok)); err != nil {
		t.Fatal(err)
	}
	m, err := dealer.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Frames) != 4 || string(m.Frames[1]) != "kv-events" ||
		binary.BigEndian.Uint64(m.Frames[2]) != first || !bytes.Equal(m.Frames[3], payload) {
		t.Fatalf("replayed frames %q", m.Frames)
	}
	if m, err = dealer.Recv(); err != nil || binary.BigEndian.Uint64(m.Frames[2]) != kvevents.EndSeq {
		t.Fatalf("end marker %q %v", m.Frames, err)
	}
}

func TestKVEventsOff(t *testing.T) {
	e := newTest(t, Config{Instant: true, KVEvents: KVEventsConfig{Enabled: false, Endpoint: "tcp://127.0.0.1:0"}})
	generate(t, e, &engine.Request{Prompt: prompt(0, 100), MaxTokens: 3})
	if e.KVEventsEndpoint() != "" || e.pub != nil || e.PublisherStats() != (kvevents.PublisherStats{}) {
		t.Fatal("a worker with events off has a publisher")
	}
}
