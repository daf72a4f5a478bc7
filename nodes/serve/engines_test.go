package serve

import (
	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/mocker"
	"github.com/tandemllm/tandem/tokenizer"
)

// mockerConfig is the mocker as `tandem serve` configures it, with KV events
// off (these tests do not route on them).
func mockerConfig(model *tokenizer.Model) mocker.Config {
	cfg := mocker.DefaultConfig()
	cfg.Model = model.Name
	cfg.EOS = model.Tokenizer.EOS()
	cfg.Vocabulary = model.Tokenizer.Encode(mocker.DefaultText)
	cfg.KVEvents.Enabled = false
	return cfg
}

func newInstantEngine(model *tokenizer.Model) (engine.Engine, error) {
	cfg := mockerConfig(model)
	cfg.Instant = true
	return mocker.New(cfg)
}

func defaultTestEngines(model *tokenizer.Model) EngineFactory {
	return func(int) (engine.Engine, error) { return newInstantEngine(model) }
}

// slowTestEngines decode at about 6 ms per token (Dynamo's timing model).
func slowTestEngines(model *tokenizer.Model) EngineFactory {
	return func(int) (engine.Engine, error) { return mocker.New(mockerConfig(model)) }
}
