package engine

import (
	"errors"
	"fmt"
)

// ErrInvalidRequest is returned by Generate for a request no engine may
// serve: token ids outside the vocabulary, negative lengths. The frontend
// refuses such requests itself; engines and workers check again because a
// request plane has other callers than the frontend.
var ErrInvalidRequest = errors.New("invalid request")

// CheckRequest validates req against an engine's limits and returns how
// many tokens the sequence may generate: MaxTokens, or, when it is 0, what
// is left of the context. vocab is the vocabulary size (0: ids are only
// checked to be non-negative). A sequence that cannot fit the context or
// the KV cache (info.KVCapacityTokens, when known) is refused with
// ErrPromptTooLong instead of being admitted and preempted forever.
//
// Every comparison is done on values already known to be in range, so no
// sum can overflow: max_tokens of 2^63-1 is a refusal, not a wrap-around.
func CheckRequest(req *Request, info Info, vocab int) (int, error) {
	n := len(req.Prompt)
	if n == 0 {
		return 0, fmt.Errorf("%w: empty prompt", ErrInvalidRequest)
	}
	for i, t := range req.Prompt {
		if t < 0 || (vocab > 0 && int(t) >= vocab) {
			return 0, fmt.Errorf("%w: prompt token %d at position %d is outside the vocabulary [0,%d)", ErrInvalidRequest, t, i, vocab)
		}
	}
	for _, t := range req.StopTokens {
		if t < 0 || (vocab > 0 && int(t) >= vocab) {
			return 0, fmt.Errorf("%w: stop token %d is outside the vocabulary [0,%d)", ErrInvalidRequest, t, vocab)
		}
	}
	if req.MaxTokens < 0 {
		return 0, fmt.Errorf("%w: max tokens %d is negative", ErrInvalidRequest, req.MaxTokens)
	}
	if req.TopLogprobs < 0 || req.TopLogprobs > MaxTopLogprobs {
		return 0, fmt.Errorf("%w: top logprobs %d is outside [0,%d]", ErrInvalidRequest, req.TopLogprobs, MaxTopLogprobs)
	}
	if req.MinTokens < 0 {
		return 0, fmt.Errorf("%w: min tokens %d is negative", ErrInvalidRequest, req.MinTokens)
	}
	limit := info.ContextLength
	if c := info.KVCapacityTokens; c > 0 && (limit <= 0 || c < limit) {
		limit = c
	}
	if limit <= 0 {
		return req.MaxTokens, nil // an engine that states no limit (upstream) enforces its own
	}
	if n >= limit {
		return 0, fmt.Errorf("%w: the prompt is %d tokens; the engine takes at most %d (context length %d, KV cache %d tokens)",
			ErrPromptTooLong, n, limit-1, info.ContextLength, info.KVCapacityTokens)
	}
	maxNew := req.MaxTokens
	if maxNew == 0 {
		maxNew = limit - n
	}
	if maxNew > limit-n {
		return 0, fmt.Errorf("%w: %d prompt + %d output tokens > %d (context length %d, KV cache %d tokens)",
			ErrPromptTooLong, n, req.MaxTokens, limit, info.ContextLength, info.KVCapacityTokens)
	}
	if req.MinTokens > maxNew {
		return 0, fmt.Errorf("%w: min tokens %d exceeds the %d tokens the sequence may generate", ErrInvalidRequest, req.MinTokens, maxNew)
	}
	return maxNew, nil
}
