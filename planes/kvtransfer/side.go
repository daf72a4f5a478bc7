package kvtransfer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/tracing"
)

// Side is a worker as the disaggregation orchestrator (package disagg)
// sees it. In one process it is a Local (the engine and its transfer node);
// across processes the frontend holds a requestplane.Side that carries each
// call over the worker's request plane. Keeping the decider behind this
// interface is what lets one cost model serve both deployments. It lives
// here, on the transfer plane, so that the request plane (which serves and
// proxies it) sits below the orchestrator.
type Side interface {
	ID() string
	// Layout is the engine's KV layout (engine.KVPort.KVLayout): sides
	// with different layouts never exchange blocks.
	Layout() string
	BlockSize() int
	BlockBytes() int
	// TransferAddr is where the worker's transfer node receives blocks
	// ("" when it receives none: it cannot decode disaggregated).
	TransferAddr() string
	// Assess looks prompt up in the worker's prefix cache and prices its
	// prefill there; tail is a further token count to price (the partial
	// last block a decode worker computes after a remote prefill).
	Assess(ctx context.Context, prompt []engine.Token, tail int) (Assessment, error)
	// LinkThroughput is the measured throughput from this worker to peer in
	// bytes per second, probing the link the first time.
	LinkThroughput(ctx context.Context, peer Peer) (float64, error)
	// PrefillAndSend runs req's prefill leg and sends blocks [from, full)
	// of its prompt (full = whole blocks of all but the last token) to
	// peer, streaming them while the prefill runs where the engine allows.
	// Errors carry a code (CodeOf): CodePrefillFailed or a
	// transfer code.
	PrefillAndSend(ctx context.Context, req *engine.Request, peer Peer, from int) (Push, error)
	// TransferToken authorizes sender to send this worker blocks
	// [from, ...) of tokens (whole blocks), once (MintToken).
	// Only a decode worker, which receives, can issue one.
	TransferToken(ctx context.Context, sender string, tokens []engine.Token, from int) ([]byte, error)
}

// TransferKeyResetter is implemented by a Side that caches the key its
// transfer tokens are minted with: requestplane.Side, a remote worker's,
// which fetched it from that worker. Asked by disagg's orchestrator when the
// decode worker rejected a transfer (a worker restarted under the same
// record has a new key), so the next token is minted with a fresh one.
type TransferKeyResetter interface {
	ResetTransferKey()
}

// Assessment is a worker's view of one prompt.
type Assessment struct {
	// CachedTokens is the prefix of all but the prompt's last token that
	// the worker's cache holds (whole blocks): the last token is always
	// recomputed, its logits start decoding.
	CachedTokens int `json:"cached_tokens"`
	// RunningDecodes is how many sequences a local prefill would stall.
	RunningDecodes int `json:"running_decodes"`
	// UncachedSeconds and TailSeconds are the engine's own estimates for
	// the uncached tokens and for tail tokens; negative when the engine
	// cannot estimate (the orchestrator then uses what it learned).
	UncachedSeconds float64 `json:"uncached_s"`
	TailSeconds     float64 `json:"tail_s"`
	// ChunkTokens is the engine's prefill chunk when it commits blocks
	// chunk by chunk (engine.KVStreamer), so a transfer overlaps its
	// prefill; 0 when blocks exist only once the prefill ends.
	ChunkTokens int `json:"chunk_tokens,omitempty"`
}

// Push is the outcome of a PrefillAndSend.
type Push struct {
	Transfer Stats
	// Prefill is how long the prefill leg took.
	Prefill time.Duration
	// LinkBytesPerSec is the sender's link estimate after the transfer.
	LinkBytesPerSec float64
}

// Worker is an engine taking part in disaggregated serving in this
// process.
type Worker struct {
	ID     string
	Engine engine.Engine
	// Node is the worker's transfer-plane end; decode workers' nodes must
	// be listening.
	Node *Node
}

// CodePrefillFailed is the code of a prefill leg that failed (the request
// prefills locally); disagg.FallbackPrefillFailed is the same code.
const CodePrefillFailed = "disagg_prefill_failed"

// Local is the Side of an engine in this process. The request plane
// serves a worker's Local to remote orchestrators.
type Local struct {
	w    Worker
	port engine.KVPort
}

// NewLocal returns w's Side; its engine must implement engine.KVPort.
func NewLocal(w Worker) (*Local, error) {
	port, ok := w.Engine.(engine.KVPort)
	if !ok || w.Node == nil {
		return nil, fmt.Errorf("disagg: worker %s cannot move KV (engine %s)", w.ID, w.Engine.Info().Kind)
	}
	return &Local{w: w, port: port}, nil
}

