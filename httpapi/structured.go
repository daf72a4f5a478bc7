package httpapi

import (
	"encoding/json"
	"errors"

	"github.com/tandemllm/tandem/chatparse"
	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/openai"
	"github.com/tandemllm/tandem/structured"
)

// checkConstraint compiles a request's structured-output constraint (the
// compiled grammar is cached for the engines of this process) so that a
// schema the compiler cannot honour is a 400 naming the field and the
// keyword before any token is generated, whichever worker would serve it.
func checkConstraint(c *openai.Constraint) (*engine.Constraint, *openai.Error) {
	if c == nil {
		return nil, nil
	}
	if _, err := structured.Shared.Grammar(c.Kind, c.Spec); err != nil {
		var ue *structured.UnsupportedError
		switch {
		case errors.As(err, &ue):
			return nil, openai.BadRequest(c.Field, "unsupported_schema", "%v", err)
		case errors.Is(err, structured.ErrUnsatisfiable):
			return nil, openai.BadRequest(c.Field, "unsatisfiable_schema", "%v", err)
		}
		return nil, openai.BadRequest(c.Field, "invalid_value", "%v", err)
	}
	return &engine.Constraint{Kind: engine.ConstraintKind(c.Kind), Spec: c.Spec, Field: c.Field}, nil
}

// toolCallsFormat sets a forced tool call's syntax (the tool_calls
// constraint's format) to the model's tool-call parser, the one that
// reads the reply back: a call forced in another family's syntax would
// come back as text. The structured package refuses a format it cannot
// write (a 400 naming tool_choice).
func toolCallsFormat(c *openai.Constraint, plan *chatPlan) (*openai.Constraint, *openai.Error) {
	if c == nil || c.Kind != structured.KindToolCalls || plan == nil || plan.opts.ToolParser == "" {
		return c, nil
	}
	name, err := chatparse.CanonicalTool(plan.opts.ToolParser)
	if err != nil {
		return nil, openai.BadRequest(c.Field, "invalid_value", "%v", err)
	}
	var spec openai.ToolCallsSpec
	if err := json.Unmarshal([]byte(c.Spec), &spec); err != nil {
		return nil, openai.BadRequest(c.Field, "invalid_value", "%v", err)
	}
	spec.Format = name
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, openai.BadRequest(c.Field, "invalid_value", "%v", err)
	}
	out := *c
	out.Spec = string(b)
	return &out, nil
}
