package vllmpd

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/tandemllm/tandem/authn"
	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/health"
	"github.com/tandemllm/tandem/internal/connlimit"
	"github.com/tandemllm/tandem/planes/kvtransfer"
)

// DefaultLease is how long a prefill worker keeps a finished prefill's
// blocks addressable for a decode worker's pull: vLLM's
// VLLM_NIXL_ABORT_REQUEST_TIMEOUT default.
const DefaultLease = 480 * time.Second

// maxLeases bounds the prefill side's table: a proxy that never sends
// the decode legs must not grow it without limit. The blocks themselves
// are ordinary evictable cache blocks; a lease only names them.
const maxLeases = 4096

// WorkerConfig configures a Worker.
type WorkerConfig struct {
	// ID is remote_engine_id in the params this worker returns.
	ID string
	// Engine hosts the KV; it must implement engine.KVPort.
	Engine engine.Engine
	// Gen is how requests reach Engine (nil: Engine itself).
	Gen engine.Generator
	// Node is the worker's transfer-plane end. It must listen: a decode
	// leg's pulled blocks arrive there.
	Node *kvtransfer.Node
	// SideChannel is where the side channel listens (default
	// 127.0.0.1:0); AdvertiseHost replaces its host in remote_host when
	// set (a wildcard listen address).
	SideChannel   string
	AdvertiseHost string
	// Lease is how long prefilled blocks stay addressable (DefaultLease).
	Lease  time.Duration
	Logger *slog.Logger
	// Peers are the side channels a decode leg may pull from (nil: none;
	// ParsePeers). Checked before any connection and before a transfer
	// token is minted.
	Peers *Peers
	// RefusedPulls, if set, counts decode legs whose remote_host and
	// remote_port were not among Peers.
	RefusedPulls interface{ Inc() }
	// ConnLimits bound the side channel's port (internal/connlimit);
	// Board and ConnMetrics carry its diagnostic and series.
	ConnLimits  connlimit.Limits
	ConnMetrics *connlimit.Metrics
	Board       *health.Board
	// TLS, if set, serves the side channel over mutual TLS admitting only
	// cluster workers, and pulls from other workers' side channels with
	// this worker's certificate (the Node should carry the same identity).
	TLS *authn.Cluster
}

// Worker is an engine.Generator that plays either leg of vLLM's P/D
// protocol, chosen per request by its kv_transfer_params; requests without
// them pass straight through.
type Worker struct {
	cfg  WorkerConfig
	gen  engine.Generator
	port engine.KVPort
	bs   int
	lis  net.Listener
	srv  *http.Server
	host string
	pnum int
	hc   *http.Client
	url  string // the side channel's scheme

	mu     sync.Mutex
	leases map[string]lease
	order  []string // insertion order, to drop the oldest past maxLeases
}

type lease struct {
	tokens  []engine.Token // whole blocks
	expires time.Time
}

// NewWorker starts w's side channel.
func NewWorker(cfg WorkerConfig) (*Worker, error) {
	port, ok := cfg.Engine.(engine.KVPort)
	if !ok {
		return nil, fmt.Errorf("vllmpd: the %s engine cannot transfer KV", cfg.Engine.Info().Kind)
	}
	if cfg.Node == nil || cfg.Node.Addr() == "" {
		return nil, errors.New("vllmpd: the worker needs a listening transfer node")
	}
	if cfg.Gen == nil {
		cfg.Gen = cfg.Engine
	}
	if cfg.SideChannel == "" {
		cfg.SideChannel = "127.0.0.1:0"
	}
	if cfg.Lease <= 0 {
		cfg.Lease = DefaultLease
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	raw, err := net.Listen("tcp", cfg.SideChannel)
	if err != nil {
		return nil, fmt.Errorf("vllmpd: side channel: %w", err)
	}
	var lis net.Listener = connlimit.Wrap(raw, PlaneSideChannel, cfg.ConnLimits, cfg.Board, cfg.ConnMetrics, cfg.Logger)
	host, ps, _ := net.SplitHostPort(lis.Addr().String())
	if cfg.AdvertiseHost != "" {
		host = cfg.AdvertiseHost
	}
	pnum, _ := strconv.Atoi(ps)
	w := &Worker{cfg: cfg, gen: cfg.Gen, port: port, bs: cfg.Engine.Info().BlockSize, lis: lis, host: host, pnum: pnum, leases: map[string]lease{},
		hc: http.DefaultClient, url: "http://"}
	if cfg.TLS != nil {
		lis = tls.NewListener(lis, cfg.TLS.Server(authn.RoleWorker))
		w.hc = &http.Client{Transport: &http.Transport{TLSClientConfig: cfg.TLS.Client(authn.RoleWorker), ForceAttemptHTTP2: true}}
		w.url = "https://"
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/kv/pull", w.handlePull)
	w.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ConnState: connlimit.EstablishOnRequest, ErrorLog: slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn)}
	go func() { _ = w.srv.Serve(lis) }()
	return w, nil
}

