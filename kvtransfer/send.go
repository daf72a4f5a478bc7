package kvtransfer

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/zeebo/xxh3"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/health"
)

// Peer is a destination worker.
type Peer struct {
	ID   string
	Addr string // its Node's Listen address
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
}

// Send streams blocks [from, len(tokens)/blockSize) of tokens from this
// node's engine to peer, which imports them into its prefix cache. tokens
// must be whole blocks. Failures return an *Error with a diagnostic code,
// raised on the board for the link until a later transfer succeeds.
func (n *Node) Send(ctx context.Context, peer Peer, tokens []engine.Token, from int) (Stats, error) {
	start := time.Now()
	st, err := n.send(ctx, peer, tokens, from)
	st.Duration = time.Since(start)
	m := n.cfg.Metrics
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
	if st.Bytes >= minSampleBytes {
		n.observe(peer, float64(st.Bytes)/st.Duration.Seconds())
	}
	if n.cfg.Board != nil {
		for _, c := range []string{CodeFailed, CodeTimeout, CodeRejected, CodeLayoutMismatch} {
			n.cfg.Board.Clear(c, subject, "kv_transfer_recovered", "KV transfers on the link succeed again")
		}
	}
	return st, nil
}

func (n *Node) dial(ctx context.Context, peer Peer) (net.Conn, context.Context, context.CancelFunc, error) {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.Timeout)
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
	// Closing the connection is what interrupts blocked reads and writes
	// when the caller gives up.
	stop := context.AfterFunc(ctx, func() { _ = c.Close() })
	return c, ctx, func() { stop(); cancel(); _ = c.Close() }, nil
}

func (n *Node) send(ctx context.Context, peer Peer, tokens []engine.Token, from int) (Stats, error) {
	port := n.cfg.Port
	bs := blockSizeOf(port)
	var st Stats
	if bs == 0 || len(tokens)%bs != 0 {
		return st, fmt.Errorf("kvtransfer: %d tokens are not whole blocks", len(tokens))
	}
	st.Wanted = len(tokens)/bs - from
	if st.Wanted <= 0 {
		return st, nil
	}
	c, ctx, done, err := n.dial(ctx, peer)
	if err != nil {
		return st, err
	}
	defer done()
	w := bufio.NewWriterSize(c, 64<<10)
	bb := port.KVBlockBytes()
	if _, err := w.Write(encodeBegin(&begin{Layout: port.KVLayout(), BlockSize: bs, BlockBytes: bb, From: from, Tokens: tokens})); err != nil {
		return st, wrapCtx(ctx, err)
	}
	// One staging buffer per transfer, from the budget, held only while
	// blocks are being written.
	buf, err := n.budget.Acquire(ctx, bb)
	n.noteBudget()
	if err != nil {
		return st, err
	}
	var hdr [frameHeader + blockHeader]byte
	_, err = port.ExportBlocks(ctx, tokens, from, buf, func(i int) error {
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
		return nil
	})
	n.budget.Release(buf)
	if err != nil {
		return st, wrapCtx(ctx, fmt.Errorf("kvtransfer: export: %w", err))
	}
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
	if e, ok := p.(interface{ Info() engine.Info }); ok {
		return e.Info().BlockSize
	}
	return 0
}

// Probe measures the link to peer with a short burst and records it as the
// link's first estimate. It returns bytes per second.
func (n *Node) Probe(ctx context.Context, peer Peer) (float64, error) {
	c, ctx, done, err := n.dial(ctx, peer)
	if err != nil {
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
