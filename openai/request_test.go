package openai

import (
	"encoding/json"
	"net/http"
	"testing"
)

func TestDecodeChatErrors(t *testing.T) {
	tests := []struct {
		name   string
		body   string
		status int
		param  string
	}{
		{"empty body", ``, 400, ""},
		{"malformed", `{"model":`, 400, ""},
		{"trailing", `{"model":"m","messages":[{"role":"user","content":"hi"}]} {}`, 400, ""},
		{"missing model", `{"messages":[{"role":"user","content":"hi"}]}`, 400, "model"},
		{"missing messages", `{"model":"m"}`, 400, "messages"},
		{"empty messages", `{"model":"m","messages":[]}`, 400, "messages"},
		{"bad role", `{"model":"m","messages":[{"role":"wizard","content":"hi"}]}`, 400, "messages[0].role"},
		{"content number", `{"model":"m","messages":[{"role":"user","content":5}]}`, 400, "messages[0].content"},
		{"image part", `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`, 400, "messages[0].content[0]"},
		{"max_tokens type", `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":"ten"}`, 400, "max_tokens"},
		{"max_tokens zero", `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":0}`, 400, "max_tokens"},
		{"temperature", `{"model":"m","messages":[{"role":"user","content":"hi"}],"temperature":3}`, 400, "temperature"},
		{"top_p", `{"model":"m","messages":[{"role":"user","content":"hi"}],"top_p":0}`, 400, "top_p"},
		{"n=129", `{"model":"m","messages":[{"role":"user","content":"hi"}],"n":129}`, 400, "n"},
		{"n=2 with kv_transfer_params", `{"model":"m","messages":[{"role":"user","content":"hi"}],"n":2,"kv_transfer_params":{"do_remote_decode":true}}`, 400, "n"},
		// Finding 2 of issue 12: what OpenAI refuses, refused with param.
		{"n=-1", `{"model":"m","messages":[{"role":"user","content":"hi"}],"n":-1}`, 400, "n"},
		{"n=0", `{"model":"m","messages":[{"role":"user","content":"hi"}],"n":0}`, 400, "n"},
		{"tools not objects", `{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[1,"x",null]}`, 400, "tools[0]"},
		{"tools null element", `{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[null]}`, 400, "tools[0]"},
		{"tools object", `{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":{"type":"function"}}`, 400, "tools"},
		{"tool without type", `{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"function":{"name":"f"}}]}`, 400, "tools[0].type"},
		{"tool without name", `{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{}}]}`, 400, "tools[0].function.name"},
		{"stop_token_ids negative", `{"model":"m","messages":[{"role":"user","content":"hi"}],"stop_token_ids":[3,-1]}`, 400, "stop_token_ids[1]"},
		{"max_tokens beyond int64", `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":92233720368547758070}`, 400, "max_tokens"},
		{"stream_options without stream", `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream_options":{"include_usage":true}}`, 400, "stream_options"},
		{"stop wrong type", `{"model":"m","messages":[{"role":"user","content":"hi"}],"stop":5}`, 400, "stop"},
		{"stop empty string", `{"model":"m","messages":[{"role":"user","content":"hi"}],"stop":[""]}`, 400, "stop"},
		{"min over max", `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":2,"min_tokens":3}`, 400, "min_tokens"},
		{"logprobs number", `{"model":"m","messages":[{"role":"user","content":"hi"}],"logprobs":1}`, 400, "logprobs"},
		{"top_logprobs without logprobs", `{"model":"m","messages":[{"role":"user","content":"hi"}],"top_logprobs":2}`, 400, "top_logprobs"},
		{"top_logprobs 21", `{"model":"m","messages":[{"role":"user","content":"hi"}],"logprobs":true,"top_logprobs":21}`, 400, "top_logprobs"},
		{"top_logprobs -1", `{"model":"m","messages":[{"role":"user","content":"hi"}],"logprobs":true,"top_logprobs":-1}`, 400, "top_logprobs"},
		{"response_format type", `{"model":"m","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"xml"}}`, 400, "response_format.type"},
		{"two constraints", `{"model":"m","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_object"},"structured_outputs":{"regex":"a+"}}`, 400, "structured_outputs.regex"},
		{"structured_outputs two", `{"model":"m","messages":[{"role":"user","content":"hi"}],"structured_outputs":{"regex":"a+","choice":["x"]}}`, 400, "structured_outputs"},
		{"tool_choice unknown", `{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}}}`, 400, "tool_choice"},
		{"tool_choice without tools", `{"model":"m","messages":[{"role":"user","content":"hi"}],"tool_choice":"required"}`, 400, "tool_choice"},
		{"return_token_ids string", `{"model":"m","messages":[{"role":"user","content":"hi"}],"return_token_ids":"true"}`, 400, "return_token_ids"},
		{"return_token_ids number", `{"model":"m","messages":[{"role":"user","content":"hi"}],"return_token_ids":1}`, 400, "return_token_ids"},
		{"tools ok", `{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f","parameters":{}}}],"n":0}`, 400, "n"},
		{"return_token_ids object", `{"model":"m","messages":[{"role":"user","content":"hi"}],"return_token_ids":{}}`, 400, "return_token_ids"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, e := DecodeChat([]byte(tc.body))
			if e == nil {
				t.Fatal("no error")
			}
			if e.Status != tc.status || e.Param != tc.param {
				t.Fatalf("status %d param %q, want %d %q (%v)", e.Status, e.Param, tc.status, tc.param, e)
			}
			var body struct {
				Error struct {
					Message string  `json:"message"`
					Type    string  `json:"type"`
					Param   *string `json:"param"`
					Code    *string `json:"code"`
				} `json:"error"`
			}
			if err := json.Unmarshal(e.JSON(), &body); err != nil || body.Error.Message == "" || body.Error.Type == "" {
				t.Fatalf("bad error body %s: %v", e.JSON(), err)
			}
		})
	}
}

