package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/tandemllm/tandem/internal/backoff"
	"github.com/tandemllm/tandem/openai"
)

// Target is one OpenAI-compatible endpoint under test.
type Target struct {
	// Label names the target in reports; default "A", "B", ...
	Label string
	// URL is the base URL, with or without a trailing /v1.
	URL    string
	APIKey string
	// Model is the model to request; empty asks GET /v1/models and takes
	// the first.
	Model string
}

// DefaultWorkerHeader is the response header Tandem's frontend names the
// serving worker in.
const DefaultWorkerHeader = "X-Tandem-Worker"

// NewHTTPClient returns a client tuned for load generation: no
// compression (it would add client CPU and hide stream timing), and enough
// idle connections that a closed loop of conns requests never reconnects.
func NewHTTPClient(conns int) *http.Client {
	conns = max(conns, 16)
	return &http.Client{Transport: &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        conns * 2,
		MaxIdleConnsPerHost: conns * 2,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		ReadBufferSize:      32 << 10,
	}}
}

// baseURL strips a trailing slash and /v1, so users may pass either form.
func baseURL(raw string) (string, error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil {
		return "", fmt.Errorf("url %q: %w", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return "", fmt.Errorf("url %q: want http(s)://host[:port][/v1]", raw)
	}
	s := strings.TrimRight(u.String(), "/")
	return strings.TrimSuffix(s, "/v1"), nil
}

// discoverModel asks GET /v1/models for the first model served.
func discoverModel(ctx context.Context, c *http.Client, base, key string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/models", nil)
	if err != nil {
		return "", fmt.Errorf("models request: %w", err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", fmt.Errorf("GET %s/v1/models: %w", base, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return "", fmt.Errorf("GET %s/v1/models: %w", base, err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s/v1/models: status %d: %s", base, resp.StatusCode, errorMessage(body))
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return "", fmt.Errorf("GET %s/v1/models: %w", base, err)
	}
	if len(list.Data) == 0 || list.Data[0].ID == "" {
		return "", fmt.Errorf("GET %s/v1/models: no models listed", base)
	}
	return list.Data[0].ID, nil
}

// endpoint is a resolved target.
type endpoint struct {
	Target
	index int
	base  string
}

// client sends requests and measures them. It is safe for concurrent use.
type client struct {
	http         *http.Client
	workerHeader string
	stream       bool
	needText     bool
	timeout      time.Duration
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type wireRequest struct {
	Model         string         `json:"model"`
	Messages      []Message      `json:"messages,omitempty"`
	Prompt        any            `json:"prompt,omitempty"`
	MaxTokens     int            `json:"max_tokens,omitempty"`
	Stream        bool           `json:"stream,omitempty"`
	StreamOptions *streamOptions `json:"stream_options,omitempty"`
	IgnoreEOS     bool           `json:"ignore_eos,omitempty"`
}

func (c *client) body(model string, r *Request) ([]byte, error) {
	w := wireRequest{Model: model, MaxTokens: r.MaxTokens, IgnoreEOS: r.IgnoreEOS}
	switch {
	case r.Endpoint != Completions:
		w.Messages = r.Messages
	case r.PromptIDs != nil:
		w.Prompt = r.PromptIDs
	default:
		w.Prompt = r.Prompt
	}
	if c.stream {
		w.Stream, w.StreamOptions = true, &streamOptions{IncludeUsage: true}
	}
	b, err := json.Marshal(w)
	if err != nil {
		return nil, fmt.Errorf("encoding request: %w", err)
	}
	return b, nil
}

type wireError struct {
	Message string `json:"message"`
	Code    any    `json:"code"`
}

// wireChunk is a streamed chunk or a whole response; only what the
// measurements need is decoded.
type wireChunk struct {
	Choices []struct {
		Delta struct {
			Content          string `json:"content"`
			ReasoningContent string `json:"reasoning_content"`
		} `json:"delta"`
		Message struct {
			Content string `json:"content"`
		} `json:"message"`
		Text string `json:"text"`
	} `json:"choices"`
	Usage *openai.Usage `json:"usage"`
	Error *wireError    `json:"error"`
}

func (w *wireChunk) text() string {
	var sb strings.Builder
	for _, c := range w.Choices {
		sb.WriteString(c.Delta.ReasoningContent)
		sb.WriteString(c.Delta.Content)
		sb.WriteString(c.Message.Content)
		sb.WriteString(c.Text)
	}
	return sb.String()
}

// errorMessage extracts an OpenAI error message from a body, else a
// prefix of the body.
func errorMessage(body []byte) string {
	var e struct {
		Error *wireError `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && e.Error != nil && e.Error.Message != "" {
		return e.Error.Message
	}
	s := strings.TrimSpace(string(body))
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	if s == "" {
		s = "(empty body)"
	}
	return s
}

// do sends req to ep at due (zero: now) and measures it; origin is the
// run's start. It returns the record and what the
// session needs to continue. A cancelled ctx yields cancelled=true: the
// user stopped the run, and the request says nothing about the target.
func (c *client) do(ctx context.Context, ep *endpoint, req *Request, due, origin time.Time) (rec Record, reply Reply, cancelled bool) {
	rec = Record{Target: ep.index, Label: ep.Label, URL: ep.base, Session: req.Tag.Session, Turn: req.Tag.Turn,
		Prefix: req.Tag.Prefix, Round: req.Tag.Round, TTFTMs: -1, CachedTokens: -1, InputTokens: req.InputTokens,
		OverlapTokens: req.OverlapTokens}
	body, err := c.body(ep.Model, req)
	if err != nil {
		rec.ErrorKind, rec.Error = ErrDecode, err.Error()
		return rec, Reply{Err: err}, false
	}
	rctx := ctx
	if c.timeout > 0 {
		var cancel context.CancelFunc
		rctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	hreq, err := http.NewRequestWithContext(rctx, http.MethodPost, ep.base+req.Endpoint.path(), bytes.NewReader(body))
	if err != nil {
		rec.ErrorKind, rec.Error = ErrConnect, err.Error()
		return rec, Reply{Err: err}, false
	}
	hreq.Header.Set("Content-Type", "application/json")
	if c.stream {
		hreq.Header.Set("Accept", "text/event-stream")
	}
	if ep.APIKey != "" {
		hreq.Header.Set("Authorization", "Bearer "+ep.APIKey)
	}
	// The open loop hands requests over a little before they are due, so
	// that building a long prompt is not charged to the server: wait for
	// the moment itself here.
	if !due.IsZero() {
		if d := time.Until(due); d > 0 && !backoff.Sleep(ctx, d) {
			return rec, Reply{Err: ctx.Err()}, true
		}
	}
	sent := time.Now()
	if due.IsZero() || due.After(sent) {
		due = sent
	}
	rec.ScheduledMs = ms(due.Sub(origin).Nanoseconds())
	rec.SendLagMs = ms(sent.Sub(due).Nanoseconds())

	var text strings.Builder
	err = c.exchange(hreq, &rec, due, &text)
	rec.E2EMs = ms(time.Since(due).Nanoseconds())
	if err != nil {
		if ctx.Err() != nil {
			return rec, Reply{Err: err}, true
		}
		if rctx.Err() != nil {
			rec.ErrorKind = ErrTimeout
		}
		rec.Error = err.Error()
		if rec.ErrorKind == "" {
			rec.ErrorKind = ErrConnect
		}
		return rec, Reply{Err: err}, false
	}
	return rec, Reply{Text: text.String()}, false
}

// exchange performs the HTTP request and reads the response into rec.
// On error it sets rec.ErrorKind unless the failure is a connection one.
func (c *client) exchange(hreq *http.Request, rec *Record, due time.Time, text *strings.Builder) error {
	resp, err := c.http.Do(hreq)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	rec.Status = resp.StatusCode
	if c.workerHeader != "" {
		rec.Worker = resp.Header.Get(c.workerHeader)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		rec.ErrorKind = ErrHTTP
		return fmt.Errorf("status %d: %s", resp.StatusCode, errorMessage(b))
	}
	if !c.stream {
		return c.readWhole(resp.Body, rec, text)
	}
	return c.readStream(resp.Body, rec, due, text)
}

func (c *client) readWhole(body io.Reader, rec *Record, text *strings.Builder) error {
	b, err := io.ReadAll(body)
	if err != nil {
		rec.ErrorKind = ErrStream
		return fmt.Errorf("reading body: %w", err)
	}
	var w wireChunk
	if err := json.Unmarshal(b, &w); err != nil {
		rec.ErrorKind = ErrDecode
		return fmt.Errorf("decoding response: %w", err)
	}
	if w.Error != nil {
		rec.ErrorKind = ErrServer
		return fmt.Errorf("server error: %s", w.Error.Message)
	}
	t := w.text()
	text.WriteString(t)
	rec.OutputTokens = len(strings.Fields(t))
	applyUsage(rec, w.Usage)
	return nil
}

func applyUsage(rec *Record, u *openai.Usage) {
	if u == nil {
		return
	}
	rec.UsageReported = true
	rec.InputTokens, rec.OutputTokens = u.PromptTokens, u.CompletionTokens
	if u.Details.Reported() {
		rec.CachedTokens = u.Details.CachedTokens
	}
}

// readStream reads an SSE body. Most chunks are classified by a byte scan
// (is there non-empty content?) rather than a JSON decode: at thousands of
// requests per second the decode would be the tool's largest cost, and a
// load generator that saturates its own CPU measures itself.
func (c *client) readStream(body io.Reader, rec *Record, due time.Time, text *strings.Builder) error {
	br := bufio.NewReaderSize(body, 4<<10) // longer lines are reassembled in long
	var last time.Time
	chunks := 0
	done := false
	var long []byte
	for {
		line, err := openai.ReadSSELine(br, &long, openai.MaxSSELine)
		if p, ok := openai.SSEData(line); ok && !done {
			now := time.Now()
			if bytes.Equal(p, []byte("[DONE]")) {
				done = true
			} else if perr := c.chunk(p, rec, text); perr != nil {
				return perr
			} else if hasContent(p) {
				if chunks == 0 {
					rec.TTFTMs = ms(now.Sub(due).Nanoseconds())
				} else {
					rec.ITLMs = append(rec.ITLMs, ms(now.Sub(last).Nanoseconds()))
				}
				last = now
				chunks++
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) && done {
				break
			}
			rec.ErrorKind = ErrStream
			if errors.Is(err, io.EOF) {
				return fmt.Errorf("stream ended before [DONE] after %d chunks", chunks)
			}
			return fmt.Errorf("stream broke after %d chunks: %w", chunks, err)
		}
	}
	if !rec.UsageReported {
		rec.OutputTokens = chunks
	}
	return nil
}

// chunk handles the parts of a chunk that need decoding: usage, error
// events, and text when the session reads it.
func (c *client) chunk(p []byte, rec *Record, text *strings.Builder) error {
	isErr := bytes.Contains(p, []byte(`"error"`))
	if !c.needText && !isErr && !hasObject(p, `"usage"`) {
		return nil
	}
	var w wireChunk
	if err := json.Unmarshal(p, &w); err != nil {
		if !isErr {
			rec.ErrorKind = ErrDecode
			return fmt.Errorf("decoding chunk: %w", err)
		}
		w.Error = &wireError{Message: string(p)}
	}
	if w.Error != nil {
		rec.ErrorKind = ErrServer
		return fmt.Errorf("error event in stream: %s", w.Error.Message)
	}
	applyUsage(rec, w.Usage)
	if c.needText {
		text.WriteString(w.text())
	}
	return nil
}

// hasContent reports whether a chunk carries generated text: one of the
// content keys with a non-empty string value.
func hasContent(p []byte) bool {
	for _, key := range [...]string{`"content"`, `"text"`, `"reasoning_content"`} {
		k := []byte(key)
		rest := p
		for {
			i := bytes.Index(rest, k)
			if i < 0 {
				break
			}
			rest = rest[i+len(k):]
			v := bytes.TrimLeft(rest, " ")
			if len(v) == 0 || v[0] != ':' {
				continue
			}
			v = bytes.TrimLeft(v[1:], " ")
			if len(v) >= 2 && v[0] == '"' && v[1] != '"' {
				return true
			}
		}
	}
	return false
}

// hasObject reports whether key appears with an object value; servers that
// send "usage":null on every chunk then cost no decode.
func hasObject(p []byte, key string) bool {
	rest := p
	for {
		i := bytes.Index(rest, []byte(key))
		if i < 0 {
			return false
		}
		rest = rest[i+len(key):]
		v := bytes.TrimLeft(rest, " ")
		if len(v) > 0 && v[0] == ':' {
			if v = bytes.TrimLeft(v[1:], " "); len(v) > 0 && v[0] == '{' {
				return true
			}
		}
	}
}
