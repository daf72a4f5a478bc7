package dispatch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/routed"
	"github.com/tandemllm/tandem/health"
	"github.com/tandemllm/tandem/router"
	"github.com/tandemllm/tandem/tracing"
)

var (
	// ErrFirstTokenTimeout: a worker sent no first token within
	// Config.FirstTokenTimeout and no other worker was left to try.
	ErrFirstTokenTimeout = errors.New("first token timeout")
	// ErrNotRouted marks a request no worker could be chosen for (no live
	// worker of its model, every one excluded, the policy failed).
	ErrNotRouted = errors.New("no worker chosen")
	// ErrUnknownModel: no worker has ever registered the request's model
	// (with ErrNotRouted).
	ErrUnknownModel = router.ErrUnknownModel
)

// WorkerError is a request's failure on a worker before its first token,
// after any retries: the error is the worker's, as it reported it.
type WorkerError struct {
	Worker string
	Err    error
}

func (e *WorkerError) Error() string { return e.Err.Error() }
func (e *WorkerError) Unwrap() error { return e.Err }

// Request is one choice of a request, tokenized and admitted.
type Request struct {
	// Engine is the request as the worker's engine receives it. Generate
	// neither changes nor keeps it past the Stream's end.
	Engine *engine.Request
	// Pin, when set, starts the request on the worker Pin was first routed
	// to (the later choices of an n > 1 request, after choice 0's first
	// token): no routing, no retry, no first-token wait, no migration, and
	// no load counted again in the router.
	Pin *Stream
}

// Dispatcher runs requests on the router's workers. Create it with New.
type Dispatcher struct {
	cfg        Config
	router     *router.Router
	board      *health.Board
	log        *slog.Logger
	retries    *prometheus.CounterVec
	migrations *prometheus.CounterVec
}

// New returns a Dispatcher over r. It installs the router's reachability
// and stuck hooks (raised on board) and its stuck threshold. reg receives
// the retry and migration counters.
func New(cfg Config, r *router.Router, board *health.Board, reg prometheus.Registerer, log *slog.Logger) *Dispatcher {
	if log == nil {
		log = slog.Default()
	}
	d := &Dispatcher{cfg: cfg, router: r, board: board, log: log,
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_frontend_retries_total", Help: "Requests re-routed because their worker failed before the first token.",
		}, []string{"model"}),
		migrations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_frontend_migrations_total", Help: "Streams continued on another worker after theirs failed mid-stream (--migration-limit), by result (ok, failed).",
		}, []string{"model", "result"}),
	}
	if reg != nil {
		reg.MustRegister(d.retries, d.migrations)
	}
	r.SetReachabilityHook(d.reachability)
	r.SetStuckHook(d.stuck)
	r.SetStuckAfter(cfg.StuckAfter)
	return d
}

// AddModel creates model's series of the retry and migration counters, so
// that they read 0 before the first event.
func (d *Dispatcher) AddModel(model string) {
	d.retries.WithLabelValues(model)
	d.migrations.WithLabelValues(model, "ok")
	d.migrations.WithLabelValues(model, "failed")
}

func (d *Dispatcher) stuck(worker string, stuck bool, idle time.Duration) {
	if d.board == nil {
		return
	}
	if !stuck {
		d.board.Clear(DiagWorkerStuck, worker, DiagWorkerProgressing, "the worker produces tokens again, or holds no work")
		return
	}
	d.board.Raise(DiagWorkerStuck, worker, health.Error,
		fmt.Sprintf("the worker holds requests but produced nothing for %v; new requests go to other workers", idle.Round(time.Millisecond)))
}

func (d *Dispatcher) reachability(worker string, reachable bool, quarantine time.Duration) {
	if d.board == nil {
		return
	}
	if reachable {
		d.board.Clear(DiagWorkerUnreachable, worker, DiagWorkerReachable, "the worker answers again, or left the router")
		return
	}
	d.board.Raise(DiagWorkerUnreachable, worker, health.Warn,
		fmt.Sprintf("the worker cannot be reached; it gets no new requests for %v, then one is tried", quarantine))
}

