package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"

	"github.com/ardanlabs/jinja"
)

// BuiltinChatML is the chat template of the built-in mock model: ChatML
// (<|im_start|>role\ncontent<|im_end|>\n per message, "<|im_start|>assistant\n"
// as generation prompt). Tools, when given, are listed in a system block and
// assistant tool calls are written as <tool_call> JSON, Qwen-style, so tool
// requests cost realistic prompt tokens.
const BuiltinChatML = `{%- if tools %}
{{- '<|im_start|>system\n' }}
{%- if messages and messages[0].role == 'system' %}{{- messages[0].content + '\n\n' }}{%- endif %}
{{- '# Tools\n\nYou may call one or more functions. Reply with <tool_call>{"name": <function-name>, "arguments": <args-json-object>}</tool_call>.\n<tools>' }}
{%- for tool in tools %}{{- '\n' }}{{- tool | tojson }}{%- endfor %}
{{- '\n</tools><|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
{%- if not (tools and loop.first and message.role == 'system') %}
{{- '<|im_start|>' + message.role + '\n' + message.content }}
{%- if message.tool_calls %}
{%- for tc in message.tool_calls %}
{%- set f = tc.function if tc.function else tc %}
{{- '\n<tool_call>\n{"name": "' + f.name + '", "arguments": ' }}
{%- if f.arguments is string %}{{- f.arguments }}{%- else %}{{- f.arguments | tojson }}{%- endif %}
{{- '}\n</tool_call>' }}
{%- endfor %}
{%- endif %}
{{- '<|im_end|>\n' }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}`

// BuiltinJoin is the template for models that ship none (llama2.c
// checkpoints are plain text completers): the message contents joined with
// "\n", roles, tools and add_generation_prompt ignored. A one-message chat
// therefore prompts exactly like /v1/completions with that text.
const BuiltinJoin = `{%- for message in messages %}{%- if not loop.first %}{{- '\n' }}{%- endif %}{{- message.content }}{%- endfor %}`

// reservedVar reports the variables Render sets itself, which
// chat_template_kwargs may not override.
func reservedVar(k string) bool {
	switch k {
	case "messages", "tools", "documents", "add_generation_prompt":
		return true
	}
	return false
}

// openAIContentPattern detects templates that iterate over message content
// parts (the "openai" content format, in vLLM's terms); all others expect
// content to be a string.
const openAIContentPattern = `for\s+\w+\s+in\s+[\w.]*(\.content|\[\s*['"]content['"]\s*\])`

type jinjaTemplate struct {
	tmpl *jinja.Template
	// vars are the tokenizer's special tokens (bos_token, eos_token, ...),
	// which HF passes to every template.
	vars map[string]jinja.Value
	// stringContent: flatten OpenAI content-part lists (and null) to the
	// string the template expects, as vLLM does.
	stringContent bool
	// source is the template's text (Source), which the frontend reads to
	// pick the model's tool-call and reasoning parsers.
	source string
}

// Source returns the template's Jinja source.
func (t *jinjaTemplate) Source() string { return t.source }

// NewChatTemplate compiles a Jinja chat template (e.g. GGUF's
// tokenizer.chat_template). specials become template variables such as
// bos_token and eos_token.
//
// Render gives the template the variables HF's apply_chat_template does:
// messages, tools (None when absent), documents (None),
// add_generation_prompt, the specials, and the request's
// chat_template_kwargs (which may not override the first four). Unless the
// template iterates over message content parts, content given as a list of
// text parts is joined with "\n" and null content becomes "", as vLLM does;
// non-text parts are then an error.
func NewChatTemplate(source string, specials map[string]string) (ChatTemplate, error) {
	t, err := jinja.Compile(source)
	if err != nil {
		return nil, fmt.Errorf("chat template: %w", err)
	}
	vars := make(map[string]jinja.Value, len(specials))
	for k, v := range specials {
		vars[k] = jinja.NewString(v)
	}
	parts := regexp.MustCompile(openAIContentPattern).MatchString(source)
	return &jinjaTemplate{tmpl: t, vars: vars, stringContent: !parts, source: source}, nil
}

