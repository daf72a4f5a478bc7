package requestplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tandemllm/tandem/disagg"
	"github.com/tandemllm/tandem/engine"
)

const (
	serviceName    = "tandem.requestplane.Worker"
	generateMethod = "/" + serviceName + "/Generate"
	infoMethod     = "/" + serviceName + "/Info"
)

type service interface{}

var serviceDesc = grpc.ServiceDesc{
	ServiceName: serviceName,
	HandlerType: (*service)(nil),
	Methods: append([]grpc.MethodDesc{{
		MethodName: "Info",
		Handler: func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			var none engine.Info
			if err := dec(&none); err != nil {
				return nil, err
			}
			info := srv.(*handler).eng.Info()
			return &info, nil
		},
	}}, disaggMethods...),
	Streams: []grpc.StreamDesc{{
		StreamName:    "Generate",
		ServerStreams: true,
		Handler: func(srv any, stream grpc.ServerStream) error {
			return srv.(*handler).generate(stream)
		},
	}},
}

// maxMessage bounds one request-plane message: the codec's largest prompt
// (maxTokens ids of 4 bytes) plus room, instead of gRPC's 4 MiB default,
// which a million-token prompt would exceed.
const maxMessage = 4*maxTokens + 1<<20

type handler struct {
	eng  engine.Engine
	side disagg.Side // nil: the disaggregation calls are unimplemented
	// vocab bounds the token ids a caller may send (0: unchecked). The
	// worker checks what the frontend checks, because anything that can
	// reach the port can call Generate.
	vocab int
}

// NewServer returns a gRPC server exposing eng and, when side is not nil,
// the worker's part in disaggregated prefill (Assess, Link, Prefill).
// Every Generate is checked against eng's limits and vocab (the tokenizer's
// vocabulary size; 0 skips the upper bound on ids) before the engine sees
// it. The
// caller owns Serve and GracefulStop (which lets in-flight streams finish:
// that is the drain).
func NewServer(eng engine.Engine, side disagg.Side, vocab int, opts ...grpc.ServerOption) *grpc.Server {
	opts = append([]grpc.ServerOption{
		grpc.ForceServerCodec(codec{}),
		grpc.MaxRecvMsgSize(maxMessage),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
	}, opts...)
	s := grpc.NewServer(opts...)
	s.RegisterService(&serviceDesc, &handler{eng: eng, side: side, vocab: vocab})
	return s
}

func (h *handler) generate(stream grpc.ServerStream) error {
	var req engine.Request
	if err := stream.RecvMsg(&req); err != nil {
		return err
	}
	if req.ID == "" {
		if md, ok := metadata.FromIncomingContext(stream.Context()); ok {
			if v := md.Get("x-request-id"); len(v) > 0 {
				req.ID = v[0]
			}
		}
	}
	if _, err := engine.CheckRequest(&req, h.eng.Info(), h.vocab); err != nil {
		return toStatus(err)
	}
	s, err := h.eng.Generate(stream.Context(), &req)
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
		if err := stream.SendMsg(&d); err != nil {
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
	}
	return err
}

// withRequestID passes the request id as gRPC metadata, for the worker's
// logs.
func withRequestID(ctx context.Context, id string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "x-request-id", id)
}

// ErrUnavailable means the worker could not be reached or went away; the
// frontend retries such requests elsewhere if no token was streamed yet.
// It is engine.ErrUnavailable, which other remote engines return too.
var ErrUnavailable = engine.ErrUnavailable

// Client is a remote worker; it implements engine.Generator. One Client
// holds one HTTP/2 connection, multiplexing every request to that worker.
type Client struct {
	cc *grpc.ClientConn
}

// Dial connects lazily to addr (host:port).
func Dial(addr string, opts ...grpc.DialOption) (*Client, error) {
	opts = append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(codec{}), grpc.MaxCallRecvMsgSize(maxMessage), grpc.MaxCallSendMsgSize(maxMessage)),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 5 * time.Second, PermitWithoutStream: true}),
	}, opts...)
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("requestplane: dial %s: %w", addr, err)
	}
	return &Client{cc: cc}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.cc.Close() }

// Info asks the worker to describe its engine.
func (c *Client) Info(ctx context.Context) (engine.Info, error) {
	var info engine.Info
	if err := c.cc.Invoke(ctx, infoMethod, &engine.Info{}, &info); err != nil {
		return info, fromStatus(err)
	}
	return info, nil
}

// Generate implements engine.Generator.
func (c *Client) Generate(ctx context.Context, req *engine.Request) (engine.Stream, error) {
	if req.ID != "" {
		ctx = withRequestID(ctx, req.ID)
	}
	cs, err := c.cc.NewStream(ctx, &serviceDesc.Streams[0], generateMethod)
	if err != nil {
		return nil, fromStatus(err)
	}
	if err := cs.SendMsg(req); err != nil {
		return nil, fromStatus(err)
	}
	if err := cs.CloseSend(); err != nil {
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
	cs       grpc.ClientStream
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
	var d engine.Delta
	if err := s.cs.RecvMsg(&d); err != nil {
		if err == io.EOF {
			return d, io.EOF
		}
		return d, fromStatus(err)
	}
	return d, nil
}
