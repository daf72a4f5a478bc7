package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/openai"
	"github.com/tandemllm/tandem/router"
	"github.com/tandemllm/tandem/tokenizer"
)

// output turns one engine stream into the response body.
type output struct {
	s       *Server
	j       *job
	m       *Model
	stream  engine.Stream
	route   *router.Route
	first   engine.Delta
	firstOK bool // first holds a delta (false: the stream ended at once)
	cancel  func()
	detok   *tokenizer.Detokenizer
	stop    stopMatcher

	// Migration (--migration-limit): the request's context and engine
	// request, the workers already failed, the generated ids so far, and
	// whether the current route still awaits its first token.
	ctx        context.Context
	ereq       *engine.Request
	tried      []string
	gen        []engine.Token
	migrations int
	migrated   bool
	needFirst  bool // a migrated route awaits its first token

	completion     int
	prompt, cached int
	kvParams       []byte // the engine's kv_transfer_params, if any
	finish         string
	last           time.Time

	// vLLM's return_token_ids; all zero (and unused) when not requested.
	wantIDs    bool
	ids        []engine.Token // generated ids not yet written: since the last chunk, or all of them (collect)
	promptSent bool           // a completions stream has sent prompt_token_ids
	idText     []byte         // pushIDs' scratch
	idEnds     []int

	chat *chatState // chat parsing (tools, reasoning); nil: text is content
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
			if o.migrate(err) {
				return o.next()
			}
			return "", true, err
		}
		if o.needFirst {
			o.needFirst = false
			o.route.FirstToken(d.CachedTokens)
		}
		now := time.Now()
		o.route.Progress(now)
		if n := len(d.Tokens); n > 0 {
			gap := now.Sub(o.last).Seconds() / float64(n)
			for range n {
				o.m.metrics.itl.Observe(gap)
			}
		}
		o.last = now
	}
	if d.PromptTokens > 0 && !o.migrated {
		// After a migration the engine's prompt includes what was
		// generated; the client's usage stays that of its own prompt.
		o.prompt, o.cached = d.PromptTokens, d.CachedTokens
	}
	if o.s != nil && o.s.cfg.MigrationLimit > 0 {
		o.gen = append(o.gen, d.Tokens...)
	}
	if d.KVTransferParams != nil {
		o.kvParams = d.KVTransferParams
	}
	o.completion += len(d.Tokens)
	var emit string
	var stopped bool
	if o.wantIDs {
		emit, stopped = o.pushIDs(d.Tokens)
	} else {
		emit, stopped = o.stop.push(o.detok.Add(d.Tokens...))
	}
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

// migrate continues a stream whose worker failed after its first token on
// another worker: the prompt plus the tokens already sent, for what is left
// of max_tokens, as Dynamo's --migration-limit does. The detokenizer and
// stop matcher carry on, so the client sees one unbroken stream. It
// reports whether a new stream replaced the broken one.
func (o *output) migrate(cause error) bool {
	if o.s == nil || o.ctx == nil || o.ctx.Err() != nil {
		return false
	}
	limit := o.s.cfg.MigrationLimit
	if o.migrations >= limit {
		return false
	}
	old := o.route
	old.Unreachable() // its stream broke: quarantined until it serves again
	old.Done()
	o.tried = append(o.tried, old.Worker.ID)
	req := *o.ereq
	req.Prompt = append(slices.Clip(o.j.prompt), o.gen...)
	req.KVTransferParams, req.PredictedCachedTokens = nil, 0
	if req.MaxTokens > 0 {
		if req.MaxTokens -= len(o.gen); req.MaxTokens <= 0 {
			return false
		}
	}
	req.MinTokens = max(req.MinTokens-len(o.gen), 0)
	for o.migrations < limit {
		o.migrations++
		rt, err := o.s.router.Route(&router.Request{ID: o.j.id, Model: o.m.Name, Tokens: req.Prompt}, o.tried...)
		if err != nil {
			break
		}
		req.PredictedCachedTokens = rt.Decision.PredictedCachedTokens
		st, err := rt.Worker.Gen.Generate(o.ctx, &req)
		if err != nil {
			if o.ctx.Err() == nil {
				rt.Unreachable()
			}
			rt.Done()
			o.tried = append(o.tried, rt.Worker.ID)
			continue
		}
		o.s.log.Warn("worker failed mid-stream; the request continues on another worker", "diagnostic_code", DiagRequestMigrated,
			"request_id", o.j.id, "from", old.Worker.ID, "to", rt.Worker.ID, "tokens_sent", len(o.gen), "migration", o.migrations, "err", cause)
		o.m.metrics.migrated.Inc()
		o.route, o.stream, o.needFirst, o.migrated = rt, st, true, true
		return true
	}
	o.m.metrics.migrateFailed.Inc()
	return false
}

