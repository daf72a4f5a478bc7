package engines

import (
	"fmt"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/tokenizer"
)

// ServedModel names the model a pool of engines serves, called for each
// engine eng (engines[i]): --served-model-name if given, else for an
// upstream server the name it serves (a user asks for the model the server
// lists, not Tandem's tokenizer's), and every upstream of the pool must
// serve the first one's model. The first is the first engine whose model
// is known: an upstream server that has not answered (no --upstream-model)
// has none yet, and the name comes from the first that answered.
func ServedModel(name string, model *tokenizer.Model, eng engine.Engine, engines []engine.Engine, i int) (*tokenizer.Model, error) {
	info := eng.Info()
	first := engines[0]
	for _, e := range engines[:i] {
		if e.Info().Model != "" {
			first = e
			break
		}
	}
	if info.Kind == "upstream" && i > 0 && info.Model != "" && first.Info().Model != "" && info.Model != first.Info().Model {
		url := func(e engine.Engine) string {
			if u, ok := e.(engine.URLReporter); ok {
				return u.URL()
			}
			return "?"
		}
		return nil, fmt.Errorf("serve: upstream %s serves model %q but upstream %s serves %q: one pool serves one model (set --upstream-model to pick one)",
			url(first), first.Info().Model, url(eng), info.Model)
	}
	if i > 0 && (first != eng && first.Info().Model != "" || info.Model == "") {
		return model, nil
	}
	if name == "" && info.Kind == "upstream" {
		name = info.Model
	}
	if name == "" || name == model.Name {
		return model, nil
	}
	m := *model
	m.Name = name
	return &m, nil
}

// FitContext is model with the context length eng states when the model
// states none or a larger one: a tokenizer directory may not state it
// (llama2.c has none); the engine knows it.
func FitContext(model *tokenizer.Model, eng engine.Engine) *tokenizer.Model {
	if info := eng.Info(); model.ContextLength == 0 || (info.ContextLength > 0 && info.ContextLength < model.ContextLength) {
		m := *model
		m.ContextLength = info.ContextLength
		return &m
	}
	return model
}
