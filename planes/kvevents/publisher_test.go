package kvevents

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
)

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func be8(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

type recvResult struct {
	msg zmq4.Msg
	err error
}

// receiver pumps a socket's messages into a channel so tests can wait with
// a deadline (zmq4's Recv has none).
func receiver(s zmq4.Socket) <-chan recvResult {
	ch := make(chan recvResult, 1024)
	go func() {
		for {
			m, err := s.Recv()
			ch <- recvResult{m, err}
			if err != nil {
				return
			}
		}
	}()
	return ch
}

func next(t *testing.T, ch <-chan recvResult) zmq4.Msg {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("recv: %v", r.err)
		}
		return r.msg
	case <-time.After(5 * time.Second):
		t.Fatal("timed out waiting for a message")
	}
	return zmq4.Msg{}
}

var probe = []byte("probe")

// joinSub dials a SUB socket and publishes probes until one arrives, which
// defeats ZMQ's slow-joiner effect (messages published before the
// subscription reaches the publisher are silently lost).
func joinSub(t *testing.T, ctx context.Context, p *Publisher, topic string) <-chan recvResult {
	t.Helper()
	sub := zmq4.NewSub(ctx)
	t.Cleanup(func() { sub.Close() })
	if err := sub.Dial(p.Endpoint()); err != nil {
		t.Fatal(err)
	}
	if err := sub.SetOption(zmq4.OptionSubscribe, topic); err != nil {
		t.Fatal(err)
	}
	ch := receiver(sub)
	deadline := time.After(5 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var probes uint64 // accepted probes: on an idle publisher, seqs 0..probes-1
	for {
		select {
		case r := <-ch:
			if r.err != nil {
				t.Fatal(r.err)
			}
			// Drain probes still queued or in flight so the caller starts
			// clean.
			for binary.BigEndian.Uint64(r.msg.Frames[1]) != probes-1 {
				r = <-ch
			}
			return ch
		case <-tick.C:
			if p.Publish(probe) {
				probes++
			}
		case <-deadline:
			t.Fatal("subscriber never joined")
		}
	}
}

func newTestPublisher(t *testing.T, cfg PublisherConfig) *Publisher {
	t.Helper()
	if cfg.Endpoint == "" {
		cfg.Endpoint = "tcp://127.0.0.1:0"
	}
	cfg.Logger = quietLogger()
	p, err := NewPublisher(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func TestPublisherFramesAndReplay(t *testing.T) {
	for _, tc := range []struct {
		name   string
		legacy bool
	}{{"current replay", false}, {"legacy replay", true}} {
		t.Run(tc.name, func(t *testing.T) {
			p := newTestPublisher(t, PublisherConfig{
				ReplayEndpoint: "tcp://127.0.0.1:0", Topic: "kv-events", LegacyReplay: tc.legacy,
			})
			if strings.HasSuffix(p.Endpoint(), ":0") || strings.HasSuffix(p.ReplayEndpoint(), ":0") {
				t.Fatalf("endpoints not resolved: %s %s", p.Endpoint(), p.ReplayEndpoint())
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			sub := joinSub(t, ctx, p, "kv-events")

			payloadA := unhex(t, vectorA)
			first := p.Stats().Published // every probe was received, hence sent
			if !p.Publish(payloadA) {
				t.Fatal("publish refused")
			}
			m := next(t, sub)
			if len(m.Frames) != 3 || string(m.Frames[0]) != "kv-events" ||
				!bytes.Equal(m.Frames[1], be8(first)) || !bytes.Equal(m.Frames[2], payloadA) {
				t.Fatalf("frames %x", m.Frames)
			}
			// Five more batches; the subscriber "misses" them and replays
			// from the second one.
			var sent [][]byte
			for i := range 5 {
				b := batchA()
				b.TS = float64(i)
				sent = append(sent, EncodeBatch(b, FormatArray))
				p.Publish(sent[i])
			}
			for range 5 {
				next(t, sub)
			}

			dealer := zmq4.NewDealer(ctx)
			defer dealer.Close()
			if err := dealer.Dial(p.ReplayEndpoint()); err != nil {
				t.Fatal(err)
			}
			start := first + 2
			if err := dealer.SendMulti(zmq4.NewMsgFrom([]byte{}, be8(start))); err != nil {
				t.Fatal(err)
			}
			rep := receiver(dealer)
			for i := 1; i < 5; i++ {
				m := next(t, rep)
				var want [][]byte
				if tc.legacy {
					want = [][]byte{{}, be8(first + uint64(i) + 1), sent[i]}
				} else {
					want = [][]byte{{}, []byte("kv-events"), be8(first + uint64(i) + 1), sent[i]}
				}
				if !framesEqual(m.Frames, want) {
					t.Fatalf("replay %d: frames %x, want %x", i, m.Frames, want)
				}
			}
			end := next(t, rep)
			wantEnd := [][]byte{{}, {}, be8(EndSeq), {}}
			if tc.legacy {
				wantEnd = [][]byte{{}, be8(EndSeq), {}}
			}
			if !framesEqual(end.Frames, wantEnd) {
				t.Fatalf("end marker %x", end.Frames)
			}
		})
	}
}

func framesEqual(a, b [][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

func TestReplayBufferIsBounded(t *testing.T) {
	p := newTestPublisher(t, PublisherConfig{BufferSteps: 3})
	for i := range 10 {
		p.Publish([]byte{byte(i)})
	}
	deadline := time.Now().Add(5 * time.Second)
	for p.Stats().Published < 10 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	got := p.replaySince(0)
	if len(got) != 3 || got[0].seq != 7 || got[2].seq != 9 || got[2].payload[0] != 9 {
		t.Fatalf("ring %+v", got)
	}
	if got := p.replaySince(9); len(got) != 1 {
		t.Fatalf("replaySince(9) = %+v", got)
	}
}

func TestPublishNeverBlocks(t *testing.T) {
	// A publisher without its sender goroutine: the queue fills and
	// Publish must drop instead of waiting.
	p := &Publisher{cfg: PublisherConfig{MaxQueueSize: 2}, log: quietLogger(), notify: make(chan struct{}, 1)}
	for i, want := range []bool{true, true, false, false} {
		if got := p.Publish([]byte{byte(i)}); got != want {
			t.Fatalf("publish %d = %v, want %v", i, got, want)
		}
	}
	if p.Stats().Dropped != 2 {
		t.Fatalf("dropped %d", p.Stats().Dropped)
	}
}

func TestPublisherClose(t *testing.T) {
	p, err := NewPublisher(context.Background(), PublisherConfig{Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	p.Publish([]byte("x"))
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if p.Publish([]byte("y")) {
		t.Fatal("publish after close accepted")
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if p.Stats().Published != 1 {
		t.Fatalf("queued batch not flushed: %+v", p.Stats())
	}
}

func TestBindFailure(t *testing.T) {
	p := newTestPublisher(t, PublisherConfig{})
	_, err := NewPublisher(context.Background(), PublisherConfig{Endpoint: p.Endpoint(), Logger: quietLogger()})
	if err == nil {
		t.Fatal("binding a used port succeeded")
	}
}

func TestOffsetEndpointPort(t *testing.T) {
	for _, tc := range []struct {
		in     string
		offset int
		want   string
		err    bool
	}{
		{"tcp://*:5557", 0, "tcp://*:5557", false},
		{"tcp://*:5557", 3, "tcp://*:5560", false},
		{"tcp://127.0.0.1:5557", 1, "tcp://127.0.0.1:5558", false},
		{"tcp://[::1]:5557", 2, "tcp://[::1]:5559", false},
		{"tcp://127.0.0.1:0", 5, "tcp://127.0.0.1:0", false},
		{"inproc://events", 2, "inproc://events_dp2", false},
		{"ipc:///tmp/x", 2, "ipc:///tmp/x", false},
		{"tcp://nohost", 1, "", true},
	} {
		got, err := OffsetEndpointPort(tc.in, tc.offset)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("OffsetEndpointPort(%q, %d) = %q, %v", tc.in, tc.offset, got, err)
		}
	}
}
