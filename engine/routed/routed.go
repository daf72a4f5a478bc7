// Package routed is the request a routed worker's Generator receives: the
// engine request plus what the router decided for it. The router's
// prediction is frontend-side knowledge that only wrappers around a
// worker's Generator read (a disaggregation driver skips a prefill leg
// that would move nothing); it never crosses the request plane, so it
// travels beside engine.Request rather than in it.
//
// dispatch hands every routed request to the chosen worker through
// Generate. A wrapper that reads the decision implements Generator; a
// wrapper that only passes requests on implements it too and forwards
// with Generate, so the decision reaches the reader however the wrappers
// are stacked. Plain engine.Generators (engines, request-plane clients)
// need nothing: Generate calls their Generate with the engine request.
package routed

import (
	"context"

	"github.com/tandemllm/tandem/engine"
)

// Request is an engine request on its way to the worker the router chose.
type Request struct {
	Req *engine.Request
	// PredictedCachedTokens is the prompt prefix the router expects the
	// chosen worker to hold (router.Decision); 0 when no prediction was
	// made.
	PredictedCachedTokens int
}

// Generator is implemented by the wrappers of a worker's Generator that
// read the routing decision, or pass it on to one that does.
type Generator interface {
	GenerateRouted(ctx context.Context, r Request) (engine.Stream, error)
}

// Generate starts r on g: with the decision when g reads it, as a plain
// engine request otherwise.
func Generate(ctx context.Context, g engine.Generator, r Request) (engine.Stream, error) {
	if rg, ok := g.(Generator); ok {
		return rg.GenerateRouted(ctx, r)
	}
	return g.Generate(ctx, r.Req)
}