// Render implements ChatTemplate. It is safe for concurrent use.
func (t *jinjaTemplate) Render(in ChatInput) (out string, err error) {
	// A template engine bug on odd input must cost one request, not the
	// process.
	defer func() {
		if r := recover(); r != nil {
			out, err = "", fmt.Errorf("chat template: internal error: %v", r)
		}
	}()
	vars := make(map[string]jinja.Value, len(t.vars)+len(in.Kwargs)+4)
	for k, v := range t.vars {
		vars[k] = v
	}
	for k, raw := range in.Kwargs {
		if reservedVar(k) {
			return "", fmt.Errorf("chat_template_kwargs may not set %q", k)
		}
		v, err := jsonToValue(raw)
		if err != nil {
			return "", fmt.Errorf("chat_template_kwargs[%q]: %w", k, err)
		}
		vars[k] = v
	}
	msgs, err := jsonToValue(in.Messages)
	if err != nil {
		return "", fmt.Errorf("messages: %w", err)
	}
	if !msgs.IsList() {
		return "", errors.New("messages must be a JSON array")
	}
	if t.stringContent {
		if err := flattenContent(msgs); err != nil {
			return "", err
		}
	}
	vars["messages"] = msgs
	// HF passes tools=None and documents=None when absent, so templates
	// testing "tools is not none" see the same thing here.
	vars["tools"] = jinja.None()
	if raw := bytes.TrimSpace(in.Tools); len(raw) > 0 && !bytes.Equal(raw, []byte("null")) {
		tools, err := jsonToValue(raw)
		if err != nil {
			return "", fmt.Errorf("tools: %w", err)
		}
		if !tools.IsList() {
			return "", errors.New("tools must be a JSON array")
		}
		vars["tools"] = tools
	}
	vars["documents"] = jinja.None()
	vars["add_generation_prompt"] = jinja.NewBool(in.AddGenerationPrompt)
	return t.tmpl.RenderValues(vars)
}

// flattenContent turns each message's content-part list into the newline
// joined text of its parts, and null content into "" (vLLM's "string"
// content format), so string-only templates accept OpenAI requests that use
// parts or send content: null beside tool_calls.
func flattenContent(msgs jinja.Value) error {
	for i, m := range msgs.AsList().Items {
		if !m.IsDict() {
			return fmt.Errorf("messages[%d] must be an object", i)
		}
		d := m.AsDict()
		c, ok := d.Get("content")
		switch {
		case !ok:
		case c.IsNone():
			d.Set("content", jinja.NewString(""))
		case c.IsList():
			var texts []string
			for j, part := range c.AsList().Items {
				if !part.IsDict() {
					return fmt.Errorf("messages[%d].content[%d] must be an object", i, j)
				}
				p := part.AsDict()
				typ, _ := p.Get("type")
				if !typ.IsString() || typ.AsString() != "text" {
					return fmt.Errorf("messages[%d].content[%d]: unsupported content part type %s for a text-only model", i, j, typ.String())
				}
				txt, _ := p.Get("text")
				if !txt.IsString() {
					return fmt.Errorf("messages[%d].content[%d].text must be a string", i, j)
				}
				texts = append(texts, txt.AsString())
			}
			d.Set("content", jinja.NewString(strings.Join(texts, "\n")))
		}
	}
	return nil
}

// jsonToValue decodes JSON into jinja values keeping object key order, so
// `tojson` reproduces the client's order as Python's json.dumps does.
func jsonToValue(raw []byte) (jinja.Value, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := decodeJSONValue(dec, 0)
	if err != nil {
		return jinja.Undefined(), err
	}
	if _, err := dec.Token(); err != io.EOF {
		return jinja.Undefined(), errors.New("invalid JSON: trailing data")
	}
	return v, nil
}

// maxJSONDepth stops hostile nesting from exhausting the stack.
const maxJSONDepth = 256

func decodeJSONValue(dec *json.Decoder, depth int) (jinja.Value, error) {
	if depth > maxJSONDepth {
		return jinja.Undefined(), fmt.Errorf("invalid JSON: nested deeper than %d", maxJSONDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return jinja.Undefined(), fmt.Errorf("invalid JSON: %w", err)
	}
	switch v := tok.(type) {
	case json.Delim:
		switch v {
		case '[':
			var items []jinja.Value
			for dec.More() {
				item, err := decodeJSONValue(dec, depth+1)
				if err != nil {
					return jinja.Undefined(), err
				}
				items = append(items, item)
			}
			if _, err := dec.Token(); err != nil {
				return jinja.Undefined(), fmt.Errorf("invalid JSON: %w", err)
			}
			if items == nil {
				items = []jinja.Value{}
			}
			return jinja.NewList(items), nil
		case '{':
			d := jinja.NewDict()
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return jinja.Undefined(), fmt.Errorf("invalid JSON: %w", err)
				}
				key, ok := kt.(string)
				if !ok {
					return jinja.Undefined(), errors.New("invalid JSON: object key is not a string")
				}
				val, err := decodeJSONValue(dec, depth+1)
				if err != nil {
					return jinja.Undefined(), err
				}
				d.AsDict().Set(key, val)
			}
			if _, err := dec.Token(); err != nil {
				return jinja.Undefined(), fmt.Errorf("invalid JSON: %w", err)
			}
			return d, nil
		}
		return jinja.Undefined(), fmt.Errorf("invalid JSON: unexpected %v", v)
	case string:
		return jinja.NewString(v), nil
	case json.Number:
		// FromGoValue keeps integers integral (Python json.dumps prints 3,
		// not 3.0) and turns the rest into floats.
		return jinja.FromGoValue(v), nil
	case bool:
		return jinja.NewBool(v), nil
	case nil:
		return jinja.None(), nil
	}
	return jinja.Undefined(), fmt.Errorf("invalid JSON: unexpected token %v", tok)
}
