package kvtransfer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/tandemllm/tandem/tracing"
)

// Wire format, versions 2 and 3. Every frame is
//
//	type u8 | length u32 LE | payload[length]
//
// A transfer is Begin, Block*, End from the sender, answered by one Result.
// A probe is Probe answered by ProbeAck. Integers are little-endian.
//
//	Begin:    version u8 | layout len u16 + bytes | sender len u16 + bytes |
//	          token len u16 + bytes | block_size u32 | block_bytes u32 |
//	          from u32 | n_tokens u32 | tokens i32×n_tokens
//
// Version 2 added the sender's id and the transfer token (token.go).
// Version 3 is version 2 with the W3C trace context of a sampled request
// after the token:
//
//	... token len u16 + bytes | trace len u8 (55) + traceparent |
//	block_size u32 ...
//
// so that the receiver's kv_receive span joins the request's trace. A
// sender writes version 3 only for a sampled request and version 2
// otherwise; receivers accept both. A receiver of an older release refuses
// version 3 ("version 3, want 2"), so in a rolling upgrade with tracing on,
// decode workers go first (with tracing off, or for unsampled requests,
// mixed releases interoperate).
//
//	Block:    index u32 | xxh3-64 of data u64 | data[block_bytes]
//	End:      blocks u32 (how many Block frames were sent)
//	Result:   imported u32 | code len u16 + bytes | message len u16 + bytes
//	Probe:    opaque bytes (timed, then discarded)
//	ProbeAck: bytes received u32
const (
	frameBegin    = 1
	frameBlock    = 2
	frameEnd      = 3
	frameResult   = 4
	frameProbe    = 5
	frameProbeAck = 6

	wireVersion      = 2
	wireVersionTrace = 3 // version 2 plus a traceparent
	frameHeader      = 5
	blockHeader      = 12

	// maxControlFrame bounds every frame except Block and Probe, whose
	// payloads are streamed rather than buffered.
	maxControlFrame = 64 << 20
	// maxBlockBytes bounds one block (a 1,024-token block of a 1 MiB/token
	// model is the largest anyone sensible sends).
	maxBlockBytes = 1 << 30
	maxProbe      = 64 << 20
)

// ErrProtocol is wrapped by every malformed-frame error.
var ErrProtocol = errors.New("kvtransfer: protocol error")

// begin is the header of a transfer.
type begin struct {
	Layout string
	Sender string // the sending worker's id
	Token  []byte // the transfer token (token.go)
	// Trace is the sampled request's W3C traceparent (tracing.Traceparent,
	// exactly tracing.TraceparentLen bytes), or "": version 2.
	Trace      string
	BlockSize  int
	BlockBytes int
	From       int
	Tokens     []int32 // the full blocks being transferred and all before them
}

// result is the receiver's answer.
type result struct {
	Imported int // blocks imported
	Code     string
	Message  string
}

func appendFrameHeader(b []byte, typ byte, n int) []byte {
	b = append(b, typ)
	return binary.LittleEndian.AppendUint32(b, uint32(n))
}

