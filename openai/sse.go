package openai

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// Usage is OpenAI's usage object: what Tandem's server writes and what
// its clients of other servers (engine/upstream, bench) read. It is the
// only copy in the repository.
type Usage struct {
	PromptTokens     int                 `json:"prompt_tokens"`
	CompletionTokens int                 `json:"completion_tokens"`
	TotalTokens      int                 `json:"total_tokens"`
	Details          PromptTokensDetails `json:"prompt_tokens_details"`
	// CompletionDetails is set when the reply had reasoning (its tokens).
	CompletionDetails *CompletionTokensDetails `json:"completion_tokens_details,omitempty"`
}

// PromptTokensDetails is usage.prompt_tokens_details. Servers may leave it
// (or its cached_tokens) out: vLLM does without
// --enable-prompt-tokens-details. Reported says whether cached_tokens was
// there, so a reader can tell "none cached" from "not said".
type PromptTokensDetails struct {
	CachedTokens int `json:"cached_tokens"`
	reported     bool
}

// Reported says whether cached_tokens was set (by NewUsage) or decoded.
func (d PromptTokensDetails) Reported() bool { return d.reported }

// UnmarshalJSON notes whether cached_tokens was present.
func (d *PromptTokensDetails) UnmarshalJSON(b []byte) error {
	var w struct {
		CachedTokens *int `json:"cached_tokens"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	if w.CachedTokens != nil {
		d.CachedTokens, d.reported = *w.CachedTokens, true
	}
	return nil
}

// NewUsage fills the total.
func NewUsage(prompt, completion, cached int) Usage {
	return Usage{PromptTokens: prompt, CompletionTokens: completion, TotalTokens: prompt + completion,
		Details: PromptTokensDetails{CachedTokens: cached, reported: true}}
}

// ChunkHeader is what every chunk of one stream repeats.
type ChunkHeader struct {
	ID      string
	Model   string
	Created int64
	Chat    bool // chat.completion.chunk vs text_completion
	// Index is the choice's index (n > 1 streams interleave choices).
	Index int
}

func (h *ChunkHeader) appendPrefix(dst []byte) []byte {
	dst = append(dst, `data: {"id":`...)
	dst = AppendString(dst, h.ID)
	if h.Chat {
		dst = append(dst, `,"object":"chat.completion.chunk","created":`...)
	} else {
		dst = append(dst, `,"object":"text_completion","created":`...)
	}
	dst = strconv.AppendInt(dst, h.Created, 10)
	dst = append(dst, `,"model":`...)
	return AppendString(dst, h.Model)
}

// appendRoleChoices appends the choices array of the first chat chunk.
func (h *ChunkHeader) appendRoleChoices(dst []byte) []byte {
	dst = append(dst, `,"choices":[{"index":`...)
	dst = strconv.AppendInt(dst, int64(h.Index), 10)
	return append(dst, `,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]`...)
}

// AppendRoleChunk appends the first chat chunk, which announces the
// assistant role with empty content (as OpenAI and vLLM send it).
func (h *ChunkHeader) AppendRoleChunk(dst []byte) []byte {
	dst = h.appendRoleChoices(h.appendPrefix(dst))
	return append(dst, "}\n\n"...)
}

// AppendRoleChunkIDs appends the first chat chunk of a return_token_ids
// request: AppendRoleChunk's, plus the prompt's ids at the top level as
// "prompt_token_ids" (vLLM's ChatCompletionStreamResponse shape).
func (h *ChunkHeader) AppendRoleChunkIDs(dst []byte, prompt []int32) []byte {
	dst = h.appendRoleChoices(h.appendPrefix(dst))
	dst = append(dst, `,"prompt_token_ids":`...)
	dst = AppendTokenIDs(dst, prompt)
	return append(dst, "}\n\n"...)
}

// AppendChunk appends a content chunk; finish is "" for none.
func (h *ChunkHeader) AppendChunk(dst []byte, text, finish string) []byte {
	dst = h.appendChoice(h.appendPrefix(dst), text, finish, nil)
	return append(dst, "}]}\n\n"...)
}

// AppendChunkLogprobs is AppendChunk with the choice's "logprobs" set to
// lp, a JSON value (AppendChatLogprobs' or AppendCompletionLogprobs'); nil
// lp writes null.
func (h *ChunkHeader) AppendChunkLogprobs(dst []byte, text, finish string, lp []byte) []byte {
	dst = h.appendChoice(h.appendPrefix(dst), text, finish, lp)
	return append(dst, "}]}\n\n"...)
}

// AppendChunkIDs appends a content chunk of a return_token_ids request:
// AppendChunk's, plus the choice's "token_ids" (ids, the tokens produced
// since the previous chunk; nil is sent as []) and, when prompt is not
// nil, "prompt_token_ids": in the choice for completions, at the top level
// for chat. The shapes follow vLLM's CompletionResponseStreamChoice and
// ChatCompletionStreamResponse.
func (h *ChunkHeader) AppendChunkIDs(dst []byte, text, finish string, prompt, ids []int32) []byte {
	return h.AppendChunkIDsLogprobs(dst, text, finish, prompt, ids, nil)
}

// AppendChunkIDsLogprobs is AppendChunkIDs with the choice's "logprobs"
// set to lp (nil: null).
func (h *ChunkHeader) AppendChunkIDsLogprobs(dst []byte, text, finish string, prompt, ids []int32, lp []byte) []byte {
	dst = h.appendChoice(h.appendPrefix(dst), text, finish, lp)
	if prompt != nil && !h.Chat {
		dst = append(dst, `,"prompt_token_ids":`...)
		dst = AppendTokenIDs(dst, prompt)
	}
	dst = append(dst, `,"token_ids":`...)
	dst = AppendTokenIDs(dst, ids)
	dst = append(dst, "}]"...)
	if prompt != nil && h.Chat {
		dst = append(dst, `,"prompt_token_ids":`...)
		dst = AppendTokenIDs(dst, prompt)
	}
	return append(dst, "}\n\n"...)
}

// appendChoice appends the choices array up to the open choice's
// finish_reason. lp is the choice's logprobs JSON (nil: null).
func (h *ChunkHeader) appendChoice(dst []byte, text, finish string, lp []byte) []byte {
	dst = append(dst, `,"choices":[{"index":`...)
	dst = strconv.AppendInt(dst, int64(h.Index), 10)
	if h.Chat {
		dst = append(dst, `,"delta":{`...)
		if text != "" || finish == "" {
			dst = append(dst, `"content":`...)
			dst = AppendString(dst, text)
		}
		dst = append(dst, '}')
	} else {
		dst = append(dst, `,"text":`...)
		dst = AppendString(dst, text)
	}
	dst = append(dst, `,"logprobs":`...)
	if lp == nil {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, lp...)
	}
	dst = append(dst, `,"finish_reason":`...)
	if finish == "" {
		return append(dst, "null"...)
	}
	return AppendString(dst, finish)
}

// AppendTokenIDs appends ids as a JSON array of integers (nil is []).
func AppendTokenIDs(dst []byte, ids []int32) []byte {
	dst = append(dst, '[')
	for i, id := range ids {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendInt(dst, int64(id), 10)
	}
	return append(dst, ']')
}

// AppendUsageChunk appends the include_usage chunk: empty choices, usage set.
func (h *ChunkHeader) AppendUsageChunk(dst []byte, u Usage) []byte {
	dst = h.appendPrefix(dst)
	dst = append(dst, `,"choices":[],"usage":`...)
	return append(AppendUsage(dst, u), "}\n\n"...)
}

// AddUsage gives the chunk that ends dst a "usage" field: vLLM's
// stream_options.continuous_usage_stats puts usage in every chunk.
func AddUsage(dst []byte, u Usage) []byte {
	dst = dst[:len(dst)-len("}\n\n")]
	dst = append(dst, `,"usage":`...)
	return append(AppendUsage(dst, u), "}\n\n"...)
}

// AppendUsage appends the usage object.
func AppendUsage(dst []byte, u Usage) []byte {
	dst = append(dst, `{"prompt_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.PromptTokens), 10)
	dst = append(dst, `,"completion_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.CompletionTokens), 10)
	dst = append(dst, `,"total_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.TotalTokens), 10)
	dst = append(dst, `,"prompt_tokens_details":{"cached_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.Details.CachedTokens), 10)
	if d := u.CompletionDetails; d != nil {
		dst = append(dst, `},"completion_tokens_details":{"reasoning_tokens":`...)
		dst = strconv.AppendInt(dst, int64(d.ReasoningTokens), 10)
	}
	return append(dst, "}}"...)
}

// Done is the stream terminator.
const Done = "data: [DONE]\n\n"

const hexDigits = "0123456789abcdef"

// AppendString appends s as a JSON string. Invalid UTF-8 becomes U+FFFD, the
// same as encoding/json, so a client's JSON parser never rejects a chunk.
func AppendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		// U+2028/2029 are valid JSON but break JavaScript consumers.
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
