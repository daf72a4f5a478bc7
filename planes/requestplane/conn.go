package requestplane

import (
	"context"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/tandemllm/tandem/authn"
	"github.com/tandemllm/tandem/control/discovery"
	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/planes/kvtransfer"
)

// Conn is a frontend's connection to one worker over its transport (the
// gRPC request plane, or in process: Connect), counting the streams in
// flight so that a departed worker's connection closes only after they end:
// closing it at once would cut the streams of a worker that is draining
// cleanly. It implements engine.Generator.
type Conn struct {
	c     *Client // nil in process
	local *Local  // nil over gRPC

	mu      sync.Mutex
	active  int
	retired bool
	closed  bool
	queue   *QueueWatch // an upstream worker's queue reports; nil until asked
}

// QueueReport is the worker's engine queue report for the router: in
// process the engine's own; over gRPC, for a server Tandem does not own
// (which may have other clients), a watch of the reports its worker
// relays, once per connection. nil: none.
func (c *Conn) QueueReport(ctx context.Context, rec discovery.Record) engine.QueueReporter {
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

// Info is the worker as the router sees it: in process the engine's own
// info (and timing model), otherwise what its record says.
func (c *Conn) Info(rec discovery.Record) (engine.Info, engine.PrefillEstimator) {
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
func (c *Conn) shut() {
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

// Connect reaches a worker over its transport: an in-process address
// (RegisterLocal) resolves to the worker itself, any other is dialled over
// gRPC, with mutual TLS when cluster is set.
func Connect(addr string, cluster *authn.Cluster) (*Conn, error) {
	if l, ok, err := LookupLocal(addr); ok {
		if err != nil {
			return nil, err
		}
		return &Conn{local: l}, nil
	}
	var opts []grpc.DialOption
	if cluster != nil {
		opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(cluster.Client(authn.RoleWorker))))
	}
	c, err := Dial(addr, opts...)
	if err != nil {
		return nil, err
	}
	return &Conn{c: c}, nil
}

// Generate implements engine.Generator. The frontend cancels the context
// it passes once it is done with the stream, whatever the outcome, which is
// when the stream stops counting.
func (c *Conn) Generate(ctx context.Context, req *engine.Request) (engine.Stream, error) {
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

func (c *Conn) hold() {
	c.mu.Lock()
	c.active++
	c.mu.Unlock()
}

func (c *Conn) release() {
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

// Retire closes the connection once no stream uses it.
func (c *Conn) Retire() {
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

// Close cuts the connection now (shutdown).
func (c *Conn) Close() {
	c.mu.Lock()
	was := c.closed
	c.closed, c.retired = true, true
	c.mu.Unlock()
	if !was {
		c.shut()
	}
}

// Side is the worker's part in disaggregation over this connection. Its
// calls count as streams, so a draining prefill worker finishes the legs
// it is running before its connection closes.
func (c *Conn) Side(rec discovery.Record) kvtransfer.Side {
	if c.local != nil {
		return c.local.Side
	}
	return &countedSide{Side: NewSide(c.c, SideDesc{
		ID: rec.ID, Layout: rec.KVLayout.EngineLayout, BlockSize: rec.KVLayout.BlockSize,
		BlockBytes: rec.KVTransfer.BlockBytes, TransferAddr: rec.KVTransfer.Addr,
	}), c: c}
}

type countedSide struct {
	*Side
	c *Conn
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
