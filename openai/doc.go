// Package openai owns the OpenAI HTTP API as clients use it: request types
// and their validation, the error body shape, and the exact bytes of
// server-sent-event chunks. It knows nothing about routing or engines, so
// the frontend and the worker's vLLM-compatible server share one
// definition of the wire.
//
// Streaming chunks are built with append-style encoders instead of
// encoding/json: a chunk is written per token, and reflection there was the
// largest part of the frontend's fixed cost.
package openai
