package tokenizer

import (
	"encoding/binary"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tandemllm/tandem/tokenid"
)

// Seed corpora live in testdata/fuzz/<FuzzName>/; f.Add seeds below cover
// the rest. Run one target with e.g.
//   go test ./tokenizer/ -run '^$' -fuzz FuzzDefaultRoundTrip -fuzztime 30s

func FuzzDefaultRoundTrip(f *testing.F) {
	for _, s := range trickyTexts {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tok := testDefault(t).Tokenizer
		ids := tok.Encode(s)
		if !utf8.ValidString(s) {
			// Invalid input is encoded as its HF-style lossy repair.
			if got, want := tok.Decode(ids), lossyString([]byte(s)); got != want {
				t.Fatalf("Decode(Encode(%q)) = %q, want %q", s, got, want)
			}
			return
		}
		if got := tok.Decode(ids); got != s {
			t.Fatalf("Decode(Encode(%q)) = %q (ids %v)", s, got, ids)
		}
		d := NewDetokenizer(tok)
		var sb strings.Builder
		for _, id := range ids {
			sb.WriteString(d.Add(id))
		}
		if sb.String()+d.Flush() != s {
			t.Fatalf("stream of %q = %q", s, sb.String())
		}
	})
}

func FuzzSplitters(f *testing.F) {
	for _, s := range trickyTexts {
		f.Add(s)
	}
	type pair struct {
		name   string
		native *nativeSplitter
		re     *regexSplitter
	}
	var pairs []pair
	for _, kp := range knownPatterns {
		n, _ := newNativeSplitter(kp.pattern)
		r, err := newRegexSplitter(kp.pattern)
		if err != nil {
			f.Fatal(err)
		}
		pairs = append(pairs, pair{kp.name, n, r})
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, p := range pairs {
			checkSplitAgreement(t, p.name, p.native, p.re, s)
		}
	})
}

func FuzzDetokenizer(f *testing.F) {
	f.Add([]byte{0xF0, 0x9F, 0x8E, 0x89, 'a'}, uint8(1))
	f.Add([]byte("\xe4\xb8\xad\xe6\x96\x87"), uint8(2))
	f.Add([]byte{0x80, 0xff, 0xc3}, uint8(3))
	f.Fuzz(func(t *testing.T, data []byte, chunk uint8) {
		tok := testDefault(t).Tokenizer
		// Two bytes per id, biased towards single-byte tokens so that runes
		// get split across tokens.
		var ids []tokenid.ID
		bl := tok.(*byteLevel)
		for i := 0; i+1 < len(data); i += 2 {
			if data[i]&1 == 0 {
				ids = append(ids, bl.byteTok[data[i+1]])
			} else {
				ids = append(ids, tokenid.ID(binary.LittleEndian.Uint16(data[i:]))*3)
			}
		}
		d := NewDetokenizer(tok)
		n := int(chunk%5) + 1
		var sb strings.Builder
		for i := 0; i < len(ids); i += n {
			s := d.Add(ids[i:min(i+n, len(ids))]...)
			if !utf8.ValidString(s) {
				t.Fatalf("invalid UTF-8 %q", s)
			}
			sb.WriteString(s)
		}
		if got, want := sb.String()+d.Flush(), tok.Decode(ids); got != want {
			t.Fatalf("stream %q != Decode %q", got, want)
		}
	})
}

func FuzzLoadLlama2C(f *testing.F) {
	f.Add(llama2CFile(5, []string{"<unk>", "<s>", "</s>", "a", "b", " ", "ab", " ab"}, []float32{0, 0, 0, -1, -2, -3, -4, -5}))
	f.Add(llama2CFile(6, []string{"<unk>", "\n<s>\n", "\n</s>\n", "<0x00>", "<0xE4>", "<0xB8>", "<0xAD>", " t", "he"}, []float32{0, 0, 0, 0, 0, 0, 0, 1, 2}))
	f.Add([]byte{7, 0, 0, 0, 0, 0, 0, 0, 3})
	f.Fuzz(func(t *testing.T, data []byte) {
		tok, err := parseLlama2C(data)
		if err != nil {
			return
		}
		for _, s := range []string{"", "ab", "the 中文 🎉", "<s>"} {
			ids := tok.Encode(s)
			tok.Decode(ids)
			if slices.ContainsFunc(ids, func(id tokenid.ID) bool { return id < 0 || int(id) >= tok.VocabSize() }) {
				t.Fatalf("Encode(%q) = %v: id outside the vocabulary", s, ids)
			}
		}
	})
}

func FuzzParseTokenizerJSON(f *testing.F) {
	good := tinyTokenizerJSON(f, nil)
	f.Add(good)
	f.Add(good[:len(good)/2])
	f.Add([]byte(`{"model":{"type":"BPE","vocab":{"a":0},"merges":["a a"]},"pre_tokenizer":{"type":"ByteLevel"}}`))
	f.Add([]byte(`{"model":{"vocab":{"a":99999999}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		tok, err := ParseTokenizerJSON(data)
		if err != nil {
			return
		}
		for _, s := range []string{"", "hello world", "the 中文 🎉 <|endoftext|>"} {
			ids := tok.Encode(s)
			if tok.Decode(ids) != s {
				t.Fatalf("round trip of %q failed: %v", s, ids)
			}
		}
	})
}
