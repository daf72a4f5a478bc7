package kvtransfer

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/zeebo/xxh3"

	"github.com/tandemllm/tandem/authn"
	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/health"
)

// Peer is a destination worker.
type Peer struct {
	ID   string
	Addr string // its Node's Listen address
	// Token authorizes one transfer to the peer (MintToken, signed with
	// the peer's key); probes need none.
	Token []byte
}

// Stats describes a finished transfer.
type Stats struct {
	// Blocks and Bytes actually sent (block payloads only).
	Blocks int
	Bytes  int64
	// Wanted is how many blocks were asked for; fewer were sent when the
	// sender's cache no longer held them all (the receiver computes the rest).
	Wanted   int
	Duration time.Duration
	// Waited is the part of Duration spent waiting for the engine to commit
	// blocks (SendWhile); Duration-Waited is the time the link was in use.
	Waited time.Duration
}

// finished is the computing channel of a prompt whose KV is already in the
// cache: closed, so it yields nil at once.
var finished = func() <-chan error {
	c := make(chan error)
	close(c)
	return c
}()

// Send streams blocks [from, len(tokens)/blockSize) of tokens from this
// node's engine to peer, which imports them into its prefix cache. tokens
// must be whole blocks. Failures return an *Error with a diagnostic code,
// raised on the board for the link until a later transfer succeeds.
func (n *Node) Send(ctx context.Context, peer Peer, tokens []engine.Token, from int) (Stats, error) {
	return n.SendWhile(ctx, peer, tokens, from, finished)
}

// SendWhile is Send for a prompt whose KV is still being computed: it
// streams blocks [from, len(tokens)/blockSize) as the engine commits them,
// until computing yields. computing yields one value (or is closed) when
// the prefill leg ends, nil if it succeeded; SendWhile receives from it at
// most once and may return without receiving (a failed transfer), so give
// it a buffer of one.
//
// With an engine.KVStreamer port the Begin frame goes out at once and every
// commit sends the blocks it made exportable, so the link works while later
// chunks are computed; after computing yields nil the rest is sent and the
// transfer ends as Send does (blocks the cache no longer holds are left to
// the receiver). Other ports wait for computing, then Send. The node's
// Timeout bounds the whole streamed transfer, prefill included.
//
// A prefill that fails (computing yields an error), or the caller's
// context ending before the prefill has finished, aborts the transfer
// (the connection closes; the receiver keeps the blocks it imported) and
// returns that error as is: it says nothing about the link, so it is no
// *Error, raises no diagnostic and counts as "aborted", not failed.
// Stats.Waited is the time spent waiting for the engine; the link estimate
// is fed Duration-Waited, so a slow prefill never makes the link look slow.
func (n *Node) SendWhile(ctx context.Context, peer Peer, tokens []engine.Token, from int, computing <-chan error) (Stats, error) {
	start := time.Now()
	st, err := n.send(ctx, peer, tokens, from, computing)
	st.Duration = time.Since(start)
	m := n.cfg.Metrics
	var ab *abortError
	if errors.As(err, &ab) {
		m.transfers.WithLabelValues(n.cfg.ID, peer.ID, "aborted").Inc()
		return st, ab.err
	}
	subject := n.cfg.ID + "->" + peer.ID
	if err != nil {
		code := CodeOf(err)
		if code == "" {
			code = CodeFailed
			if isTimeout(err) {
				code = CodeTimeout
			}
			err = &Error{Code: code, Err: err}
		}
		m.transfers.WithLabelValues(n.cfg.ID, peer.ID, code).Inc()
		if n.cfg.Board != nil {
			n.cfg.Board.Raise(code, subject, health.Warn, "KV transfer failed; the request falls back to local prefill",
				"err", err.Error())
		}
		return st, err
	}
	m.transfers.WithLabelValues(n.cfg.ID, peer.ID, "ok").Inc()
	m.bytes.WithLabelValues(n.cfg.ID, peer.ID).Add(float64(st.Bytes))
	m.seconds.WithLabelValues(n.cfg.ID, peer.ID).Observe(st.Duration.Seconds())
	// While the sender waits for a commit, the socket buffer drains in the
	// background, so Duration-Waited can under-count the link's busy time
	// by one buffer's drain per wait: slightly optimistic on a link slower
	// than the engine, never pessimistic because of the engine.
	if busy := st.Duration - st.Waited; st.Bytes >= minSampleBytes && busy > 0 {
		n.observe(peer, float64(st.Bytes)/busy.Seconds())
	}
	if n.cfg.Board != nil {
		for _, c := range []string{CodeFailed, CodeTimeout, CodeRejected, CodeLayoutMismatch, CodeRefusedPeer} {
			n.cfg.Board.Clear(c, subject, CodeRecovered, "KV transfers on the link succeed again")
		}
	}
	return st, nil
}

