package engine

import (
	"context"
	"io"
	"sync"
)

// Pipe carries Deltas from an engine's scheduler to one consumer. Send never
// blocks: tokens accumulate until the consumer's next Recv, which takes them
// all at once. A scheduler stepping hundreds of sequences therefore cannot be
// stalled by one slow client, and a fast engine naturally delivers several
// tokens per Recv (fewer syscalls downstream) when the consumer lags.
type Pipe struct {
	ctx    context.Context
	mu     sync.Mutex
	notify chan struct{}
	buf    Delta
	has    bool // buf holds undelivered progress
	done   bool // a Finish or error was sent
	err    error
	eof    bool // the final Delta was delivered
}

// NewPipe returns a Pipe whose Recv also returns when ctx ends, so a consumer
// is never stranded by an engine that forgets to finish a cancelled sequence.
func NewPipe(ctx context.Context) *Pipe {
	return &Pipe{ctx: ctx, notify: make(chan struct{}, 1)}
}

// Send queues d. It reports false once the sequence has finished, so the
// engine can drop a sequence nobody reads.
func (p *Pipe) Send(d Delta) bool {
	p.mu.Lock()
	if p.done {
		p.mu.Unlock()
		return false
	}
	p.buf.Tokens = append(p.buf.Tokens, d.Tokens...)
	p.buf.Logprobs = append(p.buf.Logprobs, d.Logprobs...)
	if d.PromptTokens != 0 || d.CachedTokens != 0 {
		p.buf.PromptTokens, p.buf.CachedTokens = d.PromptTokens, d.CachedTokens
	}
	if d.Finish != FinishNone {
		p.buf.Finish = d.Finish
		p.done = true
	}
	p.has = true
	p.mu.Unlock()
	p.wake()
	return true
}

// Fail ends the stream with err after any queued tokens.
func (p *Pipe) Fail(err error) {
	p.mu.Lock()
	if !p.done {
		p.done, p.err = true, err
	}
	p.mu.Unlock()
	p.wake()
}

func (p *Pipe) wake() {
	select {
	case p.notify <- struct{}{}:
	default:
	}
}

// Recv implements Stream.
func (p *Pipe) Recv() (Delta, error) {
	for {
		p.mu.Lock()
		if p.has {
			d := p.buf
			// Hand over the slice and start a fresh one: the consumer owns d.
			p.buf = Delta{PromptTokens: d.PromptTokens, CachedTokens: d.CachedTokens}
			p.has = false
			if d.Finish != FinishNone {
				p.eof = true
			}
			p.mu.Unlock()
			return d, nil
		}
		if p.eof {
			p.mu.Unlock()
			return Delta{}, io.EOF
		}
		if p.done && p.err != nil {
			err := p.err
			p.mu.Unlock()
			return Delta{}, err
		}
		p.mu.Unlock()
		select {
		case <-p.notify:
		case <-p.ctx.Done():
			p.mu.Lock()
			if !p.has && !p.eof {
				p.done = true
				if p.err == nil {
					p.err = p.ctx.Err()
				}
			}
			p.mu.Unlock()
			// Loop once more: deliver what is queued, then the error.
			select {
			case p.notify <- struct{}{}:
			default:
			}
		}
	}
}

// Done reports whether the sequence has finished or failed; engines poll it
// to drop work for consumers that went away.
func (p *Pipe) Done() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done || p.ctx.Err() != nil
}
