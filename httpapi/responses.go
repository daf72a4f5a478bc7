package httpapi

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandemllm/tandem/openai"
	"github.com/tandemllm/tandem/openai/chatstream"
	"github.com/tandemllm/tandem/openai/responses"
)

// registerResponsesStore exposes the /v1/responses store's fill: a store
// that evicts responses before their TTL is too small for its clients'
// previous_response_id chains (--responses-store-size, -bytes).
func registerResponsesStore(reg prometheus.Registerer, st *responses.Store) {
	if reg == nil {
		return
	}
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tandem_frontend_responses_stored",
			Help: "Finished /v1/responses held for previous_response_id."}, func() float64 { n, _, _ := st.Stats(); return float64(n) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tandem_frontend_responses_stored_bytes",
			Help: "Bytes of the stored responses' conversations (bounded by --responses-store-bytes)."}, func() float64 { _, b, _ := st.Stats(); return float64(b) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tandem_frontend_responses_evicted_total",
			Help: "Stored responses dropped for room before their TTL (--responses-store-size, --responses-store-bytes); a later previous_response_id naming one gets 404."},
			func() float64 { _, _, e := st.Stats(); return float64(e) }),
	)
}

// randomID is prefix and 24 random bytes in hex: ids that name stored
// conversations are unguessable, and never taken from the client
// (X-Request-Id), so no client can pick another's.
func randomID(prefix string) string {
	var b [24]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24)
	return prefix + hex.EncodeToString(b[:])
}

// readTranslated checks the Content-Type and reads the body of a
// translated API's request, bounded as chat's are. The body's share of
// the server's body budget is given back before it returns: the chat
// request built from it takes its own.
func (s *Server) readTranslated(w http.ResponseWriter, r *http.Request) ([]byte, *openai.Error) {
	if e := checkContentType(r); e != nil {
		return nil, e
	}
	body, release, e := s.readBody(w, r)
	if e != nil {
		release()
		return nil, e
	}
	// The decoders copy what they keep, so the reservation can go now.
	out := append([]byte(nil), body...)
	release()
	return out, nil
}

// handleResponses serves POST /v1/responses by running the chat handler
// on the translated request (see translate.go).
func (s *Server) handleResponses(w http.ResponseWriter, r *http.Request) {
	const endpoint = "responses"
	body, e := s.readTranslated(w, r)
	var req *responses.Request
	if e == nil {
		req, e = responses.Decode(body)
	}
	if e != nil {
		s.fail(w, endpoint, "", e)
		return
	}
	var history []chatstream.Message
	if req.PreviousResponseID != "" {
		st, ok := s.responses.Get(req.PreviousResponseID)
		if !ok {
			s.fail(w, endpoint, req.Model, s.responseGone(req.PreviousResponseID, "previous_response_id"))
			return
		}
		history = st.Conversation
	}
	creq, conv, e := responses.ToChat(req, history)
	if e != nil {
		s.fail(w, endpoint, req.Model, e)
		return
	}
	resp := responses.NewResponse(randomID("resp_"), time.Now().Unix(), req)
	tr := responses.NewTranslator(resp)
	var (
		buf     []byte
		started bool
		broke   *openai.Error // an in-band error after the stream began
	)
	onChunk := func(c *chatstream.Chunk) error {
		if c.Error != nil {
			broke = c.Error.ToError(c.Error.Status())
			return nil
		}
		if !req.Stream {
			tr.Chunk(nil, c)
			return nil
		}
		if !started {
			started = true
			h := w.Header()
			h.Set("Content-Type", "text/event-stream")
			h.Set("Cache-Control", "no-cache")
			h.Set("X-Accel-Buffering", "no")
			w.WriteHeader(http.StatusOK)
			buf = tr.Start(buf)
		}
		buf = tr.Chunk(buf, c)
		_, err := w.Write(buf)
		buf = buf[:0]
		return err
	}
	flush := func() {
		if f, ok := w.(http.Flusher); ok && started {
			f.Flush()
		}
	}
	sink, err := s.runChat(w, r, endpoint, creq, onChunk, flush)
	if err != nil {
		s.fail(w, endpoint, req.Model, openai.Internal("encode_failed", "building the chat request: %v", err))
		return
	}
	if sink.status != http.StatusOK {
		ce := sink.chatError()
		ce.Param = responses.ChatParam(ce.Param)
		openai.WriteError(w, ce) // the chat handler counted it
		return
	}
	if sink.err != nil {
		return // the client is gone
	}
	if broke != nil {
		if req.Stream {
			_, _ = w.Write(tr.Fail(buf, broke))
			flush()
		} else {
			openai.WriteError(w, broke)
		}
		return
	}
	if req.Stream {
		if !started {
			// A chat stream with no chunk at all: still a whole stream.
			started = true
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(http.StatusOK)
			buf = tr.Start(buf)
		}
		_, _ = w.Write(tr.End(buf))
		flush()
	} else {
		tr.End(nil)
		writeJSON(w, http.StatusOK, resp)
	}
	if resp.Store {
		s.responses.Put(resp, tr.Conversation(conv))
	}
}

// responseGone is the 404 for a response id that is not in the store.
// The store cannot tell an id it never held from one it let go, so the
// message names every cause and the bounds (vLLM answers an unknown
// previous_response_id with 404 too: serving_responses.py).
func (s *Server) responseGone(id, param string) *openai.Error {
	cfg := s.responses.Config()
	return &openai.Error{Status: http.StatusNotFound, Type: "invalid_request_error", Param: param, Code: "previous_response_not_found",
		Message: "Response with id '" + id + "' not found: it was never created here, was created with store=false, or has left this " +
			"server's response store, which keeps the last " + itoa(cfg.Size) + " responses for " + cfg.TTL.String() +
			" (--responses-store-size, --responses-store-ttl); send the whole conversation as input instead."}
}

// handleGetResponse serves GET /v1/responses/{id}: a stored response.
func (s *Server) handleGetResponse(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	st, ok := s.responses.Get(id)
	if !ok {
		e := s.responseGone(id, "response_id")
		e.Code = "not_found"
		openai.WriteError(w, e)
		return
	}
	writeJSON(w, http.StatusOK, st.Response)
}

// handleDeleteResponse serves DELETE /v1/responses/{id}.
func (s *Server) handleDeleteResponse(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !s.responses.Delete(id) {
		e := s.responseGone(id, "response_id")
		e.Code = "not_found"
		openai.WriteError(w, e)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": id, "object": "response.deleted", "deleted": true})
}
