package router

import (
	"testing"
	"time"

	"github.com/tandemllm/tandem/planes/kvevents"
	"github.com/tandemllm/tandem/planes/kvevents/follow"
)

// TestKVBoundSocketRoutesByTopic: with --kv-events-bind the policy binds one
// SUB socket; two publishers dial into it (vLLM with a host in its
// endpoint, llm-d's simulators) and their events reach the worker whose
// endpoint names their topic, so the request goes where the cache is.
func TestKVBoundSocketRoutesByTopic(t *testing.T) {
	f := newKVFixture(t, false, 0, func(c *KVConfig) { c.Bind = "tcp://127.0.0.1:0" })
	l := f.fol.Listener()
	if l == nil {
		t.Fatal("no listener bound")
	}
	if err := f.kv.AddWorker("wb", "topic:b", "", 0); err != nil {
		t.Fatal(err)
	}
	f.r.AddWorker(Worker{ID: "wb", Model: "m"})
	if err := f.kv.AddWorker("wa", "topic:a", "", 0); err != nil {
		t.Fatal(err)
	}
	f.r.AddWorker(Worker{ID: "wa", Model: "m"})
	pubs := map[string]*kvevents.Publisher{}
	for _, topic := range []string{"a", "b"} {
		p, err := kvevents.NewPublisher(t.Context(), kvevents.PublisherConfig{Endpoint: l.Endpoint(), Dial: true, FirstSeq: 1, Topic: topic})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		pubs[topic] = p
	}
	a, b := prompt(1, 6), prompt(2, 6)
	deadline := time.Now().Add(10 * time.Second)
	for {
		// Publishing until the events land: a dialing publisher's first
		// messages are lost until its connection is up (ZMQ slow joiner).
		pubs["a"].Publish(kvevents.EncodeBatch(&kvevents.Batch{Events: []kvevents.Event{storedEvent(a, 100)}}, kvevents.FormatArray))
		pubs["b"].Publish(kvevents.EncodeBatch(&kvevents.Batch{Events: []kvevents.Event{storedEvent(b, 200)}}, kvevents.FormatMap))
		da, db := f.route(t, a, nil), f.route(t, b, nil)
		if da.WorkerID == "wa" && da.PredictedCachedTokens == len(a)-tbs && db.WorkerID == "wb" && db.PredictedCachedTokens == len(b)-tbs {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("events never routed: a→%+v b→%+v", da, db)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestKVBoundEndpointNeedsBind: a topic:NAME endpoint without
// --kv-events-bind is an error naming the flag.
func TestKVBoundEndpointNeedsBind(t *testing.T) {
	f := newKVFixture(t, false, 0, nil)
	if err := f.kv.AddWorker("w", "topic:a", "", 0); err == nil {
		t.Fatal("accepted")
	}
}

// TestBoundPrefixIsFollowers: the router's name for a topic endpoint is the
// follower's, which parses it.
func TestBoundPrefixIsFollowers(t *testing.T) {
	if BoundPrefix != follow.BoundPrefix {
		t.Fatalf("router.BoundPrefix %q, follow.BoundPrefix %q", BoundPrefix, follow.BoundPrefix)
	}
}
