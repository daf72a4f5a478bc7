package requestplane

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tandemllm/tandem/disagg"
	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/kvtransfer"
)

// The disaggregation calls: a frontend's orchestrator asks a worker about
// a prompt (Assess), about its link to a decode worker (Link), and has a
// prefill worker run a prefill leg and push the blocks (Prefill). They
// ride the request plane rather than a service of their own so that one
// connection, one address in discovery and one drain cover everything a
// frontend asks of a worker.
const (
	assessMethod  = "/" + serviceName + "/Assess"
	linkMethod    = "/" + serviceName + "/Link"
	prefillMethod = "/" + serviceName + "/Prefill"
	keyMethod     = "/" + serviceName + "/TransferKey"
)

// keyReply carries the key a decode worker's transfer tokens are signed
// with. Only a frontend may ask (with mTLS, the request plane admits only
// frontends' certificates).
type keyReply struct {
	Key []byte
}

// tokenKeyer is a Side that can hand out its token key (disagg.Local).
type tokenKeyer interface{ TokenKey() []byte }

// assessRequest asks for a disagg.Assessment of Prompt.
type assessRequest struct {
	Prompt []engine.Token
	Tail   int
}

// linkRequest asks for the link estimate to Peer; linkReply answers.
type linkRequest struct {
	Peer kvtransfer.Peer `json:"peer"`
}

type linkReply struct {
	BytesPerSec float64 `json:"bytes_per_sec"`
	Code        string  `json:"code,omitempty"`
	Message     string  `json:"message,omitempty"`
}

// pushRequest is a prefill leg: Request's prompt is prefilled and blocks
// [From, full) are sent to Peer.
type pushRequest struct {
	Request engine.Request
	Peer    kvtransfer.Peer
	From    int
}

// pushReply carries a disagg.Push, or the diagnostic code of a failure:
// the code, not a gRPC status, is what the orchestrator counts and logs.
type pushReply struct {
	Blocks      int     `json:"blocks"`
	Bytes       int64   `json:"bytes"`
	Wanted      int     `json:"wanted"`
	DurationNs  int64   `json:"duration_ns"`
	WaitedNs    int64   `json:"waited_ns"`
	PrefillNs   int64   `json:"prefill_ns"`
	BytesPerSec float64 `json:"bytes_per_sec"`
	Code        string  `json:"code,omitempty"`
	Message     string  `json:"message,omitempty"`
}

func unary[Req, Rep any](h func(*handler, context.Context, *Req) (*Rep, error)) func(any, context.Context, func(any) error, grpc.UnaryServerInterceptor) (any, error) {
	return func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
		hd := srv.(*handler)
		if hd.side == nil {
			return nil, status.Error(codes.Unimplemented, "this worker takes no part in disaggregated prefill (no KV transfer node)")
		}
		var req Req
		if err := dec(&req); err != nil {
			return nil, err
		}
		return h(hd, ctx, &req)
	}
}

var disaggMethods = []grpc.MethodDesc{
	{MethodName: "TransferKey", Handler: unary(func(h *handler, _ context.Context, _ *keyReply) (*keyReply, error) {
		k, ok := h.side.(tokenKeyer)
		if !ok || h.side.TransferAddr() == "" {
			return nil, status.Error(codes.FailedPrecondition, "this worker receives no KV transfers")
		}
		return &keyReply{Key: k.TokenKey()}, nil
	})},
	{MethodName: "Assess", Handler: unary(func(h *handler, ctx context.Context, r *assessRequest) (*disagg.Assessment, error) {
		a, err := h.side.Assess(ctx, r.Prompt, r.Tail)
		if err != nil {
			return nil, toStatus(err)
		}
		return &a, nil
	})},
	{MethodName: "Link", Handler: unary(func(h *handler, ctx context.Context, r *linkRequest) (*linkReply, error) {
		bps, err := h.side.LinkThroughput(ctx, r.Peer)
		if err != nil {
			return &linkReply{Code: codeOf(err), Message: err.Error()}, nil
		}
		return &linkReply{BytesPerSec: bps}, nil
	})},
	{MethodName: "Prefill", Handler: unary(func(h *handler, ctx context.Context, r *pushRequest) (*pushReply, error) {
		p, err := h.side.PrefillAndSend(ctx, &r.Request, r.Peer, r.From)
		st := p.Transfer
		rep := &pushReply{Blocks: st.Blocks, Bytes: st.Bytes, Wanted: st.Wanted, DurationNs: int64(st.Duration),
			WaitedNs: int64(st.Waited), PrefillNs: int64(p.Prefill), BytesPerSec: p.LinkBytesPerSec}
		if err != nil {
			if ctx.Err() != nil {
				return nil, toStatus(ctx.Err())
			}
			rep.Code, rep.Message = codeOf(err), err.Error()
		}
		return rep, nil
	})},
}

