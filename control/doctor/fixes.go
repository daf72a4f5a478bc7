package doctor

// fixes maps each diagnostic code (docs/ARCHITECTURE.md's table) to what an
// operator does about it.
var fixes = map[string]string{
	"kv_events_missing":              "the worker computes blocks but its events do not reach the router: check its KV event endpoint is reachable from the frontend (firewall, --advertise-host) and that both use one --event-plane; a worker started with --kv-events off must be restarted with it on",
	"kv_events_lost":                 "give the worker a replay socket so sequence gaps are replayed instead of rebuilt: --kv-events-replay-endpoint auto for Tandem's engines, --upstream-kv-events-replay tcp://host:port (the replay_endpoint of vLLM's --kv-events-config) for an upstream server",
	"kv_block_size_mismatch":         "use one block size: every engine's --block-size must be a multiple of the frontend's --router-block-size",
	"kv_prediction_drift":            "the router's index disagrees with the engine's cache: check the worker's KV events flow (tandem doctor's kv_events check) and that its block size and hash settings match the router's (--router-block-size, --kv-events-token-ids)",
	"ttft_model_drift":               "the worker is slower or faster than its timing model: if it changed (hardware, load from outside Tandem), nothing to do, the router re-learns; otherwise look for contention on its host",
	"worker_unreachable":             "the worker's request plane does not answer: restart it, or remove its stale record (tandem doctor's discovery.stale check); with --mtls-* both sides need certificates of one CA",
	"worker_stuck":                   "the worker holds requests and produces no token: read its log and restart it",
	"frontend_connections_capped":    "raise --max-connections or add frontend replicas",
	"frontend_body_budget_exhausted": "raise --body-budget-bytes or lower --max-body-bytes",
	"frontend_saturated":             "add workers for the model or raise --max-inflight / --max-queue",
	"request_plane_schema_mismatch":  "upgrade the frontend and workers to one release",
	"discovery_unavailable":          "bring the discovery backend (etcd, the file directory, the kube API) back, or fix the --discovery flags",
	"discovery_record_invalid":       "remove the corrupt record; the worker writes a valid one again",
	"discovery_id_conflict":          "give every worker its own --id",
	"discovery_junk_files":           "remove the files in the discovery directory that are not <id>.json records",
	"worker_refused":                 "start the worker with the frontend's model and tokenizer",
	"worker_model_unserved":          "start a frontend for the worker's model, or the worker with the frontend's model",
	"tokenizer_mismatch":             "start the worker with the frontend's tokenizer (--model)",
	"event_plane_disconnected":       "bring NATS back or fix --nats and its credentials",
	"event_plane_relay_loss":         "NATS drops relayed batches: check its slow-consumer limits and the network",
	"kv_transfer_failed":             "check that the prefill worker can connect to the decode worker's --kv-transfer-addr (firewall, --advertise-host) and that both share one cluster CA",
	"kv_transfer_timeout":            "the link is too slow for --transfer-timeout: measure it (tandem doctor's disagg.link check) and raise the timeout or use --disagg auto",
	"kv_transfer_rejected":           "give every worker a certificate of the cluster CA (tandem certs issue --role worker) and upgrade them to one release",
	"plane_unauthenticated":          "configure authentication for that plane (--api-key-file, --mtls-*, NATS token or TLS), or bind it to loopback",
	"kv_transfer_peer_refused":       "a frontend named a transfer address discovery does not publish: check that frontends and workers share one discovery backend",
	"kv_layout_mismatch":             "start prefill and decode workers of a model from one configuration (dtype, --block-size, tokenizer, --kv-config-fingerprint)",
	"disagg_no_prefill_worker":       "start prefill workers (tandem worker --role prefill), or run the decode workers aggregated",
	"disagg_no_transfer_addr":        "start decode workers with a reachable --kv-transfer-addr",
	"upstream_unavailable":           "the vLLM server behind the worker does not answer GET /health: restart it or fix --upstream",
	"upstream_no_cached_tokens":      "start vLLM with --enable-prompt-tokens-details",
	"operator_reconcile_failed":      "read the operator's log and the TandemDeployment's status conditions",
	"operator_api_unreachable":       "check the operator's network path and credentials to the API server",
	"drain_timeout":                  "raise --drain-timeout, or expect cut streams on shutdown",
}

func diagnosticFix(code string) string {
	if f, ok := fixes[code]; ok {
		return f
	}
	return "see the code in docs/ARCHITECTURE.md's Diagnostic codes table"
}
