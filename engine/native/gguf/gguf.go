package gguf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sort"

	"github.com/tandemllm/tandem/engine/native/mmapfile"
)

// Type is a ggml tensor type.
type Type uint32

// The tensor types this package can size (others are refused at read).
// The numbers are ggml's enum ggml_type (ggml/include/ggml.h in
// https://github.com/ggml-org/llama.cpp).
const (
	F32  Type = 0
	F16  Type = 1
	Q4_0 Type = 2
	Q8_0 Type = 8
	Q4_K Type = 12
	Q5_K Type = 13
	Q6_K Type = 14
	BF16 Type = 30
)

// blockInfo is a type's block size in elements and in bytes, from
// ggml/src/ggml-common.h (block_q4_0: fp16 d + 16 bytes of nibbles;
// block_q8_0: fp16 d + 32 int8; block_q4_K: fp16 d, fp16 dmin, 12 bytes of
// 6-bit scales and mins, 128 bytes of nibbles; block_q5_K: the same plus 32
// bytes of high bits; block_q6_K: 128 bytes of low nibbles, 64 of high
// 2-bit pairs, 16 int8 scales, fp16 d).
var blockInfo = map[Type][2]uint64{
	F32: {1, 4}, F16: {1, 2}, BF16: {1, 2},
	Q4_0: {32, 18}, Q8_0: {32, 34},
	Q4_K: {256, 144}, Q5_K: {256, 176}, Q6_K: {256, 210},
}

var typeNames = map[Type]string{F32: "F32", F16: "F16", BF16: "BF16", Q4_0: "Q4_0", Q8_0: "Q8_0", Q4_K: "Q4_K", Q5_K: "Q5_K", Q6_K: "Q6_K"}

func (t Type) String() string {
	if s, ok := typeNames[t]; ok {
		return s
	}
	return fmt.Sprintf("ggml type %d", uint32(t))
}

// BlockSize is the number of elements one block of t holds (1 for the
// float types, 0 for types this package does not know).
func (t Type) BlockSize() int { return int(blockInfo[t][0]) }

// RowBytes is the byte size of a row of n elements of type t.
func (t Type) RowBytes(n int) (int, error) {
	if n < 0 {
		return 0, fmt.Errorf("negative row length %d", n)
	}
	b, err := t.bytes(uint64(n))
	return int(b), err
}

// bytes is the byte size of n elements, or an error for types or
// element counts the format cannot hold. Rows of a blocked type must be
// whole blocks; callers check that per row (a tensor of whole rows of
// whole blocks is then whole blocks too).
func (t Type) bytes(n uint64) (uint64, error) {
	bi, ok := blockInfo[t]
	if !ok {
		return 0, fmt.Errorf("unsupported tensor type %v", t)
	}
	if n%bi[0] != 0 {
		return 0, fmt.Errorf("%v tensor of %d elements is not a multiple of its block size %d", t, n, bi[0])
	}
	return n / bi[0] * bi[1], nil
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

// File is a parsed GGUF file: a read-only memory map of it (Open on
// Linux) or bytes in memory (Parse). Tensor bytes alias the image.
type File struct {
	Version   uint32
	Alignment uint64
	// KV holds metadata: integers as int64 or uint64, floats as float64,
	// strings, bools, and arrays as []string, []float32, []int32, []int64,
	// []uint64, []float64 or []bool.
	KV      map[string]any
	Tensors []Tensor
	// Mapped reports that the image is a memory map of the file.
	Mapped bool
	// DataOffset is where the tensor data section starts in the file.
	DataOffset uint64
	data       []byte
	byName     map[string]int
}

const magic = "GGUF"

// maxRank bounds tensor ranks; ggml has at most 4 dimensions.
const maxRank = 4

// Mapped reports that Open maps files on this platform (else it reads
// them whole).
func Mapped() bool { return mmapfile.Mapped }

// Open maps the file at path read-only (package mmapfile) and parses it. No
// tensor byte is read here: pages are faulted in from the page cache when
// the engine first touches them, so opening a large model costs the
// directory walk only, and the weights are shared with every other process
// mapping the same file. The mapping is never unmapped: tensor slices
// handed out alias it and may outlive the File.
func Open(path string) (*File, error) {
	b, err := mmapfile.Map(path)
	if err != nil {
		return nil, err
	}
	f, err := Parse(b)
	if err != nil {
		mmapfile.Unmap(b)
		return nil, fmt.Errorf("gguf %s: %w", path, err)
	}
	f.Mapped = mmapfile.Mapped
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
		if bs := t.Type.BlockSize(); bs > 1 && t.Dims[0]%uint64(bs) != 0 {
			return nil, fmt.Errorf("tensor %q: rows of %d elements are not whole %v blocks of %d", t.Name, t.Dims[0], t.Type, bs)
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
	f.DataOffset = start
	// Of the tensors that run past the end, name the first one cut: the
	// one with the lowest offset, where the file stops.
	var cut *Tensor
	for i := range f.Tensors {
		t := &f.Tensors[i]
		if t.Offset%f.Alignment != 0 {
			return nil, fmt.Errorf("tensor %q offset %d is not aligned to %d", t.Name, t.Offset, f.Alignment)
		}
		if t.Offset > uint64(len(f.data)) || t.Size > uint64(len(f.data))-t.Offset {
			if cut == nil || t.Offset < cut.Offset {
				cut = t
			}
		}
	}
	if cut != nil {
		return nil, fmt.Errorf("tensor %q (%v %v, %d bytes at data offset %d) runs past the end of the file (truncated? data section is %d bytes)",
			cut.Name, cut.Type, cut.Dims, cut.Size, cut.Offset, len(f.data))
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
