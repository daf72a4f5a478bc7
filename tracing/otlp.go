package tracing

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/encoding/protowire"
)

// otlpExportMethod is the OTLP/gRPC trace service's one method
// (opentelemetry/proto/collector/trace/v1/trace_service.proto).
const otlpExportMethod = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"

// otlpClient sends the Provider's encoded batches to an OTLP/gRPC
// collector, uncompressed, as otlptracegrpc does by default. A failed
// batch is not retried: its spans are dropped and the export loop logs it
// (a collector that is down costs spans, never memory or a stuck process).
type otlpClient struct{ conn *grpc.ClientConn }

// newOTLPClient connects lazily, so a collector that is down does not
// stop the process from starting.
func newOTLPClient(hostport string, creds credentials.TransportCredentials) (*otlpClient, error) {
	conn, err := grpc.NewClient(hostport, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP client: %w", err)
	}
	return &otlpClient{conn: conn}, nil
}

// send exports one encoded ExportTraceServiceRequest and reports a
// partial success (spans the collector rejected) as an error.
func (c *otlpClient) send(ctx context.Context, req []byte) error {
	var resp []byte
	if err := c.conn.Invoke(ctx, otlpExportMethod, req, &resp, grpc.ForceCodec(rawCodec{})); err != nil {
		return fmt.Errorf("tracing: OTLP export: %w", err)
	}
	if rejected, msg := partialSuccess(resp); rejected > 0 || msg != "" {
		return fmt.Errorf("tracing: the collector rejected %d spans: %s", rejected, msg)
	}
	return nil
}

func (c *otlpClient) close() error { return c.conn.Close() }

// partialSuccess reads ExportTraceServiceResponse.partial_success (field
// 1: rejected_spans = 1, error_message = 2); a response it cannot parse
// counts as full success (the spans were accepted by the RPC).
func partialSuccess(resp []byte) (rejected int64, msg string) {
	for len(resp) > 0 {
		num, typ, n := protowire.ConsumeTag(resp)
		if n < 0 {
			return 0, ""
		}
		resp = resp[n:]
		if num == 1 && typ == protowire.BytesType {
			ps, n := protowire.ConsumeBytes(resp)
			if n < 0 {
				return 0, ""
			}
			resp = resp[n:]
			for len(ps) > 0 {
				f, t, m := protowire.ConsumeTag(ps)
				if m < 0 {
					return rejected, msg
				}
				ps = ps[m:]
				switch {
				case f == 1 && t == protowire.VarintType:
					v, m := protowire.ConsumeVarint(ps)
					if m < 0 {
						return rejected, msg
					}
					rejected, ps = int64(v), ps[m:]
				case f == 2 && t == protowire.BytesType:
					v, m := protowire.ConsumeString(ps)
					if m < 0 {
						return rejected, msg
					}
					msg, ps = v, ps[m:]
				default:
					m := protowire.ConsumeFieldValue(f, t, ps)
					if m < 0 {
						return rejected, msg
					}
					ps = ps[m:]
				}
			}
			continue
		}
		m := protowire.ConsumeFieldValue(num, typ, resp)
		if m < 0 {
			return 0, ""
		}
		resp = resp[m:]
	}
	return rejected, msg
}

// rawCodec passes already-encoded protobuf bytes through gRPC: the
// request is a []byte, the reply a *[]byte. Its name is "proto", so the
// collector sees the content type it expects (application/grpc+proto).
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) {
	b, ok := v.([]byte)
	if !ok {
		return nil, fmt.Errorf("tracing: rawCodec cannot marshal %T", v)
	}
	return b, nil
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	p, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("tracing: rawCodec cannot unmarshal into %T", v)
	}
	*p = append((*p)[:0], data...)
	return nil
}

func (rawCodec) Name() string { return "proto" }
