// Package vllmpd speaks vLLM's own disaggregated prefill/decode protocol
// (the NixlConnector proxy protocol), on both of its sides.
//
// Tandem's own disaggregation (package disagg) moves KV between engines it
// hosts. When the workers are real vLLM servers, Tandem cannot reach into
// their KV caches: vLLM moves the blocks itself (NIXL), and the only lever
// a router has is the request. So the router drives vLLM exactly as vLLM's
// reference proxy (toy_proxy_server.py) does:
//
//  1. the prefill leg: the client's body with
//     kv_transfer_params = {"do_remote_decode": true, "do_remote_prefill":
//     false, "remote_engine_id": null, "remote_block_ids": null,
//     "remote_host": null, "remote_port": null}, stream false, max_tokens
//     AND max_completion_tokens 1 (servers honour either; rewriting only
//     one lets the other win), stream_options, min_tokens and
//     min_completion_tokens removed; read fully;
//  2. the decode leg: the client's original body plus the
//     kv_transfer_params the prefill response returned at its top level,
//     verbatim (its fields are the prefill engine's business: which
//     blocks, where its side channel is), streamed back;
//  3. X-Request-Id, the same on both legs, so logs of P and D line up.
//
// Forward is that client. Worker is the other side, for the mocker's
// vLLM-compatible mode (`tandem worker --openai-addr`): an engine wrapper
// that plays both roles, so the protocol is tested end to end without
// vLLM. As prefill (do_remote_decode) it prefills, keeps the prompt's
// blocks under a lease, and answers remote_engine_id, remote_request_id,
// remote_block_ids, remote_host/remote_port (its side channel), tp_size,
// remote_num_tokens and remote_blocks_expiry_time. As decode
// (do_remote_prefill) it asks that side channel to push the blocks it
// lacks over Tandem's transfer plane (kvtransfer) into its own prefix
// cache, then decodes with them as cached. Where NIXL does an RDMA READ,
// the side channel triggers a TCP push: the same pull semantics on any
// network. A failed pull falls back to computing the prompt locally, as
// newer vLLM builds do, so the request still succeeds.
package vllmpd
