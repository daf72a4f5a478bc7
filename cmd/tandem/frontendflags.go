package main

import (
	"github.com/spf13/cobra"

	"github.com/tandemllm/tandem/httpapi"
)

// registerFrontendFlags adds the flags of the OpenAI frontend shared by
// `tandem serve` and `tandem frontend`: request limits, admission control
// and the HTTP server's bounds.
func registerFrontendFlags(cmd *cobra.Command, c *httpapi.Config) {
	f := cmd.Flags()
	f.Int64Var(&c.MaxBodyBytes, "max-body-bytes", c.MaxBodyBytes, "largest accepted request body")
	f.IntVar(&c.MaxRetries, "max-retries", c.MaxRetries, "other workers to try when a worker fails before the first token")
	f.IntVar(&c.MigrationLimit, "migration-limit", c.MigrationLimit, "times a stream whose worker fails after its first token continues on another worker with the prompt plus the tokens already sent (0: never; Dynamo's --migration-limit)")
	f.IntVar(&c.MaxTokensDefault, "max-tokens-default", c.MaxTokensDefault, "tokens generated for a request that sets no max_tokens (0: up to the context length)")
	f.IntVar(&c.MaxTokensLimit, "max-tokens-limit", c.MaxTokensLimit, "largest max_tokens a request may ask for (0: the context length)")
	f.IntVar(&c.MaxInflight, "max-inflight", c.MaxInflight, "requests served at once per model (0: no limit); more wait in a queue of --max-queue")
	f.IntVar(&c.MaxQueue, "max-queue", c.MaxQueue, "requests that may wait for a slot per model; past it, and after --queue-timeout, a request gets 429 with Retry-After")
	f.DurationVar(&c.QueueTimeout, "queue-timeout", c.QueueTimeout, "longest wait for an admission slot")
	f.DurationVar(&c.StuckAfter, "stuck-after", c.StuckAfter, "a worker holding requests without producing a token this long is reported stuck and skipped (0: never)")
	f.Var(notBool{&c.NoAccessLog}, "access-log", "log one info line per request: id, model, worker, status, tokens in/out, cached, TTFT, duration (--access-log=false: off)")
	f.DurationVar(&c.FirstTokenTimeout, "first-token-timeout", c.FirstTokenTimeout, "bound on waiting for a request's first token on one worker; past it the request is tried elsewhere, else 504 (0: no bound)")
	h := &c.HTTP
	f.DurationVar(&h.ReadHeaderTimeout, "http-read-header-timeout", h.ReadHeaderTimeout, "bound on reading a request's headers")
	f.DurationVar(&h.ReadTimeout, "http-read-timeout", h.ReadTimeout, "bound on reading a whole request (headers and body)")
	f.DurationVar(&h.WriteIdleTimeout, "http-write-idle-timeout", h.WriteIdleTimeout, "bound on each write of a response: a client that reads nothing this long is cut")
	f.DurationVar(&h.IdleTimeout, "http-idle-timeout", h.IdleTimeout, "keep-alive connections idle this long are closed")
	f.IntVar(&h.MaxConns, "max-connections", h.MaxConns, "open client connections (0: no cap); past it a connection gets a 503 and is closed")
	f.Int64Var(&h.BodyBudget, "body-budget-bytes", h.BodyBudget, "request-body bytes held in memory at once across the server (0: no budget); past it a request gets 503")
}
