package main

import (
	"regexp"
	"strings"
	"testing"
)

// TestHelp: the serving commands' help has examples and grouped flags; no
// help string's backticks become a fake value name; an empty list shows no
// default; bench compare lists only the bench flags it reads; a mistyped
// flag gets the nearest one suggested.
func TestHelp(t *testing.T) {
	flagLine := regexp.MustCompile(`(?m)^\s+(?:-\w, )?--[a-z0-9-]+ (\S+)\s{2,}`)
	types := map[string]bool{"string": true, "int": true, "int64": true, "uint": true, "uint64": true, "float": true, "float64Slice": true,
		"duration": true, "strings": true, "stringArray": true, "ints": true, "bool": true, "stringToString": true, "bytes": true}
	for _, name := range []string{"serve", "frontend", "worker", "doctor", "planner"} {
		out, err := runCLI(t, name, "--help")
		if err != nil {
			t.Fatalf("%s --help: %v", name, err)
		}
		for _, w := range []string{"Examples:\n  tandem " + name, "Global Flags:", "--log-level"} {
			if !strings.Contains(out, w) {
				t.Errorf("%s --help lacks %q", name, w)
			}
		}
		if strings.Contains(out, "\nFlags:\n") || !regexp.MustCompile(`\n(Engine|Cluster|Planner|Security|Observability|HTTP)[^\n]*:\n`).MatchString(out) {
			t.Errorf("%s --help is not grouped:\n%s", name, out)
		}
		for _, m := range flagLine.FindAllStringSubmatch(out, -1) {
			if !types[m[1]] {
				t.Errorf("%s --help: a fake value name in %q", name, m[0])
			}
		}
	}
	for _, args := range [][]string{{"serve", "--help"}, {"bench", "synthetic", "--help"}, {"planner", "--help"}} {
		out, _ := runCLI(t, args...)
		if strings.Contains(out, "(default [])") || strings.Contains(out, "(default )") {
			t.Errorf("%v: an empty list default is shown", args)
		}
	}
	out, _ := runCLI(t, "bench", "compare", "--help")
	if strings.Contains(out, "--url") || strings.Contains(out, "--concurrency") || !strings.Contains(out, "--slo") {
		t.Errorf("bench compare --help lists flags it does not read:\n%s", out)
	}
	_, err := runCLI(t, "serve", "--routr-mode", "kv")
	if err == nil || !strings.Contains(err.Error(), "Did you mean --router-mode?") {
		t.Errorf("mistyped flag: %v", err)
	}
}
