package gguf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"sort"
)

// Type is a ggml tensor type.
type Type uint32

// The tensor types this package can size (others are refused at read).
const (
	F32  Type = 0
	F16  Type = 1
	Q8_0 Type = 8
)

func (t Type) String() string {
	switch t {
	case F32:
		return "F32"
	case F16:
		return "F16"
	case Q8_0:
		return "Q8_0"
	}
	return fmt.Sprintf("ggml type %d", uint32(t))
}

// rowBytes is the byte size of n elements, or an error for types or
// element counts the format cannot hold.
func (t Type) bytes(n uint64) (uint64, error) {
	switch t {
	case F32:
		return 4 * n, nil
	case F16:
		return 2 * n, nil
	case Q8_0:
		if n%32 != 0 {
			return 0, fmt.Errorf("Q8_0 tensor of %d elements is not a multiple of 32", n)
		}
		return n / 32 * 34, nil
	}
	return 0, fmt.Errorf("unsupported tensor type %v", t)
}

// Value types of metadata.
const (
	tU8 uint32 = iota
	tI8
	tU16
	tI16
	tU32
	tI32
	tF32
	tBool
	tString
	tArray
	tU64
	tI64
	tF64
)

// Tensor describes one tensor. Dims[0] is the fastest-varying (columns).
type Tensor struct {
	Name   string
	Dims   []uint64
	Type   Type
	Offset uint64 // from the start of the data section
	Size   uint64 // bytes
}

// Elements is the product of Dims.
func (t *Tensor) Elements() uint64 {
	n := uint64(1)
	for _, d := range t.Dims {
		n *= d
	}
	return n
}

// File is a parsed GGUF file held in memory.
type File struct {
	Version   uint32
	Alignment uint64
	// KV holds metadata: integers as int64 or uint64, floats as float64,
	// strings, bools, and arrays as []string, []float32, []int32, []int64,
	// []uint64, []float64 or []bool.
	KV      map[string]any
	Tensors []Tensor
	data    []byte
	byName  map[string]int
}

const magic = "GGUF"

// maxRank bounds tensor ranks; ggml has at most 4 dimensions.
const maxRank = 4

// Open reads and parses the file at path.
func Open(path string) (*File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	f, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("gguf %s: %w", path, err)
	}
	return f, nil
}

type reader struct {
	b   []byte
	off uint64
	err error
}

var errShort = errors.New("unexpected end of file")

func (r *reader) take(n uint64) []byte {
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b))-r.off {
		r.err = fmt.Errorf("at byte %d: %w (need %d more bytes)", r.off, errShort, n)
		return nil
	}
	s := r.b[r.off : r.off+n]
	r.off += n
	return s
}

func (r *reader) u32() uint32 {
	if s := r.take(4); s != nil {
		return binary.LittleEndian.Uint32(s)
	}
	return 0
}

func (r *reader) u64() uint64 {
	if s := r.take(8); s != nil {
		return binary.LittleEndian.Uint64(s)
	}
	return 0
}

func (r *reader) str() string {
	n := r.u64()
	return string(r.take(n))
}

func (r *reader) left() uint64 { return uint64(len(r.b)) - r.off }

// Parse parses a GGUF image. The returned File aliases b.
func Parse(b []byte) (*File, error) {
	r := &reader{b: b}
	if string(r.take(4)) != magic {
		if r.err != nil {
			return nil, r.err
		}
		return nil, errors.New("not a GGUF file (bad magic)")
	}
	f := &File{Version: r.u32(), KV: map[string]any{}, Alignment: 32, byName: map[string]int{}}
	if f.Version != 2 && f.Version != 3 {
		return nil, fmt.Errorf("unsupported GGUF version %d", f.Version)
	}
	nt, nkv := r.u64(), r.u64()
	if r.err != nil {
		return nil, r.err
	}
	// Each KV takes at least 12 bytes and each tensor info at least 24:
	// counts beyond what the file could hold are corrupt.
	if nkv > r.left()/12 || nt > r.left()/24 {
		return nil, fmt.Errorf("header claims %d tensors and %d metadata entries, more than the file can hold", nt, nkv)
	}
	for range nkv {
		k := r.str()
		v, err := r.value(r.u32(), 0)
		if r.err != nil {
			return nil, fmt.Errorf("metadata: %w", r.err)
		}
		if err != nil {
			return nil, fmt.Errorf("metadata %q: %w", k, err)
		}
		f.KV[k] = v
	}
	if a, ok := f.KV["general.alignment"]; ok {
		al, ok := asUint(a)
		if !ok || al == 0 || al&(al-1) != 0 || al > 1<<16 {
			return nil, fmt.Errorf("general.alignment %v is not a power of two", a)
		}
		f.Alignment = al
	}
	for range nt {
		t := Tensor{Name: r.str()}
		rank := r.u32()
		if r.err == nil && (rank == 0 || rank > maxRank) {
			return nil, fmt.Errorf("tensor %q has rank %d", t.Name, rank)
		}
		for range rank {
			t.Dims = append(t.Dims, r.u64())
		}
		t.Type, t.Offset = Type(r.u32()), r.u64()
		if r.err != nil {
			return nil, fmt.Errorf("tensor directory: %w", r.err)
		}
		n := uint64(1)
		for _, d := range t.Dims {
			if d == 0 || d > 1<<40 || n > (1<<50)/d {
				return nil, fmt.Errorf("tensor %q has bad dimensions %v", t.Name, t.Dims)
			}
			n *= d
		}
		size, err := t.Type.bytes(n)
		if err != nil {
			return nil, fmt.Errorf("tensor %q: %w", t.Name, err)
		}
		t.Size = size
		if _, dup := f.byName[t.Name]; dup {
			return nil, fmt.Errorf("tensor %q appears twice", t.Name)
		}
		f.byName[t.Name] = len(f.Tensors)
		f.Tensors = append(f.Tensors, t)
	}
	start := (r.off + f.Alignment - 1) / f.Alignment * f.Alignment
	if start > uint64(len(b)) {
		start = uint64(len(b))
	}
	f.data = b[start:]
	for _, t := range f.Tensors {
		if t.Offset%f.Alignment != 0 {
			return nil, fmt.Errorf("tensor %q offset %d is not aligned to %d", t.Name, t.Offset, f.Alignment)
		}
		if t.Offset > uint64(len(f.data)) || t.Size > uint64(len(f.data))-t.Offset {
			return nil, fmt.Errorf("tensor %q (%d bytes at data offset %d) runs past the end of the file (truncated? data section is %d bytes)",
				t.Name, t.Size, t.Offset, len(f.data))
		}
	}
	return f, nil
}

