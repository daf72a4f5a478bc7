package chatparse

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// seqID makes ids deterministic in tests.
func seqID() func() string {
	n := 0
	return func() string { n++; return fmt.Sprintf("call_%d", n) }
}

type tc struct {
	name      string
	src       string // where the string comes from
	tool      string
	reasoning string
	opens     bool // the prompt opened the reasoning block
	tools     []Tool
	in        string
	want      Result
}

func call(name, args string) ToolCall { return ToolCall{Name: name, Arguments: args} }

var weatherTools = []Tool{{Name: "get_weather", Params: map[string]string{"city": "string", "days": "integer", "unit": "string", "verbose": "boolean", "opts": "object"}}}

// cases are strings the families' models really write, each with its source.
// Where vLLM documents its parser's answer for the string (its parser tests),
// want is that answer: arguments as json.dumps(..., ensure_ascii=False).
var cases = []tc{
	// Hermes / Qwen2.5 / Qwen3.
	{name: "hermes one call", tool: "hermes",
		src:  "Qwen2.5 chat template (tool_call JSON block); vLLM tests/tool_use/test_hermes_tool_parser.py",
		in:   "<tool_call>\n{\"name\": \"get_current_temperature\", \"arguments\": {\"location\": \"Paris, France\", \"unit\": \"celsius\"}}\n</tool_call>",
		want: Result{Calls: []ToolCall{call("get_current_temperature", `{"location": "Paris, France", "unit": "celsius"}`)}}},
	{name: "hermes content then two calls", tool: "hermes",
		src:  "Qwen2.5 function-calling docs (parallel calls after a sentence)",
		in:   "Let me check both.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Tōkyō\"}}\n</tool_call>",
		want: Result{Content: "Let me check both.\n", Calls: []ToolCall{call("get_weather", `{"city": "Paris"}`), call("get_weather", `{"city": "Tōkyō"}`)}}},
	{name: "hermes compact JSON re-serialized", tool: "hermes",
		src:  "Hermes-2-Pro model card (arguments written compact)",
		in:   `<tool_call>{"arguments":{"symbol":"TSLA","n":[1,2.5,{"a":null}]},"name":"get_stock_fundamentals"}</tool_call>`,
		want: Result{Calls: []ToolCall{call("get_stock_fundamentals", `{"symbol": "TSLA", "n": [1, 2.5, {"a": null}]}`)}}},
	{name: "hermes malformed JSON is content", tool: "hermes",
		src:  "vLLM tests/tool_use/test_hermes_tool_parser.py (invalid JSON stays text)",
		in:   "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": }\n</tool_call>",
		want: Result{Content: "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": }\n</tool_call>"}},
	{name: "hermes marker in a code block is content", tool: "hermes",
		src:  "issue 35: a <tool_call> inside a code block",
		in:   "Write it like this:\n```\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>\n```\nDone.",
		want: Result{Content: "Write it like this:\n```\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>\n```\nDone."}},
	{name: "hermes unclosed at the end", tool: "hermes",
		src:  "vLLM hermes parser regex `<tool_call>(.*?)</tool_call>|<tool_call>(.*)` (EOS before the closing tag)",
		in:   "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n",
		want: Result{Calls: []ToolCall{call("get_weather", `{"city": "Paris"}`)}}},
	{name: "plain text", tool: "hermes", src: "no call", in: "The weather is <b>nice</b> today, a < b.",
		want: Result{Content: "The weather is <b>nice</b> today, a < b."}},
	// Qwen3 with reasoning.
	{name: "qwen3 think then call", tool: "hermes", reasoning: "qwen3",
		src:  "Qwen3 model card (thinking mode: <think>…</think> then the answer); vLLM tests/reasoning/test_qwen3_reasoning_parser.py",
		in:   "<think>\nThe user wants the weather.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
		want: Result{Reasoning: "\nThe user wants the weather.\n", Content: "\n\n", Calls: []ToolCall{call("get_weather", `{"city": "Paris"}`)}}},
	{name: "qwen3 no thinking", reasoning: "qwen3",
		src: "Qwen3 model card (enable_thinking=False: the template writes an empty think block, the reply has none)",
		in:  "Paris is the capital of France.", want: Result{Content: "Paris is the capital of France."}},
	{name: "qwen3 thinking-2507 prompt opens the block", reasoning: "qwen3", opens: true,
		src: "Qwen3-*-Thinking-2507 model card (the template writes <think>, the reply has only </think>)",
		in:  "I should add.\n</think>\n\n2", want: Result{Reasoning: "I should add.\n", Content: "\n\n2"}},
	// vLLM tests/reasoning/test_qwen3_reasoning_parser.py: with_think,
	// multiline_reasoning, complete_reasoning, only_open_tag,
	// tool_call_with_think_no_end; vLLM's answers.
	{name: "vllm qwen3 with_think", reasoning: "qwen3", src: "vLLM tests/reasoning/test_qwen3_reasoning_parser.py WITH_THINK",
		in: "<think>This is a reasoning section</think>This is the rest", want: Result{Reasoning: "This is a reasoning section", Content: "This is the rest"}},
	{name: "vllm qwen3 multiline", reasoning: "qwen3", src: "vLLM tests/reasoning/test_qwen3_reasoning_parser.py MULTILINE_REASONING",
		in: "<think>This is a reasoning\nsection</think>This is the rest\nThat", want: Result{Reasoning: "This is a reasoning\nsection", Content: "This is the rest\nThat"}},
	{name: "vllm qwen3 complete reasoning", reasoning: "qwen3", src: "vLLM tests/reasoning/test_qwen3_reasoning_parser.py COMPLETE_REASONING (content None)",
		in: "<think>This is a reasoning section</think>", want: Result{Reasoning: "This is a reasoning section"}},
	{name: "vllm qwen3 only open tag", reasoning: "qwen3", src: "vLLM tests/reasoning/test_qwen3_reasoning_parser.py ONLY_OPEN_TAG (truncated: all reasoning)",
		in: "<think>This is a reasoning section", want: Result{Reasoning: "This is a reasoning section"}},
	{name: "vllm qwen3 tool call ends reasoning", reasoning: "qwen3", src: "vLLM tests/reasoning/test_qwen3_reasoning_parser.py TOOL_CALL_WITH_THINK_NO_END",
		in:   "<think>I need to read the file.\n\n<tool_call>\n<function=bash>\n<parameter=command>\ncat /etc/hosts\n</parameter>\n</function>\n</tool_call>",
		want: Result{Reasoning: "I need to read the file.\n\n", Content: "<tool_call>\n<function=bash>\n<parameter=command>\ncat /etc/hosts\n</parameter>\n</function>\n</tool_call>"}},
	{name: "vllm qwen3 tool call then parsed", tool: "qwen3_coder", reasoning: "qwen3", src: "the same reply with vLLM's qwen3_coder parser after the reasoning parser",
		in:   "<think>I need to read the file.\n\n<tool_call>\n<function=bash>\n<parameter=command>\ncat /etc/hosts\n</parameter>\n</function>\n</tool_call>",
		want: Result{Reasoning: "I need to read the file.\n\n", Calls: []ToolCall{call("bash", `{"command": "cat /etc/hosts"}`)}}},
	// Qwen3-Coder XML.
	{name: "qwen3-coder call", tool: "qwen3_coder", tools: weatherTools,
		src:  "Qwen3-Coder chat template; vLLM tests/tool_use/test_qwen3coder_tool_parser.py (typed by the schema)",
		in:   "I'll check.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nDallas\n</parameter>\n<parameter=days>\n3\n</parameter>\n<parameter=verbose>\ntrue\n</parameter>\n<parameter=opts>\n{\"a\": [1]}\n</parameter>\n</function>\n</tool_call>",
		want: Result{Content: "I'll check.\n", Calls: []ToolCall{call("get_weather", `{"city": "Dallas", "days": 3, "verbose": true, "opts": {"a": [1]}}`)}}},
	{name: "qwen3-coder multi-line string", tool: "qwen3_coder", tools: []Tool{{Name: "write_file", Params: map[string]string{"path": "string", "content": "string"}}},
		src:  "Qwen3-Coder chat template (values are raw text: code keeps its newlines and quotes)",
		in:   "<tool_call>\n<function=write_file>\n<parameter=path>\na.py\n</parameter>\n<parameter=content>\nprint(\"hi\")\nx = '\\\\'\n</parameter>\n</function>\n</tool_call>",
		want: Result{Calls: []ToolCall{call("write_file", `{"path": "a.py", "content": "print(\"hi\")\nx = '\\\\'"}`)}}},
	// Llama 3.x.
	{name: "llama3 JSON", tool: "llama3_json",
		src:  "Llama 3.1 model card (JSON tool calling: {\"name\", \"parameters\"}); vLLM tests/entrypoints/openai/tool_parsers/test_llama3_json_tool_parser.py",
		in:   `{"name": "get_weather", "parameters": {"city": "San Francisco", "metric": "celsius"}}`,
		want: Result{Calls: []ToolCall{call("get_weather", `{"city": "San Francisco", "metric": "celsius"}`)}}},
	{name: "llama3 python_tag two calls", tool: "llama3_json",
		src:  "Llama 3.1 prompt format (<|python_tag|>); vLLM llama3_json (calls joined by \"; \")",
		in:   `<|python_tag|>{"name": "searchCVE", "parameters": {"cve": "CVE-2024-1234"}}; {"name": "get_weather", "parameters": {}}`,
		want: Result{Calls: []ToolCall{call("searchCVE", `{"cve": "CVE-2024-1234"}`), call("get_weather", `{}`)}}},
	{name: "llama3 text is content", tool: "llama3_json", src: "a plain answer", in: "Hello! {\"name\" is a key}",
		want: Result{Content: "Hello! {\"name\" is a key}"}},
	{name: "llama3 brace that is no call", tool: "llama3_json", src: "malformed JSON at the start stays text", in: "{not json} ok",
		want: Result{Content: "{not json} ok"}},
	// Mistral.
	{name: "mistral v3 list", tool: "mistral",
		src:  "Mistral-7B-Instruct-v0.3 model card; vLLM tests/tool_use/test_mistral_tool_parser.py",
		in:   `[TOOL_CALLS] [{"name": "get_current_weather", "arguments": {"location": "Paris, France", "format": "celsius"}}]`,
		want: Result{Calls: []ToolCall{call("get_current_weather", `{"location": "Paris, France", "format": "celsius"}`)}}},
	{name: "mistral v11 name[ARGS]", tool: "mistral",
		src:  "Mistral tokenizer v11 (Magistral, Mistral-Small-3.2: [TOOL_CALLS]name[ARGS]{...}); vLLM mistral parser",
		in:   `Sure.[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]get_time[ARGS]{"tz": "CET"}`,
		want: Result{Content: "Sure.", Calls: []ToolCall{call("get_weather", `{"city": "Paris"}`), call("get_time", `{"tz": "CET"}`)}}},
	// DeepSeek.
	{name: "deepseek v3", tool: "deepseek_v3",
		src:  "DeepSeek-V3 chat template (function<｜tool▁sep｜>name + ```json block); vLLM deepseek_v3 parser",
		in:   "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"location\": \"Tokyo\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
		want: Result{Calls: []ToolCall{call("get_weather", `{"location": "Tokyo"}`)}}},
	{name: "deepseek v3.1 two calls", tool: "deepseek_v31",
		src:  "DeepSeek-V3.1 model card (tool call format: name<｜tool▁sep｜>arguments); vLLM tests/tool_use/test_deepseekv31_tool_parser.py",
		in:   "Checking.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>foo<｜tool▁sep｜>{\"x\":1}<｜tool▁call▁end｜><｜tool▁call▁begin｜>bar<｜tool▁sep｜>{\"y\":2}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
		want: Result{Content: "Checking.", Calls: []ToolCall{call("foo", `{"x":1}`), call("bar", `{"y":2}`)}}},
	{name: "deepseek r1 reasoning then answer", reasoning: "deepseek_r1",
		src:  "DeepSeek-R1 model card (the template writes <think>\\n; the reply closes it); vLLM tests/reasoning/test_deepseekr1_reasoning_parser.py",
		in:   "This is a reasoning section</think>This is the rest",
		want: Result{Reasoning: "This is a reasoning section", Content: "This is the rest"}},
	{name: "deepseek r1 unfinished reasoning", reasoning: "deepseek_r1",
		src: "vLLM tests/reasoning/test_deepseekr1_reasoning_parser.py (no </think>: all reasoning)",
		in:  "This is a reasoning section", want: Result{Reasoning: "This is a reasoning section"}},
	// gpt-oss harmony.
	{name: "harmony analysis then call", tool: "openai", reasoning: "gpt_oss",
		src:  "OpenAI harmony response format guide (function calling)",
		in:   "<|channel|>analysis<|message|>Need to use function get_weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"location\":\"San Francisco\"}<|call|>",
		want: Result{Reasoning: "Need to use function get_weather.", Calls: []ToolCall{call("get_weather", `{"location":"San Francisco"}`)}}},
	{name: "harmony final answer", tool: "openai", reasoning: "gpt_oss",
		src:  "OpenAI harmony response format guide (analysis then final)",
		in:   "<|channel|>analysis<|message|>User asks 2+2.<|end|><|start|>assistant<|channel|>final<|message|>2 + 2 = 4.<|return|>",
		want: Result{Reasoning: "User asks 2+2.", Content: "2 + 2 = 4."}},
	{name: "harmony recipient in the role", tool: "openai", reasoning: "gpt_oss",
		src:  "OpenAI harmony guide (recipient may follow the role: <|start|>assistant to=functions.x<|channel|>commentary json)",
		in:   "<|start|>assistant to=functions.lookup<|channel|>commentary json<|message|>{\"q\": \"x\"}<|call|>",
		want: Result{Calls: []ToolCall{call("lookup", `{"q": "x"}`)}}},
	// Kimi K2.
	{name: "kimi k2 call", tool: "kimi_k2",
		src:  "Kimi-K2-Instruct docs/tool_call_guidance.md; vLLM tests/tool_use/test_kimi_k2_tool_parser.py (id is functions.NAME:IDX)",
		in:   "I'll look.<|tool_calls_section_begin|>\n<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Beijing\"}<|tool_call_end|>\n<|tool_calls_section_end|>",
		want: Result{Content: "I'll look.", Calls: []ToolCall{{ID: "functions.get_weather:0", Name: "get_weather", Arguments: `{"city": "Beijing"}`}}}},
	{name: "vllm kimi k2 two calls", tool: "kimi_k2",
		src: "vLLM tests/tool_use/test_kimi_k2_tool_parser.py multi_tool_call_with_content_before (vLLM's answer)",
		in:  "I'll help you check the weather. <|tool_calls_section_begin|> <|tool_call_begin|>\nfunctions.get_weather:0 <|tool_call_argument_begin|> {\"city\": \"Beijing\"} <|tool_call_end|> <|tool_call_begin|>\nfunctions.get_weather:1 <|tool_call_argument_begin|> {\"city\": \"Shanghai\"} <|tool_call_end|> <|tool_calls_section_end|>",
		want: Result{Content: "I'll help you check the weather. ", Calls: []ToolCall{
			{ID: "functions.get_weather:0", Name: "get_weather", Arguments: `{"city": "Beijing"}`},
			{ID: "functions.get_weather:1", Name: "get_weather", Arguments: `{"city": "Shanghai"}`}}}},
	{name: "vllm kimi k2 newlines in json", tool: "kimi_k2",
		src:  "vLLM tests/tool_use/test_kimi_k2_tool_parser.py newlines_in_json (arguments kept as written)",
		in:   "I need to process formatted JSON. <|tool_calls_section_begin|><|tool_call_begin|>functions.process_data:0<|tool_call_argument_begin|>{\n  \"name\": \"test\",\n  \"value\": 123\n}<|tool_call_end|><|tool_calls_section_end|>",
		want: Result{Content: "I need to process formatted JSON. ", Calls: []ToolCall{{ID: "functions.process_data:0", Name: "process_data", Arguments: "{\n  \"name\": \"test\",\n  \"value\": 123\n}"}}}},
	{name: "vllm kimi k2 invalid json is content", tool: "kimi_k2",
		src:  "vLLM tests/tool_use/test_kimi_k2_tool_parser.py invalid_json (vLLM returns the broken call; Tandem keeps the section as text, issue 35)",
		in:   "Check. <|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{\"city\": \"Beijing\" <|tool_call_end|><|tool_calls_section_end|>",
		want: Result{Content: "Check. <|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{\"city\": \"Beijing\" <|tool_call_end|><|tool_calls_section_end|>"}},
	// GLM-4.5.
	{name: "glm45 call", tool: "glm45", tools: weatherTools,
		src:  "GLM-4.5 chat template (<arg_key>/<arg_value>); vLLM tests/tool_use/test_glm4_moe_tool_parser.py",
		in:   "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Beijing</arg_value>\n<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n</tool_call>",
		want: Result{Calls: []ToolCall{call("get_weather", `{"city": "Beijing", "days": 2}`)}}},
	{name: "glm45 reasoning and call", tool: "glm45", reasoning: "qwen3", tools: weatherTools,
		src:  "GLM-4.5 model card (thinking <think>…</think>, vLLM --reasoning-parser glm45)",
		in:   "<think>weather</think>\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Oslo</arg_value>\n</tool_call>",
		want: Result{Reasoning: "weather", Content: "\n", Calls: []ToolCall{call("get_weather", `{"city": "Oslo"}`)}}},
	// Pythonic.
	{name: "pythonic two calls", tool: "pythonic",
		src:  "vLLM tool calling docs (pythonic: Llama 3.2 / Llama 4); vLLM tests/entrypoints/openai/tool_parsers/test_pythonic_tool_parser.py",
		in:   "[get_weather(city='San Francisco', metric='celsius'), get_weather(city='Seattle', metric='celsius')]",
		want: Result{Calls: []ToolCall{call("get_weather", `{"city": "San Francisco", "metric": "celsius"}`), call("get_weather", `{"city": "Seattle", "metric": "celsius"}`)}}},
	{name: "pythonic literals", tool: "pythonic",
		src:  "vLLM tests/entrypoints/openai/tool_parsers/test_pythonic_tool_parser.py (lists, dicts, booleans, None)",
		in:   "[register_user(name='John Doe', age=37, address={'city': 'San Francisco', 'state': 'CA'}, role=None, passed_test=True, aliases=['John', 'Johnny'])]",
		want: Result{Calls: []ToolCall{call("register_user", `{"name": "John Doe", "age": 37, "address": {"city": "San Francisco", "state": "CA"}, "role": null, "passed_test": true, "aliases": ["John", "Johnny"]}`)}}},
	{name: "pythonic list that is no call", tool: "pythonic", src: "a Markdown list reference", in: "[1] see the note",
		want: Result{Content: "[1] see the note"}},
	// Granite and Kimi reasoning.
	{name: "granite reasoning", reasoning: "granite",
		src:  "Granite 3.2 model card (thinking=True); vLLM tests/reasoning/test_granite_reasoning_parser.py",
		in:   "Here is my thought process:This is a reasoning section\nHere is my response:This is the rest",
		want: Result{Reasoning: "This is a reasoning section\n", Content: "This is the rest"}},
	{name: "kimi thinking", reasoning: "kimi",
		src: "Kimi-VL-A3B-Thinking model card (◁think▷…◁/think▷)",
		in:  "◁think▷Look at the image.◁/think▷A cat.", want: Result{Reasoning: "Look at the image.", Content: "A cat."}},
}

