package router

import (
	"errors"

	"github.com/tandemllm/tandem/engine"
)

// Request is what a policy sees of one request.
type Request struct {
	ID     string
	Model  string
	Tokens []engine.Token
	// Remote is set instead of Tokens for a request another router
	// replica routed (router.LoadShare): its prompt as the kv policy's
	// block hashes, so that the load messages replicas exchange carry no
	// prompt tokens.
	Remote *RemotePrompt
}

// RemotePrompt is a prompt known by its length and the chained hashes of
// its whole blocks (blockhash.Hasher, block size BlockSize).
type RemotePrompt struct {
	Len       int
	BlockSize int
	Hashes    []uint64
}

// Len is the prompt's length in tokens.
func (r *Request) Len() int {
	if r.Remote != nil {
		return r.Remote.Len
	}
	return len(r.Tokens)
}

// Candidate is a live worker able to serve the request, with the load the
// router itself has placed on it.
type Candidate struct {
	ID string
	// Active is the number of requests routed to the worker and not yet
	// finished; Prefilling is the subset that has not produced a token yet.
	Active     int
	Prefilling int
	// PrefillTokens sums the prompt tokens of the Prefilling requests.
	PrefillTokens int
}

// Decision is a policy's choice.
type Decision struct {
	WorkerID string
	// PredictedCachedTokens is the prefix the policy expects the worker to
	// hold (0 for load-only policies). Compared later with the engine's
	// reported cached_tokens to measure prediction accuracy.
	PredictedCachedTokens int
	// What the decision rested on, for its trace span: how many workers
	// were candidates, the chosen worker's cost and the best other one's
	// (kv policies; in the cost's unit, NaN when there was none), how
	// many tied within the tie band, and why this one won ("cheapest",
	// "tie_broken", "softmax_sample"; "" for load-only policies).
	Candidates   int
	CostModel    string
	Cost         float64
	RunnerUpCost float64
	Ties         int
	Reason       string
}

// Policy picks one of candidates, which is never empty. Implementations must
// be safe for concurrent use.
type Policy interface {
	Name() string
	Pick(req *Request, candidates []Candidate) (Decision, error)
}

// Observer is implemented by policies that learn from the lifecycle of the
// requests they routed. Calls for one request arrive in order.
type Observer interface {
	Routed(req *Request, d Decision)
	FirstToken(req *Request, workerID string, cachedTokens int)
	Finished(req *Request, workerID string)
	WorkerRemoved(workerID string)
}

// LateObserver is implemented by observers that accept an engine's
// cached_tokens after the first token: FirstToken was called with -1
// (unknown), and CachedTokensLate brings the count once the engine
// reported it (an upstream server that sends usage only at the end).
type LateObserver interface {
	CachedTokensLate(req *Request, workerID string, cachedTokens int)
}

// WorkerObserver is implemented by policies that want to know about each
// worker as it is added (its engine's timing, for the ttft cost).
type WorkerObserver interface {
	WorkerAdded(w Worker)
}

// ErrNoWorker is returned when no live worker serves the model.
var ErrNoWorker = errors.New("no live worker for the model")

// ErrUnknownModel is returned for a model no worker has ever registered.
var ErrUnknownModel = errors.New("unknown model")
