package kvtransfer

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/tandemllm/tandem/engine/mocker"
)

// throttledConn paces writes to a fixed rate, a link of known speed on
// loopback. Pacing keeps an absolute schedule, so late wake-ups (sleeps
// of a quarter millisecond overshoot) are made up by not sleeping instead
// of slowing the link; only a link idle for longer than throttleIdle
// restarts the schedule, so idleness earns no burst credit.
type throttledConn struct {
	net.Conn
	bps  float64
	next time.Time // when the next byte may leave
}

const (
	throttleQuantum = 16 << 10
	throttleIdle    = 5 * time.Millisecond
)

func (c *throttledConn) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		k := min(len(p), throttleQuantum)
		switch now := time.Now(); {
		case now.Sub(c.next) > throttleIdle:
			c.next = now
		case c.next.After(now):
			time.Sleep(c.next.Sub(now))
		}
		n, err := c.Conn.Write(p[:k])
		written += n
		c.next = c.next.Add(time.Duration(float64(n) / c.bps * float64(time.Second)))
		if err != nil {
			return written, err
		}
		p = p[k:]
	}
	return written, nil
}

// BenchmarkSendWhileOverlap measures, in one run, a multi-chunk prompt's
// prefill followed by Send (sequential) against SendWhile streaming it
// during the prefill (overlapped), over a link throttled to a known rate.
// The prefill is a mocker with Dynamo's timing and 256-token chunks: 2,049
// tokens are 8 chunks of ≈20.4 ms plus a one-token step, ≈180 ms; their
// 128 blocks × 64 KiB = 8 MiB take 125 ms at 64 MiB/s (a link faster
// than the prefill) and 250 ms at 32 MiB/s (a slower one). Sequential
// should cost about prefill + transfer, overlapped about the larger of the
// two plus what remains after the prefill's last chunk. Reported per
// iteration (one of each): seq-ms, overlap-ms, prefill-ms and send-ms (the
// sequential run's two parts) and the ratio overlap/seq.
//
//	go test -run '^$' -bench BenchmarkSendWhileOverlap -benchtime 10x ./planes/kvtransfer/
func BenchmarkSendWhileOverlap(b *testing.B) {
	for _, mibps := range []int{64, 32} {
		b.Run(fmt.Sprintf("link=%dMiBps", mibps), func(b *testing.B) { benchOverlap(b, float64(mibps<<20)) })
	}
}

func benchOverlap(b *testing.B, rate float64) {
	const (
		bs, bpt = 16, 4096
		tokens  = 8 * overlapChunk
	)
	src, err := mocker.New(mocker.Config{Speedup: 1, MaxNumBatchedTokens: overlapChunk,
		KVBytesPerToken: bpt, KVCapacityTokens: 64 * 1024})
	if err != nil {
		b.Fatal(err)
	}
	defer src.Close()
	dst := newMocker(b, bpt)
	a, err := NewNode(Config{ID: "p0", Port: src, Timeout: time.Minute,
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var d net.Dialer
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &throttledConn{Conn: c, bps: rate}, nil
		}})
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	recv := newNode(b, "d0", dst, 0, nil, true)
	peer := Peer{ID: "d0", Addr: recv.Addr()}
	ctx := context.Background()
	var seq, ov, pre, send time.Duration
	n, salt := 0, 0
	check := func(st Stats, err error) {
		b.Helper()
		if err != nil {
			b.Fatal(err)
		}
		if st.Blocks != tokens/bs {
			b.Fatalf("sent %d blocks, want %d", st.Blocks, tokens/bs)
		}
	}
	for b.Loop() {
		// Fresh caches and prompts: every leg prefills and moves all 8 MiB.
		for _, e := range []*mocker.Engine{src, dst} {
			if err := e.ResetPrefixCache(ctx); err != nil {
				b.Fatal(err)
			}
		}
		salt++
		p := prompt(tokens+1, salt)
		t0 := time.Now()
		if err := prefillLeg(ctx, src, p); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		st, err := a.Send(ctx, peer, p[:tokens], 0)
		check(st, err)
		t2 := time.Now()
		pre += t1.Sub(t0)
		send += t2.Sub(t1)
		seq += t2.Sub(t0)

		salt++
		p = prompt(tokens+1, salt)
		t0 = time.Now()
		st, err = a.SendWhile(ctx, peer, p[:tokens], 0, startPrefill(ctx, src, p))
		check(st, err)
		ov += time.Since(t0)
		n++
	}
	ms := func(d time.Duration) float64 { return d.Seconds() * 1e3 / float64(n) }
	b.ReportMetric(ms(seq), "seq-ms")
	b.ReportMetric(ms(ov), "overlap-ms")
	b.ReportMetric(ms(pre), "prefill-ms")
	b.ReportMetric(ms(send), "send-ms")
	b.ReportMetric(ov.Seconds()/seq.Seconds(), "overlap/seq")
}
