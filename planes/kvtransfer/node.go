package kvtransfer

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"github.com/zeebo/xxh3"

	"github.com/tandemllm/tandem/authn"
	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/health"
	"github.com/tandemllm/tandem/internal/connlimit"
)

// Diagnostic codes of failed transfers.
const (
	CodeFailed         = "kv_transfer_failed"
	CodeTimeout        = "kv_transfer_timeout"
	CodeLayoutMismatch = "kv_layout_mismatch"
	CodeRejected       = "kv_transfer_rejected"
	// CodeRefusedPeer: the destination is not a transfer address
	// discovery published (Config.AllowPeer); nothing was sent.
	CodeRefusedPeer = "kv_transfer_peer_refused"
)

// Defaults.
const (
	DefaultTimeout    = 60 * time.Second
	DefaultProbeBytes = 2 << 20
	// ewmaWeight is the weight of a new transfer in the link estimate:
	// heavy enough to follow a link whose load changes within a few
	// transfers, light enough that one slow transfer does not swing it.
	ewmaWeight = 0.3
	// minSampleBytes: smaller transfers measure latency, not throughput.
	minSampleBytes = 1 << 20
)

// Error is a failed transfer with its diagnostic code.
type Error struct {
	Code string
	Err  error
}

func (e *Error) Error() string { return e.Code + ": " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// CodeOf returns the diagnostic code of err ("" if it is not an *Error).
func CodeOf(err error) string {
	var te *Error
	if errors.As(err, &te) {
		return te.Code
	}
	return ""
}

// Config configures a Node.
type Config struct {
	// ID names the worker in metrics and diagnostics.
	ID string
	// Port is the worker's engine: the source of sent blocks and the sink
	// of received ones.
	Port engine.KVPort
	// Budget bounds the worker's staging memory (nil: DefaultBudget).
	Budget *Budget
	// Timeout bounds one transfer when the caller's context has no
	// deadline (default 60 s).
	Timeout time.Duration
	// ProbeBytes is the size of the first-sight link probe (default 2 MiB).
	ProbeBytes int
	Board      *health.Board // nil: no diagnostics
	Metrics    *Metrics      // nil: unregistered series
	Logger     *slog.Logger
	// Listen, if set, creates the receiving listener (nil: net.Listen);
	// Dial, if set, opens connections to peers (nil: a net.Dialer). Hooks
	// for sockets that must live elsewhere, e.g. in another network
	// namespace.
	Listen func(network, addr string) (net.Listener, error)
	Dial   func(ctx context.Context, network, addr string) (net.Conn, error)
	// TLS, if set, is the cluster identity: the listener admits only
	// workers' certificates signed by the cluster CA, and connections to
	// peers present this worker's certificate and expect a worker's.
	TLS *authn.Cluster
	// RequireToken makes the receiver refuse transfers without a valid
	// token from MintToken with this node's key (token.go): the frontend
	// assigned the sender to that prompt, for this receiver, once.
	RequireToken bool
	// AllowPeer, if set, vets every destination address before a
	// connection is made (the worker passes only the transfer addresses
	// discovery published, so a caller cannot point a send or a probe at
	// an address of its choosing). nil allows any.
	AllowPeer func(ctx context.Context, addr string) error
	// ConnLimits bound the receiving port (internal/connlimit): a global
	// and a per-source connection cap, a handshake deadline (the TLS
	// handshake and the first frame) and an idle timeout (zero: 10
	// minutes idle, no caps). ConnMetrics and Board carry their series
	// and diagnostic.
	ConnLimits  connlimit.Limits
	ConnMetrics *connlimit.Metrics
}

// PlaneKVTransfer is the receiving port's plane name (connlimit).
const PlaneKVTransfer = "kv-transfer"

// defaultIdle is how long an idle connection stays without ConnLimits.
const defaultIdle = 10 * time.Minute

// Node is one worker's end of the transfer plane: it sends its engine's
// blocks to peers and, once Listen is called, receives blocks into it.
// Safe for concurrent use.
type Node struct {
	cfg    Config
	budget *Budget
	tokens *tokens

	mu    sync.Mutex
	links map[string]*link // by destination address
	lis   net.Listener
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
	ctx   context.Context
	stop  context.CancelFunc
}

type link struct {
	dstID  string
	bps    float64 // 0: unknown
	probed bool
	// probing is closed when the first probe ends, so concurrent first
	// requests on a pair wait for one probe instead of starting many.
	probing chan struct{}
}

// NewNode returns a node; it receives nothing until Listen.
func NewNode(cfg Config) (*Node, error) {
	if cfg.Port == nil {
		return nil, errors.New("kvtransfer: node needs an engine KV port")
	}
	if cfg.Budget == nil {
		cfg.Budget = NewBudget(0)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.ProbeBytes <= 0 {
		cfg.ProbeBytes = DefaultProbeBytes
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	ts, err := newTokens()
	if err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(context.Background())
	n := &Node{cfg: cfg, budget: cfg.Budget, tokens: ts, links: map[string]*link{}, conns: map[net.Conn]struct{}{}, ctx: ctx, stop: stop}
	cfg.Metrics.budgetUsed.WithLabelValues(cfg.ID, "limit").Set(float64(n.budget.Limit()))
	return n, nil
}

// ID is the worker's id.
func (n *Node) ID() string { return n.cfg.ID }

// Budget is the worker's staging budget.
func (n *Node) Budget() *Budget { return n.budget }

// Listen starts receiving on addr ("127.0.0.1:0" picks a port).
func (n *Node) Listen(addr string) error {
	listen := n.cfg.Listen
	if listen == nil {
		listen = net.Listen
	}
	lis, err := listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("kvtransfer: listen %s: %w", addr, err)
	}
	lis = connlimit.Wrap(lis, PlaneKVTransfer, n.cfg.ConnLimits, n.cfg.Board, n.cfg.ConnMetrics, n.cfg.Logger)
	if n.cfg.TLS != nil {
		lis = tls.NewListener(lis, n.cfg.TLS.Server(authn.RoleWorker))
	}
	n.mu.Lock()
	n.lis = lis
	n.mu.Unlock()
	n.wg.Add(1)
	go n.accept(lis)
	return nil
}

// Addr is the receiving address ("" before Listen).
func (n *Node) Addr() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.lis == nil {
		return ""
	}
	return n.lis.Addr().String()
}

// TokenKey is the key transfer tokens to this node are signed with
// (MintToken). Only frontends may learn it: the request plane hands it
// to callers with a frontend's certificate when mTLS is on.
func (n *Node) TokenKey() []byte { return n.tokens.key }

// MintToken signs a token for a transfer of blocks [from, ...) of tokens
// from sender to this node.
func (n *Node) MintToken(sender string, tokens []engine.Token, from int) ([]byte, error) {
	return MintToken(n.tokens.key, n.cfg.ID, sender, tokens, from)
}

// Close stops receiving and aborts transfers in progress.
func (n *Node) Close() error {
	n.stop()
	n.mu.Lock()
	var err error
	if n.lis != nil {
		err = n.lis.Close()
	}
	for c := range n.conns {
		_ = c.Close()
	}
	n.mu.Unlock()
	n.wg.Wait()
	return err
}

func (n *Node) accept(lis net.Listener) {
	defer n.wg.Done()
	for {
		c, err := lis.Accept()
		if err != nil {
			return
		}
		n.mu.Lock()
		n.conns[c] = struct{}{}
		n.mu.Unlock()
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			n.serveConn(c)
			n.mu.Lock()
			delete(n.conns, c)
			n.mu.Unlock()
			_ = c.Close()
		}()
	}
}