// pushIDs is next's text step for return_token_ids: it also records the
// delta's ids, all of them (EOS included), or when a stop string ends the
// choice, those up to and including the token that completed it. To know
// which token that is, a delta of several tokens goes through the
// detokenizer one token at a time, noting where each token's text ends;
// the text pushed to the stop matcher is the same as in one Add.
func (o *output) pushIDs(toks []engine.Token) (string, bool) {
	if len(o.stop.stops) == 0 || len(toks) < 2 {
		emit, stopped := o.stop.push(o.detok.Add(toks...))
		o.ids = append(o.ids, toks...)
		return emit, stopped
	}
	text, ends := o.idText[:0], o.idEnds[:0]
	for _, t := range toks {
		text = append(text, o.detok.Add(t)...)
		ends = append(ends, len(text))
	}
	o.idText, o.idEnds = text, ends
	held := len(o.stop.pending)
	emit, stopped := o.stop.push(string(text))
	n := len(toks)
	if stopped {
		// The match ends inside this delta's text (the held text alone
		// holds no stop string): keep the tokens up to the one whose text
		// reaches its end.
		end := o.stop.end - held
		n = 1
		for n < len(toks) && ends[n-1] < end {
			n++
		}
	}
	o.ids = append(o.ids, toks[:n]...)
	return emit, stopped
}

