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
