package otlptest

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Collector keeps what exporters sent it.
type Collector struct {
	mu    sync.Mutex
	raw   [][]byte
	bytes atomic.Int64
}

// Start serves a Collector on a loopback port until the test ends and
// returns it with its host:port.
func Start(tb testing.TB) (*Collector, string) {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	c := &Collector{}
	srv := grpc.NewServer(grpc.ForceServerCodec(rawCodec{}), grpc.UnknownServiceHandler(c.export))
	go func() { _ = srv.Serve(ln) }()
	tb.Cleanup(srv.Stop)
	return c, ln.Addr().String()
}

// export answers every call (the trace service's Export is the only one
// an exporter makes) with an empty ExportTraceServiceResponse.
func (c *Collector) export(_ any, ss grpc.ServerStream) error {
	var in []byte
	if err := ss.RecvMsg(&in); err != nil {
		return err
	}
	c.bytes.Add(int64(len(in)))
	c.mu.Lock()
	c.raw = append(c.raw, in)
	c.mu.Unlock()
	return ss.SendMsg([]byte{})
}

// Bytes is the size of every request received so far.
func (c *Collector) Bytes() int64 { return c.bytes.Load() }

// Requests decodes every request received so far.
func (c *Collector) Requests(tb testing.TB) []*collectortrace.ExportTraceServiceRequest {
	tb.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*collectortrace.ExportTraceServiceRequest, 0, len(c.raw))
	for _, b := range c.raw {
		req := &collectortrace.ExportTraceServiceRequest{}
		if err := proto.Unmarshal(b, req); err != nil {
			tb.Fatalf("otlptest: an exporter sent an undecodable request: %v", err)
		}
		out = append(out, req)
	}
	return out
}

// Spans counts the spans of every request received so far.
func (c *Collector) Spans(tb testing.TB) int64 {
	tb.Helper()
	var n int64
	for _, req := range c.Requests(tb) {
		for _, rs := range req.GetResourceSpans() {
			for _, ss := range rs.GetScopeSpans() {
				n += int64(len(ss.GetSpans()))
			}
		}
	}
	return n
}

// rawCodec hands the server each request's bytes as they arrived and
// sends a reply's bytes as given. Its name is "proto", the content type
// exporters send.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) {
	b, ok := v.([]byte)
	if !ok {
		return nil, fmt.Errorf("otlptest: cannot marshal %T", v)
	}
	return b, nil
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	p, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("otlptest: cannot unmarshal into %T", v)
	}
	*p = append([]byte(nil), data...)
	return nil
}

func (rawCodec) Name() string { return "proto" }
