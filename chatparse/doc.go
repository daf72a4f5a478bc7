// Package chatparse splits what a chat model writes into the parts of an
// OpenAI chat message: reasoning (`reasoning_content`), content, and tool
// calls (`tool_calls`), per model family, both for a whole reply and
// incrementally for a stream of text deltas.
//
// Tandem tokenizes in the frontend and sends token ids to the engines, so
// the engines' own OpenAI servers never see the text: the parsing lives
// here, once for every engine. Families and their names follow vLLM's
// --tool-call-parser and --reasoning-parser choices (hermes, qwen3_coder,
// llama3_json, mistral, deepseek_v3, deepseek_v31, openai (gpt-oss
// harmony), kimi_k2, glm45, pythonic; deepseek_r1, qwen3, gpt-oss, granite,
// kimi), and Detect picks them from a chat template's source.
//
// Rules every parser keeps:
//   - text that only looks like a call (a marker inside a ``` code block,
//     a body that does not decode) comes back as content, never dropped;
//   - a stream holds back only what may still turn out to be a marker (a
//     proper prefix of one at the end of the text so far), or a call whose
//     closing marker has not come yet;
//   - a call's deltas give its index, id and name first, then its
//     arguments, as OpenAI streams them;
//   - arguments are what vLLM's parser of the family returns: re-serialized
//     as json.dumps(..., ensure_ascii=False) writes them (", " and ": "
//     separators, key order kept) for hermes, llama3_json, mistral,
//     pythonic and the XML families, the model's own text (checked to be a
//     JSON object) for deepseek, kimi_k2 and harmony.
//
// The package is pure: no I/O; ids come from crypto/rand unless
// Options.NewID gives them.
package chatparse