// serveConn answers transfers and probes on one connection until it ends.
func (n *Node) serveConn(c net.Conn) {
	if tc, ok := c.(*tls.Conn); ok {
		// A stranger's handshake is refused here, before any frame.
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if err := tc.HandshakeContext(n.ctx); err != nil {
			n.refused(c, "", "tls", err)
			return
		}
	}
	rd := &reader{r: bufio.NewReaderSize(c, 64<<10)}
	idle := n.cfg.ConnLimits.Idle
	if idle <= 0 {
		idle = defaultIdle
	}
	for {
		// An idle connection may wait up to the idle timeout; a transfer
		// in progress is bounded by the node's timeout.
		_ = c.SetReadDeadline(time.Now().Add(idle))
		typ, size, err := rd.next()
		if err != nil {
			return
		}
		connlimit.Established(c) // a frame header: past the handshake
		_ = c.SetDeadline(time.Now().Add(n.cfg.Timeout))
		switch typ {
		case frameProbe:
			if _, err := io.CopyN(io.Discard, rd.r, int64(size)); err != nil {
				return
			}
			if _, err := c.Write(encodeU32(frameProbeAck, size)); err != nil {
				return
			}
		case frameBegin:
			// The frame is bounded by the staging budget before a byte of
			// it is allocated, and its reservation is held through the
			// transfer (the decoded token list is as large): a peer
			// cannot make the worker hold more than --transfer-budget by
			// sending large control frames on many connections.
			bctx, cancel := context.WithTimeout(n.ctx, n.cfg.Timeout)
			p, err := n.budget.Acquire(bctx, size)
			cancel()
			n.noteBudget()
			if err != nil {
				n.cfg.Logger.Warn("refusing a KV transfer header beyond the staging budget", "bytes", size, "peer", c.RemoteAddr().String(), "err", err)
				return
			}
			if _, err := io.ReadFull(rd.r, p); err != nil {
				n.budget.Release(p)
				n.noteBudget()
				return
			}
			res, keep := n.receive(c, rd, p)
			n.budget.Release(p)
			n.noteBudget()
			if _, err := c.Write(encodeResult(res)); err != nil || !keep {
				return
			}
		default:
			return
		}
	}
}

