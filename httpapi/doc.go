// Package frontend is Tandem's OpenAI-compatible HTTP server: it parses and
// validates requests (through package openai), renders chat templates,
// tokenizes, asks the router for a worker, streams the worker's tokens back
// as text with stop strings applied, and records the frontend metrics.
//
// It never picks workers itself and never talks to an engine other than
// through the engine.Generator the router hands it, so the same code serves
// in-process workers (tandem serve) and remote ones (the request plane).
//
// Errors before the first token become HTTP statuses (and a worker that
// went away is retried elsewhere); after the first byte of a stream they
// travel as an SSE error event, never a status change.
package httpapi
