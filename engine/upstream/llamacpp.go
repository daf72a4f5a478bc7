package upstream

import (
	"bytes"
	"container/list"
	"context"
	"encoding/json"
	"fmt"
	"hash/maphash"
	"io"
	"math"
	"strconv"
	"sync"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/health"
)

// APILlamaCpp is llama.cpp's llama-server, spoken through its native
// POST /completion (ggml-org/llama.cpp tools/server/README.md): token-id
// prompts, cache_prompt, id_slot, return_tokens. llama-server publishes no
// KV events: the router routes its workers by approximation, and the
// engine adds slot affinity (a prefix's slot is remembered and asked for
// again with id_slot), since a slot's cache holds one sequence only.
const APILlamaCpp = "llamacpp"

// DiagNoKVEvents is raised (warn) for a worker whose server publishes no KV
// events (llama.cpp): /health says it is routed by approximation.
const DiagNoKVEvents = "upstream_no_kv_events"

// slotMemory bounds the prefixes whose slot is remembered.
const slotMemory = 4096

// slots remembers, per block-aligned prompt prefix, the llama-server slot
// that last held it, least recently used forgotten first.
type slots struct {
	seed maphash.Seed
	mu   sync.Mutex
	byP  map[uint64]*list.Element
	lru  list.List // of slotEntry, front = most recent
}

type slotEntry struct {
	key  uint64
	slot int
}

func newSlots() *slots {
	return &slots{seed: maphash.MakeSeed(), byP: map[uint64]*list.Element{}}
}

// prefixes returns the chain hash of each full block of prompt.
func (s *slots) prefixes(prompt []engine.Token, bs int) []uint64 {
	var h maphash.Hash
	h.SetSeed(s.seed)
	out := make([]uint64, 0, len(prompt)/bs)
	var b [4]byte
	for i, t := range prompt {
		u := uint32(t)
		b[0], b[1], b[2], b[3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
		h.Write(b[:])
		if (i+1)%bs == 0 {
			out = append(out, h.Sum64())
		}
	}
	return out
}

// lookup returns the slot of the longest remembered prefix (-1: none).
func (s *slots) lookup(keys []uint64) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(keys) - 1; i >= 0; i-- {
		if el, ok := s.byP[keys[i]]; ok {
			s.lru.MoveToFront(el)
			return el.Value.(slotEntry).slot
		}
	}
	return -1
}

// remember records that slot now holds every prefix in keys.
func (s *slots) remember(keys []uint64, slot int) {
	if slot < 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		if el, ok := s.byP[k]; ok {
			el.Value = slotEntry{k, slot}
			s.lru.MoveToFront(el)
			continue
		}
		s.byP[k] = s.lru.PushFront(slotEntry{k, slot})
		for s.lru.Len() > slotMemory {
			old := s.lru.Back()
			delete(s.byP, old.Value.(slotEntry).key)
			s.lru.Remove(old)
		}
	}
}

// llamaBody is a POST /completion request (tools/server/README.md).
type llamaBody struct {
	NPredict     int            `json:"n_predict"`
	Stream       bool           `json:"stream"`
	CachePrompt  bool           `json:"cache_prompt"`
	IDSlot       int            `json:"id_slot"`
	ReturnTokens bool           `json:"return_tokens"`
	NProbs       int            `json:"n_probs"`
	Temperature  float32        `json:"temperature"`
	TopP         float32        `json:"top_p,omitempty"`
	TopK         int            `json:"top_k,omitempty"`
	Seed         *int64         `json:"seed,omitempty"`
	IgnoreEOS    bool           `json:"ignore_eos,omitempty"`
	Prompt       []engine.Token `json:"prompt"`
	// Structured outputs (structured.go).
	JSONSchema json.RawMessage `json:"json_schema,omitempty"`
	Grammar    string          `json:"grammar,omitempty"`
}