// Generate routes req and starts it, retrying on other workers while none
// has sent a first token, and returns the stream once one has. ctx is the
// engine's: cancelling it stops the request wherever it runs. The Stream
// must be closed.
//
// Errors: ErrNotRouted (with ErrUnknownModel for a model no worker ever
// registered) when no worker could be chosen at first; a *WorkerError
// wrapping the last worker's failure (engine errors, ErrFirstTokenTimeout,
// the context's error) otherwise; the previous attempt's failure when
// routing fails on a retry (every worker was tried).
func (d *Dispatcher) Generate(ctx context.Context, req *Request) (*Stream, error) {
	if req.Pin != nil {
		return d.pinned(ctx, req)
	}
	ereq := req.Engine
	rreq := &router.Request{ID: ereq.ID, Model: ereq.Model, Tokens: ereq.Prompt}
	var (
		tried   []string
		lastErr error // the previous attempt's failure
	)
	for attempt := 0; ; attempt++ {
		_, rspan := child(ctx, tracing.SpanRoute)
		route, err := d.router.Route(rreq, tried...)
		endRoute(rspan, route, attempt, err)
		if err != nil {
			if lastErr != nil {
				// Every worker was tried: the caller hears why the last
				// attempt failed, not that none is left.
				return nil, lastErr
			}
			return nil, fmt.Errorf("%w: %w", ErrNotRouted, err)
		}
		// Each attempt has its own context, so that a worker that sends
		// no first token within --first-token-timeout can be given up on
		// alone and the request tried elsewhere.
		actx, acancel := context.WithCancel(ctx)
		var timedOut atomic.Bool
		var timer *time.Timer
		if t := d.cfg.FirstTokenTimeout; t > 0 {
			timer = time.AfterFunc(t, func() { timedOut.Store(true); acancel() })
		}
		fctx, fspan := child(actx, tracing.SpanFirstToken)
		// A copy per attempt: an earlier attempt's engine may still read
		// its request while it winds down.
		areq := *ereq
		var (
			stream engine.Stream
			first  engine.Delta
		)
		stream, err = routed.Generate(fctx, route.Worker.Gen, routed.Request{Req: &areq, PredictedCachedTokens: route.Decision.PredictedCachedTokens})
		if err == nil {
			first, err = stream.Recv()
			if err == io.EOF {
				err = nil // a stream that ends at once is still a result
			}
		}
		if timer != nil && !timer.Stop() && timedOut.Load() {
			err = fmt.Errorf("%w: worker %s sent no first token within %v", ErrFirstTokenTimeout, route.Worker.ID, d.cfg.FirstTokenTimeout)
		}
		if fspan.IsRecording() {
			tracing.SetAttributes(fspan, attribute.String(tracing.AttrWorker, route.Worker.ID), attribute.Int(tracing.AttrCachedTokens, first.CachedTokens))
		}
		tracing.EndWithError(fspan, err)
		if err == nil {
			return d.started(ctx, ereq, route, stream, first, tried, acancel), nil
		}
		acancel()
		if errors.Is(err, engine.ErrUnavailable) && ctx.Err() == nil {
			route.Unreachable()
		}
		route.Done()
		retryable := errors.Is(err, engine.ErrUnavailable) || errors.Is(err, ErrFirstTokenTimeout)
		if retryable && attempt < d.cfg.MaxRetries && ctx.Err() == nil {
			tried, lastErr = append(tried, route.Worker.ID), err
			d.retries.WithLabelValues(ereq.Model).Inc()
			d.log.WarnContext(ctx, "worker failed before the first token; retrying on another worker",
				"diagnostic_code", DiagWorkerRetry, "request_id", ereq.ID, "worker", route.Worker.ID, "err", err)
			continue
		}
		if ctx.Err() == nil {
			d.log.WarnContext(ctx, "request failed before the first token", "request_id", ereq.ID, "worker", route.Worker.ID, "err", err)
		}
		return nil, &WorkerError{Worker: route.Worker.ID, Err: err}
	}
}

// started is the Stream of a request whose first delta arrived: the
// router hears the first token now, with the engine's cached tokens, or
// at the end when the first delta carries no usage (an upstream server
// that reports cached_tokens only in its final usage chunk), rather than
// a false 0 now.
func (d *Dispatcher) started(ctx context.Context, ereq *engine.Request, route *router.Route, st engine.Stream, first engine.Delta,
	tried []string, cancel context.CancelFunc) *Stream {
	s := &Stream{d: d, ctx: ctx, req: ereq, st: st, route: route, origin: route, cancel: cancel, tried: tried,
		first: first, firstPending: true, firstAt: time.Now()}
	s.late = first.PromptTokens == 0 && first.Finish == engine.FinishNone
	if s.late {
		route.FirstToken(-1)
	} else {
		route.FirstToken(first.CachedTokens)
	}
	return s
}

// pinned starts req on the worker req.Pin was first routed to, telling
// its Generator that the whole prompt should be cached there.
func (d *Dispatcher) pinned(ctx context.Context, req *Request) (*Stream, error) {
	origin := req.Pin.origin
	st, err := routed.Generate(ctx, origin.Worker.Gen, routed.Request{Req: req.Engine, PredictedCachedTokens: len(req.Engine.Prompt)})
	if err != nil {
		return nil, err
	}
	return &Stream{d: d, st: st, route: origin, origin: origin, pinned: true}, nil
}

