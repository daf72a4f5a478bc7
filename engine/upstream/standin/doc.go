// Package standin is a vLLM look-alike for tests across packages: a real
// HTTP server on a real socket that answers /v1/models, /health and
// /v1/completions the way vLLM's OpenAI server does, computing with a
// mocker engine (its paged KV cache, timing and vLLM KV events over ZMQ).
//
// Each behaviour that differs between vLLM releases, or between vLLM and
// the look-alikes users put behind a router, is an option, and each cites
// where the real server does it:
//
//   - ReturnTokenIDs: vLLM ≥ 0.10.2 honours return_token_ids
//     (vllm/entrypoints/openai/protocol.py, CompletionRequest); older
//     releases, and most OpenAI-compatible servers, send text only.
//   - PromptTokensDetails: prompt_tokens_details.cached_tokens only with
//     --enable-prompt-tokens-details (vllm/entrypoints/openai/cli_args.py).
//   - usage: every chunk with stream_options.continuous_usage_stats, else
//     one final chunk with "choices": [] when include_usage
//     (vllm/entrypoints/openai/serving_completion.py).
//   - KV events through the mocker's kvevents.EngineConfig: map or array
//     form, a publisher that binds (vLLM with tcp://*:port) or dials
//     (vLLM with a host, vllm/distributed/kv_events.py ZmqEventPublisher;
//     llm-d's simulators), batches numbered from any FirstSeq, and
//     parent_block_hash 0 for "none" (ZeroParent), as the look-alikes do.
//
// SGLang (sglang.go) is an SGLang look-alike: /generate with input_ids or
// text, cumulative or --stream-output chunks, meta_info with
// cached_tokens, one mocker per attention-DP rank publishing SGLang-shaped
// KV events at port + rank, /get_server_info, /get_model_info and
// sglang:* /metrics; LlamaCpp (llamacpp.go) is a llama-server look-alike.
// Each behaviour cites SGLang's or llama.cpp's source.
//
// It is a test server: no authentication, loopback only.
package standin
