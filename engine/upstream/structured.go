package upstream

import (
	"encoding/json"
	"fmt"

	"github.com/tandemllm/tandem/engine"
)

// Structured outputs on each upstream dialect. Each server compiles the
// constraint itself (xgrammar, llguidance, llama.cpp's GBNF); what it cannot
// take is refused with the request's field named, never sent unconstrained.
//
//   - vLLM: structured_outputs {json|regex|choice|grammar|json_object} on
//     /v1/completions (vllm/entrypoints/openai/protocol.py,
//     StructuredOutputsParams in vllm/sampling_params.py); before it,
//     guided_json, guided_regex, guided_choice, guided_grammar
//     (Config.GuidedFields).
//   - SGLang: sampling_params json_schema (a string: the schema's JSON
//     text), regex, ebnf, each Optional[str], at most one per request
//     (SamplingParams in python/sglang/srt/sampling/sampling_params.py
//     of sgl-project/sglang, whose verify() refuses two with "Only one of
//     regex, json_schema, or ebnf can be set."; structural_tag is not
//     sent).
//   - llama.cpp: json_schema (an object) or grammar (GBNF) on /completion
//     (ggml-org/llama.cpp tools/server/README.md, "grammar: Set grammar
//     for grammar-based sampling", "json_schema: Set a JSON schema for
//     grammar-based sampling"; the server reads json_schema only when
//     grammar is absent, and builds of early 2025 refused both
//     together). One at most is sent; no regular expressions.
//
// The stand-ins (engine/upstream/standin) take the same fields
// (TestConstraintFieldsStandIns).
//   - APIOpenAI: the standard completions API has no constraint field.

// constraintRefused is the refusal for a constraint this dialect cannot
// carry.
func constraintRefused(c *engine.Constraint, dialect string) error {
	field := c.Field
	if field == "" {
		field = "response_format"
	}
	return fmt.Errorf("%w: %s: a %s constraint cannot be passed to this upstream (%s)", engine.ErrInvalidRequest, field, c.Kind, dialect)
}

// vllmConstraint fills b's structured-output fields.
func (e *Engine) vllmConstraint(b *body, c *engine.Constraint) error {
	if c == nil {
		return nil
	}
	if e.cfg.API == APIOpenAI || c.Kind == engine.ConstraintToolCalls {
		return constraintRefused(c, e.cfg.API)
	}
	if e.cfg.GuidedFields {
		switch c.Kind {
		case engine.ConstraintJSONSchema:
			b.GuidedJSON = json.RawMessage(c.Spec)
		case engine.ConstraintJSONObject:
			b.GuidedJSON = json.RawMessage(`{"type":"object"}`)
		case engine.ConstraintRegex:
			b.GuidedRegex = c.Spec
		case engine.ConstraintChoice:
			b.GuidedChoice = json.RawMessage(c.Spec)
		case engine.ConstraintGrammar:
			b.GuidedGrammar = c.Spec
		default:
			return constraintRefused(c, "vllm guided decoding")
		}
		return nil
	}
	so := map[string]any{}
	switch c.Kind {
	case engine.ConstraintJSONSchema:
		so["json"] = json.RawMessage(c.Spec)
	case engine.ConstraintJSONObject:
		so["json_object"] = true
	case engine.ConstraintRegex:
		so["regex"] = c.Spec
	case engine.ConstraintChoice:
		so["choice"] = json.RawMessage(c.Spec)
	case engine.ConstraintGrammar:
		so["grammar"] = c.Spec
	default:
		return constraintRefused(c, "vllm")
	}
	b.StructuredOutputs = so
	return nil
}

// sglangConstraint fills SGLang's sampling parameters.
func sglangConstraint(p *sglangSampling, c *engine.Constraint) error {
	if c == nil {
		return nil
	}
	switch c.Kind {
	case engine.ConstraintJSONSchema:
		p.JSONSchema = c.Spec
	case engine.ConstraintJSONObject:
		p.JSONSchema = `{"type":"object"}`
	case engine.ConstraintRegex:
		p.Regex = c.Spec
	case engine.ConstraintGrammar:
		p.EBNF = c.Spec
	case engine.ConstraintChoice:
		// A choice is a regex of escaped alternatives.
		var cs []string
		if err := json.Unmarshal([]byte(c.Spec), &cs); err != nil {
			return constraintRefused(c, APISGLang)
		}
		p.Regex = choiceRegex(cs)
	default:
		return constraintRefused(c, APISGLang)
	}
	return nil
}

// llamaConstraint fills llama-server's fields.
func llamaConstraint(b *llamaBody, c *engine.Constraint) error {
	if c == nil {
		return nil
	}
	switch c.Kind {
	case engine.ConstraintJSONSchema:
		b.JSONSchema = json.RawMessage(c.Spec)
	case engine.ConstraintJSONObject:
		b.JSONSchema = json.RawMessage(`{"type":"object"}`)
	case engine.ConstraintGrammar:
		b.Grammar = c.Spec
	case engine.ConstraintChoice:
		var cs []string
		if err := json.Unmarshal([]byte(c.Spec), &cs); err != nil {
			return constraintRefused(c, APILlamaCpp)
		}
		g := "root ::= "
		for i, s := range cs {
			if i > 0 {
				g += " | "
			}
			q, _ := json.Marshal(s) // a JSON string is a GBNF literal for printable text
			g += string(q)
		}
		b.Grammar = g
	default:
		// llama-server takes no regular expressions.
		return constraintRefused(c, APILlamaCpp)
	}
	return nil
}

// choiceRegex is a regex matching exactly one of cs.
func choiceRegex(cs []string) string {
	out := "("
	for i, s := range cs {
		if i > 0 {
			out += "|"
		}
		out += regexpQuote(s)
	}
	return out + ")"
}

func regexpQuote(s string) string {
	const special = `\.+*?()|[]{}^$`
	var out []byte
	for i := 0; i < len(s); i++ {
		for j := 0; j < len(special); j++ {
			if s[i] == special[j] {
				out = append(out, '\\')
				break
			}
		}
		out = append(out, s[i])
	}
	return string(out)
}
