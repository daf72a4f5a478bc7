package kvevents

import (
	"context"
	"encoding/binary"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// recorder is a Handler that keeps what it saw.
type recorder struct {
	mu     sync.Mutex
	order  []int64 // seqs, and -1 for every reset
	seqs   []uint64
	ts     []float64
	states []StreamStatus
	notify chan struct{}
}

func newRecorder() *recorder { return &recorder{notify: make(chan struct{}, 1)} }

func (r *recorder) HandleBatch(seq uint64, b *Batch) {
	r.mu.Lock()
	r.seqs = append(r.seqs, seq)
	r.order = append(r.order, int64(seq))
	r.ts = append(r.ts, b.TS)
	r.mu.Unlock()
	r.poke()
}

func (r *recorder) HandleState(s StreamStatus) {
	r.mu.Lock()
	r.states = append(r.states, s)
	if s.State == StreamReset {
		r.order = append(r.order, -1)
	}
	r.mu.Unlock()
	r.poke()
}

func (r *recorder) poke() {
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

func (r *recorder) snapshot() ([]uint64, []float64, []StreamStatus) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.seqs), slices.Clone(r.ts), slices.Clone(r.states)
}

// waitFor polls cond after every callback, failing after 10 s.
func (r *recorder) waitFor(t *testing.T, what string, cond func(seqs []uint64, states []StreamStatus) bool) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		seqs, _, states := r.snapshot()
		if cond(seqs, states) {
			return
		}
		select {
		case <-r.notify:
		case <-time.After(20 * time.Millisecond):
		case <-deadline:
			t.Fatalf("timed out waiting for %s; seqs %v states %v", what, seqs, stateNames(states))
		}
	}
}

func stateNames(ss []StreamStatus) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.State.String())
	}
	return out
}

func hasState(states []StreamStatus, st StreamState) bool {
	return slices.ContainsFunc(states, func(s StreamStatus) bool { return s.State == st })
}

// liveStatus is the first StreamLive status.
func liveStatus(states []StreamStatus) StreamStatus {
	for _, s := range states {
		if s.State == StreamLive {
			return s
		}
	}
	return StreamStatus{}
}

func countState(states []StreamStatus, st StreamState) int {
	n := 0
	for _, s := range states {
		if s.State == st {
			n++
		}
	}
	return n
}

func seqRange(a, b uint64) []uint64 {
	var out []uint64
	for i := a; i < b; i++ {
		out = append(out, i)
	}
	return out
}

func payloadTS(ts float64) []byte {
	return EncodeBatch(&Batch{TS: ts, Events: []Event{{Type: TypeAllBlocksCleared}}}, FormatMap)
}