// Stream is a dispatched request's output: one unbroken engine stream,
// whichever workers it ran on.
type Stream struct {
	d      *Dispatcher
	ctx    context.Context // the caller's: migrations start on it
	req    *engine.Request // as routed first (nil when pinned)
	st     engine.Stream   // the current worker's
	route  *router.Route   // the current worker's
	origin *router.Route   // the first
	cancel context.CancelFunc
	pinned bool

	first        engine.Delta
	firstPending bool // Recv returns first next
	firstAt      time.Time
	late         bool // the first delta carried no usage
	cached       int  // the engine's cached tokens, as last reported before any migration
	delivered    bool // a delta went out

	// Migration (--migration-limit): the generated ids so far, the
	// workers already failed, and whether the current route still awaits
	// its first token.
	gen        []engine.Token
	tried      []string
	migrations int
	migrated   bool
	needFirst  bool
	closed     bool
}

// Recv returns the next delta: first the one Generate waited for. After a
// migration, deltas carry no PromptTokens or CachedTokens: the engine's
// prompt then includes what was generated, and the caller's usage stays
// that of its own prompt.
func (s *Stream) Recv() (engine.Delta, error) {
	if s.firstPending {
		s.firstPending = false
		s.note(s.first)
		return s.first, nil
	}
	d, err := s.st.Recv()
	if err == io.EOF {
		return d, err
	}
	if err != nil {
		if s.migrate(err) {
			return s.Recv()
		}
		return d, err
	}
	if s.needFirst {
		s.needFirst = false
		s.route.FirstToken(d.CachedTokens)
	}
	s.route.Progress(time.Now())
	if s.migrated {
		d.PromptTokens, d.CachedTokens = 0, 0
	}
	s.note(d)
	return d, nil
}

// note records what a delta tells about the request.
func (s *Stream) note(d engine.Delta) {
	s.delivered = true
	if d.PromptTokens > 0 {
		s.cached = d.CachedTokens
	}
	if s.d.cfg.MigrationLimit > 0 && !s.pinned {
		s.gen = append(s.gen, d.Tokens...)
	}
}

// Worker is the id of the worker the stream now runs on.
func (s *Stream) Worker() string { return s.route.Worker.ID }

// FirstTokenAt is when the first delta arrived (zero for a pinned stream).
func (s *Stream) FirstTokenAt() time.Time { return s.firstAt }

// First is the delta Generate waited for (zero for a pinned stream).
func (s *Stream) First() engine.Delta { return s.first }

// LateUsage reports that the first delta carried no usage: the engine's
// cached tokens come with a later delta.
func (s *Stream) LateUsage() bool { return s.late }

// Close ends the request's routes: the router releases its load and, when
// the first delta carried no usage, hears the engine's cached tokens.
// Closing a pinned stream does nothing: its load is its pin's. Close may
// be called more than once.
func (s *Stream) Close() {
	if s.closed || s.pinned {
		return
	}
	s.closed = true
	s.route.Done() // a migrated stream's last route
	if s.late && s.delivered {
		s.origin.CachedTokens(s.cached)
	}
	s.origin.Done()
	s.cancel()
}

// migrate continues a stream whose worker failed after its first token on
// another worker: the prompt plus the tokens already sent, for what is left
// of max_tokens, as Dynamo's --migration-limit does. It reports whether a
// new stream replaced the broken one.
func (s *Stream) migrate(cause error) bool {
	if s.pinned || s.ctx.Err() != nil {
		return false
	}
	limit := s.d.cfg.MigrationLimit
	if s.migrations >= limit {
		return false
	}
	old := s.route
	old.Unreachable() // its stream broke: quarantined until it serves again
	old.Done()
	s.tried = append(s.tried, old.Worker.ID)
	req := *s.req
	req.Prompt = append(slices.Clip(s.req.Prompt), s.gen...)
	req.KVTransferParams = nil
	if req.MaxTokens > 0 {
		if req.MaxTokens -= len(s.gen); req.MaxTokens <= 0 {
			return false
		}
	}
	req.MinTokens = max(req.MinTokens-len(s.gen), 0)
	for s.migrations < limit {
		s.migrations++
		rt, err := s.d.router.Route(&router.Request{ID: req.ID, Model: req.Model, Tokens: req.Prompt}, s.tried...)
		if err != nil {
			break
		}
		st, err := routed.Generate(s.ctx, rt.Worker.Gen, routed.Request{Req: &req, PredictedCachedTokens: rt.Decision.PredictedCachedTokens})
		if err != nil {
			if s.ctx.Err() == nil {
				rt.Unreachable()
			}
			rt.Done()
			s.tried = append(s.tried, rt.Worker.ID)
			continue
		}
		s.d.log.Warn("worker failed mid-stream; the request continues on another worker", "diagnostic_code", DiagRequestMigrated,
			"request_id", req.ID, "from", old.Worker.ID, "to", rt.Worker.ID, "tokens_sent", len(s.gen), "migration", s.migrations, "err", cause)
		s.d.migrations.WithLabelValues(req.Model, "ok").Inc()
		s.route, s.st, s.needFirst, s.migrated = rt, st, true, true
		return true
	}
	s.d.migrations.WithLabelValues(req.Model, "failed").Inc()
	return false
}
