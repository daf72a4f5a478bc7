package requestplane

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/planes/kvtransfer"
	rpv1 "github.com/tandemllm/tandem/planes/requestplane/proto/tandem/requestplane/v1"
	"github.com/tandemllm/tandem/tracing"
)

// A remote worker's Side caches its transfer key, and the orchestrator
// resets it through this capability (checked at compile time).
var _ kvtransfer.TransferKeyResetter = (*Side)(nil)

// The disaggregation calls: a frontend's orchestrator asks a worker about
// a prompt (Assess), about its link to a decode worker (Link), and has a
// prefill worker run a prefill leg and push the blocks (Prefill). They
// ride the request plane rather than a service of their own so that one
// connection, one address in discovery and one drain cover everything a
// frontend asks of a worker.

// errNoSide is the status of a disaggregation call on a worker that takes
// no part in it.
var errNoSide = status.Error(codes.Unimplemented, "this worker takes no part in disaggregated prefill (no KV transfer node)")

// tokenKeyer is a Side that can hand out its token key (kvtransfer.Local).
type tokenKeyer interface{ TokenKey() []byte }

// TransferKey hands a frontend the key this worker's transfer tokens are
// signed with. Only a frontend may ask (with mTLS, the request plane admits
// only frontends' certificates).
func (h *handler) TransferKey(context.Context, *rpv1.TransferKeyRequest) (*rpv1.TransferKeyReply, error) {
	k, ok := h.side.(tokenKeyer)
	if !ok || h.side.TransferAddr() == "" {
		return nil, status.Error(codes.FailedPrecondition, "this worker receives no KV transfers")
	}
	return &rpv1.TransferKeyReply{Key: k.TokenKey()}, nil
}

func (h *handler) Assess(ctx context.Context, m *rpv1.AssessRequest) (_ *rpv1.Assessment, err error) {
	ctx, sp := tracing.StartCall(ctx, rpv1.Worker_Assess_FullMethodName, spanContext(m.GetTrace()))
	defer func() { tracing.EndCall(sp, err) }()
	if h.side == nil {
		return nil, errNoSide
	}
	if len(m.Prompt) > maxTokens {
		return nil, status.Errorf(codes.InvalidArgument, "requestplane: assess %d tokens: at most %d", len(m.Prompt), maxTokens)
	}
	a, err := h.side.Assess(ctx, m.Prompt, int(m.Tail))
	if err != nil {
		return nil, toStatus(err)
	}
	return wireAssessment(a), nil
}

func (h *handler) Link(ctx context.Context, m *rpv1.LinkRequest) (*rpv1.LinkReply, error) {
	if h.side == nil {
		return nil, errNoSide
	}
	bps, err := h.side.LinkThroughput(ctx, enginePeer(m.Peer))
	if err != nil {
		return &rpv1.LinkReply{Code: codeOf(err), Message: err.Error()}, nil
	}
	return &rpv1.LinkReply{BytesPerSec: bps}, nil
}

func (h *handler) Prefill(ctx context.Context, m *rpv1.PrefillRequest) (_ *rpv1.PrefillReply, err error) {
	ctx, sp := tracing.StartCall(ctx, rpv1.Worker_Prefill_FullMethodName, spanContext(m.GetRequest().GetTrace()))
	defer func() { tracing.EndCall(sp, err) }()
	if h.side == nil {
		return nil, errNoSide
	}
	req, err := engineRequest(m.GetRequest())
	if err != nil {
		return nil, err
	}
	p, err := h.side.PrefillAndSend(ctx, req, enginePeer(m.Peer), int(m.From))
	st := p.Transfer
	rep := &rpv1.PrefillReply{Blocks: int32Of(st.Blocks), Bytes: st.Bytes, Wanted: int32Of(st.Wanted), DurationNs: int64(st.Duration),
		WaitedNs: int64(st.Waited), PrefillNs: int64(p.Prefill), BytesPerSec: p.LinkBytesPerSec}
	if err != nil {
		if ctx.Err() != nil {
			return nil, toStatus(ctx.Err())
		}
		rep.Code, rep.Message = codeOf(err), err.Error()
	}
	return rep, nil
}

func codeOf(err error) string {
	if c := kvtransfer.CodeOf(err); c != "" {
		return c
	}
	return kvtransfer.CodeFailed
}

// Side is a remote worker as a frontend's disaggregation orchestrator sees
// it (kvtransfer.Side): the static facts come from the worker's discovery
// record, the calls go over its request plane.
type Side struct {
	c    *Client
	desc SideDesc

	mu    sync.Mutex
	links map[string]linkEstimate // by peer address
	key   []byte                  // the worker's token key, once fetched
}

// SideDesc is what the worker's record says about its KV.
type SideDesc struct {
	ID           string
	Layout       string
	BlockSize    int
	BlockBytes   int
	TransferAddr string
}

type linkEstimate struct {
	bps float64
	at  time.Time
}

// linkTTL bounds how long a link estimate the worker gave is reused before
// it is asked again: other frontends' transfers move the worker's own
// estimate in the meantime.
const linkTTL = 10 * time.Second

