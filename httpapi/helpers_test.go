package httpapi

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandemllm/tandem/dispatch"
	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/health"
	"github.com/tandemllm/tandem/router"
	"github.com/tandemllm/tandem/tokenizer"
)

// byteTok is a byte-per-token tokenizer with two special tokens, enough to
// exercise the frontend without a vocabulary file.
type byteTok struct{}

const (
	tokStart engine.Token = 256
	tokEnd   engine.Token = 257
)

var specials = map[string]engine.Token{"<|im_start|>": tokStart, "<|im_end|>": tokEnd}

func (byteTok) Encode(s string) []engine.Token {
	var out []engine.Token
	for len(s) > 0 {
		matched := false
		for text, id := range specials {
			if strings.HasPrefix(s, text) {
				out, s, matched = append(out, id), s[len(text):], true
				break
			}
		}
		if !matched {
			out, s = append(out, engine.Token(s[0])), s[1:]
		}
	}
	return out
}

func (t byteTok) Decode(ids []engine.Token) string {
	var b []byte
	for _, id := range ids {
		b = t.AppendTokenBytes(b, id)
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

func (byteTok) AppendTokenBytes(dst []byte, id engine.Token) []byte {
	switch {
	case id < 256:
		return append(dst, byte(id))
	case id == tokStart:
		return append(dst, "<|im_start|>"...)
	case id == tokEnd:
		return append(dst, "<|im_end|>"...)
	}
	return dst
}
func (byteTok) VocabSize() int                 { return 258 }
func (byteTok) EOS() []engine.Token            { return []engine.Token{tokEnd} }
func (byteTok) BOS() (engine.Token, bool)      { return 0, false }
func (byteTok) IsSpecial(id engine.Token) bool { return id >= 256 }
func (byteTok) Fingerprint() string {
	h := sha256.Sum256([]byte("byteTok"))
	return hex.EncodeToString(h[:])
}

type chatML struct{}

func (chatML) Render(in tokenizer.ChatInput) (string, error) {
	var msgs []struct{ Role, Content string }
	if err := json.Unmarshal(in.Messages, &msgs); err != nil {
		return "", err
	}
	var sb strings.Builder
	for _, m := range msgs {
		sb.WriteString("<|im_start|>" + m.Role + "\n" + m.Content + "<|im_end|>\n")
	}
	if in.AddGenerationPrompt {
		sb.WriteString("<|im_start|>assistant\n")
	}
	return sb.String(), nil
}

type fixture struct {
	srv    *Server
	url    string
	router *router.Router
	board  *health.Board
	reg    *prometheus.Registry
}

func newFixture(t *testing.T, ctxLen int, engines map[string]engine.Generator) *fixture {
	t.Helper()
	return newFixtureCfg(t, DefaultConfig(), ctxLen, engines)
}

func newFixtureCfg(t *testing.T, cfg Config, ctxLen int, engines map[string]engine.Generator) *fixture {
	t.Helper()
	return newFixtureDispatch(t, cfg, dispatch.DefaultConfig(), ctxLen, engines)
}

// newFixtureDispatch is newFixtureCfg with the dispatch layer's
// configuration too (retries, first-token timeout, migration).
func newFixtureDispatch(t *testing.T, cfg Config, dcfg dispatch.Config, ctxLen int, engines map[string]engine.Generator) *fixture {
	t.Helper()
	reg := prometheus.NewRegistry()
	log := slog.New(slog.DiscardHandler)
	board := health.NewBoard(log, reg)
	r := router.New(&router.RoundRobin{}, reg)
	s := New(cfg, dispatch.New(dcfg, r, board, reg, log), board, reg, log)
	s.AddModel(&tokenizer.Model{Name: "m", Tokenizer: byteTok{}, Template: chatML{}, ContextLength: ctxLen})
	for id, g := range engines {
		r.AddWorker(router.Worker{ID: id, Model: "m", Gen: g, Info: engine.Info{Kind: "scripted"}})
	}
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	return &fixture{srv: s, url: hs.URL, router: r, board: board, reg: reg}
}

func toks(s string) []engine.Token { return byteTok{}.Encode(s) }
