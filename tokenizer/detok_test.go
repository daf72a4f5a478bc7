package tokenizer

import (
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"github.com/tandemllm/tandem/tokenid"
)

func TestAppendLossy(t *testing.T) {
	tests := []struct {
		in        string
		final     string // whole input, final=true
		streamOut string // final=false
		held      string
	}{
		{"abc", "abc", "abc", ""},
		{"héllo", "héllo", "héllo", ""},
		{"\xe4\xb8", "\uFFFD", "", "\xe4\xb8"},           // incomplete 中: held, one U+FFFD at the end
		{"\xe4\xb8a", "\uFFFDa", "\uFFFDa", ""},          // maximal subpart: one replacement
		{"\x80\x80", "\uFFFD\uFFFD", "\uFFFD\uFFFD", ""}, // each stray continuation byte
		{"\xf0\x9f\x8e", "\uFFFD", "", "\xf0\x9f\x8e"},
		{"\xf0\x9f\x8e\x89", "🎉", "🎉", ""},
		{"\xed\xa0\x80", "\uFFFD\uFFFD\uFFFD", "\uFFFD\uFFFD\uFFFD", ""}, // surrogate: ED then A0 is not allowed
		{"\xe0\x80", "\uFFFD\uFFFD", "\uFFFD\uFFFD", ""},                 // overlong lead
		{"\xf4\x90\x80\x80", "\uFFFD\uFFFD\uFFFD\uFFFD", "\uFFFD\uFFFD\uFFFD\uFFFD", ""},
		{"\xc0\xaf", "\uFFFD\uFFFD", "\uFFFD\uFFFD", ""},
		{"a\xff", "a\uFFFD", "a\uFFFD", ""},
		{"a\xc3", "a\uFFFD", "a", "\xc3"},
	}
	for _, tt := range tests {
		got, n := appendLossy(nil, []byte(tt.in), true)
		if string(got) != tt.final || n != len(tt.in) {
			t.Errorf("lossy(%q) = %q", tt.in, got)
		}
		got, n = appendLossy(nil, []byte(tt.in), false)
		if string(got) != tt.streamOut || tt.in[n:] != tt.held {
			t.Errorf("stream lossy(%q) = %q, held %q", tt.in, got, tt.in[n:])
		}
	}
}

// streamTokenizers are the tokenizers the streaming properties are checked
// on: both backends, and Qwen3 when cached.
func streamTokenizers(t *testing.T) map[string]Tokenizer {
	toks := map[string]Tokenizer{"o200k": testDefault(t).Tokenizer}
	if _, err := storiesPath(); err == nil {
		toks["llama2c"] = testStories(t)
	}
	if _, err := qwenAvailable(); err == nil {
		toks["qwen3"] = testQwen3(t).Tokenizer
	}
	return toks
}

// checkStream feeds ids in random chunks and checks the Detokenizer
// contract: every Add output is valid UTF-8 and the concatenation with Flush
// equals Decode of the whole.
func checkStream(t *testing.T, tok Tokenizer, ids []tokenid.ID, rng *rand.Rand) {
	t.Helper()
	d := NewDetokenizer(tok)
	var sb strings.Builder
	for i := 0; i < len(ids); {
		n := 1
		if rng.IntN(4) == 0 {
			n = 1 + rng.IntN(4)
		}
		n = min(n, len(ids)-i)
		s := d.Add(ids[i : i+n]...)
		if !utf8.ValidString(s) {
			t.Fatalf("Add(%v) = %q is not valid UTF-8 (ids %v)", ids[i:i+n], s, ids)
		}
		sb.WriteString(s)
		i += n
	}
	sb.WriteString(d.Flush())
	if want := tok.Decode(ids); sb.String() != want {
		t.Fatalf("streamed %q\nDecode   %q\nids %v", sb.String(), want, ids)
	}
}

func TestDetokenizerRandomIDs(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for name, tok := range streamTokenizers(t) {
		t.Run(name, func(t *testing.T) {
			// Byte-sized tokens make partial and invalid UTF-8 likely.
			var byteToks []tokenid.ID
			for c := 0; c < 256; c++ {
				ids := tok.Encode(string([]byte{byte(c)}))
				if len(ids) > 0 && c >= 0x80 {
					byteToks = append(byteToks, ids[len(ids)-1])
				}
			}
			if bl, ok := tok.(*byteLevel); ok {
				byteToks = bl.byteTok[0x80:]
			} else if sp, ok := tok.(*sentencePiece); ok {
				byteToks = sp.byteTok[0x80:]
			}
			for iter := 0; iter < 300; iter++ {
				ids := make([]tokenid.ID, 1+rng.IntN(20))
				for i := range ids {
					if rng.IntN(2) == 0 && len(byteToks) > 0 {
						ids[i] = byteToks[rng.IntN(len(byteToks))]
					} else {
						ids[i] = tokenid.ID(rng.IntN(tok.VocabSize()))
					}
				}
				checkStream(t, tok, ids, rng)
			}
		})
	}
}

func TestDetokenizerRealText(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	texts := append([]string{
		"emoji 🎉🔥👍🏽 family 👨‍👩‍👧‍👦 中文分词测试 日本語 한국어 🇫🇷",
		strings.Repeat("Once upon a time 🐉 龍が飛んだ. ", 20),
	}, trickyTexts...)
	for name, tok := range streamTokenizers(t) {
		t.Run(name, func(t *testing.T) {
			for _, text := range texts {
				ids := tok.Encode(text)
				if bos, ok := tok.BOS(); ok {
					ids = append([]tokenid.ID{bos}, ids...)
				}
				checkStream(t, tok, ids, rng)
				if bl, ok := tok.(*byteLevel); ok {
					want := text
					if bl.nfc {
						want = norm.NFC.String(text)
					}
					if got := tok.Decode(ids); got != want {
						t.Errorf("Decode(Encode(%q)) = %q", text, got)
					}
				}
			}
		})
	}
}

func TestDetokenizerSkipSpecial(t *testing.T) {
	tok := testDefault(t).Tokenizer
	ids := tok.Encode("<|im_start|>assistant\nhi 🎉<|im_end|>")
	d := NewDetokenizer(tok, SkipSpecial())
	var sb strings.Builder
	for _, id := range ids {
		sb.WriteString(d.Add(id))
	}
	sb.WriteString(d.Flush())
	if sb.String() != "assistant\nhi 🎉" {
		t.Errorf("SkipSpecial stream = %q", sb.String())
	}
	if got := DecodeSkipSpecial(tok, ids); got != "assistant\nhi 🎉" {
		t.Errorf("DecodeSkipSpecial = %q", got)
	}
}

func TestDetokenizerAllocs(t *testing.T) {
	tok := testDefault(t).Tokenizer
	ascii := tok.Encode(" hello")[0]
	d := NewDetokenizer(tok)
	if n := testing.AllocsPerRun(100, func() { d.Add(ascii) }); n != 0 {
		t.Errorf("Add of a whole-rune token: %v allocs, want 0", n)
	}
	// 🎉 is two o200k tokens whose bytes split inside the rune.
	emoji := tok.Encode("🎉")
	if len(emoji) < 2 {
		t.Skip("emoji is a single token")
	}
	if n := testing.AllocsPerRun(100, func() {
		for _, id := range emoji {
			d.Add(id)
		}
	}); n > 1 {
		t.Errorf("split-rune tokens: %v allocs per rune, want <= 1", n)
	}
}
