package engine

import (
	"context"
	"errors"

	"github.com/tandemllm/tandem/tokenid"
)

// Token is a vocabulary id (tokenid.ID, defined once below every layer).
// The alias stays because the seam's signatures, and all their callers,
// read engine.Token.
type Token = tokenid.ID

// FinishReason says why a sequence ended. The values are the OpenAI ones so
// the frontend can pass them through unchanged.
type FinishReason string

const (
	// FinishNone marks a delta of a sequence that is still running.
	FinishNone FinishReason = ""
	// FinishStop: an EOS or stop token (or, in the frontend, a stop string).
	FinishStop FinishReason = "stop"
	// FinishLength: max_tokens or the context length was reached.
	FinishLength FinishReason = "length"
	// FinishCancelled: the caller's context ended before the sequence did.
	FinishCancelled FinishReason = "cancelled"
)

// Sampling holds the sampling parameters of one request. The zero value is
// greedy decoding.
type Sampling struct {
	Temperature float32
	TopP        float32 // 0 or 1 disables nucleus sampling
	TopK        int     // 0 disables top-k
	Seed        uint64
	HasSeed     bool // Seed was set by the client; otherwise the engine picks one
}

// Request is one generation request, already tokenized.
type Request struct {
	ID     string
	Model  string
	Prompt []Token
	// MaxTokens bounds the generated tokens; 0 means "up to the context length".
	MaxTokens int
	// MinTokens suppresses EOS and stop tokens until this many were generated.
	MinTokens int
	// IgnoreEOS keeps generating past EOS (benchmarks use it for fixed OSL).
	IgnoreEOS bool
	// StopTokens end the sequence like EOS does (the token itself is emitted).
	StopTokens []Token
	Sampling   Sampling
	// KVTransferParams is the request's kv_transfer_params object (vLLM's
	// P/D protocol), raw JSON passed through untouched: the frontend does
	// not interpret it, an engine wrapper that speaks the protocol does
	// (disagg/vllmpd). Nil when the client sent none.
	KVTransferParams []byte
	// Logprobs asks the engine for the log-probability of every generated
	// token (Delta.Logprobs), and TopLogprobs for that many most likely
	// alternatives at each position (0..MaxTopLogprobs; CheckRequest
	// refuses more). TopLogprobs without Logprobs is ignored.
	Logprobs    bool
	TopLogprobs int
	// Constraint, when set, restricts the output (structured outputs): an
	// engine that cannot honour it refuses the request (ErrInvalidRequest naming the field)
	// rather than return unconstrained text.
	Constraint *Constraint
}

// MaxTopLogprobs is the most alternatives a request may ask for per
// position: OpenAI's top_logprobs range is 0..20.
const MaxTopLogprobs = 20

// TokenLogprob is one generated token's log-probability (natural log) and,
// when asked for, the most likely alternatives at its position, most likely
// first. Token is the vocabulary id; the frontend renders its text.
type TokenLogprob struct {
	Token   Token
	Logprob float32
	Top     []TopLogprob
}

// TopLogprob is one alternative at a position.
type TopLogprob struct {
	Token   Token
	Logprob float32
}

// Delta is one batch of progress on a sequence. An engine may coalesce
// several decode steps into one Delta when the consumer is slower than the
// engine; the frontend treats Tokens as an ordered run.
type Delta struct {
	Tokens []Token
	// Finish is set on the last Delta of a sequence.
	Finish FinishReason
	// PromptTokens and CachedTokens are set from the first Delta on: the
	// prompt length and how many of its tokens the engine found in its
	// prefix cache (OpenAI's usage.prompt_tokens_details.cached_tokens).
	PromptTokens int
	CachedTokens int
	// KVTransferParams, when set on any Delta (normally the last), is
	// returned at the top level of a non-streaming response as
	// kv_transfer_params: how a vLLM prefill leg tells the proxy where its
	// KV blocks are. Raw JSON object.
	KVTransferParams []byte
	// Logprobs holds one entry per entry of Tokens when the request asked
	// for logprobs (Request.Logprobs), else nil.
	Logprobs []TokenLogprob
}

// Stream yields the Deltas of one sequence. Recv returns io.EOF after the
// Delta that carries Finish. Recv must not be called concurrently.
type Stream interface {
	Recv() (Delta, error)
}

// Generator starts sequences. Cancelling ctx stops the sequence: engines
// must stop computing for it promptly (the frontend's contract is 100 ms)
// and end the stream with FinishCancelled or ctx's error.
type Generator interface {
	Generate(ctx context.Context, req *Request) (Stream, error)
}

// Info describes an engine to the worker that hosts it.
type Info struct {
	Kind          string // "mocker", "native", ...
	Model         string
	BlockSize     int
	ContextLength int
	// KVCapacityTokens is the size of the KV cache in tokens (0 if unknown).
	KVCapacityTokens int
	// EOS lists the tokens that end generation unless IgnoreEOS is set.
	EOS []Token
}

// Engine is a Generator that a worker can host.
type Engine interface {
	Generator
	Info() Info
	Close() error
}

// ErrOverloaded is returned by Generate when the engine cannot queue more
// work; the frontend turns it into a 503 with Retry-After.
var ErrOverloaded = errors.New("engine overloaded")

// ErrPromptTooLong is returned when a prompt plus its MaxTokens cannot fit the
// context length; the frontend maps it to 413/400 context_length_exceeded.
var ErrPromptTooLong = errors.New("prompt exceeds the context length")

// ErrClosed is returned by Generate after Close.
var ErrClosed = errors.New("engine closed")

// ErrUnavailable means the worker or server behind a Generator could not
// be reached or went away before the first token; the frontend retries
// such requests on another worker.
var ErrUnavailable = errors.New("worker unavailable")

// ConstraintKind says what a Constraint's Spec holds.
type ConstraintKind string

// The constraint kinds (vLLM's structured_outputs names where they exist).
const (
	ConstraintJSONSchema ConstraintKind = "json"        // Spec: a JSON Schema
	ConstraintJSONObject ConstraintKind = "json_object" // Spec: empty; any JSON object
	ConstraintRegex      ConstraintKind = "regex"       // Spec: a regular expression the whole output matches
	ConstraintChoice     ConstraintKind = "choice"      // Spec: a JSON array of strings
	ConstraintGrammar    ConstraintKind = "grammar"     // Spec: a GBNF grammar
	ConstraintToolCalls  ConstraintKind = "tool_calls"  // Spec: JSON {"format","tools":[{"name","parameters"}]}
)

// Constraint restricts a sequence's output to a language (structured
// outputs). It is a specification, not compiled state: each engine
// compiles it against its own vocabulary (package structured), or passes
// it to the server it adapts, or refuses the request naming Field.
type Constraint struct {
	Kind ConstraintKind
	Spec string
	// Field names the request field the constraint came from
	// (response_format, structured_outputs.regex, tool_choice), for
	// refusals.
	Field string
}
