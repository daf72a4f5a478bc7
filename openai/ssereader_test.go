package openai

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestReadSSELine(t *testing.T) {
	long := strings.Repeat("x", 100)
	tests := []struct {
		name    string
		in      string
		max     int
		want    []string
		wantErr error
	}{
		{"short lines", "data: a\n\ndata: b\n", 1 << 10, []string{"data: a\n", "\n", "data: b\n"}, io.EOF},
		{"unterminated last line", "data: a\ndata: b", 1 << 10, []string{"data: a\n", "data: b"}, io.EOF},
		{"longer than the buffer, within the bound", "data: " + long + "\nend\n", 1 << 10, []string{"data: " + long + "\n", "end\n"}, io.EOF},
		{"past the bound", "data: " + long + long + "\n", 64, nil, ErrSSELineTooLong},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := bufio.NewReaderSize(strings.NewReader(tt.in), 16)
			var buf []byte
			var got []string
			var err error
			for {
				var line []byte
				line, err = ReadSSELine(r, &buf, tt.max)
				if len(line) > 0 {
					got = append(got, string(line))
				}
				if err != nil {
					break
				}
			}
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err %v, want %v", err, tt.wantErr)
			}
			if strings.Join(got, "|") != strings.Join(tt.want, "|") {
				t.Fatalf("lines %q, want %q", got, tt.want)
			}
		})
	}
}

func TestSSEData(t *testing.T) {
	tests := []struct {
		line, want string
		ok         bool
	}{
		{"data: {}\r\n", "{}", true},
		{"data:[DONE]\n", "[DONE]", true},
		{": ping\n", "", false},
		{"\n", "", false},
		{"error: {}\n", "", false},
	}
	for _, tt := range tests {
		got, ok := SSEData([]byte(tt.line))
		if ok != tt.ok || string(got) != tt.want {
			t.Errorf("%q: %q %v, want %q %v", tt.line, got, ok, tt.want, tt.ok)
		}
	}
}

func TestUsageDecode(t *testing.T) {
	tests := []struct {
		in       string
		cached   int
		reported bool
	}{
		{`{"prompt_tokens":5,"prompt_tokens_details":{"cached_tokens":3}}`, 3, true},
		{`{"prompt_tokens":5,"prompt_tokens_details":{"cached_tokens":0}}`, 0, true},
		{`{"prompt_tokens":5}`, 0, false},
		{`{"prompt_tokens":5,"prompt_tokens_details":null}`, 0, false},
		{`{"prompt_tokens":5,"prompt_tokens_details":{}}`, 0, false},
	}
	for _, tt := range tests {
		var u Usage
		if err := json.Unmarshal([]byte(tt.in), &u); err != nil {
			t.Fatalf("%s: %v", tt.in, err)
		}
		if u.PromptTokens != 5 || u.Details.CachedTokens != tt.cached || u.Details.Reported() != tt.reported {
			t.Errorf("%s: %+v reported %v", tt.in, u, u.Details.Reported())
		}
	}
	// What Tandem writes reads back the same.
	b, err := json.Marshal(NewUsage(10, 3, 8))
	if err != nil {
		t.Fatal(err)
	}
	var u Usage
	if err := json.Unmarshal(b, &u); err != nil || u != NewUsage(10, 3, 8) {
		t.Fatalf("round trip %s: %+v %v", b, u, err)
	}
	if string(b) != string(AppendUsage(nil, NewUsage(10, 3, 8))) {
		t.Fatalf("json.Marshal %s differs from AppendUsage %s", b, AppendUsage(nil, NewUsage(10, 3, 8)))
	}
}

func FuzzReadSSELine(f *testing.F) {
	f.Add([]byte("data: a\n\ndata: [DONE]\n"), 8)
	f.Add([]byte(strings.Repeat("y", 300)), 100)
	f.Fuzz(func(t *testing.T, in []byte, max int) {
		if max < 0 || max > 1<<16 {
			return
		}
		r := bufio.NewReaderSize(strings.NewReader(string(in)), 16)
		var buf []byte
		total := 0
		for {
			line, err := ReadSSELine(r, &buf, max)
			if len(line) > max+16 {
				t.Fatalf("line of %d bytes past the bound %d", len(line), max)
			}
			total += len(line)
			if err != nil {
				break
			}
		}
		if total > len(in) {
			t.Fatalf("read %d bytes from %d", total, len(in))
		}
	})
}
