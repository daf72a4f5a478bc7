// Package tokenizer turns text into token ids and back, and renders chat
// requests into prompt text, for every model Tandem serves.
//
// It owns:
//
//   - the Tokenizer interface and its two backends: byte-level BPE
//     (Hugging Face tokenizer.json for Qwen/GPT-2/Llama-3 style models,
//     llama.cpp "gpt2" vocabularies, and OpenAI's o200k_base for the built-in
//     mock model) and SentencePiece-score BPE (llama2.c tokenizer.bin files
//     and llama.cpp "llama" vocabularies);
//   - the incremental Detokenizer, which streams text without ever emitting a
//     broken UTF-8 sequence;
//   - ChatTemplate, which renders OpenAI-style messages with the model's own
//     Jinja template (github.com/ardanlabs/jinja), keeping JSON key order so
//     that tool definitions serialise byte-for-byte like Hugging Face;
//   - Model, Default (the built-in "tandem-mock" model) and LoadDir (a
//     Hugging Face or llama2.c model directory).
//
// Why it exists as one package: the frontend, the router (which hashes token
// blocks) and the native engine must all agree on token ids, so they share a
// single implementation whose output is pinned to Hugging Face's by golden
// fixtures (testdata/) rather than each linking a different library. The
// hot paths (Encode of a short prompt, Detokenizer.Add per token) sit inside
// the frontend's 0.3 ms latency budget, which is why pre-tokenisation uses a
// hand-written matcher for the known split patterns instead of a general
// backtracking regex engine (regexp2 remains the fallback for unknown
// patterns and the oracle in tests).
//
// Nothing is fetched at run time: o200k_base comes embedded in
// github.com/pkoukk/tiktoken-go-loader, and model directories are read from
// disk. Constructors return values; the package keeps no mutable
// package-level state, so Default and LoadDir are meant to be called once at
// start-up and their results shared (all types are safe for concurrent use
// except Detokenizer, which belongs to one stream).
package tokenizer
