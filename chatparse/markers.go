package chatparse

// Markers lists the marker strings the named parsers read. Some are
// special tokens that a server dropping special tokens from the text
// (skip_special_tokens) would hide from the parser: Mistral's
// [TOOL_CALLS], Llama's <|python_tag|>, harmony's channel tokens. The
// frontend keeps exactly these in the text it parses.
func Markers(tool, reasoning string) []string {
	var m []string
	tn, _ := CanonicalTool(tool)
	rn, _ := CanonicalReasoning(reasoning)
	switch tn {
	case "hermes", "qwen3_coder", "glm45":
		m = append(m, "<tool_call>", "</tool_call>")
	case "llama3_json":
		m = append(m, "<|python_tag|>")
	case "pythonic":
		m = append(m, "<|python_start|>", "<|python_end|>")
	case "mistral":
		m = append(m, "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]")
	case "deepseek_v3", "deepseek_v31":
		m = append(m, dsCallsBegin, dsCallsEnd, dsCallBegin, dsCallEnd, dsSep)
	case "kimi_k2":
		m = append(m, kimiSectionBegin, kimiSectionEnd, kimiCallBegin, kimiArgBegin, kimiCallEnd)
	}
	if tn == "openai" || rn == "gpt_oss" {
		m = append(m, hStart, hChannel, hMessage, "<|constrain|>", "<|end|>", "<|call|>", "<|return|>")
	}
	switch rn {
	case "deepseek_r1", "qwen3":
		m = append(m, "<think>", "</think>")
	case "kimi":
		m = append(m, "<think>", "</think>", "◁think▷", "◁/think▷")
	}
	return m
}
