package upstream

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/tandemllm/tandem/engine"
)

// vllmLogprobs is a completions choice's logprobs as vLLM writes it
// (vllm/entrypoints/openai/protocol.py, CompletionLogProbs): with
// return_tokens_as_token_ids every token, in tokens and as a top_logprobs
// key, is "token_id:N". A position's top_logprobs holds the sampled token
// and the top alternatives (serving_completion.py,
// _create_completion_logprobs). token_logprobs entries may be null.
type vllmLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []*float64           `json:"token_logprobs"`
	TopLogprobs   []map[string]float64 `json:"top_logprobs"`
}

// lpTop is the alternatives a request wants per position, -1 for no
// logprobs.
func lpTop(req *engine.Request) int {
	if !req.Logprobs {
		return -1
	}
	return req.TopLogprobs
}

// lpTop is lpTop of the stream's request.
func (s *sseStream) lpTop() int {
	if !s.logprobs {
		return -1
	}
	return s.top
}

// tokenIDOf reads vLLM's "token_id:N".
func tokenIDOf(s string) (engine.Token, bool) {
	v, ok := strings.CutPrefix(s, "token_id:")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil || n < 0 {
		return 0, false
	}
	return engine.Token(n), true
}

// applyLogprobs adds the choice's logprobs (vLLM's shape) to d, one entry
// per token the choice carried. The alternatives are the top entries by
// logprob, at most top of them (the sampled token is among them only when
// it ranks there, as OpenAI's top_logprobs reads). With top < 0 the
// request asked for none and the field is ignored.
func (e *Engine) applyLogprobs(c *completion, d *engine.Delta, top int) error {
	if top < 0 || len(c.Choices) == 0 || c.Choices[0].Logprobs == nil {
		return nil
	}
	lp := c.Choices[0].Logprobs
	if len(lp.Tokens) > len(d.Tokens)-len(d.Logprobs) {
		return fmt.Errorf("upstream: %d logprobs tokens for %d generated tokens", len(lp.Tokens), len(d.Tokens)-len(d.Logprobs))
	}
	for i, name := range lp.Tokens {
		id, ok := tokenIDOf(name)
		if !ok {
			// A server that ignored return_tokens_as_token_ids: the ids
			// the choice carried are in the same order.
			id = d.Tokens[len(d.Logprobs)]
		}
		v := math.Inf(-1)
		if i < len(lp.TokenLogprobs) && lp.TokenLogprobs[i] != nil {
			v = *lp.TokenLogprobs[i]
		}
		entry := engine.TokenLogprob{Token: id, Logprob: float32(v)}
		if top > 0 && i < len(lp.TopLogprobs) {
			for k, p := range lp.TopLogprobs[i] {
				tid, ok := tokenIDOf(k)
				if !ok {
					continue // a text key cannot be named by id
				}
				entry.Top = append(entry.Top, engine.TopLogprob{Token: tid, Logprob: float32(p)})
			}
			slices.SortFunc(entry.Top, func(a, b engine.TopLogprob) int {
				if c := cmp.Compare(b.Logprob, a.Logprob); c != 0 {
					return c
				}
				return cmp.Compare(a.Token, b.Token)
			})
			if len(entry.Top) > top {
				entry.Top = entry.Top[:top]
			}
		}
		d.Logprobs = append(d.Logprobs, entry)
	}
	return nil
}

// sglangEntry reads SGLang's [logprob, token_id, text] (logprob may be
// null: none, read as -Inf).
func sglangEntry(raw json.RawMessage) (engine.Token, float32, error) {
	var e []json.RawMessage
	if err := json.Unmarshal(raw, &e); err != nil || len(e) < 2 {
		return 0, 0, fmt.Errorf("upstream: a logprobs entry %.64s is not [logprob, token_id, text]", raw)
	}
	var id int32
	if err := json.Unmarshal(e[1], &id); err != nil || id < 0 {
		return 0, 0, fmt.Errorf("upstream: a logprobs entry's token id %.32s", e[1])
	}
	v := math.Inf(-1)
	if !bytes.Equal(bytes.TrimSpace(e[0]), []byte("null")) {
		if err := json.Unmarshal(e[0], &v); err != nil {
			return 0, 0, fmt.Errorf("upstream: a logprobs entry's logprob %.32s", e[0])
		}
	}
	return id, float32(v), nil
}

// sglangLogprobs turns meta_info's output_token_logprobs and
// output_top_logprobs into the entries of a chunk's n new tokens: the last
// n of each list, which reads both a server that sends every output
// token's so far and one that sends only the new ones.
func sglangLogprobs(tok, top []json.RawMessage, n, want int) ([]engine.TokenLogprob, error) {
	if len(tok) < n {
		return nil, fmt.Errorf("upstream: %d output_token_logprobs for %d new tokens", len(tok), n)
	}
	tok = tok[len(tok)-n:]
	if len(top) >= n {
		top = top[len(top)-n:]
	} else {
		top = nil
	}
	out := make([]engine.TokenLogprob, n)
	for i, raw := range tok {
		id, v, err := sglangEntry(raw)
		if err != nil {
			return nil, err
		}
		out[i] = engine.TokenLogprob{Token: id, Logprob: v}
		if want == 0 || top == nil || bytes.Equal(bytes.TrimSpace(top[i]), []byte("null")) {
			continue
		}
		var alts []json.RawMessage
		if err := json.Unmarshal(top[i], &alts); err != nil {
			return nil, fmt.Errorf("upstream: output_top_logprobs: %w", err)
		}
		for _, a := range alts[:min(len(alts), want)] {
			aid, av, err := sglangEntry(a)
			if err != nil {
				return nil, err
			}
			out[i].Top = append(out[i].Top, engine.TopLogprob{Token: aid, Logprob: av})
		}
	}
	return out, nil
}