func opts(c tc) Options {
	return Options{ToolParser: c.tool, ReasoningParser: c.reasoning, Tools: c.tools, PromptOpensReasoning: c.opens, NewID: seqID()}
}

// norm fills generated ids the way seqID makes them.
func fillIDs(r Result) Result {
	for i := range r.Calls {
		if r.Calls[i].ID == "" {
			r.Calls[i].ID = fmt.Sprintf("call_%d", i+1)
		}
	}
	if len(r.Calls) == 0 {
		r.Calls = nil
	}
	return r
}

func TestParseFamilies(t *testing.T) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Parse(opts(c), c.in)
			if err != nil {
				t.Fatal(err)
			}
			if want := fillIDs(c.want); !reflect.DeepEqual(fillIDs(got), want) {
				t.Fatalf("source: %s\n got %#v\nwant %#v", c.src, fillIDs(got), want)
			}
		})
	}
}

// streamed feeds pieces and collects; it also checks the delta shape: a
// call's first delta has its id and name, later ones only arguments.
func streamed(t *testing.T, o Options, pieces ...string) Result {
	t.Helper()
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	var c Collector
	seen := map[int]bool{}
	check := func(out Out) {
		for _, d := range out.Calls {
			if !seen[d.Index] {
				if d.ID == "" || d.Name == "" {
					t.Fatalf("call %d starts without id and name: %+v", d.Index, d)
				}
				if d.Index != len(seen) {
					t.Fatalf("call index %d after %d calls", d.Index, len(seen))
				}
				seen[d.Index] = true
			} else if d.ID != "" || d.Name != "" {
				t.Fatalf("call %d repeats its id or name: %+v", d.Index, d)
			}
		}
		c.Add(out)
	}
	for _, p := range pieces {
		check(s.Feed(p))
	}
	check(s.Flush())
	return c.Result
}

