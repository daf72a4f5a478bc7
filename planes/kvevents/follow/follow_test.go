package follow

import (
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandemllm/tandem/planes/kvevents"
	"github.com/tandemllm/tandem/planes/kvevents/event"
)

// recorder is a worker's handler: the batches' sequence numbers and the
// stream states, in order.
type recorder struct {
	mu     sync.Mutex
	seqs   []uint64
	states []event.StreamState
}

func (r *recorder) HandleBatch(seq uint64, _ *event.Batch) {
	r.mu.Lock()
	r.seqs = append(r.seqs, seq)
	r.mu.Unlock()
}

func (r *recorder) HandleState(s event.StreamStatus) {
	r.mu.Lock()
	r.states = append(r.states, s.State)
	r.mu.Unlock()
}

func (r *recorder) live() (bool, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.states {
		if s == event.StreamLive {
			return true, len(r.seqs)
		}
	}
	return false, len(r.seqs)
}

func batch() *kvevents.Batch {
	return &kvevents.Batch{Events: []kvevents.Event{{Type: kvevents.TypeBlockStored, BlockHashes: []kvevents.Hash{kvevents.IntHash(1)}, BlockSize: 16}}}
}

// TestFollowFeedsHandler: a followed worker's batches and its stream going
// live reach its handler, over a real PUB socket (Follow) and over the
// bound socket (Bind, a topic:NAME endpoint); stop ends the feed.
func TestFollowFeedsHandler(t *testing.T) {
	tests := []struct {
		name  string
		bound bool
	}{{"pub socket", false}, {"bound socket", true}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Config{Registerer: prometheus.NewRegistry(), DialTimeout: time.Second}
			if tt.bound {
				cfg.Bind = "tcp://127.0.0.1:0"
			}
			f, err := New(t.Context(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(f.Close)
			pcfg := kvevents.PublisherConfig{Endpoint: "tcp://127.0.0.1:0"}
			if tt.bound {
				pcfg = kvevents.PublisherConfig{Endpoint: f.Listener().Endpoint(), Dial: true, Topic: "w0"}
			}
			p, err := kvevents.NewPublisher(t.Context(), pcfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Close() })
			ep := p.Endpoint()
			if tt.bound {
				ep = BoundPrefix + "w0"
			}
			rec := &recorder{}
			stop, err := f.Follow("w0", ep, "", rec)
			if err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(10 * time.Second)
			for {
				// Published until one lands: a fresh subscription misses
				// what comes before it takes effect (ZMQ's slow joiner).
				p.PublishBatch(batch(), kvevents.FormatMap)
				if live, n := rec.live(); live && n > 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no live stream: %+v", rec)
				}
				time.Sleep(20 * time.Millisecond)
			}
			stop()
			_, n := rec.live()
			p.PublishBatch(batch(), kvevents.FormatMap)
			time.Sleep(50 * time.Millisecond)
			if _, m := rec.live(); m != n {
				t.Errorf("handler fed after stop: %d batches, then %d", n, m)
			}
		})
	}
}

// TestFollowRefuses: a topic endpoint needs a bound socket, and an empty
// endpoint is no stream.
func TestFollowRefuses(t *testing.T) {
	f, err := New(t.Context(), Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, ep := range []string{BoundPrefix + "a", ""} {
		if _, err := f.Follow("w", ep, "", &recorder{}); err == nil {
			t.Errorf("endpoint %q accepted", ep)
		}
	}
}
