package chatparse

import "strings"

// Detect names the tool-call and reasoning parsers a chat template's source
// implies ("" where it implies none): each family's template writes its own
// call markers into the prompt when it renders an assistant's tool calls,
// and its own reasoning tags.
func Detect(template string) (tool, reasoning string) {
	has := func(s ...string) bool {
		for _, x := range s {
			if !strings.Contains(template, x) {
				return false
			}
		}
		return true
	}
	switch {
	case has("<|channel|>", "<|message|>"):
		return "openai", "gpt_oss"
	case has(dsCallsBegin):
		tool = "deepseek_v31"
		if has("```json") {
			tool = "deepseek_v3"
		}
	case has("<|tool_calls_section_begin|>") || has("<|tool_call_section_begin|>"):
		tool = "kimi_k2"
	case has("<function=", "<parameter="):
		tool = "qwen3_coder"
	case has("<arg_key>"):
		tool = "glm45"
	case has("<tool_call>"):
		tool = "hermes"
	case has("[TOOL_CALLS]"):
		tool = "mistral"
	case has("[func_name1("):
		tool = "pythonic"
	case has("<|python_tag|>") || has("<|eot_id|>", `"parameters"`):
		tool = "llama3_json"
	}
	switch {
	case has("Here is my thought process:"):
		reasoning = "granite"
	case has("◁think▷"):
		reasoning = "kimi"
	case has("<think>") && (tool == "deepseek_v3" || tool == "deepseek_v31" || has("<｜Assistant｜>")):
		reasoning = "deepseek_r1"
	case has("<think>") && tool == "kimi_k2":
		reasoning = "kimi"
	case has("</think>"):
		reasoning = "qwen3"
	}
	return tool, reasoning
}