// TestStreamEveryByteBoundary: every case, split in two at every byte and
// fed one byte at a time, parses as the whole reply does.
func TestStreamEveryByteBoundary(t *testing.T) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want := fillIDs(c.want)
			for i := 0; i <= len(c.in); i++ {
				if got := fillIDs(streamed(t, opts(c), c.in[:i], c.in[i:])); !reflect.DeepEqual(got, want) {
					t.Fatalf("split at %d (%q|%q):\n got %#v\nwant %#v", i, c.in[:i], c.in[i:], got, want)
				}
			}
			bytes := make([]string, len(c.in))
			for i := 0; i < len(c.in); i++ {
				bytes[i] = c.in[i : i+1]
			}
			if got := fillIDs(streamed(t, opts(c), bytes...)); !reflect.DeepEqual(got, want) {
				t.Fatalf("byte by byte:\n got %#v\nwant %#v", got, want)
			}
		})
	}
}

// TestStreamHoldsOnlyPartialMarkers: in plain text a stream releases
// everything but a suffix that may still begin a marker.
func TestStreamHoldsOnlyPartialMarkers(t *testing.T) {
	text := "Some text with < signs, [brackets], <tool and `code` but no call<tool_"
	for _, tool := range []string{"hermes", "qwen3_coder", "glm45", "mistral", "deepseek_v3", "kimi_k2"} {
		s, err := New(Options{ToolParser: tool, NewID: seqID()})
		if err != nil {
			t.Fatal(err)
		}
		released := 0
		for i := 0; i < len(text); i++ {
			out := s.Feed(text[i : i+1])
			released += len(out.Content)
			f := newToolParser(tool, Options{}).(*sectionParser).f
			hold := partialSuffix(text[:i+1], append(f.starts, fence))
			if released != i+1-hold {
				t.Fatalf("%s: after %q released %d bytes, want %d", tool, text[:i+1], released, i+1-hold)
			}
		}
	}
}