// PlaneSideChannel is the side channel's plane name (connlimit).
const PlaneSideChannel = "vllmpd-side-channel"

// SideChannelAddr is host:port of the side channel (remote_host:remote_port).
func (w *Worker) SideChannelAddr() string { return net.JoinHostPort(w.host, strconv.Itoa(w.pnum)) }

// Close stops the side channel.
func (w *Worker) Close() error { return w.srv.Close() }

// fullBlocks is how many whole blocks of a prompt are worth moving: the
// last prompt token is always recomputed (its logits start decoding).
func (w *Worker) fullBlocks(prompt []engine.Token) int { return max(len(prompt)-1, 0) / w.bs }

// Generate implements engine.Generator.
func (w *Worker) Generate(ctx context.Context, req *engine.Request) (engine.Stream, error) {
	if req.KVTransferParams == nil {
		return w.gen.Generate(ctx, req)
	}
	p, err := ParseParams(req.KVTransferParams)
	if err != nil {
		return nil, err
	}
	r := *req
	r.KVTransferParams = nil
	switch {
	case p.DoRemoteDecode:
		st, err := w.gen.Generate(ctx, &r)
		if err != nil {
			return nil, err
		}
		return &prefillStream{w: w, st: st, req: &r}, nil
	case p.DoRemotePrefill:
		if err := w.pull(ctx, &r, p); err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			w.cfg.Logger.Warn("pulling prefilled KV failed; prefilling locally", "diagnostic_code", DiagPullFailed,
				"request_id", req.ID, "remote_engine_id", deref(p.RemoteEngineID), "err", err)
		}
	}
	return w.gen.Generate(ctx, &r)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// prefillStream passes the prefill leg's deltas through and, on the last,
// leases the prompt's blocks and attaches the params naming them.
type prefillStream struct {
	w   *Worker
	st  engine.Stream
	req *engine.Request
}

func (s *prefillStream) Recv() (engine.Delta, error) {
	d, err := s.st.Recv()
	if err != nil || d.Finish == engine.FinishNone || d.Finish == engine.FinishCancelled {
		return d, err
	}
	params, perr := s.w.lease(s.req)
	if perr != nil {
		s.w.cfg.Logger.Warn("leasing prefilled KV failed", "request_id", s.req.ID, "err", perr)
		return d, nil
	}
	d.KVTransferParams = params
	return d, nil
}

// lease records req's prompt blocks and returns the kv_transfer_params
// that name them.
func (w *Worker) lease(req *engine.Request) ([]byte, error) {
	full := w.fullBlocks(req.Prompt)
	ids := make([]int, full)
	for i := range ids {
		ids[i] = i
	}
	now := time.Now()
	exp := now.Add(w.cfg.Lease)
	w.mu.Lock()
	for len(w.order) > 0 {
		id := w.order[0]
		if l, ok := w.leases[id]; ok && now.Before(l.expires) && len(w.order) < maxLeases {
			break
		}
		delete(w.leases, id)
		w.order = w.order[1:]
	}
	if _, ok := w.leases[req.ID]; !ok {
		w.order = append(w.order, req.ID)
	}
	w.leases[req.ID] = lease{tokens: req.Prompt[:full*w.bs], expires: exp}
	w.mu.Unlock()
	bids, _ := json.Marshal(ids)
	engineID, host, port := w.cfg.ID, w.host, w.pnum
	expSec := float64(exp.UnixNano()) / 1e9
	b, err := json.Marshal(Params{
		DoRemotePrefill: true, RemoteEngineID: &engineID, RemoteBlockIDs: bids,
		RemoteHost: &host, RemotePort: &port, RemoteRequestID: req.ID, TPSize: 1,
		RemoteNumTokens: len(req.Prompt), RemoteBlocksExpiryTime: &expSec,
	})
	if err != nil {
		return nil, fmt.Errorf("vllmpd: params: %w", err)
	}
	return b, nil
}

// pullRequest is the side channel's request: push the leased blocks
// [From, …) of RequestID to the transfer node at DstAddr.
type pullRequest struct {
	RequestID string `json:"remote_request_id"`
	From      int    `json:"from"`
	DstID     string `json:"dst_id"`
	DstAddr   string `json:"dst_addr"`
	// Token is the puller's transfer token for the blocks: its node
	// imports nothing without it (kvtransfer.MintToken).
	Token []byte `json:"token"`
}

