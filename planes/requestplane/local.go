package requestplane

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/planes/kvtransfer"
)

// LocalScheme begins the request-plane address of a worker served in
// process (RegisterLocal): a frontend of the same process resolves it with
// LookupLocal instead of dialling, and no byte crosses a socket.
const LocalScheme = "inproc://"

// Local is a worker served in process: what a frontend reaches over gRPC,
// handed over directly.
type Local struct {
	// Gen takes the worker's streams (its drain gate, not the bare engine).
	Gen engine.Generator
	// Side is its part in disaggregated prefill; nil for aggregated workers.
	Side kvtransfer.Side
	// Engine is what gRPC does not carry: the engine's info, its timing
	// model and its queue report.
	Engine engine.Engine
}

var locals = struct {
	sync.Mutex
	byAddr map[string]*Local
	next   uint64
}{byAddr: map[string]*Local{}}

// RegisterLocal serves l in process under a fresh address,
// "inproc://<n>/<id>" (unique in the process, so systems started side by
// side never meet), until the returned func withdraws it.
func RegisterLocal(id string, l *Local) (addr string, withdraw func()) {
	locals.Lock()
	defer locals.Unlock()
	locals.next++
	addr = fmt.Sprintf("%s%d/%s", LocalScheme, locals.next, id)
	locals.byAddr[addr] = l
	return addr, func() {
		locals.Lock()
		delete(locals.byAddr, addr)
		locals.Unlock()
	}
}

// LookupLocal resolves an address RegisterLocal gave out. ok is false for
// any other address; err is set for an in-process address that is not (or
// no longer) served.
func LookupLocal(addr string) (l *Local, ok bool, err error) {
	if !strings.HasPrefix(addr, LocalScheme) {
		return nil, false, nil
	}
	locals.Lock()
	defer locals.Unlock()
	if l = locals.byAddr[addr]; l == nil {
		return nil, true, fmt.Errorf("requestplane: no worker is served in process at %s", addr)
	}
	return l, true, nil
}

// LocalServer is the in-process transport's server side: a worker served
// under an inproc:// address, behind a gate that its drain closes.
type LocalServer struct {
	gate     *gate
	addr     string
	withdraw func()
}

// ServeLocal serves gen (and the worker's side, engine) in process under
// a fresh address (RegisterLocal).
func ServeLocal(id string, gen engine.Generator, side kvtransfer.Side, eng engine.Engine) *LocalServer {
	s := &LocalServer{gate: &gate{Generator: gen}}
	s.addr, s.withdraw = RegisterLocal(id, &Local{Gen: s.gate, Side: side, Engine: eng})
	return s
}

// Addr is the worker's inproc:// address.
func (s *LocalServer) Addr() string { return s.addr }

// Stop withdraws the address at once (a failed start).
func (s *LocalServer) Stop() { s.withdraw() }

// Drain waits until the streams in flight have finished, or ctx ends (then
// it closes the gate with cut streams in flight, which the engine's close
// ends), as GracefulStop does on the gRPC request plane; then it withdraws
// the address.
func (s *LocalServer) Drain(ctx context.Context) (cut int64) {
	defer s.withdraw()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !s.gate.closeIfIdle() {
		select {
		case <-ctx.Done():
			s.gate.mu.Lock()
			s.gate.closed = true
			s.gate.mu.Unlock()
			return s.gate.n.Load()
		case <-tick.C:
		}
	}
	return 0
}

// gate is the in-process transport's server side: it counts the worker's
// streams in flight, which the drain waits for, as gRPC's GracefulStop
// does on the request plane. Once closed it refuses new streams with
// engine.ErrUnavailable: a request the router picked this worker for just
// before it left is retried on another worker by the frontend instead of
// failing.
type gate struct {
	engine.Generator
	n      atomic.Int64
	mu     sync.Mutex
	closed bool
}

// closeIfIdle closes the gate if no stream is in flight.
func (t *gate) closeIfIdle() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n.Load() > 0 {
		return false
	}
	t.closed = true
	return true
}

func (t *gate) Generate(ctx context.Context, req *engine.Request) (engine.Stream, error) {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil, fmt.Errorf("%w: the worker left its pool", engine.ErrUnavailable)
	}
	t.n.Add(1)
	t.mu.Unlock()
	st, err := t.Generator.Generate(ctx, req)
	if err != nil {
		t.n.Add(-1)
		return nil, err
	}
	ts := &gatedStream{Stream: st}
	ts.release = func() { ts.once.Do(func() { t.n.Add(-1) }) }
	// A client that leaves stops reading: its cancelled context ends the
	// stream as far as the drain is concerned (the engine stops it within
	// its 100 ms contract).
	ts.stop = context.AfterFunc(ctx, ts.release)
	return ts, nil
}

type gatedStream struct {
	engine.Stream
	once    sync.Once
	release func()
	stop    func() bool
}

func (s *gatedStream) Recv() (engine.Delta, error) {
	d, err := s.Stream.Recv()
	if err != nil || d.Finish != engine.FinishNone {
		s.stop()
		s.release()
	}
	return d, err
}
