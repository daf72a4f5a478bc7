package kvevents

import (
	"slices"
	"testing"
	"time"
)

// TestListenerManyDialingPublishers: publishers that dial (vLLM with a
// non-wildcard endpoint, llm-d's simulators) share one bound SUB socket and
// are told apart by topic; one numbers its batches from 1, which is no
// loss for a new subscription, and a topic nobody claims is ignored.
func TestListenerManyDialingPublishers(t *testing.T) {
	ctx := t.Context()
	l, err := Listen(ctx, "tcp://127.0.0.1:0", quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	type pubT struct {
		p   *Publisher
		rec *recorder
	}
	var pubs []pubT
	for i, first := range []uint64{0, 1} {
		topic := []string{"worker-a", "worker-b"}[i]
		p, err := NewPublisher(ctx, PublisherConfig{Endpoint: l.Endpoint(), Dial: true, FirstSeq: first,
			ReplayEndpoint: "tcp://127.0.0.1:0", Topic: topic, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		rec := startSubscriber(t, ctx, SubscriberConfig{Worker: topic, Listener: l, Topic: topic, ReplayEndpoint: p.ReplayEndpoint()})
		pubs = append(pubs, pubT{p, rec})
	}
	stranger, err := NewPublisher(ctx, PublisherConfig{Endpoint: l.Endpoint(), Dial: true, Topic: "nobody", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stranger.Close() })
	deadline := time.Now().Add(10 * time.Second)
	for _, pt := range pubs {
		for {
			_, _, states := pt.rec.snapshot()
			if hasState(states, StreamLive) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s never live: %v", pt.p.cfg.Topic, stateNames(states))
			}
			pt.p.Publish(payloadTS(1))
			stranger.Publish(payloadTS(9))
			time.Sleep(5 * time.Millisecond)
		}
	}
	for i, pt := range pubs {
		next := pt.p.Stats().Published
		for range 3 {
			pt.p.Publish(payloadTS(2))
		}
		pt.rec.waitFor(t, "the last batches", func(seqs []uint64, _ []StreamStatus) bool {
			return len(seqs) > 0 && seqs[len(seqs)-1] == next+2
		})
		seqs, ts, states := pt.rec.snapshot()
		if hasState(states, StreamLoss) || hasState(states, StreamReset) {
			t.Fatalf("publisher %d: states %v (seqs %v)", i, stateNames(states), seqs)
		}
		if !slices.IsSorted(seqs) || seqs[0] != uint64(i) || slices.Contains(ts, 9) {
			t.Fatalf("publisher %d: seqs %v ts %v", i, seqs, ts)
		}
	}
	if _, err := NewSubscriber(SubscriberConfig{Worker: "x", Listener: l, Handler: newRecorder()}); err == nil {
		t.Fatal("a bound subscriber without a topic was accepted")
	}
}

// TestListenerPublisherComesAndGoes: publishers killed and restarted one at
// a time on one bound socket. zmq4 reports a peer's disconnect as a receive
// error of the whole socket; the listener used to return on it, so every
// other publisher's events stopped for good. Now every live publisher's
// batches keep arriving and a restarted one is followed again (a reset,
// then its new batches) within 5 s.
func TestListenerPublisherComesAndGoes(t *testing.T) {
	ctx := t.Context()
	l, err := Listen(ctx, "tcp://127.0.0.1:0", quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	topics := []string{"w0", "w1", "w2"}
	pubs := make([]*Publisher, len(topics))
	recs := make([]*recorder, len(topics))
	start := func(i int) {
		p, err := NewPublisher(ctx, PublisherConfig{Endpoint: l.Endpoint(), Dial: true, Topic: topics[i], Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		pubs[i] = p
	}
	for i, topic := range topics {
		start(i)
		recs[i] = startSubscriber(t, ctx, SubscriberConfig{Worker: topic, Listener: l, Topic: topic})
	}
	t.Cleanup(func() {
		for _, p := range pubs {
			p.Close()
		}
	})
	// count is how many batches recorder i got with the given TS.
	count := func(i int, ts float64) int {
		_, tss, _ := recs[i].snapshot()
		n := 0
		for _, v := range tss {
			if v == ts {
				n++
			}
		}
		return n
	}
	// flowing publishes ts on every live publisher until each of them has
	// delivered one, within limit.
	flowing := func(what string, live []int, ts float64, limit time.Duration) {
		t.Helper()
		deadline := time.Now().Add(limit)
		for {
			done := true
			for _, i := range live {
				if count(i, ts) == 0 {
					done = false
					pubs[i].Publish(payloadTS(ts))
				}
			}
			if done {
				return
			}
			if time.Now().After(deadline) {
				for _, i := range live {
					_, _, st := recs[i].snapshot()
					t.Logf("%s: %d batches of ts %v, states %v", topics[i], count(i, ts), ts, stateNames(st))
				}
				t.Fatalf("%s: not every live publisher delivered within %v", what, limit)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	flowing("start", []int{0, 1, 2}, 1, 10*time.Second)
	for round, gone := range []int{0, 1, 2, 0} {
		ts := float64(10 + 2*round)
		pubs[gone].Close()
		var others []int
		for i := range topics {
			if i != gone {
				others = append(others, i)
			}
		}
		// The others keep flowing while one is gone.
		flowing("publisher "+topics[gone]+" gone", others, ts, 5*time.Second)
		start(gone)
		flowing("publisher "+topics[gone]+" restarted", []int{0, 1, 2}, ts+1, 5*time.Second)
	}
	if l.Dropped() == 0 {
		t.Fatal("no dropped connection counted")
	}
	if n := l.Connected(); n != 3 {
		t.Fatalf("connected publishers %d, want 3", n)
	}
	for i := range topics {
		_, _, st := recs[i].snapshot()
		if !hasState(st, StreamReset) {
			t.Fatalf("%s: restart not reported as a reset: %v", topics[i], stateNames(st))
		}
	}
}
