package kvevents

import (
	"net/netip"
	"strings"
	"testing"
	"time"
)

// TestListenerRefusesStrangers: a bound socket takes loopback binds only
// unless an allowlist is given; with one, a publisher from outside it is
// closed at accept and none of its events reach a subscriber, while an
// allowed one's do.
func TestListenerRefusesStrangers(t *testing.T) {
	ctx := t.Context()
	for _, ep := range []string{"tcp://0.0.0.0:0", "tcp://*:0", "tcp://[::]:0", "tcp://example.com:0"} {
		if l, err := Listen(ctx, ep, quietLogger()); err == nil {
			l.Close()
			t.Fatalf("%s bound without an allowlist", ep)
		} else if !strings.Contains(err.Error(), "--kv-events-allow") {
			t.Fatalf("%s: %v", ep, err)
		}
	}
	if _, err := ParseAllow([]string{"10.0.0.0/8,192.0.2.7", "nonsense"}); err == nil {
		t.Fatal("a bad CIDR parsed")
	}
	run := func(allow []netip.Prefix) (*Listener, *recorder) {
		l, err := ListenAllow(ctx, "tcp://127.0.0.1:0", allow, quietLogger())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		p, err := NewPublisher(ctx, PublisherConfig{Endpoint: l.Endpoint(), Dial: true, Topic: "w", Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		rec := startSubscriber(t, ctx, SubscriberConfig{Worker: "w", Listener: l, Topic: "w"})
		deadline := time.Now().Add(3 * time.Second)
		for time.Now().Before(deadline) {
			p.Publish(payloadTS(1))
			if seqs, _, _ := rec.snapshot(); len(seqs) > 0 {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		return l, rec
	}
	stranger, _ := ParseAllow([]string{"192.0.2.0/24"})
	l, rec := run(stranger)
	if seqs, _, _ := rec.snapshot(); len(seqs) != 0 {
		t.Fatalf("a stranger's batches arrived: %v", seqs)
	}
	if l.Refused() == 0 {
		t.Fatal("the stranger's connection was not refused")
	}
	friend, _ := ParseAllow([]string{"127.0.0.1"})
	l, rec = run(friend)
	if seqs, _, _ := rec.snapshot(); len(seqs) == 0 || l.Refused() != 0 {
		t.Fatalf("an allowed publisher: seqs %v, refused %d", seqs, l.Refused())
	}
}