// abortError carries an error that ended a transfer without being the
// transfer's fault (a failed prefill, the caller giving up while the engine
// computes); SendWhile returns err as is.
type abortError struct{ err error }

func (a *abortError) Error() string { return "kvtransfer: transfer aborted: " + a.err.Error() }
func (a *abortError) Unwrap() error { return a.err }

func (n *Node) dial(ctx context.Context, peer Peer) (net.Conn, context.Context, context.CancelFunc, error) {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.Timeout)
	if n.cfg.AllowPeer != nil {
		if err := n.cfg.AllowPeer(ctx, peer.Addr); err != nil {
			cancel()
			return nil, nil, nil, &Error{Code: CodeRefusedPeer, Err: fmt.Errorf("kvtransfer: %s (%s): %w", peer.ID, peer.Addr, err)}
		}
	}
	dial := n.cfg.Dial
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	c, err := dial(ctx, "tcp", peer.Addr)
	if err != nil {
		cancel()
		return nil, nil, nil, fmt.Errorf("kvtransfer: dial %s (%s): %w", peer.ID, peer.Addr, err)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	if n.cfg.TLS != nil {
		tc := tls.Client(c, n.cfg.TLS.Client(authn.RoleWorker))
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = c.Close()
			cancel()
			return nil, nil, nil, fmt.Errorf("kvtransfer: TLS with %s (%s): %w", peer.ID, peer.Addr, err)
		}
		c = tc
	}
	// Closing the connection is what interrupts blocked reads and writes
	// when the caller gives up.
	stop := context.AfterFunc(ctx, func() { _ = c.Close() })
	return c, ctx, func() { stop(); cancel(); _ = c.Close() }, nil
}

