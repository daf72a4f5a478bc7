package bench

import "math"

// Record is the measurement of one request. Times are milliseconds; the
// origin of ScheduledMs is the start of its run. TTFT and E2E count from
// the scheduled send time, which in a closed loop is the actual send time
// and in an open loop is the arrival the schedule asked for, so a request
// the tool itself sent late carries that lateness (the coordinated-omission
// rule); SendLagMs shows how late it left.
type Record struct {
	Label       string  `json:"label"`
	Target      int     `json:"target"`
	URL         string  `json:"url"`
	Run         int     `json:"run"`
	Concurrency int     `json:"concurrency,omitempty"`
	Scenario    string  `json:"scenario"`
	Seq         int     `json:"seq"`
	Session     int     `json:"session"`
	Turn        int     `json:"turn"`
	Prefix      int     `json:"prefix"`
	Round       int     `json:"round"`
	ScheduledMs float64 `json:"scheduled_ms"`
	SendLagMs   float64 `json:"send_lag_ms"`
	// TTFTMs is -1 when there was no first token (errors, non-streamed).
	TTFTMs float64 `json:"ttft_ms"`
	E2EMs  float64 `json:"e2e_ms"`
	// ITLMs holds every gap between consecutive content chunks. A server
	// that packs several tokens into one chunk shows one gap for them.
	ITLMs        []float64 `json:"itl_ms"`
	InputTokens  int       `json:"input_tokens"`
	OutputTokens int       `json:"output_tokens"`
	// OverlapTokens is how much of the prompt the workload built to be
	// shared with an earlier request (a common prefix, a conversation's
	// history): the generated overlap. Whether the server found it cached
	// is CachedTokens, which may be less (capacity, routing, eviction).
	OverlapTokens int `json:"overlap_tokens"`
	// CachedTokens is usage.prompt_tokens_details.cached_tokens, -1 when
	// the server did not report it.
	CachedTokens int `json:"cached_tokens"`
	// UsageReported says InputTokens/OutputTokens came from the server's
	// usage rather than from the request and the chunk count.
	UsageReported bool   `json:"usage_reported"`
	Status        int    `json:"status"`
	ErrorKind     string `json:"error_kind,omitempty"`
	Error         string `json:"error,omitempty"`
	Worker        string `json:"worker,omitempty"`
	// HitTTFT and HitCached are set on prefix-reuse re-requests.
	HitTTFT   *bool `json:"hit_ttft,omitempty"`
	HitCached *bool `json:"hit_cached,omitempty"`
}

// Error kinds, so reports can say what went wrong without parsing text.
const (
	ErrHTTP    = "http_status"  // a non-200 status
	ErrConnect = "connect"      // no response: refused, reset before headers
	ErrStream  = "stream_cut"   // the body ended or broke before [DONE]
	ErrServer  = "server_error" // an error event inside a 200 stream
	ErrTimeout = "timeout"      // --timeout passed
	ErrDecode  = "bad_response" // a body that is not the expected JSON
)

// OK reports whether the request succeeded.
func (r *Record) OK() bool { return r.Error == "" }

// EndMs is when the request finished, on the run's clock.
func (r *Record) EndMs() float64 { return r.ScheduledMs + r.E2EMs }

// ms converts nanoseconds to milliseconds kept to the microsecond, which
// is all a network measurement resolves and keeps the files short.
func ms(ns int64) float64 { return math.Round(float64(ns)/1e3) / 1e3 }