func TestDetect(t *testing.T) {
	for _, c := range []struct{ src, tool, reasoning string }{
		{"{{- '<tool_call>\\n{\"name\": \"' }}{%- if enable_thinking is defined %}<think>\n\n</think>{% endif %}", "hermes", "qwen3"},
		{"<tool_call>\n<function=' + tool_call.name + '>\n<parameter=", "qwen3_coder", ""},
		{"<|start|>assistant<|channel|>final<|message|>", "openai", "gpt_oss"},
		{"<｜Assistant｜><｜tool▁calls▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + '```json' <think>\n", "deepseek_v3", "deepseek_r1"},
		{"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>'+ tool['function']['name'] + '<｜tool▁sep｜>", "deepseek_v31", ""},
		{"<|tool_calls_section_begin|>", "kimi_k2", ""},
		{"<tool_call>{{ tc.name }}<arg_key>", "glm45", ""},
		{"[TOOL_CALLS]", "mistral", ""},
		{"<|python_tag|>", "llama3_json", ""},
		{"Here is my thought process:", "", "granite"},
		{"plain {{ message.content }}", "", ""},
	} {
		tool, r := Detect(c.src)
		if tool != c.tool || r != c.reasoning {
			t.Errorf("Detect(%q) = %q, %q; want %q, %q", c.src, tool, r, c.tool, c.reasoning)
		}
	}
}