// llamaChunk is one /completion answer or stream event: content and
// tokens each time; on the last (stop true) the slot, stop_type and the
// prompt's cache use (timings.cache_n; tokens_cached in older builds).
type llamaChunk struct {
	Content      string         `json:"content"`
	Tokens       []engine.Token `json:"tokens"`
	Stop         bool           `json:"stop"`
	StopType     string         `json:"stop_type"`
	IDSlot       *int           `json:"id_slot"`
	TokensCached *int           `json:"tokens_cached"`
	Timings      *struct {
		CacheN  *int `json:"cache_n"`
		PromptN *int `json:"prompt_n"`
	} `json:"timings"`
	TokensPredicted *int `json:"tokens_predicted"`
	Error           *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Type    string `json:"type"`
	} `json:"error"`
	// CompletionProbabilities, with n_probs > 0, holds one entry per
	// token of the chunk: {id, token, bytes, logprob, top_logprobs[]}
	// (tools/server/server.cpp, probs_vector_to_json, post_sampling_probs
	// false).
	CompletionProbabilities []llamaProb `json:"completion_probabilities"`
}

type llamaProb struct {
	ID          engine.Token `json:"id"`
	Logprob     *float64     `json:"logprob"`
	TopLogprobs []struct {
		ID      engine.Token `json:"id"`
		Logprob *float64     `json:"logprob"`
	} `json:"top_logprobs"`
}

// generateLlama is Generate for APILlamaCpp.
func (e *Engine) generateLlama(ctx context.Context, req *engine.Request) (engine.Stream, error) {
	keys := e.slots.prefixes(req.Prompt, e.cfg.BlockSize)
	b := llamaBody{Prompt: req.Prompt, Stream: true, CachePrompt: true, IDSlot: e.slots.lookup(keys),
		ReturnTokens: true, Temperature: req.Sampling.Temperature, TopK: req.Sampling.TopK, IgnoreEOS: req.IgnoreEOS,
		NPredict: -1}
	if err := llamaConstraint(&b, req.Constraint); err != nil {
		return nil, err
	}
	if tp := req.Sampling.TopP; tp > 0 && tp < 1 {
		b.TopP = tp
	}
	if req.Logprobs {
		// llama.cpp sends probabilities only for n_probs > 0; the chosen
		// token's logprob comes with its alternatives, so top 0 asks for
		// one and drops it.
		b.NProbs = max(req.TopLogprobs, 1)
	}
	if req.Sampling.HasSeed {
		s := int64(req.Sampling.Seed & math.MaxUint32) // llama.cpp's seed is a uint32
		b.Seed = &s
	}
	switch n := req.MaxTokens; {
	case n > 0:
		b.NPredict = n
	case e.contextLength() > 0:
		b.NPredict = max(e.contextLength()-len(req.Prompt), 1)
	}
	payload, err := json.Marshal(&b)
	if err != nil {
		return nil, fmt.Errorf("upstream: encode request: %w", err)
	}
	resp, err := e.post(ctx, "/completion", payload, req.ID)
	if err != nil {
		return nil, err
	}
	return &llamaStream{sseStream: newSSEStream(e, resp.Body, req), keys: keys}, nil
}

// llamaStream reads /completion's SSE stream: "data: {json}" events,
// comment pings (": ping", --sse-ping-interval) skipped, an error either
// as a data event carrying "error" or an "error:" field (framing varies
// by build), no [DONE] (the stop:true event ends it).
type llamaStream struct {
	sseStream
	keys []uint64
	ids  int // ids passed on so far
}