func (n *Node) send(ctx context.Context, peer Peer, tokens []engine.Token, from int, computing <-chan error) (Stats, error) {
	port := n.cfg.Port
	bs := blockSizeOf(port)
	var st Stats
	if bs == 0 || len(tokens)%bs != 0 {
		return st, fmt.Errorf("kvtransfer: %d tokens are not whole blocks", len(tokens))
	}
	st.Wanted = len(tokens)/bs - from
	if computing == nil {
		computing = finished
	}
	// done: computing has yielded nil (Send passes an already-closed one).
	done := false
	// yielded takes what computing yielded: a prefill error aborts the
	// transfer, nil (or a close) means every block is computed.
	yielded := func(err error, ok bool) error {
		if ok && err != nil {
			return &abortError{err}
		}
		done = true
		return nil
	}
	select {
	case err, ok := <-computing:
		if err := yielded(err, ok); err != nil {
			return st, err
		}
	default:
	}
	streamer, _ := port.(engine.KVStreamer)
	if !done && (streamer == nil || st.Wanted <= 0) {
		// Nothing can be sent before the prefill ends: wait for it without
		// holding a connection, then send as Send does.
		t0 := time.Now()
		select {
		case err, ok := <-computing:
			st.Waited += time.Since(t0)
			if err := yielded(err, ok); err != nil {
				return st, err
			}
		case <-ctx.Done():
			st.Waited += time.Since(t0)
			return st, &abortError{ctx.Err()}
		}
	}
	if st.Wanted <= 0 {
		return st, nil
	}
	parent := ctx
	c, ctx, closeConn, err := n.dial(ctx, peer)
	if err != nil {
		return st, err
	}
	// Closing the connection is also how an abort tells the receiver: the
	// stream ends before End, and it keeps only the blocks it imported
	// (valid KV, just fewer).
	defer closeConn()
	// fail classifies an error of the streaming phase: once the caller has
	// given up on a prefill still running, the transfer is aborted, not
	// failed (a cancelled request must not mark the link unhealthy).
	fail := func(err error) error {
		if perr := parent.Err(); perr != nil && !done {
			return &abortError{perr}
		}
		return err
	}
	w := bufio.NewWriterSize(c, 64<<10)
	bb := port.KVBlockBytes()
	if _, err := w.Write(encodeBegin(&begin{Layout: port.KVLayout(), Sender: n.cfg.ID, Token: peer.Token, Trace: wireTrace(ctx), BlockSize: bs, BlockBytes: bb, From: from, Tokens: tokens})); err != nil {
		return st, fail(wrapCtx(ctx, err))
	}
	// One staging buffer per transfer, from the budget, held while blocks
	// are being written (through the prefill, when streaming).
	buf, err := n.budget.Acquire(ctx, bb)
	n.noteBudget()
	if err != nil {
		return st, fail(err)
	}
	release := func() {
		if buf != nil {
			n.budget.Release(buf)
			buf = nil
		}
	}
	defer release()
	var (
		hdr     [frameHeader + blockHeader]byte
		next    = from    // the next block the receiver expects
		round   time.Time // when the current export round started
		emitted bool      // whether the current round has written a block
	)
	emit := func(i int) error {
		if !emitted && !done {
			// Until its first block, a round mid-prefill waits for the
			// engine (a native export queues behind the running step).
			st.Waited += time.Since(round)
		}
		emitted = true
		h := appendFrameHeader(hdr[:0], frameBlock, blockHeader+bb)
		h = binary.LittleEndian.AppendUint32(h, uint32(i))
		h = binary.LittleEndian.AppendUint64(h, xxh3.Hash(buf))
		if _, err := w.Write(h); err != nil {
			return err
		}
		if _, err := w.Write(buf); err != nil {
			return err
		}
		st.Blocks++
		st.Bytes += int64(bb)
		next = i + 1
		return nil
	}
	for {
		// The channel is taken before the cache is looked at, so a commit
		// landing during the export below still wakes the wait after it.
		var committed <-chan struct{}
		if !done {
			committed = streamer.KVCommitted()
		}
		round, emitted = time.Now(), false
		_, err := port.ExportBlocks(ctx, tokens, next, buf, emit)
		if !emitted && !done {
			st.Waited += time.Since(round)
		}
		if err != nil {
			return st, fail(wrapCtx(ctx, fmt.Errorf("kvtransfer: export: %w", err)))
		}
		if done {
			break
		}
		// Push what this round wrote: the receiver imports it while the
		// engine computes the next chunk.
		if err := w.Flush(); err != nil {
			return st, fail(wrapCtx(ctx, err))
		}
		t0 := time.Now()
		select {
		case <-committed:
			st.Waited += time.Since(t0)
		case err, ok := <-computing:
			st.Waited += time.Since(t0)
			// Done: one more round sends what the last chunks committed.
			if err := yielded(err, ok); err != nil {
				return st, err
			}
		case <-ctx.Done():
			st.Waited += time.Since(t0)
			return st, fail(wrapCtx(ctx, fmt.Errorf("kvtransfer: waiting for the engine to commit block %d: %w", next, ctx.Err())))
		}
	}
	release()
	if _, err := w.Write(encodeU32(frameEnd, st.Blocks)); err != nil {
		return st, wrapCtx(ctx, err)
	}
	if err := w.Flush(); err != nil {
		return st, wrapCtx(ctx, err)
	}
	rd := &reader{r: bufio.NewReader(c)}
	p, err := rd.expect(frameResult)
	if err != nil {
		return st, wrapCtx(ctx, fmt.Errorf("kvtransfer: reading the result: %w", err))
	}
	res, err := decodeResult(p)
	if err != nil {
		return st, err
	}
	if res.Code != "" {
		return st, &Error{Code: res.Code, Err: fmt.Errorf("receiver %s: %s", peer.ID, res.Message)}
	}
	if res.Imported != st.Blocks {
		return st, &Error{Code: CodeRejected, Err: fmt.Errorf("receiver %s imported %d of %d blocks", peer.ID, res.Imported, st.Blocks)}
	}
	return st, nil
}

// wrapCtx reports a context's end instead of the closed-connection error
// it caused.
func wrapCtx(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("%w (%w)", cerr, err)
	}
	return err
}

