package bench

import (
	"fmt"
	"strings"
	"time"
)

// Endpoint is the OpenAI API a request goes to.
type Endpoint string

// The two generation endpoints.
const (
	Chat        Endpoint = "chat"
	Completions Endpoint = "completions"
)

// ParseEndpoint accepts "chat" or "completions".
func ParseEndpoint(s string) (Endpoint, error) {
	switch Endpoint(strings.ToLower(s)) {
	case Chat, "chat/completions":
		return Chat, nil
	case Completions:
		return Completions, nil
	}
	return "", fmt.Errorf("unknown endpoint %q (want chat or completions)", s)
}

func (e Endpoint) path() string {
	if e == Completions {
		return "/v1/completions"
	}
	return "/v1/chat/completions"
}

// Message is one chat message.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Tag places a request in its workload, so that analysis (hit tables,
// conversations) can find it in the records.
type Tag struct {
	Session int `json:"session"`
	Turn    int `json:"turn"`
	// Prefix and Round are set by prefix-reuse, -1 elsewhere.
	Prefix int `json:"prefix"`
	Round  int `json:"round"`
}

// Request is one request a workload wants sent. Exactly one of Messages
// (chat), Prompt or PromptIDs (completions) is set.
type Request struct {
	Endpoint  Endpoint
	Messages  []Message
	Prompt    string
	PromptIDs []int32
	MaxTokens int
	// IgnoreEOS asks for exactly MaxTokens (a vLLM and Tandem extension;
	// OpenAI itself rejects it).
	IgnoreEOS bool
	// InputTokens is the intended prompt length, recorded when the server
	// reports no usage.
	InputTokens int
	// OverlapTokens is the prompt's generated overlap (Record.OverlapTokens).
	OverlapTokens int
	Tag           Tag
}

// Reply is what a session learns from the previous turn.
type Reply struct {
	Text string
	Err  error
}

// Session yields the requests of one conversation; single-turn workloads
// have one request per session.
type Session interface {
	// Next returns the next request, given the previous turn's reply (nil
	// before the first), and how long a user would think before sending
	// it. ok=false ends the session.
	Next(prev *Reply) (req *Request, think time.Duration, ok bool)
}

// Workload generates sessions. Session i must be a pure function of i (and
// the workload's seed) so every target of an A/B run gets the same
// requests; target lets a workload salt content per target when the
// targets share one prefix cache (frontend-overhead).
type Workload interface {
	Name() string
	// Sessions is how many sessions the workload has; 0 means unbounded
	// (the run's --requests or --duration ends it).
	Sessions() int
	NewSession(i, target int) Session
}

// Scheduled is implemented by workloads that bring their own arrival
// times (trace replay): session i is due at Arrival(i) after the start.
type Scheduled interface {
	Arrival(i int) time.Duration
}

// textReader is implemented by workloads whose sessions read the reply
// text; the client only assembles text when asked, as it costs a JSON
// decode per chunk.
type textReader interface{ needsText() bool }

// oneShot is a session of a single request.
type oneShot struct {
	req  *Request
	done bool
}

func (s *oneShot) Next(*Reply) (*Request, time.Duration, bool) {
	if s.done {
		return nil, 0, false
	}
	s.done = true
	return s.req, 0, true
}

func noTag(session int) Tag { return Tag{Session: session, Prefix: -1, Round: -1} }

// Synthetic is the classic load test: independent requests whose input and
// output lengths come from distributions, optionally sharing a prefix.
type Synthetic struct {
	Endpoint Endpoint
	Input    Dist // prompt length in words (tokens with TokenIDs)
	Output   Dist // max_tokens
	// PrefixRatio is the fraction of every prompt taken from one prefix
	// shared by all requests (0: none), to exercise prefix caches.
	PrefixRatio float64
	// TokenIDs sends completions prompts as token ids, for exact lengths.
	TokenIDs bool
	// Vocab bounds the token ids used with TokenIDs.
	Vocab     VocabRange
	IgnoreEOS bool
	Seed      uint64
	// N bounds the sessions; 0 is unbounded.
	N int
	// SaltTargets makes each target's prompts distinct (apart from the
	// shared prefix), so targets in front of the same engine do not serve
	// each other's requests from cache.
	SaltTargets bool
	// Scenario overrides Name.
	Scenario string
}

// VocabRange is the half-open range [Lo, Hi) of token ids that token-id
// prompts use. The default, [1000, 30000), is ordinary text tokens in every
// common vocabulary (Llama 2's has 32,000 ids), clear of special tokens.
type VocabRange struct{ Lo, Hi int }

func (v VocabRange) orDefault() VocabRange {
	if v.Hi <= v.Lo || v.Lo < 0 {
		return VocabRange{Lo: 1000, Hi: 30000}
	}
	return v
}

// Name implements Workload.
func (s *Synthetic) Name() string {
	if s.Scenario != "" {
		return s.Scenario
	}
	return "synthetic"
}

// Sessions implements Workload.
func (s *Synthetic) Sessions() int { return s.N }

