package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestSummarize(t *testing.T) {
	in := strings.Join([]string{
		`{"Action":"run","Package":"p","Test":"TestA"}`,
		`{"Action":"output","Package":"p","Test":"TestA","Output":"=== RUN   TestA\n"}`,
		`{"Action":"output","Package":"p","Test":"TestA","Output":"    a_test.go:12: no shared directory: set TANDEM_SHARED\n"}`,
		`{"Action":"skip","Package":"p","Test":"TestA"}`,
		`{"Action":"output","Package":"p","Test":"TestB","Output":"    b_test.go:3: boom\n"}`,
		`{"Action":"fail","Package":"p","Test":"TestB"}`,
		`{"Action":"output","Package":"p","Output":"FAIL\tp\t0.1s\n"}`,
		`{"Action":"fail","Package":"p"}`,
	}, "\n")
	var out bytes.Buffer
	failed, err := summarize(strings.NewReader(in), &out)
	if err != nil || !failed {
		t.Fatalf("failed %v err %v", failed, err)
	}
	for _, w := range []string{"boom", "FAIL\tp", "1 tests skipped", "no shared directory: set TANDEM_SHARED", "p TestA"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("summary lacks %q:\n%s", w, out.String())
		}
	}
}
