package kvtransfer

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

func TestBeginRoundTrip(t *testing.T) {
	tests := []begin{
		{Layout: "mocker/v1", BlockSize: 16, BlockBytes: 1 << 20, From: 0, Tokens: make([]int32, 32)},
		{Layout: "", BlockSize: 1, BlockBytes: 1, From: 3, Tokens: []int32{1, -2, 3}},
		{Layout: "x", Sender: "p1", Token: bytes.Repeat([]byte{7}, tokenLen), BlockSize: 2, BlockBytes: 4, Tokens: []int32{1, 2}},
		{Layout: "x", Sender: "p1", Token: bytes.Repeat([]byte{7}, tokenLen), Trace: testTraceparent, BlockSize: 2, BlockBytes: 4, Tokens: []int32{1, 2}},
	}
	for _, h := range tests {
		enc := encodeBegin(&h)
		rd := &reader{r: bytes.NewReader(enc)}
		p, err := rd.expect(frameBegin)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeBegin(p)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(*got, h) {
			t.Fatalf("got %+v, want %+v", got, h)
		}
	}
}

const testTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// TestBeginVersions: a Begin without a trace context is version 2, as
// receivers of every release read it; with one, version 3.
func TestBeginVersions(t *testing.T) {
	h := begin{Layout: "x", Sender: "p1", BlockSize: 2, BlockBytes: 4, Tokens: []int32{1, 2}}
	if v := encodeBegin(&h)[frameHeader]; v != wireVersion {
		t.Errorf("untraced Begin is version %d", v)
	}
	h.Trace = testTraceparent
	if v := encodeBegin(&h)[frameHeader]; v != wireVersionTrace {
		t.Errorf("traced Begin is version %d", v)
	}
}

func TestDecodeRejects(t *testing.T) {
	good := encodeBegin(&begin{Layout: "x", BlockSize: 4, BlockBytes: 8, Tokens: make([]int32, 8)})[frameHeader:]
	traced := encodeBegin(&begin{Layout: "x", Trace: testTraceparent, BlockSize: 4, BlockBytes: 8, Tokens: make([]int32, 8)})[frameHeader:]
	// Offset of the trace length byte: version, layout "x", sender "", token "".
	const at = 1 + 3 + 2 + 2
	withTrace := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(traced)) }
	tests := []struct {
		name string
		p    []byte
	}{
		{"empty", nil},
		{"bad version", append([]byte{9}, good[1:]...)},
		{"truncated", good[:len(good)-1]},
		{"partial block", encodeBegin(&begin{Layout: "x", BlockSize: 4, BlockBytes: 8, Tokens: make([]int32, 6)})[frameHeader:]},
		{"from beyond", encodeBegin(&begin{Layout: "x", BlockSize: 4, BlockBytes: 8, From: 3, Tokens: make([]int32, 8)})[frameHeader:]},
		{"zero block size", encodeBegin(&begin{Layout: "x", BlockSize: 0, BlockBytes: 8})[frameHeader:]},
		{"version 3 without a trace", append([]byte{wireVersionTrace}, good[1:]...)},
		{"trace length 54", withTrace(func(b []byte) []byte { b[at] = 54; return b })},
		{"trace length 255", withTrace(func(b []byte) []byte { b[at] = 255; return b })},
		{"malformed traceparent", withTrace(func(b []byte) []byte { b[at+1+10] = 'X'; return b })},
		{"zero trace id", withTrace(func(b []byte) []byte { copy(b[at+1+3:], "00000000000000000000000000000000"); return b })},
		{"truncated trace", traced[:at+20]},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := decodeBegin(tc.p); !errors.Is(err, ErrProtocol) {
				t.Fatalf("err = %v, want ErrProtocol", err)
			}
		})
	}
	rd := &reader{r: bytes.NewReader([]byte{77, 0, 0, 0, 0})}
	if _, _, err := rd.next(); !errors.Is(err, ErrProtocol) {
		t.Fatalf("unknown frame type: %v", err)
	}
	rd = &reader{r: bytes.NewReader([]byte{frameEnd, 9, 0, 0, 0})}
	if _, _, err := rd.next(); !errors.Is(err, ErrProtocol) {
		t.Fatalf("oversized end frame: %v", err)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(encodeBegin(&begin{Layout: "mocker/v1", BlockSize: 2, BlockBytes: 4, From: 1, Tokens: []int32{1, 2, 3, 4}}))
	f.Add(encodeBegin(&begin{Layout: "mocker/v1", Sender: "p1", Token: make([]byte, tokenLen), BlockSize: 2, BlockBytes: 4, Tokens: []int32{1, 2}}))
	f.Add(encodeBegin(&begin{Layout: "mocker/v1", Sender: "p1", Token: make([]byte, tokenLen), Trace: testTraceparent, BlockSize: 2, BlockBytes: 4, Tokens: []int32{1, 2}}))
	f.Add(encodeResult(&result{Imported: 3, Code: CodeRejected, Message: "no"}))
	f.Add(encodeU32(frameEnd, 5))
	f.Fuzz(func(t *testing.T, data []byte) {
		rd := &reader{r: bytes.NewReader(data)}
		for {
			typ, n, err := rd.next()
			if err != nil {
				return
			}
			p, err := rd.payload(min(n, len(data)))
			if err != nil {
				return
			}
			switch typ {
			case frameBegin:
				if h, err := decodeBegin(p); err == nil {
					if len(h.Tokens)%h.BlockSize != 0 || h.From*h.BlockSize > len(h.Tokens) {
						t.Fatalf("accepted an inconsistent header %+v", h)
					}
					if !bytes.Equal(encodeBegin(h)[frameHeader:], p) {
						t.Fatal("begin does not round-trip")
					}
				}
			case frameResult:
				if r, err := decodeResult(p); err == nil && !bytes.Equal(encodeResult(r)[frameHeader:], p) && len(r.Code) <= 1024 && len(r.Message) <= 1024 {
					t.Fatal("result does not round-trip")
				}
			case frameEnd, frameProbeAck:
				_, _ = decodeU32(p)
			}
		}
	})
}
