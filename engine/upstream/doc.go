// Package upstream is an engine that is another server: a vLLM
// OpenAI-compatible server (or anything that speaks the same extensions,
// such as `tandem worker --openai-addr`) reached over HTTP. Tandem keeps
// what it is good at — tokenizing, chat templates, KV-aware routing,
// disaggregation decisions, diagnostics — and the upstream computes.
//
// Requests go out as token-id prompts on /v1/completions with vLLM's
// extensions: return_token_ids (the generated ids come back, so the
// frontend detokenizes exactly what the engine produced instead of
// re-tokenizing text), ignore_eos, min_tokens, stop_token_ids, top_k, and
// stream_options.continuous_usage_stats (usage, and with vLLM's
// --enable-prompt-tokens-details the cached tokens, on the first chunk, so
// the router can check its KV prediction at the first token).
// kv_transfer_params passes through both ways: a prefill leg of vLLM's
// P/D protocol (disagg/vllmpd) is sent unstreamed, because vLLM returns
// the decode leg's parameters only in a whole response.
//
// An upstream that does not return token ids (vLLM older than 0.10.2) is
// refused with a clear error on the first chunk rather than served with
// ids guessed from text. Upstream refusals keep their meaning: 400 context
// length → engine.ErrPromptTooLong, 429/503 → engine.ErrOverloaded,
// unreachable or 5xx before the first token → engine.ErrUnavailable (the
// frontend retries elsewhere).
//
// A server need not answer when New is called (start in any order): its
// engine is pending, refuses requests as unavailable, and asks every
// ConnectInterval; when the server answers, its model name (without
// Config.Model) and context become Info, signalled on InfoChanged. An
// SGLang server's ranks are Fleet.DPSize, or asked at start-up (Fleet).
//
// The server's reachability is watched (GET /health every 5 s, and at once
// after a request fails to reach it): a down server raises
// upstream_unavailable on the board of the worker that fronts it.
//
// Other dialects (Config.API): APIOpenAI (text prompts, standard fields),
// APILlamaCpp (llama-server's /completion with slot affinity,
// llamacpp.go) and APISGLang (SGLang's native /generate with input_ids,
// one engine per attention-DP rank via data_parallel_rank, sglang.go).
//
// The server's own load is scraped from its /metrics on an interval
// (load.go: vllm:*, sglang:* per dp_rank, llamacpp:* or /slots) and
// reported as engine.LoadReporter; a failing scrape raises
// upstream_metrics_unavailable.
//
// The upstream's KV events (vLLM --kv-events-config, ZMQ) are not read
// here: the endpoint is reported (KVEventsEndpoint) so the router
// subscribes to it as to any Tandem engine.
package upstream
