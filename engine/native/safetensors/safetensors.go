package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"github.com/tandemllm/tandem/engine/native/mmapfile"
)

// maxHeader bounds the JSON header (the reference implementation refuses
// headers over 100 MB).
const maxHeader = 100 << 20

// Tensor is one tensor of a file.
type Tensor struct {
	Name  string
	DType string // "F32", "F16", "BF16", ...
	Shape []int
	Data  []byte
}

// File is one parsed .safetensors file.
type File struct {
	Path     string
	Metadata map[string]string
	Tensors  map[string]*Tensor
}

var elemSize = map[string]int{"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}

// Open maps and parses one file.
func Open(path string) (*File, error) {
	b, err := mmapfile.Map(path)
	if err != nil {
		return nil, err
	}
	f, err := Parse(b)
	if err != nil {
		mmapfile.Unmap(b)
		return nil, fmt.Errorf("safetensors %s: %w", path, err)
	}
	f.Path = path
	return f, nil
}

// Parse parses a file image; tensor data aliases b.
func Parse(b []byte) (*File, error) {
	if len(b) < 8 {
		return nil, fmt.Errorf("%d bytes: too short for the 8-byte header length", len(b))
	}
	n := binary.LittleEndian.Uint64(b)
	if n > maxHeader || n > uint64(len(b)-8) {
		return nil, fmt.Errorf("header length %d exceeds the file (%d bytes) or the %d limit", n, len(b), maxHeader)
	}
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(b[8 : 8+n]))
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("header: %w", err)
	}
	data := b[8+n:]
	f := &File{Tensors: map[string]*Tensor{}}
	for name, v := range raw {
		if name == "__metadata__" {
			if err := json.Unmarshal(v, &f.Metadata); err != nil {
				return nil, fmt.Errorf("__metadata__: %w", err)
			}
			continue
		}
		var h struct {
			DType   string   `json:"dtype"`
			Shape   []int64  `json:"shape"`
			Offsets []uint64 `json:"data_offsets"`
		}
		if err := json.Unmarshal(v, &h); err != nil {
			return nil, fmt.Errorf("tensor %q: %w", name, err)
		}
		es, ok := elemSize[h.DType]
		if !ok {
			return nil, fmt.Errorf("tensor %q: unknown dtype %q", name, h.DType)
		}
		if len(h.Offsets) != 2 || h.Offsets[0] > h.Offsets[1] || h.Offsets[1] > uint64(len(data)) {
			return nil, fmt.Errorf("tensor %q: data_offsets %v outside the %d data bytes (truncated?)", name, h.Offsets, len(data))
		}
		if len(h.Shape) > 8 {
			return nil, fmt.Errorf("tensor %q: rank %d", name, len(h.Shape))
		}
		elems := uint64(1)
		shape := make([]int, len(h.Shape))
		for i, d := range h.Shape {
			if d < 0 || d > 1<<40 || (d > 0 && elems > (1<<50)/uint64(d)) {
				return nil, fmt.Errorf("tensor %q: bad shape %v", name, h.Shape)
			}
			elems *= uint64(d)
			shape[i] = int(d)
		}
		if want := elems * uint64(es); want != h.Offsets[1]-h.Offsets[0] {
			return nil, fmt.Errorf("tensor %q: %s %v needs %d bytes, data_offsets give %d", name, h.DType, h.Shape, want, h.Offsets[1]-h.Offsets[0])
		}
		f.Tensors[name] = &Tensor{Name: name, DType: h.DType, Shape: shape, Data: data[h.Offsets[0]:h.Offsets[1]:h.Offsets[1]]}
	}
	return f, nil
}

// Set is the tensors of a model directory: one model.safetensors, or the
// shards model.safetensors.index.json names.
type Set struct {
	Tensors map[string]*Tensor
	Files   []string
}

// OpenDir opens the checkpoint of a Hugging Face model directory.
func OpenDir(dir string) (*Set, error) {
	idx := filepath.Join(dir, "model.safetensors.index.json")
	var files []string
	if b, err := os.ReadFile(idx); err == nil {
		var ix struct {
			WeightMap map[string]string `json:"weight_map"`
		}
		if err := json.Unmarshal(b, &ix); err != nil {
			return nil, fmt.Errorf("%s: %w", idx, err)
		}
		seen := map[string]bool{}
		for _, f := range ix.WeightMap {
			if f != filepath.Base(f) {
				return nil, fmt.Errorf("%s: shard %q is not a file name in the directory", idx, f)
			}
			if !seen[f] {
				seen[f] = true
				files = append(files, f)
			}
		}
		sort.Strings(files)
		s, err := openFiles(dir, files)
		if err != nil {
			return nil, err
		}
		for name, f := range ix.WeightMap {
			if _, ok := s.Tensors[name]; !ok {
				return nil, fmt.Errorf("%s: tensor %q is mapped to %s, which does not hold it", idx, name, f)
			}
		}
		return s, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(dir, "model.safetensors")); err != nil {
		return nil, fmt.Errorf("%s: neither model.safetensors nor model.safetensors.index.json: %w", dir, err)
	}
	return openFiles(dir, []string{"model.safetensors"})
}

func openFiles(dir string, files []string) (*Set, error) {
	s := &Set{Tensors: map[string]*Tensor{}}
	for _, name := range files {
		f, err := Open(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		for n, t := range f.Tensors {
			if _, dup := s.Tensors[n]; dup {
				return nil, fmt.Errorf("tensor %q appears in two shards (second: %s)", n, name)
			}
			s.Tensors[n] = t
		}
		s.Files = append(s.Files, f.Path)
	}
	return s, nil
}

// Write writes tensors (sorted by name, as the reference writer orders
// them) with optional metadata.
func Write(w io.Writer, tensors []Tensor, meta map[string]string) error {
	sort.Slice(tensors, func(i, j int) bool { return tensors[i].Name < tensors[j].Name })
	hdr := map[string]any{}
	if meta != nil {
		hdr["__metadata__"] = meta
	}
	var off uint64
	for _, t := range tensors {
		es, ok := elemSize[t.DType]
		if !ok {
			return fmt.Errorf("safetensors: tensor %q: unknown dtype %q", t.Name, t.DType)
		}
		n := uint64(es)
		for _, d := range t.Shape {
			n *= uint64(d)
		}
		if n != uint64(len(t.Data)) {
			return fmt.Errorf("safetensors: tensor %q: %d bytes for %s %v", t.Name, len(t.Data), t.DType, t.Shape)
		}
		hdr[t.Name] = map[string]any{"dtype": t.DType, "shape": t.Shape, "data_offsets": []uint64{off, off + n}}
		off += n
	}
	j, err := json.Marshal(hdr)
	if err != nil {
		return err
	}
	// Pad the header with spaces to 8 bytes so the data is aligned, as the
	// reference writer does.
	for len(j)%8 != 0 {
		j = append(j, ' ')
	}
	if err := binary.Write(w, binary.LittleEndian, uint64(len(j))); err != nil {
		return err
	}
	if _, err := w.Write(j); err != nil {
		return err
	}
	for _, t := range tensors {
		if _, err := w.Write(t.Data); err != nil {
			return err
		}
	}
	return nil
}
