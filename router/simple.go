package router

import (
	"math/rand/v2"
	"sync/atomic"
)

// RoundRobin cycles through the candidates. Candidates arrive in a stable
// order (sorted by id), so the cycle is fair across calls.
type RoundRobin struct{ next atomic.Uint64 }

func (*RoundRobin) Name() string { return "round-robin" }

func (p *RoundRobin) Pick(_ *Request, c []Candidate) (Decision, error) {
	i := p.next.Add(1) - 1
	return Decision{WorkerID: c[i%uint64(len(c))].ID}, nil
}

// Random picks uniformly; the baseline the seeds compare KV routing with.
type Random struct{}

func (Random) Name() string { return "random" }

func (Random) Pick(_ *Request, c []Candidate) (Decision, error) {
	return Decision{WorkerID: c[rand.IntN(len(c))].ID}, nil
}

// LeastLoaded picks the worker with the fewest prefill tokens queued, then
// the fewest active requests; ties go to the first in id order.
type LeastLoaded struct{}

func (LeastLoaded) Name() string { return "least-loaded" }

func (LeastLoaded) Pick(_ *Request, c []Candidate) (Decision, error) {
	best := 0
	for i := 1; i < len(c); i++ {
		a, b := c[i], c[best]
		if a.PrefillTokens < b.PrefillTokens || (a.PrefillTokens == b.PrefillTokens && a.Active < b.Active) {
			best = i
		}
	}
	return Decision{WorkerID: c[best].ID}, nil
}
