package router

import (
	"log/slog"
	"sync"
	"testing"
)

// memBus delivers every published message to every subscriber at once.
type memBus struct {
	mu   sync.Mutex
	subs []func(*LoadMessage)
}

func (b *memBus) Publish(m *LoadMessage) error {
	b.mu.Lock()
	subs := append([](func(*LoadMessage)){}, b.subs...)
	b.mu.Unlock()
	for _, s := range subs {
		c := *m
		s(&c)
	}
	return nil
}

func (b *memBus) Subscribe(_ string, deliver func(*LoadMessage)) (func(), error) {
	b.mu.Lock()
	b.subs = append(b.subs, deliver)
	b.mu.Unlock()
	return func() {}, nil
}

// TestLoadShareMessages: a peer's lifecycle counts as load until it
// finishes; the share's own messages and malformed ones are not applied.
func TestLoadShareMessages(t *testing.T) {
	bus := &memBus{}
	quiet := slog.New(slog.DiscardHandler)
	a := NewLoadShare(LeastLoaded{}, bus, "a", quiet)
	b := NewLoadShare(LeastLoaded{}, bus, "b", quiet)
	for _, s := range []*LoadShare{a, b} {
		if err := s.Follow(t.Context(), "m"); err != nil {
			t.Fatal(err)
		}
		defer s.Close()
	}
	req := &Request{ID: "r1", Model: "m", Tokens: []int32{1, 2, 3}}
	a.Routed(req, Decision{WorkerID: "w1"})
	if a.PeerRequests() != 0 || b.PeerRequests() != 1 {
		t.Fatalf("peer requests: a %d, b %d", a.PeerRequests(), b.PeerRequests())
	}
	d, err := b.Pick(&Request{Model: "m"}, []Candidate{{ID: "w1"}, {ID: "w2"}})
	if err != nil || d.WorkerID != "w2" {
		t.Fatalf("b picked %v (%v), want the worker a did not load", d.WorkerID, err)
	}
	a.Finished(req, "w1")
	if b.PeerRequests() != 0 {
		t.Fatal("finished request still counted")
	}
	for _, m := range []LoadMessage{
		{Kind: LoadRouted, Router: "c", Request: "x", Model: "m", Worker: "w1", Len: -1},
		{Kind: LoadRouted, Router: "c", Request: "y", Model: "m", Worker: "w1", Len: maxLoadLen + 1},
		{Kind: LoadRouted, Router: "c", Request: "z", Model: "m", Worker: "w1", BlockSize: -1},
	} {
		_ = bus.Publish(&m)
	}
	if _, _, dropped := b.Stats(); dropped != 3 || b.PeerRequests() != 0 {
		t.Fatalf("malformed messages: dropped %d, applied requests %d", dropped, b.PeerRequests())
	}
}
