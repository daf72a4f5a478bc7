package vllmpd

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Options tune Forward; the zero value works.
type Options struct {
	// Client sends both legs (nil: http.DefaultClient).
	Client *http.Client
	// RequestID is sent as X-Request-Id on both legs ("" : a fresh one,
	// as vLLM's proxy uses uuid4).
	RequestID string
	// APIKey, if set, is sent as Authorization: Bearer on both legs.
	APIKey string
}

// maxPrefillBody bounds the prefill leg's response: one token of JSON.
const maxPrefillBody = 1 << 20

// Forward runs one request through vLLM's P/D protocol: the prefill leg on
// prefillURL, then the decode leg on decodeURL with the kv_transfer_params
// the prefill leg returned. URLs are base URLs (http://host:port); the
// endpoint is /v1/chat/completions when body has messages, else
// /v1/completions. It returns the decode leg's response unread (streaming
// if body asked for it); the caller closes its Body. A non-2xx prefill leg
// is an error; a 2xx one without kv_transfer_params (a prompt shorter than
// a block, a server without a connector) sends the decode leg the original
// body, which then prefills itself, as vLLM's proxy would.
func Forward(ctx context.Context, prefillURL, decodeURL string, body []byte, opt Options) (*http.Response, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return nil, fmt.Errorf("vllmpd: request body: %w", err)
	}
	path := "/v1/completions"
	if _, ok := fields["messages"]; ok {
		path = "/v1/chat/completions"
	}
	if opt.Client == nil {
		opt.Client = http.DefaultClient
	}
	if opt.RequestID == "" {
		var b [16]byte
		_, _ = rand.Read(b[:])
		opt.RequestID = hex.EncodeToString(b[:])
	}
	pbody, err := PrefillBody(fields)
	if err != nil {
		return nil, err
	}
	presp, err := post(ctx, opt, prefillURL+path, pbody)
	if err != nil {
		return nil, fmt.Errorf("vllmpd: prefill leg: %w", err)
	}
	raw, err := io.ReadAll(io.LimitReader(presp.Body, maxPrefillBody))
	presp.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("vllmpd: prefill leg: reading the response: %w", err)
	}
	if presp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("vllmpd: prefill leg: status %d: %s", presp.StatusCode, strings.TrimSpace(string(raw)))
	}
	var pr struct {
		KVTransferParams json.RawMessage `json:"kv_transfer_params"`
	}
	if err := json.Unmarshal(raw, &pr); err != nil {
		return nil, fmt.Errorf("vllmpd: prefill leg: response: %w", err)
	}
	dbody, err := DecodeBody(fields, pr.KVTransferParams)
	if err != nil {
		return nil, err
	}
	dresp, err := post(ctx, opt, decodeURL+path, dbody)
	if err != nil {
		return nil, fmt.Errorf("vllmpd: decode leg: %w", err)
	}
	return dresp, nil
}

// PrefillBody is the prefill leg's body for the client's fields, as vLLM's
// proxy builds it.
func PrefillBody(fields map[string]json.RawMessage) ([]byte, error) {
	p := make(map[string]json.RawMessage, len(fields)+3)
	for k, v := range fields {
		p[k] = v
	}
	p["kv_transfer_params"] = prefillLegParams
	p["stream"] = json.RawMessage("false")
	p["max_tokens"] = json.RawMessage("1")
	p["max_completion_tokens"] = json.RawMessage("1")
	// A prefill leg returns one token: the client's streaming options and
	// minimum lengths would contradict that (and min_tokens > 1 is a 400).
	for _, k := range []string{"stream_options", "min_tokens", "min_completion_tokens"} {
		delete(p, k)
	}
	b, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("vllmpd: prefill body: %w", err)
	}
	return b, nil
}

// DecodeBody is the decode leg's body: the client's fields unchanged plus
// params verbatim (none when params is empty or null).
func DecodeBody(fields map[string]json.RawMessage, params json.RawMessage) ([]byte, error) {
	d := make(map[string]json.RawMessage, len(fields)+1)
	for k, v := range fields {
		d[k] = v
	}
	delete(d, "kv_transfer_params")
	if t := bytes.TrimSpace(params); len(t) > 0 && string(t) != "null" {
		d["kv_transfer_params"] = params
	}
	b, err := json.Marshal(d)
	if err != nil {
		return nil, fmt.Errorf("vllmpd: decode body: %w", err)
	}
	return b, nil
}

func post(ctx context.Context, opt Options, url string, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("request %s: %w", url, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", opt.RequestID)
	if opt.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+opt.APIKey)
	}
	resp, err := opt.Client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("post %s: %w", url, err)
	}
	return resp, nil
}
