package requestplane

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/tandemllm/tandem/engine"
)

// handCodec is the request plane's codec before the .proto, kept (for the
// hot messages, engine.Request and engine.Delta) as the baseline of
// BenchmarkCodec and as the older peer of TestOlderPeers. Format (all
// little-endian): a version byte, then fields in fixed order; strings and
// token lists are length-prefixed with uvarints; version 2 added
// kv_transfer_params, and a message without them was written as version 1.
type handCodec struct{}

const codecVersion = 2

func messageVersion(params []byte) byte {
	if len(params) == 0 {
		return 1
	}
	return codecVersion
}

var errCorrupt = errors.New("requestplane: corrupt message")

func (handCodec) Name() string { return "tandem-rp1" }

func (handCodec) Marshal(v any) ([]byte, error) {
	switch m := v.(type) {
	case *engine.Request:
		return appendRequest(make([]byte, 0, 64+4*len(m.Prompt)), m), nil
	case *engine.Delta:
		return appendDelta(make([]byte, 0, 16+4*len(m.Tokens)), m), nil
	default:
		return nil, fmt.Errorf("requestplane: cannot marshal %T", v)
	}
}

func (handCodec) Unmarshal(b []byte, v any) error {
	switch m := v.(type) {
	case *engine.Request:
		return decodeRequest(b, m)
	case *engine.Delta:
		return decodeDelta(b, m)
	default:
		return fmt.Errorf("requestplane: cannot unmarshal into %T", v)
	}
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendTokens(b []byte, t []engine.Token) []byte {
	b = binary.AppendUvarint(b, uint64(len(t)))
	for _, x := range t {
		b = binary.LittleEndian.AppendUint32(b, uint32(x))
	}
	return b
}

func appendRequest(b []byte, r *engine.Request) []byte {
	v := messageVersion(r.KVTransferParams)
	b = append(b, v)
	b = appendString(b, r.ID)
	b = appendString(b, r.Model)
	b = appendTokens(b, r.Prompt)
	b = binary.AppendVarint(b, int64(r.MaxTokens))
	b = binary.AppendVarint(b, int64(r.MinTokens))
	flags := byte(0)
	if r.IgnoreEOS {
		flags |= 1
	}
	if r.Sampling.HasSeed {
		flags |= 2
	}
	b = append(b, flags)
	b = appendTokens(b, r.StopTokens)
	b = binary.LittleEndian.AppendUint32(b, math.Float32bits(r.Sampling.Temperature))
	b = binary.LittleEndian.AppendUint32(b, math.Float32bits(r.Sampling.TopP))
	b = binary.AppendVarint(b, int64(r.Sampling.TopK))
	b = binary.LittleEndian.AppendUint64(b, r.Sampling.Seed)
	if v < 2 {
		return b
	}
	return appendString(b, string(r.KVTransferParams))
}

func appendDelta(b []byte, d *engine.Delta) []byte {
	v := messageVersion(d.KVTransferParams)
	b = append(b, v)
	b = appendTokens(b, d.Tokens)
	b = appendString(b, string(d.Finish))
	b = binary.AppendUvarint(b, uint64(d.PromptTokens))
	b = binary.AppendUvarint(b, uint64(d.CachedTokens))
	if v < 2 {
		return b
	}
	return appendString(b, string(d.KVTransferParams))
}

// reader decodes with sticky errors so the decoders read straight through.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail() {
	if r.err == nil {
		r.err = errCorrupt
	}
	r.b = nil
}

func (r *reader) byte() byte {
	if len(r.b) < 1 {
		r.fail()
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *reader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) varint() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) u32() uint32 {
	if len(r.b) < 4 {
		r.fail()
		return 0
	}
	v := binary.LittleEndian.Uint32(r.b)
	r.b = r.b[4:]
	return v
}

func (r *reader) u64() uint64 {
	if len(r.b) < 8 {
		r.fail()
		return 0
	}
	v := binary.LittleEndian.Uint64(r.b)
	r.b = r.b[8:]
	return v
}

func (r *reader) str() string {
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		r.fail()
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

func (r *reader) tokens() []engine.Token {
	n := r.uvarint()
	if n > maxTokens || n*4 > uint64(len(r.b)) {
		r.fail()
		return nil
	}
	if n == 0 {
		return nil
	}
	t := make([]engine.Token, n)
	for i := range t {
		t[i] = engine.Token(binary.LittleEndian.Uint32(r.b[4*i:]))
	}
	r.b = r.b[4*n:]
	return t
}

func (r *reader) int() int {
	v := r.varint()
	if v < math.MinInt32 || v > math.MaxInt32 {
		r.fail()
		return 0
	}
	return int(v)
}

func (r *reader) done() error {
	if r.err == nil && len(r.b) != 0 {
		return fmt.Errorf("%w: %d trailing bytes", errCorrupt, len(r.b))
	}
	return r.err
}

// version reads and checks the version byte.
func (r *reader) version() byte {
	v := r.byte()
	if (v < 1 || v > codecVersion) && r.err == nil {
		r.err = fmt.Errorf("%w: version %d (this build reads 1 to %d)", errCorrupt, v, codecVersion)
		r.b = nil
	}
	return v
}

// raw reads a length-prefixed byte string (nil when empty).
func (r *reader) raw() []byte {
	if s := r.str(); s != "" {
		return []byte(s)
	}
	return nil
}

func decodeRequest(b []byte, m *engine.Request) error {
	r := reader{b: b}
	r.request(m)
	return r.done()
}

// request reads what appendRequest wrote.
func (r *reader) request(m *engine.Request) {
	v := r.version()
	m.ID = r.str()
	m.Model = r.str()
	m.Prompt = r.tokens()
	// Lengths are carried whole and range-checked by the worker
	// (engine.CheckRequest), which words the refusal: a wire-level
	// failure would reach the client as a 500.
	m.MaxTokens = int(r.varint())
	m.MinTokens = int(r.varint())
	flags := r.byte()
	m.IgnoreEOS = flags&1 != 0
	m.Sampling.HasSeed = flags&2 != 0
	m.StopTokens = r.tokens()
	m.Sampling.Temperature = math.Float32frombits(r.u32())
	m.Sampling.TopP = math.Float32frombits(r.u32())
	m.Sampling.TopK = r.int()
	m.Sampling.Seed = r.u64()
	if v >= 2 {
		m.KVTransferParams = r.raw()
	}
}

func decodeDelta(b []byte, m *engine.Delta) error {
	r := reader{b: b}
	v := r.version()
	m.Tokens = r.tokens()
	m.Finish = engine.FinishReason(r.str())
	m.PromptTokens = int(r.uvarint() & math.MaxInt32)
	m.CachedTokens = int(r.uvarint() & math.MaxInt32)
	if v >= 2 {
		m.KVTransferParams = r.raw()
	}
	return r.done()
}
