package safetensors

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func sample(t testing.TB) []byte {
	var buf bytes.Buffer
	err := Write(&buf, []Tensor{
		{Name: "b", DType: "F32", Shape: []int{2}, Data: []byte{0, 0, 128, 63, 0, 0, 0, 64}},
		{Name: "a", DType: "BF16", Shape: []int{1, 3}, Data: []byte{128, 63, 0, 64, 64, 64}},
	}, map[string]string{"format": "pt"})
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestRoundTrip(t *testing.T) {
	f, err := Parse(sample(t))
	if err != nil {
		t.Fatal(err)
	}
	a := f.Tensors["a"]
	if a == nil || a.DType != "BF16" || len(a.Shape) != 2 || a.Shape[1] != 3 || !bytes.Equal(a.Data, []byte{128, 63, 0, 64, 64, 64}) {
		t.Fatalf("a = %+v", a)
	}
	if f.Metadata["format"] != "pt" {
		t.Fatalf("metadata %v", f.Metadata)
	}
	if hl := binary.LittleEndian.Uint64(sample(t)); hl%8 != 0 {
		t.Fatalf("header length %d not padded to 8", hl)
	}
}

func TestCorruptNamesTensor(t *testing.T) {
	good := sample(t)
	for _, c := range []struct {
		name string
		b    []byte
		want string
	}{
		{"truncated data", good[:len(good)-3], `tensor "b"`},
		{"short", good[:5], "too short"},
		{"huge header", append(binary.LittleEndian.AppendUint64(nil, 1<<40), good[8:]...), "header length"},
		{"bad dtype", bytes.Replace(good, []byte(`"F32"`), []byte(`"Q99"`), 1), `tensor "b": unknown dtype`},
		{"bad shape", bytes.Replace(good, []byte(`[1,3]`), []byte(`[1,4]`), 1), `tensor "a"`},
	} {
		if _, err := Parse(c.b); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want mention of %s", c.name, err, c.want)
		}
	}
}

func TestShardedDir(t *testing.T) {
	dir := t.TempDir()
	for i, name := range []string{"x", "y"} {
		var buf bytes.Buffer
		if err := Write(&buf, []Tensor{{Name: name, DType: "F32", Shape: []int{1}, Data: []byte{0, 0, 0, byte(i)}}}, nil); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, "model-0000"+string('1'+rune(i))+"-of-00002.safetensors"), buf.Bytes(), 0o644)
	}
	idx := `{"metadata":{},"weight_map":{"x":"model-00001-of-00002.safetensors","y":"model-00002-of-00002.safetensors"}}`
	os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), []byte(idx), 0o644)
	s, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Tensors) != 2 || s.Tensors["y"].Data[3] != 1 {
		t.Fatalf("set %+v", s.Tensors)
	}
	os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), []byte(strings.Replace(idx, `"y":"model-00002`, `"y":"model-00001`, 1)), 0o644)
	if _, err := OpenDir(dir); err == nil || !strings.Contains(err.Error(), `"y"`) {
		t.Fatalf("wrong shard map: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), []byte(strings.Replace(idx, `"x":"model`, `"x":"../model`, 1)), 0o644)
	if _, err := OpenDir(dir); err == nil {
		t.Fatal("shard outside the directory accepted")
	}
}

func FuzzParse(f *testing.F) {
	f.Add(sample(f))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		file, err := Parse(b)
		if err != nil {
			return
		}
		for _, tt := range file.Tensors {
			_ = tt.Data[:len(tt.Data)]
		}
	})
}