// blockSizeOf derives the block size from the layout-independent facts a
// KVPort exposes: engines report it in Info.
func blockSizeOf(p engine.KVPort) int {
	if e, ok := p.(engine.InfoReporter); ok {
		return e.Info().BlockSize
	}
	return 0
}

// Probe measures the link to peer with a short burst and records it as the
// link's first estimate. It returns bytes per second.
func (n *Node) Probe(ctx context.Context, peer Peer) (float64, error) {
	c, ctx, done, err := n.dial(ctx, peer)
	if err != nil {
		if CodeOf(err) != "" {
			return 0, err
		}
		return 0, &Error{Code: CodeFailed, Err: err}
	}
	defer done()
	size := n.cfg.ProbeBytes
	msg := make([]byte, frameHeader+size)
	copy(msg, appendFrameHeader(nil, frameProbe, size))
	// Two rounds on one connection, timing the second: the first pays for
	// TCP slow start, which real transfers (many MiB) mostly do not see.
	rd := &reader{r: c}
	var bps float64
	for range 2 {
		start := time.Now()
		if _, err := c.Write(msg); err != nil {
			return 0, &Error{Code: CodeFailed, Err: wrapCtx(ctx, err)}
		}
		if _, err := rd.expect(frameProbeAck); err != nil {
			return 0, &Error{Code: CodeFailed, Err: wrapCtx(ctx, err)}
		}
		bps = float64(size) / time.Since(start).Seconds()
	}
	n.mu.Lock()
	l := n.linkLocked(peer)
	if l.bps == 0 {
		l.bps = bps
	}
	l.probed = true
	n.mu.Unlock()
	n.cfg.Metrics.throughput.WithLabelValues(n.cfg.ID, peer.ID).Set(bps)
	return bps, nil
}

func (n *Node) linkLocked(peer Peer) *link {
	l, ok := n.links[peer.Addr]
	if !ok {
		l = &link{dstID: peer.ID}
		n.links[peer.Addr] = l
	}
	return l
}

func (n *Node) observe(peer Peer, bps float64) {
	n.mu.Lock()
	l := n.linkLocked(peer)
	if l.bps == 0 {
		l.bps = bps
	} else {
		l.bps = (1-ewmaWeight)*l.bps + ewmaWeight*bps
	}
	v := l.bps
	n.mu.Unlock()
	n.cfg.Metrics.throughput.WithLabelValues(n.cfg.ID, peer.ID).Set(v)
}

// Throughput returns the link estimate to peer in bytes per second,
// probing the link first if it has never been measured. Concurrent first
// callers share one probe.
func (n *Node) Throughput(ctx context.Context, peer Peer) (float64, error) {
	n.mu.Lock()
	l := n.linkLocked(peer)
	if l.bps > 0 {
		v := l.bps
		n.mu.Unlock()
		return v, nil
	}
	wait := l.probing
	first := wait == nil
	if first {
		l.probing = make(chan struct{})
		wait = l.probing
	}
	n.mu.Unlock()
	if first {
		_, err := n.Probe(ctx, peer)
		n.mu.Lock()
		close(l.probing)
		l.probing = nil
		n.mu.Unlock()
		if err != nil {
			return 0, err
		}
	} else {
		select {
		case <-wait:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if l.bps == 0 {
		return 0, &Error{Code: CodeFailed, Err: fmt.Errorf("kvtransfer: link to %s could not be measured", peer.ID)}
	}
	return l.bps, nil
}

// SetThroughput pins the link estimate to peer (bytes per second), for a
// link whose speed is known better than a probe can tell; real transfers
// keep refining it.
func (n *Node) SetThroughput(peer Peer, bps float64) {
	n.mu.Lock()
	n.linkLocked(peer).bps = bps
	n.mu.Unlock()
	n.cfg.Metrics.throughput.WithLabelValues(n.cfg.ID, peer.ID).Set(bps)
}

// Estimate returns the link estimate to peer without probing; ok is false
// while the link has never been measured.
func (n *Node) Estimate(peer Peer) (bps float64, ok bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if l, found := n.links[peer.Addr]; found && l.bps > 0 {
		return l.bps, true
	}
	return 0, false
}
