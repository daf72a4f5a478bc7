package httpapi

import (
	"fmt"
	"net/http"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/openai"
	"github.com/tandemllm/tandem/tokenizer"
)

// tokenizeModel resolves a /tokenize or /detokenize model: named, or,
// left out as vLLM allows, the server's only model.
func (s *Server) tokenizeModel(w http.ResponseWriter, endpoint, name string) *Model {
	if name != "" {
		return s.lookup(w, endpoint, name)
	}
	s.mu.RLock()
	var only *Model
	n := len(s.models)
	for _, m := range s.models {
		only = m
	}
	s.mu.RUnlock()
	if n != 1 {
		s.fail(w, endpoint, "", openai.BadRequest("model", "missing_field", "model is required: this server has %d models", n))
		return nil
	}
	return only
}

// handleTokenize serves POST /tokenize as vLLM does
// (vllm/entrypoints/openai/serving_tokenization.py): a prompt, or messages
// rendered through the model's chat template, to token ids with their
// count and the model's context length.
func (s *Server) handleTokenize(w http.ResponseWriter, r *http.Request) {
	const endpoint = "tokenize"
	req, ok := readDecoded(s, w, r, endpoint, openai.DecodeTokenize)
	if !ok {
		return
	}
	m := s.tokenizeModel(w, endpoint, req.Model)
	if m == nil {
		return
	}
	text := ""
	if req.Chat() {
		var err error
		text, err = m.Template.Render(tokenizer.ChatInput{Messages: req.Messages, Tools: req.Tools, Kwargs: req.ChatTemplateKwargs,
			AddGenerationPrompt: req.GenerationPrompt()})
		if err != nil {
			s.fail(w, endpoint, m.Name, openai.BadRequest("messages", "template_error", "rendering the chat template: %v", err))
			return
		}
	} else {
		text = *req.Prompt
	}
	var ids []engine.Token
	if req.SpecialTokens() {
		ids = s.encode(m, text)
	} else {
		ids = m.Tokenizer.Encode(text)
	}
	resp := openai.TokenizeResponse{Count: len(ids), MaxModelLen: m.ContextLength, Tokens: ids}
	if resp.Tokens == nil {
		resp.Tokens = []engine.Token{}
	}
	if req.ReturnTokenStrs {
		resp.TokenStrs = make([]string, len(ids))
		for i, id := range ids {
			resp.TokenStrs[i] = string(m.Tokenizer.AppendTokenBytes(nil, id))
		}
	}
	s.metrics.requests.WithLabelValues(endpoint, m.Name, "200").Inc()
	writeJSON(w, http.StatusOK, resp)
}

// handleDetokenize serves POST /detokenize as vLLM does: token ids to
// their text (special tokens rendered, as vLLM's tokenizer.decode does).
func (s *Server) handleDetokenize(w http.ResponseWriter, r *http.Request) {
	const endpoint = "detokenize"
	req, ok := readDecoded(s, w, r, endpoint, openai.DecodeDetokenize)
	if !ok {
		return
	}
	m := s.tokenizeModel(w, endpoint, req.Model)
	if m == nil {
		return
	}
	vocab := m.Tokenizer.VocabSize()
	for i, t := range req.IDs {
		if int(t) >= vocab {
			s.fail(w, endpoint, m.Name, openai.BadRequest(fmt.Sprintf("tokens[%d]", i), "invalid_value", "token id %d is outside the vocabulary (size %d)", t, vocab))
			return
		}
	}
	s.metrics.requests.WithLabelValues(endpoint, m.Name, "200").Inc()
	writeJSON(w, http.StatusOK, openai.DetokenizeResponse{Prompt: m.Tokenizer.Decode(req.IDs)})
}

// readDecoded reads a JSON request body within the server's limits and
// decodes it, answering a refusal itself (false).
func readDecoded[T any](s *Server, w http.ResponseWriter, r *http.Request, endpoint string, decode func([]byte) (T, *openai.Error)) (T, bool) {
	var v T
	if e := checkContentType(r); e != nil {
		s.fail(w, endpoint, "", e)
		return v, false
	}
	body, release, e := s.readBody(w, r)
	if e == nil {
		v, e = decode(body)
	}
	release()
	if e != nil {
		s.fail(w, endpoint, "", e)
		return v, false
	}
	return v, true
}
