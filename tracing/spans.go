package tracing

// Span names, one per step of a request. Jaeger shows them in this order
// for a disaggregated request (TestJaegerTrace in e2e checks it).
const (
	SpanHTTP       = "http.request"  // frontend: the whole request, from the first byte read
	SpanTemplate   = "template"      // frontend: the chat template rendered
	SpanTokenize   = "tokenize"      // frontend: the prompt tokenized
	SpanQueue      = "queue"         // frontend: waiting for an admission slot (--max-inflight)
	SpanRoute      = "route"         // frontend: the router's decision
	SpanDisagg     = "disagg.decide" // frontend: local vs remote prefill, with both estimates
	SpanPrefill    = "prefill"       // prefill worker: the remote prefill leg's compute
	SpanKVTransfer = "kv_transfer"   // prefill worker: the blocks streamed to the decode worker
	SpanFirstToken = "first_token"   // frontend: from the engine call to the first token
	SpanStream     = "stream"        // frontend: from the first token to the end of the stream
	SpanKVReceive  = "kv_receive"    // decode worker: blocks received and imported
)

// Attribute keys shared by the spans (OpenTelemetry semantic conventions
// where one exists, tandem.* otherwise).
const (
	AttrRequestID      = "tandem.request_id"
	AttrModel          = "gen_ai.request.model"
	AttrPromptTokens   = "gen_ai.usage.input_tokens"
	AttrOutputTokens   = "gen_ai.usage.output_tokens"
	AttrCachedTokens   = "tandem.cached_tokens"
	AttrWorker         = "tandem.worker"
	AttrCandidates     = "tandem.route.candidates"
	AttrPolicy         = "tandem.route.policy"
	AttrCost           = "tandem.route.cost"
	AttrRunnerUpCost   = "tandem.route.runner_up_cost"
	AttrTies           = "tandem.route.ties"
	AttrReason         = "tandem.route.reason"
	AttrPredicted      = "tandem.route.predicted_cached_tokens"
	AttrAttempt        = "tandem.route.attempt"
	AttrChoice         = "tandem.disagg.choice"
	AttrDisaggReason   = "tandem.disagg.reason"
	AttrPrefillWorker  = "tandem.disagg.prefill_worker"
	AttrLocalSeconds   = "tandem.disagg.local_seconds"
	AttrRemoteSeconds  = "tandem.disagg.remote_seconds"
	AttrEstXferSeconds = "tandem.disagg.est_transfer_seconds"
	AttrFallback       = "tandem.disagg.fallback"
	AttrBytes          = "tandem.kv.bytes"
	AttrBlocks         = "tandem.kv.blocks"
	AttrWanted         = "tandem.kv.blocks_wanted"
	AttrLinkBps        = "tandem.kv.link_bytes_per_second"
	AttrThroughput     = "tandem.kv.throughput_bytes_per_second"
	AttrPeer           = "tandem.kv.peer"
	AttrFinish         = "gen_ai.response.finish_reasons"
)
