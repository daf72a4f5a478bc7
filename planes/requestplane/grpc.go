package requestplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	grpchealth "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/health"
	"github.com/tandemllm/tandem/internal/connlimit"
	"github.com/tandemllm/tandem/planes/kvtransfer"
	rpv1 "github.com/tandemllm/tandem/planes/requestplane/proto/tandem/requestplane/v1"
	"github.com/tandemllm/tandem/tracing"
)

// ServiceName is the request plane's gRPC service, as health checks name
// it.
const ServiceName = "tandem.requestplane.v1.Worker"

// legacyService is the request plane of releases before the .proto: a
// hand-written descriptor and codec ("tandem-rp1", message versions 1
// and 2) under an unversioned name. Its calls are refused with a status
// that names both schemas; see "Rolling upgrades" in docs/ARCHITECTURE.md.
const legacyService = "tandem.requestplane.Worker"

// Server is a worker's request-plane server: the Worker service and
// grpc.health.v1.Health, which reports NOT_SERVING until the owner calls
// SetServing(true), after SetServing(false), and from GracefulStop or
// Stop on.
type Server struct {
	*grpc.Server
	health   *grpchealth.Server
	stopping context.Context // done from GracefulStop or Stop on
	stop     context.CancelFunc

	mu      sync.Mutex
	board   *health.Board // nil: refusals of older peers are not reported
	subject string
	quiet   time.Duration // without older peers' calls, clears DiagSchemaMismatch
	last    time.Time     // an older peer's last call
	clear   *time.Timer   // non-nil while DiagSchemaMismatch is raised
}

// DiagSchemaMismatch: peers of an older release (the request plane from
// before the .proto) call this worker, and their calls are refused. It
// clears after a minute without such calls.
const DiagSchemaMismatch = "request_plane_schema_mismatch"

// NewServer returns a gRPC server exposing eng and, when side is not nil,
// the worker's part in disaggregated prefill (Assess, Link, Prefill). opts
// come after the request plane's own (message size, keepalive policy):
// credentials and interceptors go there. Every Generate is checked against
// eng's limits and vocab (the tokenizer's vocabulary size; 0 skips the upper
// bound on ids) before the engine sees it, because anything that can reach
// the port can call Generate. The caller owns Serve and GracefulStop (which
// lets in-flight streams finish: that is the drain).
func NewServer(eng engine.Engine, side kvtransfer.Side, vocab int, opts ...grpc.ServerOption) *Server {
	s := &Server{health: grpchealth.NewServer(), quiet: time.Minute}
	opts = append([]grpc.ServerOption{
		grpc.MaxRecvMsgSize(maxMessage),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		grpc.UnknownServiceHandler(s.unknownService),
	}, opts...)
	s.Server = grpc.NewServer(opts...)
	s.stopping, s.stop = context.WithCancel(context.Background())
	rpv1.RegisterWorkerServer(s.Server, &handler{eng: eng, side: side, vocab: vocab})
	healthpb.RegisterHealthServer(s.Server, healthService{s})
	s.SetServing(false)
	return s
}

// SetServing sets what the health service reports, for the whole server
// ("") and for ServiceName: SERVING once the worker is ready (registered),
// NOT_SERVING while it is not or is draining.
func (s *Server) SetServing(ready bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if ready {
		st = healthpb.HealthCheckResponse_SERVING
	}
	s.health.SetServingStatus("", st)
	s.health.SetServingStatus(ServiceName, st)
}

// GracefulStop reports NOT_SERVING for good and ends the health watches,
// then stops taking streams and waits for the in-flight ones.
func (s *Server) GracefulStop() {
	s.health.Shutdown()
	s.stop()
	s.Server.GracefulStop()
}

// Stop reports NOT_SERVING for good and cuts every stream.
func (s *Server) Stop() {
	s.health.Shutdown()
	s.stop()
	s.Server.Stop()
}

// AttachBoard implements health.Reporter: calls of older peers are
// raised on b as DiagSchemaMismatch for subject (the worker).
func (s *Server) AttachBoard(b *health.Board, subject string) {
	s.mu.Lock()
	s.board, s.subject = b, subject
	s.mu.Unlock()
}

// olderPeer notes a call of an older peer, raising DiagSchemaMismatch
// until s.quiet passes without one.
func (s *Server) olderPeer(method, from string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last = time.Now()
	if s.board == nil || s.clear != nil {
		return
	}
	s.board.Raise(DiagSchemaMismatch, s.subject, health.Warn,
		fmt.Sprintf("a peer of an older release (%s) calls %s, the request plane from before the .proto; its calls are refused: run it at this worker's release", from, method),
		"peer", from, "method", method)
	s.clear = time.AfterFunc(s.quiet, s.quietCheck)
}