type pullReply struct {
	Blocks int   `json:"blocks"`
	Wanted int   `json:"wanted"`
	Bytes  int64 `json:"bytes"`
}

// pull brings the blocks of p's prefill that this worker's cache lacks.
func (w *Worker) pull(ctx context.Context, req *engine.Request, p Params) error {
	if p.RemoteHost == nil || p.RemotePort == nil || p.RemoteRequestID == "" {
		return errors.New("vllmpd: do_remote_prefill without remote_host, remote_port and remote_request_id")
	}
	if *p.RemotePort < 1 || *p.RemotePort > 65535 {
		return fmt.Errorf("vllmpd: remote_port %d out of range", *p.RemotePort)
	}
	// The address is the request's: it is vetted before a token for this
	// worker's node is minted or a connection opened.
	if err := w.cfg.Peers.Allow(*p.RemoteHost, *p.RemotePort); err != nil {
		if w.cfg.RefusedPulls != nil {
			w.cfg.RefusedPulls.Inc()
		}
		w.cfg.Logger.Warn("refusing to pull KV from a side channel not in --kv-transfer-peers", "diagnostic_code", DiagPeerRefused,
			"request_id", req.ID, "remote_host", *p.RemoteHost, "remote_port", *p.RemotePort)
		return fmt.Errorf("vllmpd: %w", err)
	}
	full := w.fullBlocks(req.Prompt)
	if ids, err := p.BlockIDs(); err != nil {
		return err
	} else if len(ids) < full {
		full = len(ids) // the prefill side moved fewer (a shorter prompt there)
	}
	have, err := w.port.CachedPrefix(ctx, req.Prompt[:full*w.bs])
	if err != nil {
		return fmt.Errorf("vllmpd: cached prefix: %w", err)
	}
	from := have / w.bs
	if from >= full {
		return nil // everything is cached here already
	}
	tok, err := w.cfg.Node.MintToken(deref(p.RemoteEngineID), req.Prompt[:full*w.bs], from)
	if err != nil {
		return fmt.Errorf("vllmpd: %w", err)
	}
	body, _ := json.Marshal(pullRequest{RequestID: p.RemoteRequestID, From: from, DstID: w.cfg.ID, DstAddr: w.cfg.Node.Addr(), Token: tok})
	url := w.url + net.JoinHostPort(*p.RemoteHost, strconv.Itoa(*p.RemotePort)) + "/v1/kv/pull"
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("vllmpd: pull: %w", err)
	}
	hr.Header.Set("Content-Type", "application/json")
	resp, err := w.hc.Do(hr)
	if err != nil {
		return fmt.Errorf("vllmpd: pull from %s: %w", url, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("vllmpd: pull from %s: status %d: %s", url, resp.StatusCode, raw)
	}
	var rep pullReply
	if err := json.Unmarshal(raw, &rep); err != nil {
		return fmt.Errorf("vllmpd: pull reply: %w", err)
	}
	return nil
}

// handlePull serves a decode worker's pull: the leased blocks are pushed
// to its transfer node; the reply waits until they are imported there.
func (w *Worker) handlePull(rw http.ResponseWriter, r *http.Request) {
	var pr pullRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&pr); err != nil {
		http.Error(rw, "bad pull request: "+err.Error(), http.StatusBadRequest)
		return
	}
	w.mu.Lock()
	l, ok := w.leases[pr.RequestID]
	w.mu.Unlock()
	if !ok || time.Now().After(l.expires) {
		http.Error(rw, "no leased blocks for remote_request_id "+pr.RequestID, http.StatusNotFound)
		return
	}
	// The blocks go only to the host the pull came from (its port is the
	// puller's choice): a pull cannot point this worker at a third host.
	dst, err := sameHost(pr.DstAddr, r.RemoteAddr)
	if err != nil {
		http.Error(rw, "bad dst_addr: "+err.Error(), http.StatusBadRequest)
		return
	}
	st, err := w.cfg.Node.Send(r.Context(), kvtransfer.Peer{ID: pr.DstID, Addr: dst, Token: pr.Token}, l.tokens, pr.From)
	if err != nil {
		http.Error(rw, fmt.Sprintf("sending KV: %v", err), http.StatusBadGateway)
		return
	}
	b, _ := json.Marshal(pullReply{Blocks: st.Blocks, Wanted: st.Wanted, Bytes: st.Bytes})
	rw.Header().Set("Content-Type", "application/json")
	_, _ = rw.Write(b)
}

// sameHost is dstAddr's port on remoteAddr's host.
func sameHost(dstAddr, remoteAddr string) (string, error) {
	_, port, err := net.SplitHostPort(dstAddr)
	if err != nil {
		return "", err
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("port %q", port)
	}
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		return "", err
	}
	return net.JoinHostPort(host, port), nil
}