type arrived struct {
	index int
	buf   []byte
}

// receive runs one transfer after its Begin frame. keep is false when the
// stream is no longer in step (the connection must close).
func (n *Node) receive(c net.Conn, rd *reader, p []byte) (res *result, keep bool) {
	h, err := decodeBegin(p)
	if err != nil {
		return &result{Code: CodeFailed, Message: err.Error()}, false
	}
	if n.cfg.RequireToken {
		if err := n.tokens.check(n.cfg.ID, h, time.Now()); err != nil {
			n.refused(c, h.Sender, "token", err)
			return &result{Code: CodeRejected, Message: "refused: " + err.Error()}, n.discard(rd)
		}
	}
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.Timeout)
	defer cancel()
	ctx, span := receiveSpan(ctx, h)
	defer func() { endReceive(span, h, res) }()
	port := n.cfg.Port
	if h.Layout != port.KVLayout() || h.BlockBytes != port.KVBlockBytes() {
		// Drain the stream so the sender hears the answer.
		return &result{Code: CodeLayoutMismatch, Message: fmt.Sprintf("sender layout %q (%d B/block), receiver %q (%d B/block)",
			h.Layout, h.BlockBytes, port.KVLayout(), port.KVBlockBytes())}, n.discard(rd)
	}
	// Blocks are imported as they land: an importer takes whatever has
	// arrived while its previous import ran, so the engine sees few large
	// imports under load and block-sized ones on a slow link.
	in := make(chan arrived, len(h.Tokens)/h.BlockSize+1)
	var importErr error
	imported := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		var batch [][]byte
		for a := range in {
			batch = append(batch[:0], a.buf)
			from := a.index
		more:
			for {
				select {
				case b, ok := <-in:
					if !ok {
						break more
					}
					batch = append(batch, b.buf)
				default:
					break more
				}
			}
			if importErr == nil {
				if err := port.ImportBlocks(ctx, h.Tokens, from, batch); err != nil {
					importErr = err
				} else {
					imported += len(batch)
				}
			}
			for _, b := range batch {
				n.budget.Release(b)
			}
			n.noteBudget()
		}
	}()
	next := h.From
	recvErr := func() error {
		defer close(in)
		for {
			typ, size, err := rd.next()
			if err != nil {
				return err
			}
			switch typ {
			case frameEnd:
				q, err := rd.payload(size)
				if err != nil {
					return err
				}
				cnt, err := decodeU32(q)
				if err != nil {
					return err
				}
				if cnt != next-h.From {
					return fmt.Errorf("%w: end says %d blocks, received %d", ErrProtocol, cnt, next-h.From)
				}
				return nil
			case frameBlock:
			default:
				return fmt.Errorf("%w: frame type %d inside a transfer", ErrProtocol, typ)
			}
			if size != blockHeader+h.BlockBytes {
				return fmt.Errorf("%w: block frame of %d bytes, want %d", ErrProtocol, size, blockHeader+h.BlockBytes)
			}
			var bh [blockHeader]byte
			if _, err := io.ReadFull(rd.r, bh[:]); err != nil {
				return err
			}
			idx, sum := int(binary.LittleEndian.Uint32(bh[:])), binary.LittleEndian.Uint64(bh[4:])
			if idx != next || (idx+1)*h.BlockSize > len(h.Tokens) {
				return fmt.Errorf("%w: block %d out of order (want %d of %d)", ErrProtocol, idx, next, len(h.Tokens)/h.BlockSize)
			}
			// The budget is acquired before the buffer exists; while it is
			// spent this read waits and TCP stops the sender.
			buf, err := n.budget.Acquire(ctx, h.BlockBytes)
			n.noteBudget()
			if err != nil {
				return err
			}
			if _, err := io.ReadFull(rd.r, buf); err != nil {
				n.budget.Release(buf)
				return err
			}
			if xxh3.Hash(buf) != sum {
				n.budget.Release(buf)
				return fmt.Errorf("%w: block %d checksum mismatch", ErrProtocol, idx)
			}
			in <- arrived{idx, buf}
			next++
		}
	}()
	<-done
	switch {
	case recvErr != nil:
		code := CodeFailed
		if isTimeout(recvErr) {
			code = CodeTimeout
		}
		return &result{Imported: imported, Code: code, Message: recvErr.Error()}, false
	case importErr != nil:
		return &result{Imported: imported, Code: CodeRejected, Message: importErr.Error()}, true
	}
	if n.cfg.Board != nil && n.cfg.RequireToken {
		n.cfg.Board.Clear(CodeRejected, inboundSubject(n.cfg.ID), CodeAccepted, "a transfer with a valid token was accepted")
	}
	return &result{Imported: imported}, true
}

