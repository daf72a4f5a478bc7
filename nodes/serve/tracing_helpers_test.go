package serve

import (
	"context"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/tokenizer"
	"github.com/tandemllm/tandem/tracing"
)

type (
	tokenizerModel = tokenizer.Model
	engineEngine   = engine.Engine
)

// traceSpy records the trace id each Generate's context carries.
type traceSpy struct {
	engine.Engine
	seen *[]string
}

func (s traceSpy) Generate(ctx context.Context, req *engine.Request) (engine.Stream, error) {
	*s.seen = append(*s.seen, tracing.TraceID(ctx))
	return s.Engine.Generate(ctx, req)
}