// NewSide returns the kvtransfer.Side of the worker behind c.
func NewSide(c *Client, d SideDesc) *Side {
	return &Side{c: c, desc: d, links: map[string]linkEstimate{}}
}

// TransferToken implements kvtransfer.Side: the worker's token key is
// fetched once, then every token is minted here without a round trip.
func (s *Side) TransferToken(ctx context.Context, sender string, tokens []engine.Token, from int) ([]byte, error) {
	s.mu.Lock()
	key := s.key
	s.mu.Unlock()
	if key == nil {
		rep, err := s.c.w.TransferKey(ctx, &rpv1.TransferKeyRequest{})
		if err != nil {
			return nil, fmt.Errorf("requestplane: transfer key of %s: %w", s.desc.ID, fromStatus(err))
		}
		if len(rep.Key) != kvtransfer.KeyLen {
			return nil, fmt.Errorf("requestplane: transfer key of %s: %d bytes", s.desc.ID, len(rep.Key))
		}
		key = rep.Key
		s.mu.Lock()
		s.key = key
		s.mu.Unlock()
	}
	return kvtransfer.MintToken(key, s.desc.ID, sender, tokens, from)
}

// ResetTransferKey forgets the fetched token key, so the next token is
// minted with a fresh one: the orchestrator calls it when the worker
// rejected a transfer (a worker restarted under the same address has a
// new key).
func (s *Side) ResetTransferKey() {
	s.mu.Lock()
	s.key = nil
	s.mu.Unlock()
}

func (s *Side) ID() string           { return s.desc.ID }
func (s *Side) Layout() string       { return s.desc.Layout }
func (s *Side) BlockSize() int       { return s.desc.BlockSize }
func (s *Side) BlockBytes() int      { return s.desc.BlockBytes }
func (s *Side) TransferAddr() string { return s.desc.TransferAddr }

// Assess implements kvtransfer.Side.
func (s *Side) Assess(ctx context.Context, prompt []engine.Token, tail int) (kvtransfer.Assessment, error) {
	m, err := s.c.w.Assess(ctx, &rpv1.AssessRequest{Prompt: prompt, Tail: int32Of(tail), Trace: wireTrace(ctx)})
	if err != nil {
		return kvtransfer.Assessment{}, fmt.Errorf("requestplane: assess on %s: %w", s.desc.ID, fromStatus(err))
	}
	return engineAssessment(m), nil
}

// LinkThroughput implements kvtransfer.Side; the worker's answer is reused
// for linkTTL, and every prefill leg refreshes it.
func (s *Side) LinkThroughput(ctx context.Context, peer kvtransfer.Peer) (float64, error) {
	s.mu.Lock()
	e, ok := s.links[peer.Addr]
	s.mu.Unlock()
	if ok && time.Since(e.at) < linkTTL {
		return e.bps, nil
	}
	rep, err := s.c.w.Link(ctx, &rpv1.LinkRequest{Peer: wirePeer(peer)})
	if err != nil {
		return 0, &kvtransfer.Error{Code: kvtransfer.CodeFailed, Err: fmt.Errorf("requestplane: link from %s: %w", s.desc.ID, fromStatus(err))}
	}
	if rep.Code != "" {
		return 0, &kvtransfer.Error{Code: rep.Code, Err: fmt.Errorf("worker %s: %s", s.desc.ID, rep.Message)}
	}
	s.note(peer, rep.BytesPerSec)
	return rep.BytesPerSec, nil
}

func (s *Side) note(peer kvtransfer.Peer, bps float64) {
	if bps <= 0 {
		return
	}
	s.mu.Lock()
	s.links[peer.Addr] = linkEstimate{bps: bps, at: time.Now()}
	s.mu.Unlock()
}

// PrefillAndSend implements kvtransfer.Side.
func (s *Side) PrefillAndSend(ctx context.Context, req *engine.Request, peer kvtransfer.Peer, from int) (kvtransfer.Push, error) {
	rep, err := s.c.w.Prefill(ctx, &rpv1.PrefillRequest{Request: callRequest(ctx, req), Peer: wirePeer(peer), From: int32Of(from)})
	if err != nil {
		err = fromStatus(err)
		if ctx.Err() != nil {
			return kvtransfer.Push{}, err
		}
		return kvtransfer.Push{}, &kvtransfer.Error{Code: kvtransfer.CodePrefillFailed,
			Err: fmt.Errorf("requestplane: prefill on %s: %w", s.desc.ID, err)}
	}
	p := kvtransfer.Push{
		Transfer: kvtransfer.Stats{Blocks: int(rep.Blocks), Bytes: rep.Bytes, Wanted: int(rep.Wanted),
			Duration: time.Duration(rep.DurationNs), Waited: time.Duration(rep.WaitedNs)},
		Prefill: time.Duration(rep.PrefillNs), LinkBytesPerSec: rep.BytesPerSec,
	}
	if rep.Code != "" {
		return p, &kvtransfer.Error{Code: rep.Code, Err: errors.New(rep.Message)}
	}
	s.note(peer, rep.BytesPerSec)
	return p, nil
}