func codeOf(err error) string {
	if c := kvtransfer.CodeOf(err); c != "" {
		return c
	}
	return kvtransfer.CodeFailed
}

// Side is a remote worker as a frontend's disaggregation orchestrator sees
// it (disagg.Side): the static facts come from the worker's discovery
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

// NewSide returns the disagg.Side of the worker behind c.
func NewSide(c *Client, d SideDesc) *Side {
	return &Side{c: c, desc: d, links: map[string]linkEstimate{}}
}

func (s *Side) ID() string           { return s.desc.ID }
func (s *Side) Layout() string       { return s.desc.Layout }
func (s *Side) BlockSize() int       { return s.desc.BlockSize }
func (s *Side) BlockBytes() int      { return s.desc.BlockBytes }
func (s *Side) TransferAddr() string { return s.desc.TransferAddr }

// Assess implements disagg.Side.
func (s *Side) Assess(ctx context.Context, prompt []engine.Token, tail int) (disagg.Assessment, error) {
	var a disagg.Assessment
	if err := s.c.cc.Invoke(ctx, assessMethod, &assessRequest{Prompt: prompt, Tail: tail}, &a); err != nil {
		return a, fmt.Errorf("requestplane: assess on %s: %w", s.desc.ID, fromStatus(err))
	}
	return a, nil
}

// LinkThroughput implements disagg.Side; the worker's answer is reused
// for linkTTL, and every prefill leg refreshes it.
func (s *Side) LinkThroughput(ctx context.Context, peer kvtransfer.Peer) (float64, error) {
	s.mu.Lock()
	e, ok := s.links[peer.Addr]
	s.mu.Unlock()
	if ok && time.Since(e.at) < linkTTL {
		return e.bps, nil
	}
	var rep linkReply
	if err := s.c.cc.Invoke(ctx, linkMethod, &linkRequest{Peer: peer}, &rep); err != nil {
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

// TransferToken implements disagg.Side: the worker's token key is
// fetched once, then every token is minted here without a round trip.
func (s *Side) TransferToken(ctx context.Context, sender string, tokens []engine.Token, from int) ([]byte, error) {
	s.mu.Lock()
	key := s.key
	s.mu.Unlock()
	if key == nil {
		var rep keyReply
		if err := s.c.cc.Invoke(ctx, keyMethod, &keyReply{}, &rep); err != nil {
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

// PrefillAndSend implements disagg.Side.
func (s *Side) PrefillAndSend(ctx context.Context, req *engine.Request, peer kvtransfer.Peer, from int) (disagg.Push, error) {
	if req.ID != "" {
		ctx = withRequestID(ctx, req.ID)
	}
	var rep pushReply
	if err := s.c.cc.Invoke(ctx, prefillMethod, &pushRequest{Request: *req, Peer: peer, From: from}, &rep); err != nil {
		err = fromStatus(err)
		if ctx.Err() != nil {
			return disagg.Push{}, err
		}
		return disagg.Push{}, &kvtransfer.Error{Code: disagg.FallbackPrefillFailed,
			Err: fmt.Errorf("requestplane: prefill on %s: %w", s.desc.ID, err)}
	}
	p := disagg.Push{
		Transfer: kvtransfer.Stats{Blocks: rep.Blocks, Bytes: rep.Bytes, Wanted: rep.Wanted,
			Duration: time.Duration(rep.DurationNs), Waited: time.Duration(rep.WaitedNs)},
		Prefill: time.Duration(rep.PrefillNs), LinkBytesPerSec: rep.BytesPerSec,
	}
	if rep.Code != "" {
		return p, &kvtransfer.Error{Code: rep.Code, Err: errors.New(rep.Message)}
	}
	s.note(peer, rep.BytesPerSec)
	return p, nil
}

func appendAssess(b []byte, r *assessRequest) []byte {
	b = append(b, codecVersion)
	b = appendTokens(b, r.Prompt)
	return binary.AppendVarint(b, int64(r.Tail))
}

func decodeAssess(b []byte, m *assessRequest) error {
	r := reader{b: b}
	r.version()
	m.Prompt = r.tokens()
	m.Tail = r.int()
	return r.done()
}

func appendPush(b []byte, p *pushRequest) []byte {
	b = appendRequest(b, &p.Request)
	b = appendString(b, p.Peer.ID)
	b = appendString(b, p.Peer.Addr)
	b = binary.AppendVarint(b, int64(p.From))
	return appendString(b, string(p.Peer.Token))
}

func decodePush(b []byte, m *pushRequest) error {
	r := reader{b: b}
	r.request(&m.Request)
	m.Peer.ID = r.str()
	m.Peer.Addr = r.str()
	m.From = r.int()
	if tok := r.str(); tok != "" {
		m.Peer.Token = []byte(tok)
	}
	return r.done()
}