func startSubscriber(t *testing.T, ctx context.Context, cfg SubscriberConfig) *recorder {
	t.Helper()
	rec := newRecorder()
	cfg.Handler = rec
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	cfg.MinBackoff, cfg.MaxBackoff = 5*time.Millisecond, 50*time.Millisecond
	s, err := NewSubscriber(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return rec
}

// TestSubscriberWithPublisher: batches published before the subscriber
// exists arrive through the catch-up replay, later ones live, all in order.
func TestSubscriberWithPublisher(t *testing.T) {
	ctx := t.Context()
	p, err := NewPublisher(ctx, PublisherConfig{Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0",
		Topic: "kv-events", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	for i := range 5 {
		p.Publish(payloadTS(float64(i)))
	}
	for p.Stats().Published < 5 {
		time.Sleep(time.Millisecond)
	}
	reg := prometheus.NewRegistry()
	m, err := NewSubscriberMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	rec := startSubscriber(t, ctx, SubscriberConfig{Worker: "w0", Endpoint: p.Endpoint(), ReplayEndpoint: p.ReplayEndpoint(),
		Topic: "kv-events", Metrics: m})
	rec.waitFor(t, "catch-up", func(seqs []uint64, _ []StreamStatus) bool { return len(seqs) == 5 })
	// Keep publishing until one arrives live (the subscription may take a
	// moment to reach the publisher; seq gaps are replayed meanwhile).
	deadline := time.Now().Add(10 * time.Second)
	want := uint64(5)
	for ; ; want++ {
		_, _, states := rec.snapshot()
		if hasState(states, StreamLive) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("never live")
		}
		p.Publish(payloadTS(float64(want)))
		time.Sleep(5 * time.Millisecond)
	}
	rec.waitFor(t, "all batches", func(seqs []uint64, _ []StreamStatus) bool { return uint64(len(seqs)) == want })
	seqs, ts, states := rec.snapshot()
	if !slices.Equal(seqs, seqRange(0, want)) {
		t.Fatalf("seqs %v", seqs)
	}
	if st := liveStatus(states); st.MidStream {
		t.Fatalf("the stream was replayed from seq 0, yet live reports mid-stream: %+v", st)
	}
	for i, v := range ts {
		if v != float64(i) {
			t.Fatalf("batch %d has ts %v", i, v)
		}
	}
	if hasState(states, StreamLoss) || hasState(states, StreamReset) {
		t.Fatalf("states %v", stateNames(states))
	}
	if got := testutil.ToFloat64(m.messages.WithLabelValues("w0", "applied")); uint64(got) != want {
		t.Fatalf("applied metric %v, want %d", got, want)
	}
}

// fakePublisher is a PUB and a ROUTER driven by the test, to produce gaps,
// losses, restarts and corrupt frames on demand.
type fakePublisher struct {
	t      *testing.T
	ctx    context.Context
	cancel context.CancelFunc
	pub    zmq4.Socket
	router zmq4.Socket
	legacy bool

	mu     sync.Mutex
	buffer map[uint64][]byte // what replay can serve
	served []uint64          // replay requests' start seqs
	wg     sync.WaitGroup
}

func newFakePublisher(t *testing.T, pubEP, routerEP string, legacy bool) *fakePublisher {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	f := &fakePublisher{t: t, ctx: ctx, cancel: cancel, legacy: legacy, buffer: map[uint64][]byte{}}
	f.pub = zmq4.NewPub(ctx)
	if err := f.pub.Listen(pubEP); err != nil {
		t.Fatal(err)
	}
	f.router = zmq4.NewRouter(ctx)
	if err := f.router.Listen(routerEP); err != nil {
		t.Fatal(err)
	}
	f.wg.Add(1)
	go f.serve()
	t.Cleanup(f.close)
	return f
}

func (f *fakePublisher) close() {
	f.cancel()
	f.pub.Close()
	f.router.Close()
	f.wg.Wait()
}

func (f *fakePublisher) endpoints() (string, string) {
	return endpointOf(f.pub, ""), endpointOf(f.router, "")
}

func (f *fakePublisher) serve() {
	defer f.wg.Done()
	for {
		msg, err := f.router.Recv()
		if err != nil {
			return
		}
		if len(msg.Frames) != 3 || len(msg.Frames[2]) != 8 {
			continue
		}
		id, start := msg.Frames[0], binary.BigEndian.Uint64(msg.Frames[2])
		f.mu.Lock()
		f.served = append(f.served, start)
		var seqs []uint64
		for s := range f.buffer {
			if s >= start {
				seqs = append(seqs, s)
			}
		}
		slices.Sort(seqs)
		var replies []zmq4.Msg
		for _, s := range seqs {
			if f.legacy {
				replies = append(replies, zmq4.NewMsgFrom(id, nil, be8(s), f.buffer[s]))
			} else {
				replies = append(replies, zmq4.NewMsgFrom(id, nil, []byte("t"), be8(s), f.buffer[s]))
			}
		}
		f.mu.Unlock()
		for _, r := range replies {
			_ = f.router.SendMulti(r)
		}
		if f.legacy {
			_ = f.router.SendMulti(zmq4.NewMsgFrom(id, nil, be8(EndSeq), nil))
		} else {
			_ = f.router.SendMulti(zmq4.NewMsgFrom(id, nil, nil, be8(EndSeq), nil))
		}
	}
}

// buffered makes seq available to replay without publishing it.
func (f *fakePublisher) buffered(seq uint64, payload []byte) {
	f.mu.Lock()
	f.buffer[seq] = payload
	f.mu.Unlock()
}

func (f *fakePublisher) forget(seq uint64) {
	f.mu.Lock()
	delete(f.buffer, seq)
	f.mu.Unlock()
}

// publishUntilLive publishes from seq on, one batch every 5 ms, until the
// subscriber reports StreamLive (the subscription may take a moment to
// reach the publisher), and returns the last seq published.
func (f *fakePublisher) publishUntilLive(t *testing.T, rec *recorder, seq uint64) uint64 {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for ; ; seq++ {
		f.publish(seq, payloadTS(float64(seq)))
		if _, _, st := rec.snapshot(); hasState(st, StreamLive) {
			return seq
		}
		if time.Now().After(deadline) {
			t.Fatal("never live")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// publish sends seq live and buffers it for replay.
func (f *fakePublisher) publish(seq uint64, payload []byte) {
	f.buffered(seq, payload)
	f.send(zmq4.NewMsgFrom([]byte("t"), be8(seq), payload))
}

func (f *fakePublisher) send(m zmq4.Msg) {
	if err := f.pub.SendMulti(m); err != nil {
		f.t.Error(err)
	}
}

// untilLive publishes fresh batches from seq on until the subscriber reports
// live, and returns the next unused seq.
func (f *fakePublisher) untilLive(rec *recorder, seq uint64) uint64 {
	f.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, _, states := rec.snapshot()
		if hasState(states, StreamLive) {
			return seq
		}
		if time.Now().After(deadline) {
			f.t.Fatal("never live")
		}
		f.publish(seq, payloadTS(float64(seq)))
		seq++
		time.Sleep(5 * time.Millisecond)
	}
}

func TestSubscriberRecovery(t *testing.T) {
	tests := []struct {
		name   string
		legacy bool
		run    func(t *testing.T, f *fakePublisher, rec *recorder, next uint64)
	}{
		{"gap replayed", false, func(t *testing.T, f *fakePublisher, rec *recorder, next uint64) {
			f.buffered(next, payloadTS(float64(next)))
			f.buffered(next+1, payloadTS(float64(next+1)))
			f.publish(next+2, payloadTS(float64(next+2))) // next, next+1 "lost" live
			rec.waitFor(t, "gap filled", func(seqs []uint64, _ []StreamStatus) bool { return len(seqs) == int(next+3) })
			seqs, _, states := rec.snapshot()
			if !slices.Equal(seqs, seqRange(0, next+3)) || hasState(states, StreamLoss) {
				t.Fatalf("seqs %v states %v", seqs, stateNames(states))
			}
		}},
		{"gap replayed, legacy replay layout", true, func(t *testing.T, f *fakePublisher, rec *recorder, next uint64) {
			f.buffered(next, payloadTS(float64(next)))
			f.publish(next+1, payloadTS(float64(next+1)))
			rec.waitFor(t, "gap filled", func(seqs []uint64, _ []StreamStatus) bool { return len(seqs) == int(next+2) })
			if seqs, _, _ := rec.snapshot(); !slices.Equal(seqs, seqRange(0, next+2)) {
				t.Fatalf("seqs %v", seqs)
			}
		}},
		{"gap no longer buffered is a loss", false, func(t *testing.T, f *fakePublisher, rec *recorder, next uint64) {
			f.buffered(next+1, payloadTS(float64(next+1))) // next is gone for good
			f.publish(next+2, payloadTS(float64(next+2)))
			rec.waitFor(t, "loss", func(_ []uint64, states []StreamStatus) bool { return hasState(states, StreamLoss) })
			rec.waitFor(t, "rest", func(seqs []uint64, _ []StreamStatus) bool { return len(seqs) == int(next+2) })
			seqs, _, states := rec.snapshot()
			if !slices.Equal(seqs, append(seqRange(0, next), next+1, next+2)) {
				t.Fatalf("seqs %v", seqs)
			}
			for _, s := range states {
				if s.State == StreamLoss && (s.Lost != 1 || s.Seq != next+1) {
					t.Fatalf("loss %+v", s)
				}
			}
		}},
		{"corrupt frames are skipped", false, func(t *testing.T, f *fakePublisher, rec *recorder, next uint64) {
			f.send(zmq4.NewMsgFrom([]byte("t"), []byte{1, 2, 3}, []byte("x")))        // short seq
			f.send(zmq4.NewMsgFrom([]byte("t"), be8(next)))                           // 2 frames
			f.send(zmq4.NewMsgFrom([]byte("t"), be8(next), []byte{0xc1, 0xff, 0x00})) // undecodable
			f.publish(next+1, payloadTS(float64(next+1)))
			rec.waitFor(t, "after corruption", func(seqs []uint64, _ []StreamStatus) bool {
				return len(seqs) > 0 && seqs[len(seqs)-1] == next+1
			})
			seqs, _, states := rec.snapshot()
			if !slices.Equal(seqs, append(seqRange(0, next), next+1)) {
				t.Fatalf("seqs %v", seqs)
			}
			if n := countState(states, StreamLoss); n != 1 {
				t.Fatalf("%d losses for one undecodable payload: %v", n, stateNames(states))
			}
		}},
		{"publisher restart resets", false, func(t *testing.T, f *fakePublisher, rec *recorder, next uint64) {
			pubEP, routerEP := f.endpoints()
			f.close()
			g := newFakePublisher(t, pubEP, routerEP, false)
			// The new publisher already sent 2 batches; seq next-1 exists but
			// holds other content.
			for s := range next {
				g.buffered(s, payloadTS(1000+float64(s)))
			}
			rec.waitFor(t, "reset and refetch", func(seqs []uint64, states []StreamStatus) bool {
				return hasState(states, StreamReset) && len(seqs) == int(2*next)
			})
			_, ts, _ := rec.snapshot()
			for i := range next {
				if ts[next+i] != 1000+float64(i) {
					t.Fatalf("after reset got ts %v", ts[next:])
				}
			}
		}},
		{"reconnect to the same publisher continues", false, func(t *testing.T, f *fakePublisher, rec *recorder, next uint64) {
			pubEP, routerEP := f.endpoints()
			saved := map[uint64][]byte{}
			f.mu.Lock()
			for k, v := range f.buffer {
				saved[k] = v
			}
			f.mu.Unlock()
			f.close()
			g := newFakePublisher(t, pubEP, routerEP, false)
			for k, v := range saved {
				g.buffered(k, v)
			}
			g.buffered(next, payloadTS(float64(next))) // published while we were away
			rec.waitFor(t, "continued", func(seqs []uint64, _ []StreamStatus) bool { return len(seqs) == int(next+1) })
			seqs, _, states := rec.snapshot()
			if hasState(states, StreamReset) || hasState(states, StreamLoss) || !slices.Equal(seqs, seqRange(0, next+1)) {
				t.Fatalf("seqs %v states %v", seqs, stateNames(states))
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakePublisher(t, "tcp://127.0.0.1:0", "tcp://127.0.0.1:0", tc.legacy)
			pubEP, routerEP := f.endpoints()
			rec := startSubscriber(t, t.Context(), SubscriberConfig{Worker: "w", Endpoint: pubEP, ReplayEndpoint: routerEP, Topic: "t"})
			next := f.untilLive(rec, 0)
			rec.waitFor(t, "warm-up", func(seqs []uint64, _ []StreamStatus) bool { return len(seqs) == int(next) })
			tc.run(t, f, rec, next)
		})
	}
}

// TestSubscriberWithoutReplay: with no replay socket, a new subscription
// starts clean at whatever seq the publisher is at (a frontend or worker
// restart is not a loss: finding 5 of issue 12), and a later gap is a
// loss, never silent.
func TestSubscriberWithoutReplay(t *testing.T) {
	f := newFakePublisher(t, "tcp://127.0.0.1:0", "tcp://127.0.0.1:0", false)
	pubEP, _ := f.endpoints()
	rec := startSubscriber(t, t.Context(), SubscriberConfig{Worker: "w", Endpoint: pubEP, Topic: "t"})
	s := f.publishUntilLive(t, rec, 3)
	_, _, states := rec.snapshot()
	if hasState(states, StreamLoss) {
		t.Fatalf("a new subscription reported a loss: %v", stateNames(states))
	}
	// Batches 0..2 were never seen: the consumer is told its view starts
	// mid-stream (the router routes by approximation beside it a while).
	if st := liveStatus(states); !st.MidStream {
		t.Fatalf("first live batch %d of a new subscription without replay: MidStream not set", st.Seq)
	}
	f.publish(s+2, payloadTS(float64(s+2))) // s+1 never arrives
	rec.waitFor(t, "loss", func(_ []uint64, st []StreamStatus) bool { return hasState(st, StreamLoss) })
}

// TestSubscriberTopicFilter: a ZMQ subscription to "t" also receives
// "t2" (prefix match); those messages, another stream's sequence, are
// ignored, not read as a gap.
func TestSubscriberTopicFilter(t *testing.T) {
	f := newFakePublisher(t, "tcp://127.0.0.1:0", "tcp://127.0.0.1:0", false)
	pubEP, _ := f.endpoints()
	rec := startSubscriber(t, t.Context(), SubscriberConfig{Worker: "w", Endpoint: pubEP, Topic: "t"})
	s := uint64(1)
	for ; ; s++ {
		f.publish(s, payloadTS(float64(s)))
		if _, _, st := rec.snapshot(); hasState(st, StreamLive) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	f.send(zmq4.NewMsgFrom([]byte("t2"), be8(1000), payloadTS(1000)))
	f.send(zmq4.NewMsgFrom([]byte("t-other"), be8(0), payloadTS(1001)))
	f.publish(s+1, payloadTS(float64(s+1)))
	rec.waitFor(t, "the next batch", func(seqs []uint64, _ []StreamStatus) bool {
		return len(seqs) > 0 && seqs[len(seqs)-1] == s+1
	})
	seqs, ts, states := rec.snapshot()
	if hasState(states, StreamLoss) || hasState(states, StreamReset) || slices.Contains(ts, 1000) || slices.Contains(ts, 1001) {
		t.Fatalf("another topic's messages were taken: seqs %v ts %v states %v", seqs, ts, stateNames(states))
	}
}

func TestSubscriberConfigErrors(t *testing.T) {
	for _, cfg := range []SubscriberConfig{{Handler: newRecorder()}, {Endpoint: "tcp://127.0.0.1:1"}} {
		if _, err := NewSubscriber(cfg); err == nil {
			t.Fatalf("%+v: no error", cfg)
		}
	}
}

// FuzzSubscriberFrames feeds arbitrary frames to the live path. It must never
// panic, and batches must come out in strictly increasing sequence.
func FuzzSubscriberFrames(f *testing.F) {
	f.Add([]byte{3, 1, 't', 8, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0x92, 0xcb, 0, 0})
	f.Add(append([]byte{3, 1, 't', 8, 0, 0, 0, 0, 0, 0, 0, 1, byte(len(payloadTS(1)))}, payloadTS(1)...))
	f.Add([]byte{2, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8})
	f.Fuzz(func(t *testing.T, data []byte) {
		rec := newRecorder()
		s, err := NewSubscriber(SubscriberConfig{Worker: "fuzz", Endpoint: "tcp://127.0.0.1:1", Handler: rec, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		// data is a sequence of messages: count, then length-prefixed frames.
		for len(data) > 0 {
			n := int(data[0] % 5)
			data = data[1:]
			var frames [][]byte
			for range n {
				if len(data) == 0 {
					break
				}
				l := min(int(data[0]), len(data)-1)
				frames = append(frames, data[1:1+l])
				data = data[1+l:]
			}
			s.onLive(context.Background(), frames)
		}
		rec.mu.Lock()
		defer rec.mu.Unlock()
		prev := int64(-1)
		for _, v := range rec.order {
			if v >= 0 && v <= prev {
				t.Fatalf("out of order: %v", rec.order)
			}
			prev = v
		}
	})
}

// TestSubscriberRefillsSlowJoinerWindow: batches published after the
// subscription's first catch-up but before it took effect (ZMQ's slow
// joiner drops them) are asked for again at the first live batch, so the
// stream is complete from seq 0 and not reported as mid-stream.
func TestSubscriberRefillsSlowJoinerWindow(t *testing.T) {
	f := newFakePublisher(t, "tcp://127.0.0.1:0", "tcp://127.0.0.1:0", false)
	pubEP, replayEP := f.endpoints()
	rec := startSubscriber(t, t.Context(), SubscriberConfig{Worker: "w", Endpoint: pubEP, ReplayEndpoint: replayEP, Topic: "t"})
	rec.waitFor(t, "synced", func(_ []uint64, st []StreamStatus) bool { return hasState(st, StreamSynced) })
	for s := range uint64(3) {
		f.buffered(s, payloadTS(float64(s))) // published, never seen live
	}
	s := f.publishUntilLive(t, rec, 3)
	rec.waitFor(t, "every batch", func(seqs []uint64, _ []StreamStatus) bool { return uint64(len(seqs)) == s+1 })
	seqs, _, states := rec.snapshot()
	if !slices.Equal(seqs, seqRange(0, s+1)) || hasState(states, StreamLoss) {
		t.Fatalf("seqs %v, states %v", seqs, stateNames(states))
	}
	if st := liveStatus(states); st.MidStream {
		t.Fatalf("the window was refilled from seq 0, yet live reports mid-stream: %+v", st)
	}
}
