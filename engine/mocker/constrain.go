package mocker

import (
	"fmt"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/structured"
)

// constrain compiles a request's constraint against the engine's
// vocabulary (cached per constraint and vocabulary), refusing what it
// cannot honour with the request field named.
func constrain(c *engine.Constraint, v *structured.Vocab) (*structured.Matcher, error) {
	field := c.Field
	if field == "" {
		field = "response_format"
	}
	if v == nil {
		return nil, fmt.Errorf("%w: %s: this engine was started without the token byte strings constraints need", engine.ErrInvalidRequest, field)
	}
	comp, err := structured.Shared.Get(string(c.Kind), c.Spec, v)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", engine.ErrInvalidRequest, field, err)
	}
	return comp.NewMatcher(), nil
}
