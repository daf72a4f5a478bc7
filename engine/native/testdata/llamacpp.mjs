// llamacpp.mjs runs a GGUF file in llama.cpp, as node-llama-cpp ships it
// (prebuilt libllama, CPU backend), for Tandem's comparison test and
// benchmark. It reads one JSON request on stdin and writes one JSON reply
// on stdout:
//
//   {"model": "/path/x.gguf", "threads": 2,
//    "tokenize": ["text", ...],          -> "tokens": [[id, ...], ...]
//    "prompt": [id, ...], "generate": 64, -> "greedy": [id, ...]
//    "probs": 16,                         -> "probs": [[[id, p], ...], ...]
//                                            top-16 next-token probabilities
//                                            (temperature 1, no truncation)
//                                            after the prompt and each greedy token
//    "kv": "F32",                         KV cache type (default F16)
//    "bench": {"prompt": 512, "decode": 64, "reps": 1}}
//                                         -> "bench": {"prefill_tps", "decode_tps"}
//    (every reply)                        -> "cpu": "sapphirerapids", the
//                                            libggml-cpu-<variant>.so loaded
//
// The module is loaded from $NODE_LLAMA_CPP_DIR/node_modules (installed by
// scripts/install-node-llama-cpp.sh), never from the repository.
// API: https://node-llama-cpp.withcat.ai/api (getLlama, loadModel,
// createContext, LlamaContextSequence.evaluate / evaluateWithMetadata).
import { pathToFileURL } from "node:url";
import { readFileSync } from "node:fs";
import path from "node:path";

const dir = process.env.NODE_LLAMA_CPP_DIR;
if (!dir) {
  console.error("NODE_LLAMA_CPP_DIR is not set");
  process.exit(2);
}
const { getLlama, LlamaLogLevel } = await import(
  pathToFileURL(path.join(dir, "node_modules", "node-llama-cpp", "dist", "index.js")).href
);

let input = "";
for await (const chunk of process.stdin) input += chunk;
const req = JSON.parse(input);

// gpu: false and build: "never": the prebuilt CPU binaries, nothing
// compiled or downloaded at test time.
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
// ggml has now loaded one libggml-cpu-<variant>.so, the best-scoring for
// this CPU (or the one the test pinned, TANDEM_LLAMACPP_CPU in
// llamacpp_test.go); the memory maps name it without raising the log level.
let maps = "";
try { maps = readFileSync("/proc/self/maps", "utf8"); } catch {}
const cpu = (maps.match(/libggml-cpu-([\w-]+)\.so/) ?? [])[1] ?? "";
const model = await llama.loadModel({ modelPath: req.model, gpuLayers: 0 });
const threads = req.threads ?? 1;
const out = { cpu };

if (req.tokenize) {
  // specialTokens=false: special-token text is plain text, and no BOS is
  // added (llama_tokenize with add_special=false, parse_special=false).
  out.tokens = req.tokenize.map((s) => Array.from(model.tokenize(s, false)));
  out.detok = out.tokens.map((t) => model.detokenize(t, false));
}

// "kv": "F32" keeps llama.cpp's KV cache in fp32 as Tandem's is (the
// comparison test); the default, F16, is what users run (the benchmark).
const kv = req.kv ? { experimentalKvCacheKeyType: req.kv, experimentalKvCacheValueType: req.kv } : {};
const newSeq = async (size) => {
  const ctx = await model.createContext({ contextSize: size, batchSize: size, threads, sequences: 1, ...kv });
  return { ctx, seq: ctx.getSequence() };
};

if (req.prompt) {
  const n = req.generate ?? 0;
  const { ctx, seq } = await newSeq(Math.max(256, req.prompt.length + n + 8));
  out.greedy = [];
  out.probs = [];
  const topk = req.probs ?? 0;
  // temperature 1 with top-k, top-p and min-p off: the probabilities are
  // the softmax of the raw logits; the token is then taken greedily from
  // them (the highest probability), as temperature 0 would.
  const gen = seq.evaluateWithMetadata(req.prompt, { probabilities: topk > 0 }, {
    temperature: topk > 0 ? 1 : 0, topK: 0, topP: 1, minP: 0, seed: 1, yieldEogToken: true,
  });
  let r = await gen.next();
  while (!r.done && out.greedy.length < n) {
    let tok = r.value.token;
    if (topk > 0) {
      const top = Array.from(r.value.probabilities.entries()).slice(0, topk);
      out.probs.push(top);
      tok = top[0][0];
    }
    out.greedy.push(tok);
    if (out.greedy.length >= n) break;
    r = await gen.next(tok);
  }
  await gen.return();
  await ctx.dispose();
}

if (req.bench) {
  const { prompt = 512, decode = 64, reps = 1 } = req.bench;
  const toks = [];
  for (let i = 0; i < prompt; i++) toks.push(3 + ((i * 7919) % 200));
  let best = { prefill_tps: 0, decode_tps: 0 };
  for (let r = 0; r < reps; r++) {
    const { ctx, seq } = await newSeq(prompt + decode + 16);
    let t0 = performance.now();
    // evaluateWithoutGeneratingNewTokens runs the prompt as batches of
    // batchSize tokens (one llama_decode for 512).
    await seq.evaluateWithoutGeneratingNewTokens(toks);
    const pre = performance.now() - t0;
    let n = 0;
    t0 = performance.now();
    for await (const _ of seq.evaluate([toks[prompt - 1]], { temperature: 0 })) {
      if (++n >= decode) break;
    }
    const dec = performance.now() - t0;
    best.prefill_tps = Math.max(best.prefill_tps, (prompt * 1000) / pre);
    best.decode_tps = Math.max(best.decode_tps, (n * 1000) / dec);
    await ctx.dispose();
  }
  out.bench = best;
}

await model.dispose();
await llama.dispose();
process.stdout.write(JSON.stringify(out) + "\n");
