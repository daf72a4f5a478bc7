package httpapi

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/tandemllm/tandem/anthropic"
	"github.com/tandemllm/tandem/openai"
	"github.com/tandemllm/tandem/openai/chatstream"
)

// errStopSequence stops the chat stream: the translator matched a stop
// sequence (the chat handler cancels the engine when a write fails).
var errStopSequence = errors.New("stop sequence matched")

func stopped(tr *anthropic.Translator) error {
	if tr.Stopped {
		return errStopSequence
	}
	return nil
}

// failAnthropic answers a /v1/messages request with e in Anthropic's shape
// and counts it (requests the chat handler never saw).
func (s *Server) failAnthropic(w http.ResponseWriter, model string, e *anthropic.Error, retryAfter int) {
	s.metrics.requests.WithLabelValues("messages", model, strconv.Itoa(e.Status)).Inc()
	e.Write(w, retryAfter)
}

// handleMessages serves Anthropic's POST /v1/messages by running the chat
// handler on the translated request (see translate.go). The
// anthropic-version and anthropic-beta headers are accepted and not
// checked: the translation is the same for every version.
func (s *Server) handleMessages(w http.ResponseWriter, r *http.Request) {
	const endpoint = "messages"
	body, oe := s.readTranslated(w, r)
	if oe != nil {
		s.failAnthropic(w, "", anthropic.FromOpenAI(oe, oe.Param), oe.RetryAfter)
		return
	}
	req, e := anthropic.Decode(body)
	if e != nil {
		s.failAnthropic(w, "", e, 0)
		return
	}
	creq, e := anthropic.ToChat(req)
	if e != nil {
		s.failAnthropic(w, req.Model, e, 0)
		return
	}
	tr := anthropic.NewTranslator(randomID("msg_"), req.Model, req.StopSequences)
	var (
		buf   []byte
		broke *openai.Error
		head  bool
	)
	onChunk := func(c *chatstream.Chunk) error {
		if c.Error != nil {
			broke = c.Error.ToError(c.Error.Status())
			return nil
		}
		if !req.Stream {
			tr.Chunk(nil, c)
			return stopped(tr)
		}
		buf = tr.Chunk(buf, c)
		if len(buf) == 0 {
			return stopped(tr)
		}
		if !head {
			head = true
			h := w.Header()
			h.Set("Content-Type", "text/event-stream")
			h.Set("Cache-Control", "no-cache")
			h.Set("X-Accel-Buffering", "no")
			w.WriteHeader(http.StatusOK)
		}
		_, err := w.Write(buf)
		buf = buf[:0]
		if err != nil {
			return err
		}
		return stopped(tr)
	}
	flush := func() {
		if f, ok := w.(http.Flusher); ok && head {
			f.Flush()
		}
	}
	sink, err := s.runChat(w, r, endpoint, creq, onChunk, flush)
	if err != nil {
		s.failAnthropic(w, req.Model, &anthropic.Error{Status: http.StatusInternalServerError, Type: "api_error", Message: err.Error()}, 0)
		return
	}
	if sink.status != http.StatusOK {
		ce := sink.chatError()
		anthropic.FromOpenAI(ce, anthropic.ChatParam(ce.Param)).Write(w, ce.RetryAfter) // the chat handler counted it
		return
	}
	if sink.err != nil && !errors.Is(sink.err, errStopSequence) {
		return // the client is gone
	}
	if broke != nil {
		if req.Stream && head {
			_, _ = w.Write(tr.Fail(buf, broke))
			flush()
		} else {
			anthropic.FromOpenAI(broke, "").Write(w, 0)
		}
		return
	}
	if !req.Stream {
		writeJSON(w, http.StatusOK, tr.Result())
		return
	}
	if !head {
		head = true
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
	}
	_, _ = w.Write(tr.End(buf))
	flush()
}
