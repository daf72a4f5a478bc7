package serve

import (
	"bytes"
	"encoding/json"
	"net/http"
	"reflect"
	"testing"
)

// TestLogprobsAcrossRequestPlane: chat logprobs with n = 2 come back the
// same from workers behind the gRPC request plane as from in-process
// ones: the settings cross to the worker, the entries cross back.
func TestLogprobsAcrossRequestPlane(t *testing.T) {
	body, _ := json.Marshal(map[string]any{"model": "tandem-mock", "max_tokens": 5, "seed": 11, "n": 2, "logprobs": true, "top_logprobs": 2,
		"messages": []map[string]string{{"role": "user", "content": "hello there"}}})
	type choice struct {
		Index    int             `json:"index"`
		Logprobs json.RawMessage `json:"logprobs"`
		Message  struct {
			Content string `json:"content"`
		} `json:"message"`
	}
	run := func(plane string) []choice {
		cfg := DefaultConfig()
		cfg.Workers, cfg.RequestPlane = 1, plane
		sys := startTest(t, cfg, defaultTestEngines)
		resp, err := http.Post(sys.URL()+"/v1/chat/completions", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v struct {
			Choices []choice `json:"choices"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %d %v", plane, resp.StatusCode, err)
		}
		return v.Choices
	}
	local, remote := run("inproc"), run("grpc")
	if len(remote) != 2 || !reflect.DeepEqual(local, remote) {
		t.Fatalf("in process %+v\nover gRPC %+v", local, remote)
	}
	var lp struct {
		Content []struct {
			Token       string            `json:"token"`
			TopLogprobs []json.RawMessage `json:"top_logprobs"`
		} `json:"content"`
	}
	if err := json.Unmarshal(remote[1].Logprobs, &lp); err != nil || len(lp.Content) == 0 || len(lp.Content[0].TopLogprobs) != 2 {
		t.Fatalf("logprobs %s: %v", remote[1].Logprobs, err)
	}
}
