package httpapi

import (
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tandemllm/tandem/dispatch"
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
	ds      *dispatch.Stream // stream as dispatched (nil in tests that replay deltas)
	firstOK bool             // the stream's next delta is the first, which dispatch waited for
	cancel  func()
	detok   *tokenizer.Detokenizer
	stop    stopMatcher

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

	// logprobs (Request.Logprobs): the engine's entries not yet written,
	// one per generated token (all of them for collect), kept in step with
	// the ids by pushIDs; lpOffset is completions' text_offset so far.
	wantLP   bool
	lps      []engine.TokenLogprob
	lpOffset int
	lpBuf    []byte
	lpShort  bool // the engine sent fewer entries than tokens (logged once)

	// index is the choice's index (n > 1).
	index int
	chat  *chatState // chat parsing (tools, reasoning); nil: text is content
}

// next returns the text of the next delta, whether it was the last, and an
// error if the stream broke.
func (o *output) next() (text string, done bool, err error) {
	// The stream migrates on its own (dispatch): a broken stream here
	// broke for good.
	d, err := o.stream.Recv()
	if err == io.EOF {
		// Ended without a finish reason (e.g. the stream was empty).
		o.finish = "stop"
		return o.flush(), true, nil
	}
	if err != nil {
		return "", true, err
	}
	now := time.Now()
	if o.firstOK {
		o.firstOK = false
	} else if n := len(d.Tokens); n > 0 {
		gap := now.Sub(o.last).Seconds() / float64(n)
		for range n {
			o.m.metrics.itl.Observe(gap)
		}
	}
	o.last = now
	if d.PromptTokens > 0 {
		// After a migration deltas carry no usage (dispatch.Stream): the
		// client's usage stays that of its own prompt.
		o.prompt, o.cached = d.PromptTokens, d.CachedTokens
	}
	if d.KVTransferParams != nil {
		o.kvParams = d.KVTransferParams
	}
	o.completion += len(d.Tokens)
	var emit string
	var stopped bool
	if o.wantIDs || o.wantLP {
		emit, stopped = o.pushIDs(d.Tokens, d.Logprobs)
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

// pushIDs is next's text step for return_token_ids: it also records the
// delta's ids, all of them (EOS included), or when a stop string ends the
// choice, those up to and including the token that completed it. To know
// which token that is, a delta of several tokens goes through the
// detokenizer one token at a time, noting where each token's text ends;
// the text pushed to the stop matcher is the same as in one Add.
//
// It serves logprobs the same way: the entries of the tokens kept.
func (o *output) pushIDs(toks []engine.Token, lps []engine.TokenLogprob) (string, bool) {
	if len(o.stop.stops) == 0 || len(toks) < 2 {
		emit, stopped := o.stop.push(o.detok.Add(toks...))
		o.keep(toks, lps)
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
	o.keep(toks[:n], lps)
	return emit, stopped
}

// keep records the ids of toks (return_token_ids) and their logprobs.
// An engine that sent fewer entries than tokens has the missing ones
// filled with the token and no probability (written as -9999, vLLM's
// floor), so positions never shift.
func (o *output) keep(toks []engine.Token, lps []engine.TokenLogprob) {
	if o.wantIDs {
		o.ids = append(o.ids, toks...)
	}
	if !o.wantLP {
		return
	}
	for i, t := range toks {
		if i < len(lps) {
			o.lps = append(o.lps, lps[i])
			continue
		}
		o.lps = append(o.lps, engine.TokenLogprob{Token: t, Logprob: float32(math.Inf(-1))})
		if !o.lpShort && o.s != nil {
			o.lpShort = true
			o.s.log.WarnContext(o.j.ctx, "the engine sent tokens without their logprobs; they read -9999", "diagnostic_code", DiagLogprobsMissing,
				"request_id", o.j.id, "worker", o.ds.Worker())
		}
	}
}

// tokenText is a token's raw bytes as a string, the "token" of logprobs.
func (o *output) tokenText(id engine.Token) string {
	if o.j.sampling.ReturnTokensAsTokenIDs {
		return "token_id:" + strconv.Itoa(int(id))
	}
	return string(o.m.Tokenizer.AppendTokenBytes(nil, id))
}

// encodeLP encodes the pending logprobs (nil when none are pending or none
// were asked for) into o.lpBuf and clears them.
func (o *output) encodeLP() []byte {
	if !o.wantLP || len(o.lps) == 0 {
		return nil
	}
	conv := make([]openai.Logprob, len(o.lps))
	for i, l := range o.lps {
		conv[i] = openai.Logprob{Token: o.tokenText(l.Token), Logprob: l.Logprob}
		if len(l.Top) > 0 {
			top := make([]openai.TopLogprob, len(l.Top))
			for k, t := range l.Top {
				top[k] = openai.TopLogprob{Token: o.tokenText(t.Token), Logprob: t.Logprob}
			}
			conv[i].Top = top
		}
	}
	o.lps = o.lps[:0]
	if o.j.chat {
		o.lpBuf = openai.AppendChatLogprobs(o.lpBuf[:0], conv)
	} else {
		o.lpBuf, o.lpOffset = openai.AppendCompletionLogprobs(o.lpBuf[:0], conv, o.lpOffset)
	}
	return o.lpBuf
}

// pending reports ids or logprobs not yet written.
func (o *output) pending() bool { return len(o.ids) > 0 || len(o.lps) > 0 }

// appendChunk appends a content chunk with whatever the request asked to
// ride along: return_token_ids' ids, logprobs.
func (o *output) appendChunk(dst []byte, h *openai.ChunkHeader, text, finish string) []byte {
	lp := o.encodeLP()
	if o.wantIDs {
		var prompt []engine.Token
		if !o.j.chat && !o.promptSent {
			prompt, o.promptSent = o.j.prompt, true
		}
		dst = h.AppendChunkIDsLogprobs(dst, text, finish, prompt, o.ids, lp)
		o.ids = o.ids[:0]
		return dst
	}
	return h.AppendChunkLogprobs(dst, text, finish, lp)
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
	return openai.ChunkHeader{ID: prefix + o.j.id, Model: o.m.Name, Created: o.j.start.Unix(), Chat: o.j.chat, Index: o.index}
}

// choiceMux serializes the writes of a response's choices (n > 1): each
// choice writes whole SSE events under mu.
type choiceMux struct {
	mu      sync.Mutex
	w       http.ResponseWriter
	flusher http.Flusher
	rc      *http.ResponseController
	failed  bool // a choice's stream broke or the client went away
}

// write writes one or more whole events and flushes them; it reports
// false when the client is gone.
func (m *choiceMux) write(buf []byte, deadline time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !deadline.IsZero() {
		// Each write gets its own deadline: a client that stops reading is
		// cut after idle, a long stream is not.
		_ = m.rc.SetWriteDeadline(deadline)
	}
	if _, err := m.w.Write(buf); err != nil {
		m.failed = true
		return false
	}
	if m.flusher != nil {
		m.flusher.Flush()
	} else {
		_ = m.rc.Flush()
	}
	return true
}

// stream_ writes an SSE response: o's choice and, for n > 1, the others
// (each its own engine stream, all interleaved as their deltas come), then
// usage (summed over the choices) and [DONE].
func (o *output) stream_(w http.ResponseWriter, others ...*output) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	mux := &choiceMux{w: w, flusher: flusher, rc: http.NewResponseController(w)}
	if len(others) == 0 {
		o.streamChoice(mux, true)
		return
	}
	var wg sync.WaitGroup
	for _, c := range others {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.streamChoice(mux, false)
		}()
	}
	o.streamChoice(mux, false)
	wg.Wait()
	all := append([]*output{o}, others...)
	hdr := o.header()
	var buf []byte
	if so := o.j.sampling.StreamOptions; so != nil && so.IncludeUsage && !mux.failed {
		buf = hdr.AppendUsageChunk(buf, sumUsage(all))
	}
	buf = append(buf, openai.Done...)
	var deadline time.Time
	if idle := o.s.cfg.HTTP.WriteIdleTimeout; idle > 0 {
		deadline = time.Now().Add(idle)
	}
	mux.write(buf, deadline)
}

// sumUsage is the usage of a response of several choices: the prompt once,
// the completions summed (as OpenAI and vLLM count n > 1).
func sumUsage(all []*output) openai.Usage {
	u := all[0].usage()
	for _, c := range all[1:] {
		u.CompletionTokens += c.completion
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	return u
}

// streamChoice writes one choice's chunks. Each engine delta becomes one
// chunk and one flush; a delta carrying several tokens (the engine ran
// ahead of us) becomes one chunk with all their text. With last, the
// stream's end (usage, [DONE]) rides on the choice's final write.
func (o *output) streamChoice(mux *choiceMux, last bool) {
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
			// delta fields (return_token_ids' ids and logprobs ride on
			// the finish chunk then).
			n := len(buf)
			if buf = o.chat.appendChunk(buf, &hdr, o.chat.feed(text, o.completion, done || err != nil)); len(buf) > n {
				buf = o.withUsage(buf)
			}
			o.finish = o.chat.finish(o.finish)
		} else if text != "" || o.pending() && (!done || err != nil) {
			// Ids and logprobs go out with the delta that produced them
			// even while its text is held back (a partial stop string, an
			// incomplete UTF-8 sequence), as vLLM sends them; the last may
			// ride on the finish chunk instead.
			buf = o.withUsage(o.appendChunk(buf, &hdr, text, ""))
		}
		if err != nil && o.j.ctx.Err() != nil {
			// The client went away: its own doing, not a broken stream.
			o.finish = "cancelled"
			o.s.log.DebugContext(o.j.ctx, "the client closed the stream", "request_id", o.j.id)
			*bp = buf
			return
		}
		if err != nil {
			o.finish = "error"
			o.s.log.WarnContext(o.j.ctx, "stream broke after the first token", "diagnostic_code", DiagStreamInterrupted, "request_id", o.j.id, "err", err)
			buf = openai.AppendErrorEvent(buf, openai.Unavailable("stream_interrupted", 0, "generation stopped: %v", err))
			if last {
				buf = append(buf, openai.Done...)
			}
			mux.write(buf, time.Time{})
			mux.mu.Lock()
			mux.failed = true
			mux.mu.Unlock()
			*bp = buf
			return
		}
		if done {
			buf = o.withUsage(o.appendChunk(buf, &hdr, "", o.finish))
			if so := o.j.sampling.StreamOptions; last && so != nil && so.IncludeUsage {
				buf = hdr.AppendUsageChunk(buf, o.usage())
			}
			if last {
				buf = append(buf, openai.Done...)
			}
		}
		if len(buf) > 0 {
			var deadline time.Time
			if idle := o.s.cfg.HTTP.WriteIdleTimeout; idle > 0 {
				deadline = o.last.Add(idle)
			}
			if !mux.write(buf, deadline) {
				o.cancel() // the client is gone
				*bp = buf
				return
			}
		}
		if done {
			*bp = buf
			return
		}
		buf = buf[:0]
	}
}