// appendIDsChunk appends a return_token_ids chunk carrying the ids not yet
// sent, and for completions, on the first chunk, the prompt's ids.
func (o *output) appendIDsChunk(dst []byte, h *openai.ChunkHeader, text, finish string) []byte {
	var prompt []engine.Token
	if !o.j.chat && !o.promptSent {
		prompt, o.promptSent = o.j.prompt, true
	}
	dst = h.AppendChunkIDs(dst, text, finish, prompt, o.ids)
	o.ids = o.ids[:0]
	return dst
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

// withUsage adds usage to the chunk that ends buf when the client asked
// for vLLM's continuous_usage_stats (the role chunk of chat goes without:
// it is written before the engine has reported anything).
func (o *output) withUsage(buf []byte) []byte {
	if so := o.j.sampling.StreamOptions; so != nil && so.ContinuousUsageStats {
		return openai.AddUsage(buf, o.usage())
	}
	return buf
}

func (o *output) usage() openai.Usage {
	p := o.prompt
	if p == 0 {
		p = len(o.j.prompt)
	}
	u := openai.NewUsage(p, o.completion, o.cached)
	u.CompletionDetails = o.chat.details()
	return u
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
		if o.wantIDs {
			buf = hdr.AppendRoleChunkIDs(buf, o.j.prompt)
		} else {
			buf = hdr.AppendRoleChunk(buf)
		}
	}
	for {
		text, done, err := o.next()
		if o.chat != nil {
			// Parsed: reasoning, content and tool calls as their own
			// delta fields (return_token_ids' ids ride on the finish
			// chunk then).
			n := len(buf)
			if buf = o.chat.appendChunk(buf, &hdr, o.chat.feed(text, o.completion, done || err != nil)); len(buf) > n {
				buf = o.withUsage(buf)
			}
			o.finish = o.chat.finish(o.finish)
		} else if o.wantIDs {
			// Ids go out with the delta that produced them even while its
			// text is held back (a partial stop string, an incomplete UTF-8
			// sequence), as vLLM sends them; the last may ride on the
			// finish chunk instead.
			if text != "" || len(o.ids) > 0 && (!done || err != nil) {
				buf = o.withUsage(o.appendIDsChunk(buf, &hdr, text, ""))
			}
		} else if text != "" {
			buf = o.withUsage(hdr.AppendChunk(buf, text, ""))
		}
		if err != nil {
			o.finish = "error"
			o.s.log.WarnContext(o.j.ctx, "stream broke after the first token", "diagnostic_code", DiagStreamInterrupted, "request_id", o.j.id, "err", err)
			buf = openai.AppendErrorEvent(buf, openai.Unavailable("stream_interrupted", 0, "generation stopped: %v", err))
			buf = append(buf, openai.Done...)
			_, _ = w.Write(buf)
			*bp = buf
			return
		}
		if done {
			if o.wantIDs {
				buf = o.appendIDsChunk(buf, &hdr, "", o.finish)
			} else {
				buf = hdr.AppendChunk(buf, "", o.finish)
			}
			buf = o.withUsage(buf)
			if so := o.j.sampling.StreamOptions; so != nil && so.IncludeUsage {
				buf = hdr.AppendUsageChunk(buf, o.usage())
			}
			buf = append(buf, openai.Done...)
		}
		if len(buf) > 0 {
			if idle := o.s.cfg.HTTP.WriteIdleTimeout; idle > 0 {
				// Each write gets its own deadline: a client that stops
				// reading is cut after idle, a long stream is not.
				_ = rc.SetWriteDeadline(o.last.Add(idle))
			}
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
		if o.chat != nil {
			o.chat.feed(text, o.completion, done || err != nil)
			o.finish = o.chat.finish(o.finish)
		}
		if err != nil {
			e := openai.Internal("engine_error", "generation failed: %v", err)
			openai.WriteError(w, e)
			return e.Status
		}
		if done {
			break
		}
	}
	var promptIDs, ids []engine.Token // nil (absent) unless return_token_ids
	if o.wantIDs {
		promptIDs, ids = o.j.prompt, o.ids
		if ids == nil {
			ids = []engine.Token{} // [], not absent
		}
	}
	var v any
	if o.j.chat {
		v = openai.ChatResponse{ID: "chatcmpl-" + o.j.id, Object: "chat.completion", Created: o.j.start.Unix(), Model: o.m.Name,
			Choices: []openai.ChatChoice{{Message: o.message(sb.String()), FinishReason: o.finish, TokenIDs: ids}},
			Usage:   o.usage(), PromptTokenIDs: promptIDs, KVTransferParams: o.kvParams}
	} else {
		v = openai.CompletionResponse{ID: "cmpl-" + o.j.id, Object: "text_completion", Created: o.j.start.Unix(), Model: o.m.Name,
			Choices: []openai.CompletionChoice{{Text: sb.String(), FinishReason: o.finish, PromptTokenIDs: promptIDs, TokenIDs: ids}},
			Usage:   o.usage(), KVTransferParams: o.kvParams}
	}
	b, _ := json.Marshal(v) // plain structs of strings and ints
	if idle := o.s.cfg.HTTP.WriteIdleTimeout; idle > 0 {
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(idle))
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
	return http.StatusOK
}

// message is the non-streaming chat reply's message.
func (o *output) message(text string) openai.AssistantMessage {
	if o.chat != nil {
		return o.chat.message()
	}
	return openai.AssistantMessage{Role: "assistant", Content: text}
}