// inboundSubject is the board subject of transfers this node refused.
func inboundSubject(id string) string { return "->" + id }

// refused records a connection or transfer refused by this receiver:
// reason "tls" (the handshake failed: no or a foreign certificate) or
// "token" (no valid transfer token). It raises kv_transfer_rejected until
// the next accepted transfer, logs the peer and counts it.
func (n *Node) refused(c net.Conn, sender, reason string, err error) {
	n.cfg.Metrics.refused.WithLabelValues(n.cfg.ID, reason).Inc()
	if errors.Is(err, io.EOF) {
		// Connected and hung up without a byte (a port check): counted,
		// not a diagnostic.
		n.cfg.Logger.Debug("KV transfer connection closed before its TLS handshake", "remote", c.RemoteAddr().String())
		return
	}
	msg := "refused a KV transfer connection or transfer: nothing was imported"
	if n.cfg.Board != nil {
		n.cfg.Board.Raise(CodeRejected, inboundSubject(n.cfg.ID), health.Warn, msg,
			"remote", c.RemoteAddr().String(), "sender", sender, "reason", reason, "err", err.Error())
	} else {
		n.cfg.Logger.Warn(msg, "diagnostic_code", CodeRejected, "remote", c.RemoteAddr().String(), "sender", sender, "reason", reason, "err", err)
	}
}

// discard reads the rest of a refused transfer.
func (n *Node) discard(rd *reader) bool {
	for {
		typ, size, err := rd.next()
		if err != nil {
			return false
		}
		if _, err := io.CopyN(io.Discard, rd.r, int64(size)); err != nil {
			return false
		}
		if typ == frameEnd {
			return true
		}
		if typ != frameBlock {
			return false
		}
	}
}

func (n *Node) noteBudget() {
	st := n.budget.Stats()
	m := n.cfg.Metrics
	m.budgetUsed.WithLabelValues(n.cfg.ID, "allocated").Set(float64(st.Allocated))
	m.budgetUsed.WithLabelValues(n.cfg.ID, "peak").Set(float64(st.Peak))
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}