func appendString(b []byte, s string) []byte {
	b = binary.LittleEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

func encodeBegin(h *begin) []byte {
	n := 1 + 2 + len(h.Layout) + 2 + len(h.Sender) + 2 + len(h.Token) + 16 + 4*len(h.Tokens)
	if h.Trace != "" {
		n += 1 + len(h.Trace)
	}
	b := appendFrameHeader(make([]byte, 0, frameHeader+n), frameBegin, n)
	if h.Trace != "" {
		b = append(b, wireVersionTrace)
	} else {
		b = append(b, wireVersion)
	}
	b = appendString(b, h.Layout)
	b = appendString(b, h.Sender)
	b = appendString(b, string(h.Token))
	if h.Trace != "" {
		b = append(b, byte(len(h.Trace)))
		b = append(b, h.Trace...)
	}
	for _, v := range []int{h.BlockSize, h.BlockBytes, h.From, len(h.Tokens)} {
		b = binary.LittleEndian.AppendUint32(b, uint32(v))
	}
	for _, t := range h.Tokens {
		b = binary.LittleEndian.AppendUint32(b, uint32(t))
	}
	return b
}

func encodeResult(r *result) []byte {
	code, msg := truncate(r.Code), truncate(r.Message)
	n := 4 + 2 + len(code) + 2 + len(msg)
	b := appendFrameHeader(make([]byte, 0, frameHeader+n), frameResult, n)
	b = binary.LittleEndian.AppendUint32(b, uint32(r.Imported))
	b = appendString(b, code)
	return appendString(b, msg)
}

func truncate(s string) string {
	if len(s) > 1024 {
		return s[:1024]
	}
	return s
}

func encodeU32(typ byte, v int) []byte {
	b := appendFrameHeader(make([]byte, 0, frameHeader+4), typ, 4)
	return binary.LittleEndian.AppendUint32(b, uint32(v))
}

// reader decodes frames from a stream.
type reader struct {
	r   io.Reader
	hdr [frameHeader]byte
}

// next reads a frame header and checks the length against the type's
// bound; the caller reads (or discards) the payload.
func (rd *reader) next() (typ byte, n int, err error) {
	if _, err := io.ReadFull(rd.r, rd.hdr[:]); err != nil {
		return 0, 0, err
	}
	typ, n = rd.hdr[0], int(binary.LittleEndian.Uint32(rd.hdr[1:]))
	var limit int
	switch typ {
	case frameBegin, frameResult:
		limit = maxControlFrame
	case frameEnd, frameProbeAck:
		limit = 4
	case frameBlock:
		limit = blockHeader + maxBlockBytes
	case frameProbe:
		limit = maxProbe
	default:
		return 0, 0, fmt.Errorf("%w: unknown frame type %d", ErrProtocol, typ)
	}
	if n > limit {
		return 0, 0, fmt.Errorf("%w: frame type %d of %d bytes exceeds %d", ErrProtocol, typ, n, limit)
	}
	return typ, n, nil
}

// payload reads a whole control frame's payload.
func (rd *reader) payload(n int) ([]byte, error) {
	b := make([]byte, n)
	if _, err := io.ReadFull(rd.r, b); err != nil {
		return nil, fmt.Errorf("%w: short frame: %w", ErrProtocol, err)
	}
	return b, nil
}

// expect reads a frame that must be of type want and returns its payload.
func (rd *reader) expect(want byte) ([]byte, error) {
	typ, n, err := rd.next()
	if err != nil {
		return nil, err
	}
	if typ != want {
		return nil, fmt.Errorf("%w: frame type %d, want %d", ErrProtocol, typ, want)
	}
	return rd.payload(n)
}

type cursor struct {
	b   []byte
	err error
}

func (c *cursor) u8() int {
	if c.err != nil || len(c.b) < 1 {
		c.fail()
		return 0
	}
	v := c.b[0]
	c.b = c.b[1:]
	return int(v)
}

func (c *cursor) u16() int {
	if c.err != nil || len(c.b) < 2 {
		c.fail()
		return 0
	}
	v := binary.LittleEndian.Uint16(c.b)
	c.b = c.b[2:]
	return int(v)
}

func (c *cursor) u32() int {
	if c.err != nil || len(c.b) < 4 {
		c.fail()
		return 0
	}
	v := binary.LittleEndian.Uint32(c.b)
	c.b = c.b[4:]
	return int(v)
}

func (c *cursor) str() string {
	n := c.u16()
	if c.err != nil || len(c.b) < n {
		c.fail()
		return ""
	}
	s := string(c.b[:n])
	c.b = c.b[n:]
	return s
}

func (c *cursor) fail() {
	if c.err == nil {
		c.err = fmt.Errorf("%w: truncated payload", ErrProtocol)
	}
}

func (c *cursor) done() error {
	if c.err == nil && len(c.b) != 0 {
		c.err = fmt.Errorf("%w: %d trailing bytes", ErrProtocol, len(c.b))
	}
	return c.err
}

func decodeBegin(p []byte) (*begin, error) {
	c := cursor{b: p}
	v := c.u8()
	if c.err == nil && v != wireVersion && v != wireVersionTrace {
		return nil, fmt.Errorf("%w: version %d, want %d or %d", ErrProtocol, v, wireVersion, wireVersionTrace)
	}
	h := &begin{Layout: c.str(), Sender: c.str()}
	if tok := c.str(); tok != "" {
		h.Token = []byte(tok)
	}
	if v == wireVersionTrace && c.err == nil {
		// Bounded and validated: exactly one version-00-sized
		// traceparent, well formed, or the header is refused.
		if n := c.u8(); c.err == nil && n != tracing.TraceparentLen {
			return nil, fmt.Errorf("%w: trace context of %d bytes, want %d", ErrProtocol, n, tracing.TraceparentLen)
		}
		if c.err == nil && len(c.b) < tracing.TraceparentLen {
			c.fail()
		}
		if c.err == nil {
			h.Trace = string(c.b[:tracing.TraceparentLen])
			c.b = c.b[tracing.TraceparentLen:]
			if _, ok := tracing.ParseTraceparent(h.Trace, ""); !ok {
				return nil, fmt.Errorf("%w: malformed traceparent %q", ErrProtocol, h.Trace)
			}
		}
	}
	h.BlockSize, h.BlockBytes, h.From = c.u32(), c.u32(), c.u32()
	nt := c.u32()
	if c.err != nil {
		return nil, c.err
	}
	if nt*4 != len(c.b) {
		return nil, fmt.Errorf("%w: %d tokens need %d bytes, have %d", ErrProtocol, nt, nt*4, len(c.b))
	}
	switch {
	case h.BlockSize < 1 || h.BlockSize > 1<<16:
		return nil, fmt.Errorf("%w: block size %d", ErrProtocol, h.BlockSize)
	case h.BlockBytes < 1 || h.BlockBytes > maxBlockBytes:
		return nil, fmt.Errorf("%w: block bytes %d", ErrProtocol, h.BlockBytes)
	case nt%h.BlockSize != 0:
		return nil, fmt.Errorf("%w: %d tokens is not whole blocks of %d", ErrProtocol, nt, h.BlockSize)
	case h.From > nt/h.BlockSize:
		return nil, fmt.Errorf("%w: first block %d beyond %d blocks", ErrProtocol, h.From, nt/h.BlockSize)
	}
	h.Tokens = make([]int32, nt)
	for i := range h.Tokens {
		h.Tokens[i] = int32(binary.LittleEndian.Uint32(c.b[4*i:]))
	}
	return h, nil
}

func decodeResult(p []byte) (*result, error) {
	c := cursor{b: p}
	r := &result{Imported: c.u32(), Code: c.str(), Message: c.str()}
	if err := c.done(); err != nil {
		return nil, err
	}
	return r, nil
}

func decodeU32(p []byte) (int, error) {
	c := cursor{b: p}
	v := c.u32()
	return v, c.done()
}
