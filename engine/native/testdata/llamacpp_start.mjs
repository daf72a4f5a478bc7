// llamacpp_start.mjs loads a GGUF file in llama.cpp as node-llama-cpp
// ships it (prebuilt libllama, CPU backend, its defaults: the file
// memory-mapped, an F16 KV cache) and creates N contexts of C tokens,
// then prints one JSON line: how long the process took to get there and
// its memory, for docs/benchmarks.md's start-up and memory comparison
// with the native engine (issue 38). node-llama-cpp ships no llama-server
// binary; its loadModel and createContext are llama-server's start-up
// (llama_model_load_from_file, llama_init_from_model).
//
//   NODE_LLAMA_CPP_DIR=~/.cache/tandem/node-llama-cpp-3.21.1 \
//     node engine/native/testdata/llamacpp_start.mjs MODEL.gguf CONTEXTS TOKENS
//
// -> {"ready_s": ..., "rss": ..., "rss_anon": ..., "rss_file": ...} (bytes;
// ready_s from the process's start, performance.now()).
import { pathToFileURL } from "node:url";
import { readFileSync } from "node:fs";
import path from "node:path";

const dir = process.env.NODE_LLAMA_CPP_DIR;
if (!dir) {
  console.error("NODE_LLAMA_CPP_DIR is not set");
  process.exit(2);
}
const [modelPath, contexts = "1", tokens = "4096"] = process.argv.slice(2);
const { getLlama, LlamaLogLevel } = await import(
  pathToFileURL(path.join(dir, "node_modules", "node-llama-cpp", "dist", "index.js")).href
);
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
const model = await llama.loadModel({ modelPath, gpuLayers: 0 });
const ctxs = [];
for (let i = 0; i < Number(contexts); i++) {
  ctxs.push(await model.createContext({ contextSize: Number(tokens), sequences: 1 }));
}
const ready = performance.now() / 1000;
const status = readFileSync("/proc/self/status", "utf8");
const kb = (k) => Number((status.match(new RegExp(`^${k}:\\s+(\\d+)`, "m")) ?? [0, 0])[1]) * 1024;
console.log(JSON.stringify({ ready_s: ready, contexts: ctxs.length, context_size: ctxs[0]?.contextSize,
  rss: kb("VmRSS"), rss_anon: kb("RssAnon"), rss_file: kb("RssFile") }));
process.exit(0);