func TestDecodeChatOK(t *testing.T) {
	r, e := DecodeChat([]byte(`{"model":"m","messages":[{"role":"user","name":"x","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},{"role":"assistant","content":null}],
		"max_tokens":5,"max_completion_tokens":7,"stop":"END","stream":true,"stream_options":{"include_usage":true},"seed":-3,"top_k":-1}`))
	if e != nil {
		t.Fatal(e)
	}
	if got := r.MaxNewTokens(); got != 7 {
		t.Fatalf("max_completion_tokens should win: %d", got)
	}
	if len(r.Stop) != 1 || r.Stop[0] != "END" || *r.Seed != -3 {
		t.Fatalf("stop/seed: %+v", r.Sampling)
	}
	want := `[{"role":"user","name":"x","content":"a\nb"},{"role":"assistant","content":null}]`
	if string(r.Messages) != want {
		t.Fatalf("messages\n got %s\nwant %s", r.Messages, want)
	}
}

func TestDecodeCompletionPrompts(t *testing.T) {
	tests := []struct {
		body   string
		text   string
		tokens []int32
		param  string
	}{
		{`{"model":"m","prompt":"hello"}`, "hello", nil, ""},
		{`{"model":"m","prompt":["hello"]}`, "hello", nil, ""},
		{`{"model":"m","prompt":[1,2,3]}`, "", []int32{1, 2, 3}, ""},
		{`{"model":"m","prompt":[[4,5]]}`, "", []int32{4, 5}, ""},
		{`{"model":"m","prompt":["a","b"]}`, "", nil, "prompt"},
		{`{"model":"m","prompt":[1,-2]}`, "", nil, "prompt[1]"},
		// Finding 2 of issue 12: null ids are not 0, nesting stops at one level.
		{`{"model":"m","prompt":[null,null,5]}`, "", nil, "prompt[0]"},
		{`{"model":"m","prompt":[5,null]}`, "", nil, "prompt[1]"},
		{`{"model":"m","prompt":[1.5]}`, "", nil, "prompt[0]"},
		{`{"model":"m","prompt":[[[[[7]]]]]}`, "", nil, "prompt"},
		{`{"model":"m","prompt":[[[7]]]}`, "", nil, "prompt"},
		{`{"model":"m","prompt":[["x"]]}`, "", nil, "prompt"},
		{`{"model":"m","prompt":[[1,2],[3]]}`, "", nil, "prompt"},
		{`{"model":"m","prompt":[2147483648]}`, "", nil, "prompt[0]"},
		{`{"model":"m","prompt":[]}`, "", nil, "prompt"},
		{`{"model":"m"}`, "", nil, "prompt"},
		{`{"model":"m","prompt":7}`, "", nil, "prompt"},
		{`{"model":"m","prompt":"x","echo":true}`, "", nil, "echo"},
		{`{"model":"m","prompt":"x","return_token_ids":"yes"}`, "", nil, "return_token_ids"},
		{`{"model":"m","prompt":[1],"return_token_ids":[true]}`, "", nil, "return_token_ids"},
	}
	for _, tc := range tests {
		r, e := DecodeCompletion([]byte(tc.body))
		if tc.param != "" {
			if e == nil || e.Param != tc.param || e.Status != http.StatusBadRequest {
				t.Errorf("%s: err %v, want param %q", tc.body, e, tc.param)
			}
			continue
		}
		if e != nil {
			t.Errorf("%s: %v", tc.body, e)
			continue
		}
		if r.PromptText != tc.text || len(r.PromptTokens) != len(tc.tokens) || r.HasTokens != (tc.tokens != nil) {
			t.Errorf("%s: got %q %v", tc.body, r.PromptText, r.PromptTokens)
		}
	}
}

func TestDecodeReturnTokenIDs(t *testing.T) {
	tests := []struct {
		name  string
		field string // the JSON member, "" for none
		want  bool
	}{
		{"absent", ``, false},
		{"true", `,"return_token_ids":true`, true},
		{"false", `,"return_token_ids":false`, false},
		{"null", `,"return_token_ids":null`, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, e := DecodeChat([]byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]` + tc.field + `}`))
			if e != nil || c.ReturnTokenIDs != tc.want {
				t.Fatalf("chat: %v, %v", e, c)
			}
			p, e := DecodeCompletion([]byte(`{"model":"m","prompt":[1,2]` + tc.field + `}`))
			if e != nil || p.ReturnTokenIDs != tc.want {
				t.Fatalf("completion: %v, %v", e, p)
			}
		})
	}
	_, e := DecodeCompletion([]byte(`{"model":"m","prompt":"x","return_token_ids":"true"}`))
	if e == nil || e.Status != http.StatusBadRequest || e.Code != "invalid_type" || e.Type != "invalid_request_error" {
		t.Fatalf("a string must be a 400 invalid_type: %+v", e)
	}
}