// Validate checks the configuration.
func (s *Synthetic) Validate() error {
	if err := s.Input.validate(); err != nil {
		return fmt.Errorf("input length: %w", err)
	}
	if err := s.Output.validate(); err != nil {
		return fmt.Errorf("output length: %w", err)
	}
	if !(s.PrefixRatio >= 0 && s.PrefixRatio <= 1) {
		return fmt.Errorf("shared-prefix ratio %v must be in [0, 1]", s.PrefixRatio)
	}
	if s.TokenIDs && s.Endpoint != Completions {
		return fmt.Errorf("token-id prompts need the completions endpoint")
	}
	return nil
}

// NewSession implements Workload.
func (s *Synthetic) NewSession(i, target int) Session {
	salt := uint64(0)
	if s.SaltTargets {
		salt = uint64(target) + 1
	}
	r := newRNG(s.Seed, 1, uint64(i))
	in, out := s.Input.sample(r), s.Output.sample(r)
	shared := int(float64(in) * s.PrefixRatio)
	// The shared prefix's stream ignores i: all requests draw the same
	// words. Drawing it to the longest length any request needs and
	// cutting keeps shorter prefixes a prefix of longer ones.
	pr := newRNG(s.Seed, 2)
	tail := newRNG(s.Seed, 3, uint64(i), salt)
	req := &Request{Endpoint: s.Endpoint, MaxTokens: out, IgnoreEOS: s.IgnoreEOS, InputTokens: in, Tag: noTag(i)}
	if i > 0 {
		req.OverlapTokens = shared // the first request has nobody to share with
	}
	if s.TokenIDs {
		v := s.Vocab.orDefault()
		ids := make([]int32, 0, in)
		for range shared {
			ids = append(ids, int32(v.Lo+pr.intn(v.Hi-v.Lo)))
		}
		for len(ids) < in {
			ids = append(ids, int32(v.Lo+tail.intn(v.Hi-v.Lo)))
		}
		req.PromptIDs = ids
		return &oneShot{req: req}
	}
	var sb strings.Builder
	sb.Grow(in * 7)
	appendWords(&sb, pr, shared)
	appendWords(&sb, tail, in-shared)
	if s.Endpoint == Completions {
		req.Prompt = sb.String()
	} else {
		req.Messages = []Message{{Role: "user", Content: sb.String()}}
	}
	return &oneShot{req: req}
}

// MultiTurn is a chat workload of conversations: every turn resends the
// whole history plus a new user message, so a server with a prefix cache
// reuses all but the newest turn.
type MultiTurn struct {
	Turns      Dist // turns per conversation
	FirstInput Dist // words in the first user message
	Input      Dist // words in each later user message
	Output     Dist // max_tokens per turn
	// SystemWords is the length of a system prompt shared by every
	// conversation (0: none).
	SystemWords int
	Think       time.Duration
	IgnoreEOS   bool
	Seed        uint64
	N           int
}

// Name implements Workload.
func (*MultiTurn) Name() string { return "multi-turn" }

// Sessions implements Workload.
func (m *MultiTurn) Sessions() int { return m.N }

func (*MultiTurn) needsText() bool { return true }

// Validate checks the configuration.
func (m *MultiTurn) Validate() error {
	for name, d := range map[string]Dist{"turns": m.Turns, "first input": m.FirstInput, "input": m.Input, "output": m.Output} {
		if err := d.validate(); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	if m.SystemWords < 0 {
		return fmt.Errorf("system prompt length %d must not be negative", m.SystemWords)
	}
	return nil
}

// NewSession implements Workload.
func (m *MultiTurn) NewSession(i, _ int) Session {
	r := newRNG(m.Seed, 4, uint64(i))
	c := &conversation{m: m, i: i, r: r, turns: m.Turns.sample(r)}
	if m.SystemWords > 0 {
		c.msgs = append(c.msgs, Message{Role: "system", Content: words(newRNG(m.Seed, 5), m.SystemWords)})
		c.inTokens = m.SystemWords
	}
	return c
}

type conversation struct {
	m        *MultiTurn
	i        int
	r        *rng
	turns    int
	turn     int
	msgs     []Message
	inTokens int
}

func (c *conversation) Next(prev *Reply) (*Request, time.Duration, bool) {
	if c.turn >= c.turns || (prev != nil && prev.Err != nil) {
		return nil, 0, false
	}
	think := time.Duration(0)
	if prev != nil {
		c.msgs = append(c.msgs, Message{Role: "assistant", Content: prev.Text})
		c.inTokens += len(strings.Fields(prev.Text))
		think = c.m.Think
	}
	d := c.m.Input
	if c.turn == 0 {
		d = c.m.FirstInput
	}
	// Everything before the new user message was sent before: by this
	// conversation's earlier turns, or (the system prompt) by others.
	overlap := c.inTokens
	if c.turn == 0 && c.i == 0 {
		overlap = 0
	}
	n := d.sample(c.r)
	c.msgs = append(c.msgs, Message{Role: "user", Content: words(c.r, n)})
	c.inTokens += n
	tag := noTag(c.i)
	tag.Turn = c.turn
	c.turn++
	req := &Request{Endpoint: Chat, Messages: append([]Message(nil), c.msgs...), MaxTokens: c.m.Output.sample(c.r),
		IgnoreEOS: c.m.IgnoreEOS, InputTokens: c.inTokens, OverlapTokens: overlap, Tag: tag}
	return req, think, true
}
