package upstream

import "github.com/tandemllm/tandem/engine"

// KVShape implements engine.KVDescriber. A vLLM server's KV shape is its
// own business (its connector checks it); the served model's name stands
// in for its weights.
func (e *Engine) KVShape() engine.KVShape {
	return engine.KVShape{Weights: "upstream:" + e.Info().Model}
}