// gather reads the whole choice.
func (o *output) gather() (string, error) {
	var sb strings.Builder
	for {
		text, done, err := o.next()
		sb.WriteString(text)
		if o.chat != nil {
			o.chat.feed(text, o.completion, done || err != nil)
			o.finish = o.chat.finish(o.finish)
		}
		if err != nil {
			return "", err
		}
		if done {
			return sb.String(), nil
		}
	}
}

// collect gathers the whole completion (every choice, for n > 1, read
// concurrently) and writes one JSON response.
func (o *output) collect(w http.ResponseWriter, others ...*output) int {
	all := append([]*output{o}, others...)
	texts := make([]string, len(all))
	errs := make([]error, len(all))
	var wg sync.WaitGroup
	for i, c := range all[1:] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			texts[i+1], errs[i+1] = c.gather()
		}()
	}
	texts[0], errs[0] = o.gather()
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			e := openai.Internal("engine_error", "generation failed: %v", err)
			openai.WriteError(w, e)
			return e.Status
		}
	}
	var promptIDs []engine.Token // nil (absent) unless return_token_ids
	if o.wantIDs {
		promptIDs = o.j.prompt
	}
	var v any
	if o.j.chat {
		r := openai.ChatResponse{ID: "chatcmpl-" + o.j.id, Object: "chat.completion", Created: o.j.start.Unix(), Model: o.m.Name,
			Usage: sumUsage(all), PromptTokenIDs: promptIDs, KVTransferParams: o.kvParams}
		for i, c := range all {
			r.Choices = append(r.Choices, openai.ChatChoice{Index: c.index, Message: c.message(texts[i]),
				FinishReason: c.finish, TokenIDs: c.allIDs(), Logprobs: c.allLogprobs()})
		}
		v = r
	} else {
		r := openai.CompletionResponse{ID: "cmpl-" + o.j.id, Object: "text_completion", Created: o.j.start.Unix(), Model: o.m.Name,
			Usage: sumUsage(all), KVTransferParams: o.kvParams}
		for i, c := range all {
			r.Choices = append(r.Choices, openai.CompletionChoice{Index: c.index, Text: texts[i], FinishReason: c.finish,
				PromptTokenIDs: promptIDs, TokenIDs: c.allIDs(), Logprobs: c.allLogprobs()})
		}
		v = r
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

// allIDs is a collected choice's token_ids: nil (absent) unless
// return_token_ids, else every id ([] when none).
func (o *output) allIDs() []engine.Token {
	if !o.wantIDs {
		return nil
	}
	if o.ids == nil {
		return []engine.Token{}
	}
	return o.ids
}

// allLogprobs is a collected choice's logprobs: nil (null) unless asked
// for, else every token's (an empty list when none was generated).
func (o *output) allLogprobs() openai.RawLogprobs {
	if !o.wantLP {
		return nil
	}
	if len(o.lps) == 0 {
		if o.j.chat {
			return openai.RawLogprobs(openai.AppendChatLogprobs(nil, nil))
		}
		b, _ := openai.AppendCompletionLogprobs(nil, nil, 0)
		return openai.RawLogprobs(b)
	}
	return slices.Clone(o.encodeLP())
}

// message is the non-streaming chat reply's message.
func (o *output) message(text string) openai.AssistantMessage {
	if o.chat != nil {
		return o.chat.message()
	}
	return openai.AssistantMessage{Role: "assistant", Content: text}
}
