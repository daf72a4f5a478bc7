package frontend

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/openai"
	"github.com/tandemllm/tandem/tokenizer"
)

// output turns one engine stream into the response body.
type output struct {
	s       *Server
	j       *job
	m       *Model
	stream  engine.Stream
	first   engine.Delta
	firstOK bool // first holds a delta (false: the stream ended at once)
	cancel  func()
	detok   *tokenizer.Detokenizer
	stop    stopMatcher

	completion     int
	prompt, cached int
	kvParams       []byte // the engine's kv_transfer_params, if any
	finish         string
	last           time.Time
}

// next returns the text of the next delta, whether it was the last, and an
// error if the stream broke.
func (o *output) next() (text string, done bool, err error) {
	var d engine.Delta
	if o.firstOK {
		d, o.firstOK = o.first, false
		o.last = time.Now()
	} else {
		d, err = o.stream.Recv()
		if err == io.EOF {
			// Ended without a finish reason (e.g. the stream was empty).
			o.finish = "stop"
			return o.flush(), true, nil
		}
		if err != nil {
			return "", true, err
		}
		now := time.Now()
		if n := len(d.Tokens); n > 0 {
			gap := now.Sub(o.last).Seconds() / float64(n)
			for range n {
				o.m.metrics.itl.Observe(gap)
			}
		}
		o.last = now
	}
	if d.PromptTokens > 0 {
		o.prompt, o.cached = d.PromptTokens, d.CachedTokens
	}
	if d.KVTransferParams != nil {
		o.kvParams = d.KVTransferParams
	}
	o.completion += len(d.Tokens)
	emit, stopped := o.stop.push(o.detok.Add(d.Tokens...))
	if stopped {
		o.finish = "stop"
		o.cancel() // the engine may still be generating: stop it
		return emit, true, nil
	}
	switch d.Finish {
	case engine.FinishNone:
		return emit, false, nil
	case engine.FinishLength:
		o.finish = "length"
	case engine.FinishCancelled:
		return emit, true, errors.New("the engine cancelled the sequence")
	default:
		o.finish = "stop"
	}
	return emit + o.flush(), true, nil
}

// flush ends the text: held UTF-8 bytes, then held stop-string prefixes
// (which may still complete a stop string with the detokenizer's tail).
func (o *output) flush() string {
	emit, stopped := o.stop.push(o.detok.Flush())
	if stopped {
		o.finish = "stop"
		return emit
	}
	return emit + o.stop.flush()
}

func (o *output) usage() openai.Usage {
	p := o.prompt
	if p == 0 {
		p = len(o.j.prompt)
	}
	return openai.NewUsage(p, o.completion, o.cached)
}

func (o *output) header() openai.ChunkHeader {
	prefix := "cmpl-"
	if o.j.chat {
		prefix = "chatcmpl-"
	}
	return openai.ChunkHeader{ID: prefix + o.j.id, Model: o.m.Name, Created: o.j.start.Unix(), Chat: o.j.chat}
}

// stream_ writes an SSE response. Each engine delta becomes one chunk and
// one flush; a delta carrying several tokens (the engine ran ahead of us)
// becomes one chunk with all their text.
func (o *output) stream_(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	rc := http.NewResponseController(w)

	bp := o.s.bufs.Get().(*[]byte)
	defer o.s.bufs.Put(bp)
	hdr := o.header()
	buf := (*bp)[:0]
	if o.j.chat {
		buf = hdr.AppendRoleChunk(buf)
	}
	for {
		text, done, err := o.next()
		if text != "" {
			buf = hdr.AppendChunk(buf, text, "")
		}
		if err != nil {
			o.finish = "error"
			o.s.log.Warn("stream broke after the first token", "diagnostic_code", "stream_interrupted", "request_id", o.j.id, "err", err)
			buf = openai.AppendErrorEvent(buf, openai.Unavailable("stream_interrupted", 0, "generation stopped: %v", err))
			buf = append(buf, openai.Done...)
			_, _ = w.Write(buf)
			*bp = buf
			return
		}
		if done {
			buf = hdr.AppendChunk(buf, "", o.finish)
			if so := o.j.sampling.StreamOptions; so != nil && so.IncludeUsage {
				buf = hdr.AppendUsageChunk(buf, o.usage())
			}
			buf = append(buf, openai.Done...)
		}
		if len(buf) > 0 {
			if _, err := w.Write(buf); err != nil {
				o.cancel() // the client is gone
				*bp = buf
				return
			}
			if flusher != nil {
				flusher.Flush()
			} else {
				_ = rc.Flush()
			}
		}
		if done {
			*bp = buf
			return
		}
		buf = buf[:0]
	}
}

// collect gathers the whole completion and writes one JSON response.
func (o *output) collect(w http.ResponseWriter) int {
	var sb strings.Builder
	for {
		text, done, err := o.next()
		sb.WriteString(text)
		if err != nil {
			e := openai.Internal("engine_error", "generation failed: %v", err)
			openai.WriteError(w, e)
			return e.Status
		}
		if done {
			break
		}
	}
	var v any
	if o.j.chat {
		v = openai.ChatResponse{ID: "chatcmpl-" + o.j.id, Object: "chat.completion", Created: o.j.start.Unix(), Model: o.m.Name,
			Choices: []openai.ChatChoice{{Message: openai.AssistantMessage{Role: "assistant", Content: sb.String()}, FinishReason: o.finish}},
			Usage:   o.usage(), KVTransferParams: o.kvParams}
	} else {
		v = openai.CompletionResponse{ID: "cmpl-" + o.j.id, Object: "text_completion", Created: o.j.start.Unix(), Model: o.m.Name,
			Choices: []openai.CompletionChoice{{Text: sb.String(), FinishReason: o.finish}},
			Usage:   o.usage(), KVTransferParams: o.kvParams}
	}
	b, _ := json.Marshal(v) // plain structs of strings and ints
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
	return http.StatusOK
}