func (s *llamaStream) Recv() (engine.Delta, error) {
	for {
		if s.done {
			return engine.Delta{}, io.EOF
		}
		line, err := s.line()
		if err != nil {
			return s.fail(err)
		}
		data, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			data, ok = bytes.CutPrefix(line, []byte("error:"))
		}
		if !ok {
			continue // blank separators, ": ping" comments
		}
		var c llamaChunk
		if err := json.Unmarshal(bytes.TrimSpace(data), &c); err != nil {
			return s.fail(fmt.Errorf("upstream: chunk: %w", err))
		}
		if c.Error != nil {
			return s.fail(llamaError(s.e.cfg.URL, c.Error.Code, c.Error.Type, c.Error.Message))
		}
		d := engine.Delta{Tokens: c.Tokens}
		// Older builds send no event for a token whose text they hold
		// back (an incomplete UTF-8 sequence, a partial stop string) and
		// release its text with a later event that carries only that
		// event's own token: the held-back ids are dropped. The server's
		// own count (tokens_predicted) tells: when this event leaves it
		// short, its text is tokenized instead, so no text is lost.
		short := c.TokensPredicted != nil && *c.TokensPredicted > s.ids+len(c.Tokens) && c.Content != ""
		if (len(d.Tokens) == 0 || short) && c.Content != "" {
			// Builds without return_tokens send no ids at all. Either way
			// the ids are Tandem's tokenization of the text, as for
			// text-only OpenAI servers.
			if s.e.cfg.Codec == nil {
				return s.fail(ErrNoTokenIDs)
			}
			d.Tokens = s.e.cfg.Codec.Encode(c.Content)
		}
		if c.TokensPredicted != nil {
			s.ids = max(s.ids+len(c.Tokens), *c.TokensPredicted)
		} else {
			s.ids += len(c.Tokens)
		}
		if s.logprobs && len(c.CompletionProbabilities) > 0 {
			d.Logprobs = llamaLogprobs(c.CompletionProbabilities[:min(len(c.CompletionProbabilities), len(d.Tokens))], s.top)
		}
		if !c.Stop {
			if len(d.Tokens) == 0 {
				continue
			}
			return d, nil
		}
		// The last event: how the sequence ended, its slot, and how much
		// of the prompt the slot already held.
		switch c.StopType {
		case "limit":
			d.Finish = engine.FinishLength
		default: // "eos", "word"
			d.Finish = engine.FinishStop
		}
		d.PromptTokens = s.promptLen
		// What the slot already held: timings.cache_n where the build has
		// it, else the prompt tokens it did not evaluate (timings.prompt_n
		// counts those it did). Never tokens_cached: older builds count
		// the prompt and the generated tokens in it (the slot's n_past),
		// which equals the prompt on a cold one.
		switch {
		case c.Timings != nil && c.Timings.CacheN != nil:
			d.CachedTokens = min(max(*c.Timings.CacheN, 0), s.promptLen)
		case c.Timings != nil && c.Timings.PromptN != nil:
			d.CachedTokens = min(max(s.promptLen-*c.Timings.PromptN, 0), s.promptLen)
		}
		if c.IDSlot != nil {
			s.e.slots.remember(s.keys, *c.IDSlot)
		}
		s.finish()
		return d, nil
	}
}

// llamaError maps llama-server's error object (format_error_response in
// tools/server/server-common.cpp) to the engine's errors.
func llamaError(url string, code int, typ, msg string) error {
	switch typ {
	case "exceed_context_size_error":
		// The prompt alone does not fit the slot's context.
		return &PromptTooLongError{fmt.Errorf("upstream %s: %w: %s", url, engine.ErrPromptTooLong, msg)}
	case "unavailable_error":
		return fmt.Errorf("upstream %s: %w: %s", url, engine.ErrOverloaded, msg)
	case "server_error":
		return fmt.Errorf("upstream %s: %w: %s", url, engine.ErrUnavailable, msg)
	}
	return fmt.Errorf("upstream %s: %s %s: %s", url, strconv.Itoa(code), typ, msg)
}

// noKVEvents says on /health that this worker is routed without events.
func (e *Engine) noKVEvents(b *health.Board, subject string) {
	msg := "llama.cpp publishes no KV events: this worker is routed by approximation (the router's own decisions, --router-ttl), with slot affinity (id_slot)"
	if b != nil {
		b.Raise(DiagNoKVEvents, subject, health.Warn, msg, "url", e.cfg.URL)
		return
	}
	e.cfg.Logger.Warn(msg, "diagnostic_code", DiagNoKVEvents, "url", e.cfg.URL)
}

// llamaLogprobs turns llama.cpp's completion_probabilities into the
// engine's entries, at most top alternatives each (a missing logprob reads
// as -Inf).
func llamaLogprobs(probs []llamaProb, top int) []engine.TokenLogprob {
	val := func(p *float64) float32 {
		if p == nil {
			return float32(math.Inf(-1))
		}
		return float32(*p)
	}
	out := make([]engine.TokenLogprob, len(probs))
	for i, p := range probs {
		out[i] = engine.TokenLogprob{Token: p.ID, Logprob: val(p.Logprob)}
		for _, t := range p.TopLogprobs[:min(len(p.TopLogprobs), top)] {
			out[i].Top = append(out[i].Top, engine.TopLogprob{Token: t.ID, Logprob: val(t.Logprob)})
		}
	}
	return out
}
