package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/tandemllm/tandem/engine"
)

// paramsEcho answers one token and, when the request carried
// kv_transfer_params, returns them wrapped as {"echo": ...}: it shows both
// directions of the pass-through at once.
type paramsEcho struct{ seen [][]byte }

type oneDelta struct {
	d    engine.Delta
	done bool
}

func (s *oneDelta) Recv() (engine.Delta, error) {
	if s.done {
		return engine.Delta{}, io.EOF
	}
	s.done = true
	return s.d, nil
}

func (p *paramsEcho) Generate(_ context.Context, req *engine.Request) (engine.Stream, error) {
	p.seen = append(p.seen, req.KVTransferParams)
	d := engine.Delta{Tokens: []engine.Token{'x'}, Finish: engine.FinishLength, PromptTokens: len(req.Prompt)}
	if req.KVTransferParams != nil {
		d.KVTransferParams = append(append([]byte(`{"echo":`), req.KVTransferParams...), '}')
	}
	return &oneDelta{d: d}, nil
}

func TestKVTransferParamsPassThrough(t *testing.T) {
	cases := []struct {
		name, path, body string
		status           int
		wantEngine       string // what the engine saw ("" = nil)
		wantTop          string // the response's top-level kv_transfer_params ("" = absent)
	}{
		{"chat with params", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":1,"kv_transfer_params":{"do_remote_decode":true}}`,
			200, `{"do_remote_decode":true}`, `{"echo":{"do_remote_decode":true}}`},
		{"completions with params", "/v1/completions", `{"model":"m","prompt":"hi","max_tokens":1,"kv_transfer_params":{"do_remote_prefill":true,"remote_block_ids":[1,2]}}`,
			200, `{"do_remote_prefill":true,"remote_block_ids":[1,2]}`, `{"echo":{"do_remote_prefill":true,"remote_block_ids":[1,2]}}`},
		{"absent", "/v1/completions", `{"model":"m","prompt":"hi","max_tokens":1}`, 200, "", ""},
		{"null", "/v1/completions", `{"model":"m","prompt":"hi","max_tokens":1,"kv_transfer_params":null}`, 200, "", ""},
		{"not an object", "/v1/completions", `{"model":"m","prompt":"hi","max_tokens":1,"kv_transfer_params":[1]}`, 400, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			eng := &paramsEcho{}
			cfg := DefaultConfig()
			cfg.TrustClientKVTransferParams = true // a vLLM-compatible worker behind its proxy
			f := newFixtureCfg(t, cfg, 4096, map[string]engine.Generator{"w0": eng})
			resp, err := http.Post(f.url+tc.path, "application/json", strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			if tc.status != 200 {
				return
			}
			if len(eng.seen) != 1 || string(eng.seen[0]) != tc.wantEngine {
				t.Fatalf("engine saw %q, want %q", eng.seen, tc.wantEngine)
			}
			var top map[string]json.RawMessage
			if err := json.Unmarshal(body, &top); err != nil {
				t.Fatal(err)
			}
			got, ok := top["kv_transfer_params"]
			if tc.wantTop == "" {
				if ok || bytes.Contains(body, []byte("kv_transfer_params")) {
					t.Fatalf("kv_transfer_params present: %s", body)
				}
				return
			}
			if string(got) != tc.wantTop {
				t.Fatalf("kv_transfer_params %s, want %s", got, tc.wantTop)
			}
		})
	}
}

// TestClientKVTransferParamsRefused is the careless client of issue 33's
// first finding: kv_transfer_params naming its own listener as
// remote_host:remote_port. Without --trust-client-kv-transfer-params the
// frontend answers 400 naming the field and the engine never sees them.
func TestClientKVTransferParamsRefused(t *testing.T) {
	for _, path := range []string{"/v1/completions", "/v1/chat/completions"} {
		t.Run(path, func(t *testing.T) {
			eng := &paramsEcho{}
			f := newFixture(t, 4096, map[string]engine.Generator{"w0": eng})
			body := `{"model":"m","prompt":"hi","max_tokens":1,"kv_transfer_params":{"do_remote_prefill":true,"remote_host":"10.9.9.9","remote_port":9,"remote_request_id":"x","remote_engine_id":"p"}}`
			if path == "/v1/chat/completions" {
				body = `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":1,"kv_transfer_params":{"do_remote_prefill":true,"remote_host":"10.9.9.9","remote_port":9}}`
			}
			resp, err := http.Post(f.url+path, "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var e struct {
				Error struct {
					Param string `json:"param"`
				} `json:"error"`
			}
			_ = json.Unmarshal(raw, &e)
			if resp.StatusCode != 400 || e.Error.Param != "kv_transfer_params" {
				t.Fatalf("status %d param %q: %s", resp.StatusCode, e.Error.Param, raw)
			}
			if len(eng.seen) != 0 {
				t.Fatalf("the engine saw the request: %q", eng.seen)
			}
		})
	}
}
