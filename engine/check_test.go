package engine

import (
	"errors"
	"math"
	"testing"
)

func TestCheckRequest(t *testing.T) {
	info := Info{ContextLength: 100, KVCapacityTokens: 64}
	for _, tc := range []struct {
		name string
		req  Request
		max  int
		err  error
	}{
		{"fits", Request{Prompt: []Token{1, 2}, MaxTokens: 10}, 10, nil},
		{"default: what the KV cache leaves", Request{Prompt: []Token{1, 2}}, 62, nil},
		{"overflowing max tokens", Request{Prompt: []Token{1}, MaxTokens: math.MaxInt}, 0, ErrPromptTooLong},
		{"past the KV cache, within the context", Request{Prompt: make([]Token, 60), MaxTokens: 10}, 0, ErrPromptTooLong},
		{"prompt fills the KV cache", Request{Prompt: make([]Token, 64)}, 0, ErrPromptTooLong},
		{"negative id", Request{Prompt: []Token{-1}}, 0, ErrInvalidRequest},
		{"id past the vocabulary", Request{Prompt: []Token{50}}, 0, ErrInvalidRequest},
		{"negative max", Request{Prompt: []Token{1}, MaxTokens: -3}, 0, ErrInvalidRequest},
		{"negative min", Request{Prompt: []Token{1}, MinTokens: -3}, 0, ErrInvalidRequest},
		{"min past the room", Request{Prompt: []Token{1}, MinTokens: math.MaxInt}, 0, ErrInvalidRequest},
		{"empty", Request{}, 0, ErrInvalidRequest},
		{"top logprobs 20", Request{Prompt: []Token{1}, MaxTokens: 1, Logprobs: true, TopLogprobs: 20}, 1, nil},
		{"top logprobs past 20", Request{Prompt: []Token{1}, Logprobs: true, TopLogprobs: 21}, 0, ErrInvalidRequest},
		{"negative top logprobs", Request{Prompt: []Token{1}, TopLogprobs: -1}, 0, ErrInvalidRequest},
	} {
		got, err := CheckRequest(&tc.req, info, 50)
		if !errors.Is(err, tc.err) || (err == nil && got != tc.max) {
			t.Errorf("%s: %d, %v; want %d, %v", tc.name, got, err, tc.max, tc.err)
		}
	}
	// An engine that states no limits only gets the id checks.
	if got, err := CheckRequest(&Request{Prompt: []Token{1}, MaxTokens: 1 << 40}, Info{}, 0); err != nil || got != 1<<40 {
		t.Fatalf("no limits: %d %v", got, err)
	}
}