func (s *Server) quietCheck() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if left := s.quiet - time.Since(s.last); left > 0 {
		s.clear.Reset(left)
		return
	}
	s.clear = nil
	s.board.Clear(DiagSchemaMismatch, s.subject, DiagSchemaMatch, "no peer of an older release called the request plane for "+s.quiet.String())
}

// healthService is grpc-go's health server, except that its Watch streams
// end when the server stops: grpc-go's run until the client leaves, and
// GracefulStop waits for every stream, so one watcher (a load balancer, a
// probe) would hold every drain until its timeout.
type healthService struct{ s *Server }

func (h healthService) Check(ctx context.Context, r *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	return h.s.health.Check(ctx, r)
}

func (h healthService) List(ctx context.Context, r *healthpb.HealthListRequest) (*healthpb.HealthListResponse, error) {
	return h.s.health.List(ctx, r)
}

func (h healthService) Watch(r *healthpb.HealthCheckRequest, stream healthpb.Health_WatchServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	defer context.AfterFunc(h.s.stopping, cancel)()
	err := h.s.health.Watch(r, watchStream{stream, ctx})
	if h.s.stopping.Err() != nil {
		return status.Error(codes.Unavailable, "requestplane: the server is stopping")
	}
	return err
}

// watchStream is a Watch stream whose context also ends with the server.
type watchStream struct {
	healthpb.Health_WatchServer
	ctx context.Context
}

func (w watchStream) Context() context.Context { return w.ctx }

// unknownService answers calls of services this server lacks, naming the
// schema it serves, so that a peer of an older release gets a status it
// can act on instead of gRPC's bare "unknown service".
func (s *Server) unknownService(_ any, stream grpc.ServerStream) error {
	method, _ := grpc.MethodFromServerStream(stream)
	if strings.HasPrefix(method, "/"+legacyService+"/") {
		from := "unknown"
		if p, ok := peer.FromContext(stream.Context()); ok && p.Addr != nil {
			from = p.Addr.String()
		}
		s.olderPeer(method, from)
		return status.Errorf(codes.Unimplemented, "requestplane: %s is the request plane of older releases (codec tandem-rp1, versions 1 and 2); this worker serves %s (protobuf): run the frontend at the worker's release", method, ServiceName)
	}
	return status.Errorf(codes.Unimplemented, "requestplane: unknown method %s; this worker serves %s", method, ServiceName)
}

type handler struct {
	rpv1.UnimplementedWorkerServer
	eng  engine.Engine
	side kvtransfer.Side // nil: the disaggregation calls are unimplemented
	// vocab bounds the token ids a caller may send (0: unchecked). The
	// worker checks what the frontend checks, because anything that can
	// reach the port can call Generate.
	vocab int
}

func (h *handler) Info(context.Context, *rpv1.InfoRequest) (*rpv1.EngineInfo, error) {
	return wireInfo(h.eng.Info()), nil
}

func (h *handler) Generate(m *rpv1.GenerateRequest, stream grpc.ServerStreamingServer[rpv1.Delta]) (err error) {
	ctx, sp := tracing.StartCall(stream.Context(), rpv1.Worker_Generate_FullMethodName, spanContext(m.GetTrace()))
	defer func() { tracing.EndCall(sp, err) }()
	req, err := engineRequest(m)
	if err != nil {
		return err
	}
	if sp.IsRecording() {
		tracing.SetAttributes(sp, attribute.String(tracing.AttrRequestID, req.ID), attribute.Int(tracing.AttrPromptTokens, len(req.Prompt)))
	}
	if _, err := engine.CheckRequest(req, h.eng.Info(), h.vocab); err != nil {
		return toStatus(err)
	}
	s, err := h.eng.Generate(ctx, req)
	if err != nil {
		return toStatus(err)
	}
	for {
		d, err := s.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return toStatus(err)
		}
		// A message per Send: gRPC lets stats handlers and interceptors
		// hold a sent message, so it must not be reused.
		out := new(rpv1.Delta)
		setWireDelta(out, &d)
		if err := stream.Send(out); err != nil {
			return err
		}
	}
}

