package openai

import (
	"math"
	"strconv"
	"unicode/utf8"
)

// MaxTopLogprobs is the most alternatives per position a request may ask
// for: OpenAI's top_logprobs range (0..20), which is also vLLM's default
// --max-logprobs (vllm/config/model.py max_logprobs = 20); completions'
// legacy integer logprobs is held to the same bound, as vLLM does (OpenAI's
// legacy API stops at 5).
const MaxTopLogprobs = 20

// MaxN is the most choices one request may ask for (OpenAI documents n up
// to 128).
const MaxN = 128

// minLogprob stands in for -Inf (a token the sampler could never pick) and
// NaN: JSON has no infinities, and vLLM writes max(logprob, -9999.0)
// (vllm/entrypoints/openai/serving_chat.py, _create_chat_logprobs).
const minLogprob = -9999.0

// Logprob is one generated token as the encoders take it: its text (the
// token's raw bytes, which may be part of a UTF-8 sequence), its
// log-probability and the alternatives at its position, most likely first.
type Logprob struct {
	Token   string
	Logprob float32
	Top     []TopLogprob
}

// TopLogprob is one alternative at a position.
type TopLogprob struct {
	Token   string
	Logprob float32
}

func appendLogprobValue(dst []byte, v float32) []byte {
	f := float64(v)
	if math.IsNaN(f) || f < minLogprob {
		f = minLogprob
	}
	return strconv.AppendFloat(dst, f, 'g', -1, 32)
}

// appendBytes appends the token's bytes as a JSON array of integers
// (OpenAI's "bytes": the UTF-8 bytes of the token, which lets a client
// rebuild characters split across tokens).
func appendBytes(dst []byte, s string) []byte {
	dst = append(dst, '[')
	for i := 0; i < len(s); i++ {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendUint(dst, uint64(s[i]), 10)
	}
	return append(dst, ']')
}

// AppendChatLogprobs appends chat's choice logprobs object,
// {"content":[{"token","logprob","bytes","top_logprobs":[{"token","logprob","bytes"}]}]},
// the shape of OpenAI's ChatCompletionTokenLogprob. A token whose bytes are
// not valid UTF-8 on their own reads as U+FFFD in "token" (as in vLLM) and
// keeps its real bytes in "bytes".
func AppendChatLogprobs(dst []byte, lps []Logprob) []byte {
	dst = append(dst, `{"content":[`...)
	for i, lp := range lps {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendChatEntry(dst, lp.Token, lp.Logprob)
		dst = append(dst, `,"top_logprobs":[`...)
		for j, t := range lp.Top {
			if j > 0 {
				dst = append(dst, ',')
			}
			dst = appendChatEntry(dst, t.Token, t.Logprob)
			dst = append(dst, '}')
		}
		dst = append(dst, "]}"...)
	}
	return append(dst, "]}"...)
}

// appendChatEntry appends {"token":..,"logprob":..,"bytes":[..] without
// the closing brace.
func appendChatEntry(dst []byte, tok string, v float32) []byte {
	dst = append(dst, `{"token":`...)
	dst = AppendString(dst, tok)
	dst = append(dst, `,"logprob":`...)
	dst = appendLogprobValue(dst, v)
	dst = append(dst, `,"bytes":`...)
	return appendBytes(dst, tok)
}

// AppendCompletionLogprobs appends completions' choice logprobs object,
// {"tokens":[..],"token_logprobs":[..],"top_logprobs":[{token:logprob}..],"text_offset":[..]}
// (OpenAI's legacy shape, as vLLM fills it: vllm/entrypoints/openai/
// serving_completion.py, _create_completion_logprobs). Each position's
// top_logprobs object holds the chosen token first, then the alternatives
// not already named, as vLLM's does (so logprobs 0 still names the chosen
// token). offset is the text offset of the first token; each token
// advances it by its length in characters (Python's len, as vLLM counts).
// It returns the offset after the last token, for the next chunk.
func AppendCompletionLogprobs(dst []byte, lps []Logprob, offset int) ([]byte, int) {
	dst = append(dst, `{"tokens":[`...)
	for i, lp := range lps {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = AppendString(dst, lp.Token)
	}
	dst = append(dst, `],"token_logprobs":[`...)
	for i, lp := range lps {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendLogprobValue(dst, lp.Logprob)
	}
	dst = append(dst, `],"top_logprobs":[`...)
	for i, lp := range lps {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, '{')
		dst = AppendString(dst, lp.Token)
		dst = append(dst, ':')
		dst = appendLogprobValue(dst, lp.Logprob)
		for _, t := range lp.Top {
			if t.Token == lp.Token {
				continue // a JSON object names a key once
			}
			dst = append(dst, ',')
			dst = AppendString(dst, t.Token)
			dst = append(dst, ':')
			dst = appendLogprobValue(dst, t.Logprob)
		}
		dst = append(dst, '}')
	}
	dst = append(dst, `],"text_offset":[`...)
	for i, lp := range lps {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendInt(dst, int64(offset), 10)
		offset += charLen(lp.Token)
	}
	return append(dst, "]}"...), offset
}

// charLen is the token's length in characters as Python counts the string
// vLLM holds (bytes that are not valid UTF-8 read as one U+FFFD each run).
func charLen(s string) int { return utf8.RuneCountInString(s) }

// RawLogprobs is a choice's pre-encoded logprobs JSON in a response
// struct: nil marshals as null.
type RawLogprobs []byte

// MarshalJSON implements json.Marshaler.
func (r RawLogprobs) MarshalJSON() ([]byte, error) {
	if r == nil {
		return []byte("null"), nil
	}
	return r, nil
}
