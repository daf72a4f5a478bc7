package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"

	"github.com/tandemllm/tandem/openai"
	"github.com/tandemllm/tandem/openai/chatstream"
)

// The API translators (/v1/responses, Anthropic's /v1/messages) run the
// chat completions handler itself on a chat request they build, writing
// into a chatSink instead of the connection: the chat path's admission,
// limits, routing, retries, metrics and tracing apply to them unchanged,
// and the sink hands each streamed chat chunk to the translator, which
// writes its own API's events to the client.

type endpointKey struct{}

// chatEndpoint is the endpoint label of a chat request: "chat", or the
// translated API's ("responses", "messages") when a translator runs it.
func chatEndpoint(ctx context.Context) string {
	if e, ok := ctx.Value(endpointKey{}).(string); ok {
		return e
	}
	return "chat"
}

// maxChatErrorBody bounds the error body a sink keeps.
const maxChatErrorBody = 64 << 10

// chatSink is the ResponseWriter the chat handler writes to on behalf of
// a translator. A 200 stream is cut into SSE lines and each data value
// goes to onData; any other status's body is kept (bounded) for the
// translator to word in its API's shape. Flush reaches the translator's
// flush; Unwrap gives http.ResponseController the connection, so the chat
// path's per-write deadlines still apply to the client.
type chatSink struct {
	w      http.ResponseWriter
	header http.Header
	status int
	line   []byte
	errBuf []byte
	onData func(data []byte) error
	flush  func()
	err    error // the first onData error: the translator gave up
}

func newChatSink(w http.ResponseWriter, onData func([]byte) error, flush func()) *chatSink {
	return &chatSink{w: w, header: http.Header{}, onData: onData, flush: flush}
}

func (c *chatSink) Header() http.Header { return c.header }

func (c *chatSink) WriteHeader(code int) {
	if c.status == 0 {
		c.status = code
	}
}

func (c *chatSink) Write(p []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	if c.err != nil {
		return 0, c.err
	}
	if c.status != http.StatusOK {
		if room := maxChatErrorBody - len(c.errBuf); room > 0 {
			c.errBuf = append(c.errBuf, p[:min(len(p), room)]...)
		}
		return len(p), nil
	}
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			if len(c.line)+len(p) > openai.MaxSSELine {
				c.err = openai.ErrSSELineTooLong
				return 0, c.err
			}
			c.line = append(c.line, p...)
			break
		}
		line := p[:i+1]
		if len(c.line) > 0 {
			c.line = append(c.line, line...)
			line = c.line
		}
		p = p[i+1:]
		if data, ok := openai.SSEData(line); ok {
			if err := c.onData(data); err != nil {
				c.err = err
				return 0, err
			}
		}
		c.line = c.line[:0]
	}
	return n, nil
}

func (c *chatSink) Flush() {
	if c.flush != nil {
		c.flush()
	}
}

func (c *chatSink) Unwrap() http.ResponseWriter { return c.w }

// chatError is the error the chat handler answered with (status not 200).
func (c *chatSink) chatError() *openai.Error {
	return chatstream.ParseError(c.status, c.errBuf)
}

// runChat runs the chat handler on creq for r's client, feeding each chat
// chunk of its stream to onChunk. It returns the sink, whose status says
// whether the chat handler answered (200: it streamed) or refused.
func (s *Server) runChat(w http.ResponseWriter, r *http.Request, endpoint string, creq *chatstream.Request,
	onChunk func(*chatstream.Chunk) error, flush func()) (*chatSink, error) {
	body, err := json.Marshal(creq)
	if err != nil {
		return nil, err
	}
	ctx := context.WithValue(r.Context(), endpointKey{}, endpoint)
	inner := r.Clone(ctx)
	inner.Body = io.NopCloser(bytes.NewReader(body))
	inner.ContentLength = int64(len(body))
	inner.Header.Set("Content-Type", "application/json")
	inner.URL.Path = "/v1/chat/completions"
	done := false
	sink := newChatSink(w, func(data []byte) error {
		if done {
			return nil
		}
		c, err := chatstream.ParseData(data)
		if errors.Is(err, chatstream.ErrDone) {
			done = true
			return nil
		}
		if err != nil {
			return err
		}
		return onChunk(c)
	}, flush)
	s.handleChat(sink, inner)
	for _, h := range []string{"X-Request-Id", "X-Tandem-Worker", "Retry-After"} {
		if v := sink.header.Get(h); v != "" && w.Header().Get(h) == "" {
			w.Header().Set(h, v)
		}
	}
	return sink, nil
}

func itoa(n int) string { return strconv.Itoa(n) }
