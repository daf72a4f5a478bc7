package httpapi

import (
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/tandemllm/tandem/chatparse"
)

// AddFlags registers the flags of the OpenAI frontend shared by `tandem
// serve` and `tandem frontend`, with c's values as defaults (start from
// DefaultConfig): request limits, admission control, retries, parsers,
// the responses store and the HTTP server's bounds.
func (c *Config) AddFlags(f *pflag.FlagSet) {
	f.Int64Var(&c.MaxBodyBytes, "max-body-bytes", c.MaxBodyBytes, "largest accepted request body")
	f.IntVar(&c.MaxTokensDefault, "max-tokens-default", c.MaxTokensDefault, "tokens generated for a request that sets no max_tokens (0: up to the context length)")
	f.IntVar(&c.MaxTokensLimit, "max-tokens-limit", c.MaxTokensLimit, "largest max_tokens a request may ask for (0: the context length)")
	f.IntVar(&c.MaxInflight, "max-inflight", c.MaxInflight, "requests served at once per model (0: no limit); more wait in a queue of --max-queue")
	f.IntVar(&c.MaxQueue, "max-queue", c.MaxQueue, "requests that may wait for a slot per model; past it, and after --queue-timeout, a request gets 429 with Retry-After")
	f.DurationVar(&c.QueueTimeout, "queue-timeout", c.QueueTimeout, "longest wait for an admission slot")
	f.DurationVar(&c.AdmissionWait, "admission-wait", c.AdmissionWait, "how long a request not yet streaming waits for an admission slot before its 429, whose Retry-After comes from the observed completion rate (0: --queue-timeout)")
	f.Var(notBool{&c.NoAccessLog}, "access-log", "log one info line per request: id, model, worker, status, tokens in/out, cached, TTFT, duration (--access-log=false: off)")
	f.BoolVar(&c.TrustClientKVTransferParams, "trust-client-kv-transfer-params", false, "pass a client's kv_transfer_params (vLLM's P/D extension) to the workers; off, such a request is a 400: the params name addresses a vLLM-protocol worker connects to")
	rs := &c.ResponsesStore
	f.IntVar(&rs.Size, "responses-store-size", rs.Size, "finished /v1/responses kept for previous_response_id and GET (0: none kept); the least recently used go first")
	f.Int64Var(&rs.Bytes, "responses-store-bytes", rs.Bytes, "bound on the stored responses' conversations, in bytes (0: only --responses-store-size bounds them)")
	f.DurationVar(&rs.TTL, "responses-store-ttl", rs.TTL, "how long a stored response is kept (0: until evicted)")
	f.Var(&parserFlag{p: &c.ToolCallParser, check: chatparse.CanonicalTool}, "tool-call-parser",
		"how the chat endpoint reads tool calls in what the model writes: "+strings.Join(chatparse.ToolParsers, ", ")+", or none (default: detected from the model's chat template)")
	f.Var(&parserFlag{p: &c.ReasoningParser, check: chatparse.CanonicalReasoning}, "reasoning-parser",
		"how the chat endpoint splits reasoning into reasoning_content: "+strings.Join(chatparse.ReasoningParsers, ", ")+", or none (default: detected from the model's chat template)")
	h := &c.HTTP
	f.DurationVar(&h.ReadHeaderTimeout, "http-read-header-timeout", h.ReadHeaderTimeout, "bound on reading a request's headers")
	f.DurationVar(&h.ReadTimeout, "http-read-timeout", h.ReadTimeout, "bound on reading a whole request (headers and body)")
	f.DurationVar(&h.WriteIdleTimeout, "http-write-idle-timeout", h.WriteIdleTimeout, "bound on each write of a response: a client that reads nothing this long is cut")
	f.DurationVar(&h.IdleTimeout, "http-idle-timeout", h.IdleTimeout, "keep-alive connections idle this long are closed")
	f.IntVar(&h.MaxConns, "max-connections", h.MaxConns, "open client connections (0: no cap); past it a connection gets a 503 and is closed")
	f.IntVar(&h.ProbeConns, "probe-connections", h.ProbeConns, "connections kept past --max-connections for /health, /live and /metrics (each closed after its answer or 5 s), so probes and scrapes answer however full the server is")
	f.Int64Var(&h.BodyBudget, "body-budget-bytes", h.BodyBudget, "request-body bytes held in memory at once across the server (0: no budget); past it a request gets 503")
}

// AddAuthFlags registers the OpenAI server's client authentication
// (docs/security.md): --api-key-file into keyFile (LoadKeyFile reads it),
// --protect-metrics, and --tls-cert, --tls-key into tls.
func (c *Config) AddAuthFlags(f *pflag.FlagSet, keyFile *string, tls *TLSFiles) {
	f.StringVar(keyFile, "api-key-file", "", "file of API keys, one a line (# comments): every /v1 request needs \"Authorization: Bearer <key>\"; /health and /live stay open")
	f.BoolVar(&c.ProtectMetrics, "protect-metrics", false, "with --api-key-file: /metrics needs a key too")
	f.StringVar(&tls.Cert, "tls-cert", "", "serve the OpenAI API over HTTPS with this PEM certificate chain (with --tls-key)")
	f.StringVar(&tls.Key, "tls-key", "", "PEM private key of --tls-cert")
}

// LoadKeyFile sets APIKeys from an --api-key-file (empty: none).
func (c *Config) LoadKeyFile(path string) error {
	if path == "" {
		return nil
	}
	k, err := LoadAPIKeys(path)
	if err != nil {
		return err
	}
	c.APIKeys = k
	return nil
}

// parserFlag is a parser name, checked when the flag is parsed.
type parserFlag struct {
	p     *string
	check func(string) (string, error)
}

func (f *parserFlag) String() string {
	if f.p == nil {
		return ""
	}
	return *f.p
}

func (f *parserFlag) Set(v string) error {
	if _, err := f.check(v); err != nil {
		return err
	}
	if strings.EqualFold(strings.TrimSpace(v), "none") {
		v = "none"
	}
	*f.p = v
	return nil
}

func (f *parserFlag) Type() string { return "string" }

// notBool is a boolean flag stored negated, for a Config field whose zero
// value is the default-on behaviour (NoAccessLog behind --access-log).
type notBool struct{ p *bool }

func (n notBool) String() string {
	if n.p == nil {
		return "true"
	}
	return strconv.FormatBool(!*n.p)
}

func (n notBool) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	*n.p = !v
	return nil
}

func (notBool) Type() string     { return "bool" }
func (notBool) IsBoolFlag() bool { return true }