func (r *reader) value(typ uint32, depth int) (any, error) {
	switch typ {
	case tU8:
		if s := r.take(1); s != nil {
			return uint64(s[0]), nil
		}
	case tI8:
		if s := r.take(1); s != nil {
			return int64(int8(s[0])), nil
		}
	case tU16:
		if s := r.take(2); s != nil {
			return uint64(binary.LittleEndian.Uint16(s)), nil
		}
	case tI16:
		if s := r.take(2); s != nil {
			return int64(int16(binary.LittleEndian.Uint16(s))), nil
		}
	case tU32:
		return uint64(r.u32()), nil
	case tI32:
		return int64(int32(r.u32())), nil
	case tF32:
		return float64(math.Float32frombits(r.u32())), nil
	case tBool:
		if s := r.take(1); s != nil {
			return s[0] != 0, nil
		}
	case tString:
		return r.str(), nil
	case tU64:
		return r.u64(), nil
	case tI64:
		return int64(r.u64()), nil
	case tF64:
		return math.Float64frombits(r.u64()), nil
	case tArray:
		if depth > 0 {
			return nil, errors.New("nested arrays are not supported")
		}
		et, n := r.u32(), r.u64()
		if r.err != nil {
			return nil, nil
		}
		if n > r.left() { // every element takes at least one byte
			return nil, fmt.Errorf("array of %d elements exceeds the file", n)
		}
		switch et {
		case tString:
			if n > r.left()/8 {
				return nil, fmt.Errorf("string array of %d elements exceeds the file", n)
			}
			out := make([]string, n)
			for i := range out {
				out[i] = r.str()
			}
			return out, nil
		case tF32:
			s := r.take(4 * n)
			out := make([]float32, len(s)/4)
			for i := range out {
				out[i] = math.Float32frombits(binary.LittleEndian.Uint32(s[4*i:]))
			}
			return out, nil
		case tI32:
			s := r.take(4 * n)
			out := make([]int32, len(s)/4)
			for i := range out {
				out[i] = int32(binary.LittleEndian.Uint32(s[4*i:]))
			}
			return out, nil
		case tArray:
			return nil, errors.New("nested arrays are not supported")
		}
		var ints []int64
		var uints []uint64
		var floats []float64
		var bools []bool
		for range n {
			v, err := r.value(et, depth+1)
			if err != nil || r.err != nil {
				return nil, err
			}
			switch x := v.(type) {
			case int64:
				ints = append(ints, x)
			case uint64:
				uints = append(uints, x)
			case float64:
				floats = append(floats, x)
			case bool:
				bools = append(bools, x)
			}
		}
		switch {
		case ints != nil:
			return ints, nil
		case uints != nil:
			return uints, nil
		case floats != nil:
			return floats, nil
		case bools != nil:
			return bools, nil
		}
		return []int64{}, nil
	default:
		return nil, fmt.Errorf("unknown value type %d", typ)
	}
	return nil, nil
}

func asUint(v any) (uint64, bool) {
	switch x := v.(type) {
	case uint64:
		return x, true
	case int64:
		return uint64(x), x >= 0
	}
	return 0, false
}

// Tensor returns the named tensor's description and bytes.
func (f *File) Tensor(name string) (*Tensor, []byte, bool) {
	i, ok := f.byName[name]
	if !ok {
		return nil, nil, false
	}
	t := &f.Tensors[i]
	return t, f.data[t.Offset : t.Offset+t.Size], true
}

// Uint returns an integer metadata value.
func (f *File) Uint(key string) (uint64, bool) { return asUint(f.KV[key]) }

// Float returns a numeric metadata value.
func (f *File) Float(key string) (float64, bool) {
	switch x := f.KV[key].(type) {
	case float64:
		return x, true
	case int64:
		return float64(x), true
	case uint64:
		return float64(x), true
	}
	return 0, false
}

// String returns a string metadata value.
func (f *File) String(key string) (string, bool) {
	s, ok := f.KV[key].(string)
	return s, ok
}

// Keys lists the metadata keys in sorted order.
func (f *File) Keys() []string {
	keys := make([]string, 0, len(f.KV))
	for k := range f.KV {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