// toStatus maps engine errors to gRPC codes that survive the wire, so the
// client can give back the same sentinel errors.
func toStatus(err error) error {
	switch {
	case errors.Is(err, engine.ErrOverloaded):
		return status.Error(codes.ResourceExhausted, err.Error())
	case errors.Is(err, engine.ErrPromptTooLong):
		return status.Error(codes.OutOfRange, err.Error())
	case errors.Is(err, engine.ErrInvalidRequest):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, engine.ErrClosed):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

// ErrSchema means the peer does not serve this release's request plane
// (tandem.requestplane.v1): a worker of an older release. It wraps
// ErrUnavailable, so that the frontend routes around such a worker
// (retried elsewhere, quarantined, worker_unreachable) while a fleet is
// being upgraded.
var ErrSchema = fmt.Errorf("%w: the worker does not serve %s (a release from before the request plane's .proto?)", ErrUnavailable, ServiceName)

func fromStatus(err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	switch st.Code() {
	case codes.ResourceExhausted:
		return fmt.Errorf("%w: %s", engine.ErrOverloaded, st.Message())
	case codes.OutOfRange:
		return fmt.Errorf("%w: %s", engine.ErrPromptTooLong, st.Message())
	case codes.InvalidArgument:
		return fmt.Errorf("%w: %s", engine.ErrInvalidRequest, st.Message())
	case codes.Unavailable:
		return fmt.Errorf("%w: %s", ErrUnavailable, st.Message())
	case codes.Canceled:
		return fmt.Errorf("%w: %s", context.Canceled, st.Message())
	case codes.DeadlineExceeded:
		return fmt.Errorf("%w: %s", context.DeadlineExceeded, st.Message())
	case codes.Unimplemented:
		// gRPC's own answer for a service the server lacks
		// (grpc-go: "unknown service <name>").
		if strings.Contains(st.Message(), "unknown service "+ServiceName) {
			return fmt.Errorf("%w (%s)", ErrSchema, st.Message())
		}
	}
	return err
}

// ErrUnavailable means the worker could not be reached or went away; the
// frontend retries such requests elsewhere if no token was streamed yet.
// It is engine.ErrUnavailable, which other remote engines return too.
var ErrUnavailable = engine.ErrUnavailable

// Client is a remote worker; it implements engine.Generator. One Client
// holds one HTTP/2 connection, multiplexing every request to that worker.
type Client struct {
	cc *grpc.ClientConn
	w  rpv1.WorkerClient
}

// Dial connects lazily to addr (host:port). opts come after the request
// plane's own (credentials, message sizes, keepalive): credentials and
// interceptors go there.
func Dial(addr string, opts ...grpc.DialOption) (*Client, error) {
	opts = append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessage), grpc.MaxCallSendMsgSize(maxMessage)),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 5 * time.Second, PermitWithoutStream: true}),
	}, opts...)
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("requestplane: dial %s: %w", addr, err)
	}
	return &Client{cc: cc, w: rpv1.NewWorkerClient(cc)}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.cc.Close() }

// Conn is the client's connection, for other services on the worker's
// request-plane port (grpc.health.v1).
func (c *Client) Conn() grpc.ClientConnInterface { return c.cc }

// Info asks the worker to describe its engine.
func (c *Client) Info(ctx context.Context) (engine.Info, error) {
	m, err := c.w.Info(ctx, &rpv1.InfoRequest{})
	if err != nil {
		return engine.Info{}, fromStatus(err)
	}
	return engineInfo(m), nil
}

// Generate implements engine.Generator.
func (c *Client) Generate(ctx context.Context, req *engine.Request) (engine.Stream, error) {
	cs, err := c.w.Generate(ctx, callRequest(ctx, req))
	if err != nil {
		return nil, fromStatus(err)
	}
	// gRPC reports a handler's refusal on the first receive. Take the first
	// Delta here so that refusals (overload, prompt too long, worker gone)
	// come back from Generate, where the frontend can still answer with a
	// status code or retry on another worker.
	s := &clientStream{cs: cs}
	first, err := s.recv()
	if err != nil && err != io.EOF {
		return nil, err
	}
	s.first, s.firstErr, s.hasFirst = first, err, true
	return s, nil
}

type clientStream struct {
	cs       grpc.ServerStreamingClient[rpv1.Delta]
	first    engine.Delta
	firstErr error
	hasFirst bool
}

func (s *clientStream) Recv() (engine.Delta, error) {
	if s.hasFirst {
		s.hasFirst = false
		return s.first, s.firstErr
	}
	return s.recv()
}

func (s *clientStream) recv() (engine.Delta, error) {
	m, err := s.cs.Recv()
	if err != nil {
		if err == io.EOF {
			return engine.Delta{}, io.EOF
		}
		return engine.Delta{}, fromStatus(err)
	}
	if err := checkDeltaLogprobs(m); err != nil {
		return engine.Delta{}, err
	}
	return engineDelta(m), nil
}

// LimitOptions are the server options that apply lim's handshake and idle
// bounds the gRPC way: gRPC bounds its own handshake (TLS and the HTTP/2
// preface) and pings connected clients, whose answers keep them from
// idling out. The listener under it keeps lim's connection caps only.
func LimitOptions(lim connlimit.Limits) []grpc.ServerOption {
	var opts []grpc.ServerOption
	if lim.Handshake > 0 {
		opts = append(opts, grpc.ConnectionTimeout(lim.Handshake))
	}
	if lim.Idle > 0 {
		opts = append(opts, grpc.KeepaliveParams(keepalive.ServerParameters{Time: lim.Idle / 2, Timeout: min(lim.Idle/2, 20*time.Second)}))
	}
	return opts
}