func TestNames(t *testing.T) {
	for _, n := range append(ToolParsers, "qwen3-coder", "llama3", "gpt-oss", "deepseek_r1") {
		if _, err := CanonicalTool(n); err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
	for _, n := range append(ReasoningParsers, "gpt-oss", "deepseek-r1", "openai_gptoss") {
		if _, err := CanonicalReasoning(n); err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
	if _, err := CanonicalTool("nope"); err == nil || !strings.Contains(err.Error(), "hermes") {
		t.Errorf("unknown name: %v", err)
	}
	if _, err := New(Options{ToolParser: "mistral"}); err != nil {
		t.Fatal(err)
	}
}

// FuzzStream: any reply, split anywhere, never panics, loses no text that
// is not part of a call, and parses as the whole reply does.
func FuzzStream(f *testing.F) {
	for _, c := range cases {
		f.Add(c.tool, c.reasoning, c.in, uint16(len(c.in)/2))
	}
	f.Fuzz(func(t *testing.T, tool, reasoning, in string, cut uint16) {
		tool, err := CanonicalTool(tool)
		if err != nil {
			return
		}
		reasoning, err = CanonicalReasoning(reasoning)
		if err != nil {
			return
		}
		o := Options{ToolParser: tool, ReasoningParser: reasoning, Tools: weatherTools}
		o.NewID = seqID()
		whole, err := Parse(o, in)
		if err != nil {
			t.Fatal(err)
		}
		i := int(cut) % (len(in) + 1)
		o.NewID = seqID()
		got := streamed(t, o, in[:i], in[i:])
		if !reflect.DeepEqual(fillIDs(got), fillIDs(whole)) {
			t.Fatalf("split at %d:\n got %#v\nwant %#v", i, got, whole)
		}
		if len(whole.Calls) == 0 && reasoning == "" && tool != "openai" && strings.TrimSpace(whole.Content) != strings.TrimSpace(in) {
			t.Fatalf("no call, yet the content %q is not the reply %q", whole.Content, in)
		}
		if utf8.ValidString(in) && (!utf8.ValidString(whole.Content) || !utf8.ValidString(whole.Reasoning)) {
			t.Fatalf("split a rune")
		}
	})
}
