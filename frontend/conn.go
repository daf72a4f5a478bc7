package frontend

import (
	"context"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/tandemllm/tandem/authn"
	"github.com/tandemllm/tandem/discovery"
	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/kvtransfer"
	"github.com/tandemllm/tandem/requestplane"
)

// conn is one worker's request-plane client, counting the streams in
// flight so that a departed worker's connection closes only after they end:
// closing it at once would cut the streams of a worker that is draining
// cleanly. Over the in-process transport it holds the worker itself.
type conn struct {
	c     *requestplane.Client // nil in process
	local *requestplane.Local  // nil over gRPC

	mu      sync.Mutex
	active  int
	retired bool
	closed  bool
	queue   *requestplane.QueueWatch // an upstream worker's queue reports; nil until asked
}

// queueReport is the worker's engine queue report for the router: in
// process the engine's own; over gRPC, for a server Tandem does not own
// (which may have other clients), a watch of the reports its worker
// relays, once per connection. nil: none.
func (c *conn) queueReport(ctx context.Context, rec discovery.Record) engine.QueueReporter {
	if c.local != nil {
		q, _ := c.local.Engine.(engine.QueueReporter)
		return q
	}
	if rec.Engine != "upstream" {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.queue == nil && !c.closed {
		c.queue = c.c.WatchQueue(ctx)
	}
	if c.queue == nil {
		return nil
	}
	return c.queue
}

// info is the worker as the router sees it: in process the engine's own
// info (and timing model), otherwise what its record says.
func (c *conn) info(rec discovery.Record) (engine.Info, engine.PrefillEstimator) {
	if c.local != nil {
		info := c.local.Engine.Info()
		info.Model = rec.Model
		timing, _ := c.local.Engine.(engine.PrefillEstimator)
		return info, timing
	}
	return engine.Info{Kind: rec.Engine, Model: rec.Model, BlockSize: rec.KVLayout.BlockSize, ContextLength: rec.ContextLength,
		KVCapacityTokens: rec.CapacityBlocks * rec.KVLayout.BlockSize}, nil
}

// shut stops the queue watch, then closes the connection (the watch
// would otherwise retry on a closed one).
func (c *conn) shut() {
	c.mu.Lock()
	q := c.queue
	c.mu.Unlock()
	if q != nil {
		q.Close()
	}
	if c.c != nil {
		_ = c.c.Close()
	}
}

// dial reaches a worker over its transport: an in-process address
// resolves to the worker itself, any other is dialled over gRPC.
func dial(addr string, cluster *authn.Cluster) (*conn, error) {
	if l, ok, err := requestplane.LookupLocal(addr); ok {
		if err != nil {
			return nil, err
		}
		return &conn{local: l}, nil
	}
	var opts []grpc.DialOption
	if cluster != nil {
		opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(cluster.Client(authn.RoleWorker))))
	}
	c, err := requestplane.Dial(addr, opts...)
	if err != nil {
		return nil, err
	}
	return &conn{c: c}, nil
}

// Generate implements engine.Generator. The frontend cancels the context
// it passes once it is done with the stream, whatever the outcome, which is
// when the stream stops counting.
func (c *conn) Generate(ctx context.Context, req *engine.Request) (engine.Stream, error) {
	c.hold()
	var gen engine.Generator = c.c
	if c.local != nil {
		gen = c.local.Gen
	}
	s, err := gen.Generate(ctx, req)
	if err != nil {
		c.release()
		return nil, err
	}
	context.AfterFunc(ctx, c.release)
	return s, nil
}

func (c *conn) hold() {
	c.mu.Lock()
	c.active++
	c.mu.Unlock()
}

func (c *conn) release() {
	c.mu.Lock()
	c.active--
	last := c.retired && c.active == 0 && !c.closed
	if last {
		c.closed = true
	}
	c.mu.Unlock()
	if last {
		c.shut()
	}
}

// retire closes the connection once no stream uses it.
func (c *conn) retire() {
	c.mu.Lock()
	c.retired = true
	now := c.active == 0 && !c.closed
	if now {
		c.closed = true
	}
	c.mu.Unlock()
	if now {
		c.shut()
	}
}

// close cuts the connection now (shutdown).
func (c *conn) close() {
	c.mu.Lock()
	was := c.closed
	c.closed, c.retired = true, true
	c.mu.Unlock()
	if !was {
		c.shut()
	}
}

// side is the worker's part in disaggregation over this connection. Its
// calls count as streams, so a draining prefill worker finishes the legs
// it is running before its connection closes.
func (c *conn) side(rec discovery.Record) kvtransfer.Side {
	if c.local != nil {
		return c.local.Side
	}
	return &countedSide{Side: requestplane.NewSide(c.c, requestplane.SideDesc{
		ID: rec.ID, Layout: rec.KVLayout.EngineLayout, BlockSize: rec.KVLayout.BlockSize,
		BlockBytes: rec.KVTransfer.BlockBytes, TransferAddr: rec.KVTransfer.Addr,
	}), c: c}
}

type countedSide struct {
	*requestplane.Side
	c *conn
}

func (s *countedSide) Assess(ctx context.Context, prompt []engine.Token, tail int) (kvtransfer.Assessment, error) {
	s.c.hold()
	defer s.c.release()
	return s.Side.Assess(ctx, prompt, tail)
}

func (s *countedSide) LinkThroughput(ctx context.Context, peer kvtransfer.Peer) (float64, error) {
	s.c.hold()
	defer s.c.release()
	return s.Side.LinkThroughput(ctx, peer)
}

func (s *countedSide) PrefillAndSend(ctx context.Context, req *engine.Request, peer kvtransfer.Peer, from int) (kvtransfer.Push, error) {
	s.c.hold()
	defer s.c.release()
	return s.Side.PrefillAndSend(ctx, req, peer, from)
}
