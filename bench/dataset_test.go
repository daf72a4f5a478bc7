package bench

import (
	"context"
	"strings"
	"testing"
)

func TestLoadDataset(t *testing.T) {
	items, err := LoadDataset(strings.NewReader(`{"prompt":"one two three","max_tokens":3}

{"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi there"}]}
`))
	if err != nil || len(items) != 2 || items[0].MaxTokens != 3 || len(items[1].Messages) != 2 {
		t.Fatalf("%+v, %v", items, err)
	}
	for _, tc := range []struct{ in, want string }{
		{`{"prompt":"a","messages":[{"role":"user","content":"b"}]}`, "not both"},
		{`{"max_tokens":3}`, "neither"},
		{`{"prompt":"a","max_tokens":-1}`, "max_tokens"},
		{`{"prompt":"a","temperature":1}`, "unknown field"},
		{`{"messages":[{"content":"x"}]}`, "no role"},
		{"{\"prompt\":\"a\"}\nnot json", "line 2"},
		{"\n\n", "empty"},
	} {
		if _, err := LoadDataset(strings.NewReader(tc.in)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.in, err, tc.want)
		}
	}
}

// TestDatasetRun sends a dataset's lines in order, wrapping round, to the
// endpoint each line's shape names.
func TestDatasetRun(t *testing.T) {
	f := &fakeServer{Worker: "w"}
	s := f.start(t)
	items, _ := LoadDataset(strings.NewReader("{\"prompt\":\"alpha beta\",\"max_tokens\":2}\n{\"messages\":[{\"role\":\"user\",\"content\":\"gamma\"}]}\n"))
	wl := &Dataset{Items: items, DefaultMaxTokens: 5}
	res, err := Run(context.Background(), wl, Options{Targets: []Target{{URL: s.URL}}, Requests: 5})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Records) != 5 {
		t.Fatalf("%d records", len(res.Records))
	}
	for i, r := range res.Records {
		want := []int{2, 5}[i%2]
		if !r.OK() || r.OutputTokens != want {
			t.Fatalf("record %d: %+v, want %d output tokens", i, r, want)
		}
	}
	completions := 0
	for _, b := range f.Bodies {
		if _, ok := b["prompt"]; ok {
			completions++
		}
	}
	if completions != 3 {
		t.Fatalf("%d completion requests, want 3 of 5", completions)
	}
}
