package upstream

import (
	"encoding/json"
	"testing"

	"github.com/tandemllm/tandem/engine"
)

// FuzzLogprobsParsers: no server answer makes the logprobs readers panic,
// and none yields more entries than tokens or more alternatives than asked.
func FuzzLogprobsParsers(f *testing.F) {
	for _, s := range []string{
		`{"choices":[{"text":"a","token_ids":[5],"logprobs":{"tokens":["token_id:5"],"token_logprobs":[-0.5],"top_logprobs":[{"token_id:5":-0.5,"token_id:6":-1}]}}]}`,
		`{"choices":[{"token_ids":[5],"logprobs":{"tokens":["x","y"],"token_logprobs":[null],"top_logprobs":[null]}}]}`,
		`{"choices":[{"token_ids":[1,2],"logprobs":{"tokens":["token_id:-1","token_id:99999999999"]}}]}`,
		`[[-0.5,5,null],[null,6,"x"]]`, `[[1]]`, `[["a","b"]]`, `null`,
	} {
		f.Add([]byte(s), 3)
	}
	f.Fuzz(func(t *testing.T, b []byte, top int) {
		top = max(0, min(top, engine.MaxTopLogprobs))
		e := &Engine{}
		var c completion
		if json.Unmarshal(b, &c) == nil && len(c.Choices) > 0 {
			d := engine.Delta{Tokens: c.Choices[0].TokenIDs}
			if err := e.applyLogprobs(&c, &d, top); err == nil {
				check(t, d.Logprobs, len(d.Tokens), top)
			}
		}
		var rows []json.RawMessage
		if json.Unmarshal(b, &rows) == nil {
			for n := range 3 {
				if lps, err := sglangLogprobs(rows, rows, n, top); err == nil {
					check(t, lps, n, top)
				}
			}
		}
	})
}

func check(t *testing.T, lps []engine.TokenLogprob, tokens, top int) {
	t.Helper()
	if len(lps) > tokens {
		t.Fatalf("%d entries for %d tokens", len(lps), tokens)
	}
	for _, lp := range lps {
		if len(lp.Top) > top {
			t.Fatalf("%d alternatives, asked for %d", len(lp.Top), top)
		}
	}
}