func (l *Local) ID() string           { return l.w.ID }
func (l *Local) Layout() string       { return l.port.KVLayout() }
func (l *Local) BlockSize() int       { return l.w.Engine.Info().BlockSize }
func (l *Local) BlockBytes() int      { return l.port.KVBlockBytes() }
func (l *Local) TransferAddr() string { return l.w.Node.Addr() }

// Assess implements Side.
func (l *Local) Assess(ctx context.Context, prompt []engine.Token, tail int) (Assessment, error) {
	hit, err := l.port.CachedPrefix(ctx, prompt[:max(len(prompt)-1, 0)])
	if err != nil {
		return Assessment{}, err
	}
	a := Assessment{CachedTokens: hit, UncachedSeconds: -1, TailSeconds: -1}
	if lr, ok := l.w.Engine.(engine.LoadReporter); ok {
		a.RunningDecodes = lr.RunningDecodes()
	}
	if pe, ok := l.w.Engine.(engine.PrefillEstimator); ok {
		// Negative estimates (the engine cannot tell yet) pass through:
		// the orchestrator then uses its own.
		a.UncachedSeconds, a.TailSeconds = pe.EstimatePrefill(len(prompt)-hit), pe.EstimatePrefill(tail)
	}
	if ks, ok := l.w.Engine.(engine.KVStreamer); ok {
		a.ChunkTokens = ks.PrefillChunkTokens()
	}
	return a, nil
}

// TransferToken implements Side.
func (l *Local) TransferToken(_ context.Context, sender string, tokens []engine.Token, from int) ([]byte, error) {
	return l.w.Node.MintToken(sender, tokens, from)
}

// TokenKey is the key the worker's transfer tokens are signed with: the
// request plane hands it to frontends, which mint tokens themselves.
func (l *Local) TokenKey() []byte { return l.w.Node.TokenKey() }

// LinkThroughput implements Side.
func (l *Local) LinkThroughput(ctx context.Context, peer Peer) (float64, error) {
	return l.w.Node.Throughput(ctx, peer)
}

// PrefillAndSend implements Side: the prefill leg runs while the node
// streams blocks as the engine commits them.
func (l *Local) PrefillAndSend(ctx context.Context, req *engine.Request, peer Peer, from int) (Push, error) {
	bs := l.BlockSize()
	if bs <= 0 {
		return Push{}, &Error{Code: CodePrefillFailed, Err: errors.New("engine reports no block size")}
	}
	full := max(len(req.Prompt)-1, 0) / bs
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	computing := make(chan error, 1)
	var took atomic.Int64 // read only once computing has yielded
	pctx, pspan := startSpan(ctx, tracing.SpanPrefill)
	go func() {
		start := time.Now()
		err := prefillOnly(pctx, l.w.Engine, req)
		took.Store(int64(time.Since(start)))
		endPrefill(pspan, req, err)
		computing <- err
	}()
	xctx, xspan := startSpan(ctx, tracing.SpanKVTransfer)
	st, err := l.w.Node.SendWhile(xctx, peer, req.Prompt[:full*bs], from, computing)
	endTransfer(xspan, peer, st, err)
	if err != nil && CodeOf(err) == "" && ctx.Err() == nil {
		// SendWhile returns the prefill leg's own error unwrapped.
		err = &Error{Code: CodePrefillFailed, Err: fmt.Errorf("prefill leg on %s: %w", l.w.ID, err)}
	}
	if err != nil {
		return Push{Transfer: st}, err
	}
	// The estimate as it stands (never a probe on the request's path).
	bps, _ := l.w.Node.Estimate(peer)
	return Push{Transfer: st, Prefill: time.Duration(took.Load()), LinkBytesPerSec: bps}, nil
}

// prefillOnly computes the prompt's KV on e and leaves it in e's prefix
// cache: one output token, as vLLM's prefill leg (max_tokens = 1).
func prefillOnly(ctx context.Context, e engine.Engine, req *engine.Request) error {
	pr := *req
	pr.ID = req.ID + "-prefill"
	pr.MaxTokens, pr.MinTokens, pr.IgnoreEOS, pr.StopTokens = 1, 0, true, nil
	pr.KVTransferParams = nil
	st, err := e.Generate(ctx, &pr)
	if err != nil {
		return err
	}
	for {
		if _, err := st.Recv(); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return err
		}
	}
}
