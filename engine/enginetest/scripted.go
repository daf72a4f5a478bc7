package enginetest

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tandemllm/tandem/engine"
)

// Scripted emits Output cyclically (or the prompt echoed when Output is
// empty) until MaxTokens, a stop token or EOS.
type Scripted struct {
	Name   string
	Output []engine.Token
	EOS    []engine.Token
	// Delay sleeps before each token; zero is instant.
	Delay time.Duration
	// Cached is reported as cached_tokens, capped by the prompt length.
	Cached  int
	Ctx     int // context length; default 4096
	mu      sync.Mutex
	Seen    []*engine.Request
	Started atomic.Int64
	Live    atomic.Int64 // sequences running now
}

// Info implements engine.Engine.
func (s *Scripted) Info() engine.Info {
	ctx := s.Ctx
	if ctx == 0 {
		ctx = 4096
	}
	return engine.Info{Kind: "scripted", Model: s.Name, BlockSize: 16, ContextLength: ctx, EOS: s.EOS}
}

// Close implements engine.Engine.
func (s *Scripted) Close() error { return nil }

// Generate implements engine.Generator.
func (s *Scripted) Generate(ctx context.Context, req *engine.Request) (engine.Stream, error) {
	info := s.Info()
	max, err := engine.CheckRequest(req, info, 0)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.Seen = append(s.Seen, req)
	s.mu.Unlock()
	s.Started.Add(1)
	p := engine.NewPipe(ctx)
	out := s.Output
	if len(out) == 0 {
		out = req.Prompt
	}
	cached := min(s.Cached, len(req.Prompt))
	run := func() {
		s.Live.Add(1)
		defer s.Live.Add(-1)
		for i := 0; i < max; i++ {
			if s.Delay > 0 {
				select {
				case <-time.After(s.Delay):
				case <-ctx.Done():
					p.Fail(ctx.Err())
					return
				}
			} else if ctx.Err() != nil {
				p.Fail(ctx.Err())
				return
			}
			t := out[i%len(out)]
			d := engine.Delta{Tokens: []engine.Token{t}, PromptTokens: len(req.Prompt), CachedTokens: cached}
			if i+1 == max {
				d.Finish = engine.FinishLength
			}
			if i+1 >= req.MinTokens && (contains(req.StopTokens, t) || (!req.IgnoreEOS && contains(s.EOS, t))) {
				d.Finish = engine.FinishStop
			}
			if !p.Send(d) || d.Finish != engine.FinishNone {
				return
			}
		}
	}
	if s.Delay == 0 {
		run() // instant: everything is queued before the caller's first Recv
	} else {
		go run()
	}
	return p, nil
}

func contains(ts []engine.Token, t engine.Token) bool {
	for _, x := range ts {
		if x == t {
			return true
		}
	}
	return false
}

// Requests returns the requests seen so far.
func (s *Scripted) Requests() []*engine.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*engine.Request(nil), s.Seen...)
}
