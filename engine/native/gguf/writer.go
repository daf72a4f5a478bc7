package gguf

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
)

// Writer assembles a GGUF version 3 file. Metadata is written in the order
// it was added; tensors are aligned to 32 bytes.
type Writer struct {
	kvs     []kvEntry
	tensors []wTensor
	err     error
}

type kvEntry struct {
	key string
	typ uint32
	val any
}

type wTensor struct {
	name string
	typ  Type
	dims []uint64
	data []byte
}

// Set adds a metadata value: string, bool, uint32, int32, uint64, float32,
// []string, []float32 or []int32.
func (w *Writer) Set(key string, v any) {
	var t uint32
	switch v.(type) {
	case string:
		t = tString
	case bool:
		t = tBool
	case uint32:
		t = tU32
	case int32:
		t = tI32
	case uint64:
		t = tU64
	case float32:
		t = tF32
	case []string, []float32, []int32:
		t = tArray
	default:
		if w.err == nil {
			w.err = fmt.Errorf("gguf: unsupported metadata type %T for %q", v, key)
		}
		return
	}
	w.kvs = append(w.kvs, kvEntry{key, t, v})
}

// AddTensor adds a tensor; data must already be encoded in typ.
func (w *Writer) AddTensor(name string, typ Type, dims []uint64, data []byte) {
	t := Tensor{Dims: dims, Type: typ}
	want, err := typ.bytes(t.Elements())
	if err == nil && want != uint64(len(data)) {
		err = fmt.Errorf("tensor %q: %d bytes, %v %v needs %d", name, len(data), typ, dims, want)
	}
	if err != nil && w.err == nil {
		w.err = fmt.Errorf("gguf: %w", err)
	}
	w.tensors = append(w.tensors, wTensor{name, typ, dims, data})
}

// WriteTo writes the file.
func (w *Writer) WriteTo(out io.Writer) (int64, error) {
	if w.err != nil {
		return 0, w.err
	}
	cw := &countWriter{w: bufio.NewWriterSize(out, 1<<20)}
	le := binary.LittleEndian
	u32 := func(v uint32) { cw.write(le.AppendUint32(nil, v)) }
	u64 := func(v uint64) { cw.write(le.AppendUint64(nil, v)) }
	str := func(s string) { u64(uint64(len(s))); cw.write([]byte(s)) }
	cw.write([]byte(magic))
	u32(3)
	u64(uint64(len(w.tensors)))
	u64(uint64(len(w.kvs)))
	for _, kv := range w.kvs {
		str(kv.key)
		u32(kv.typ)
		switch v := kv.val.(type) {
		case string:
			str(v)
		case bool:
			if v {
				cw.write([]byte{1})
			} else {
				cw.write([]byte{0})
			}
		case uint32:
			u32(v)
		case int32:
			u32(uint32(v))
		case uint64:
			u64(v)
		case float32:
			u32(math.Float32bits(v))
		case []string:
			u32(tString)
			u64(uint64(len(v)))
			for _, s := range v {
				str(s)
			}
		case []float32:
			u32(tF32)
			u64(uint64(len(v)))
			for _, f := range v {
				u32(math.Float32bits(f))
			}
		case []int32:
			u32(tI32)
			u64(uint64(len(v)))
			for _, i := range v {
				u32(uint32(i))
			}
		}
	}
	var off uint64
	for _, t := range w.tensors {
		str(t.name)
		u32(uint32(len(t.dims)))
		for _, d := range t.dims {
			u64(d)
		}
		u32(uint32(t.typ))
		u64(off)
		off += (uint64(len(t.data)) + 31) / 32 * 32
	}
	pad := func() {
		if r := cw.n % 32; r != 0 {
			cw.write(make([]byte, 32-r))
		}
	}
	pad()
	for _, t := range w.tensors {
		cw.write(t.data)
		pad()
	}
	if cw.err == nil {
		cw.err = cw.w.Flush()
	}
	return cw.n, cw.err
}

type countWriter struct {
	w   *bufio.Writer
	n   int64
	err error
}

func (c *countWriter) write(b []byte) {
	if c.err != nil {
		return
	}
	n, err := c.w.Write(b)
	c.n += int64(n)
	c.err = err
}
