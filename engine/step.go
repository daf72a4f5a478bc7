package engine

import "time"

// StepStats is the shape and measured duration of one scheduler step of an
// in-process engine: what a performance profile is made of. The planner's
// ProfileLearner turns a stream of them into a planner profile while the
// engine serves.
type StepStats struct {
	// PrefillTokens is the number of new (uncached) tokens computed in the
	// step for sequences still in their prefill.
	PrefillTokens int
	// PrefillCachedTokens is the number of tokens those prefilling
	// sequences already had in the KV cache before the step: their prefix
	// cache hit, or the chunks of an earlier step.
	PrefillCachedTokens int
	// PrefillSeqs is the number of sequences prefilling in the step.
	PrefillSeqs int
	// DecodeSeqs is the number of sequences generating one token each.
	DecodeSeqs int
	// DecodeContextTokens is the sum of the decoding sequences' contexts
	// (prompt and outputs so far, the new token included).
	DecodeContextTokens int
	// Duration is the step's measured duration on the engine's clock.
	Duration time.Duration
}

// StepObserver receives every step of an engine. ObserveStep runs on the
// engine's scheduler goroutine between steps, so it must be quick and must
// not block or call back into the engine; an engine with no observer pays
// one nil check per step.
type StepObserver interface {
	ObserveStep(StepStats)
}
