// Command testsummary reads `go test -json` on stdin, prints what plain
// `go test` would (each package's result line, the output of failed
// tests), and ends with every skipped test and its reason, grouped by
// reason, so that skips are seen: most reasons name what installs the
// missing piece (a fixtures directory, a fetched tokenizer, a built
// binary). scripts/test.sh runs it.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
)

type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

// reasonLine is a t.Skip message as go test prints it: "    file_test.go:12: why".
var reasonLine = regexp.MustCompile(`^\s+\S+_test\.go:\d+: (.*)$`)

func main() {
	failed, err := summarize(os.Stdin, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(2)
	}
	if failed {
		os.Exit(1)
	}
}

func summarize(in io.Reader, out io.Writer) (failed bool, err error) {
	type key struct{ pkg, test string }
	logs := map[key][]string{}
	reasons := map[string][]string{}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			fmt.Fprintln(out, sc.Text()) // build errors come as plain text
			continue
		}
		k := key{e.Package, e.Test}
		switch e.Action {
		case "output":
			if e.Test == "" {
				if !strings.HasPrefix(e.Output, "=== ") && !strings.HasPrefix(e.Output, "PASS\n") {
					fmt.Fprint(out, e.Output)
				}
				continue
			}
			if len(logs[k]) < 200 {
				logs[k] = append(logs[k], e.Output)
			}
		case "fail":
			failed = true
			if e.Test != "" {
				fmt.Fprint(out, strings.Join(logs[k], ""))
			}
			delete(logs, k)
		case "skip":
			if e.Test != "" {
				why := "(no reason given)"
				for _, l := range logs[k] {
					if m := reasonLine.FindStringSubmatch(strings.TrimRight(l, "\n")); m != nil {
						why = m[1]
					}
				}
				reasons[why] = append(reasons[why], e.Package+" "+e.Test)
			}
			delete(logs, k)
		case "pass":
			delete(logs, k)
		}
	}
	if err := sc.Err(); err != nil {
		return failed, err
	}
	n := 0
	for _, ts := range reasons {
		n += len(ts)
	}
	if n == 0 {
		fmt.Fprintln(out, "\nno test skipped")
		return failed, nil
	}
	whys := make([]string, 0, len(reasons))
	for w := range reasons {
		whys = append(whys, w)
	}
	sort.Slice(whys, func(i, j int) bool {
		if len(reasons[whys[i]]) != len(reasons[whys[j]]) {
			return len(reasons[whys[i]]) > len(reasons[whys[j]])
		}
		return whys[i] < whys[j]
	})
	fmt.Fprintf(out, "\n%d tests skipped; each reason says what runs them:\n", n)
	for _, w := range whys {
		ts := reasons[w]
		sort.Strings(ts)
		fmt.Fprintf(out, "\n  %s\n", w)
		for _, t := range ts {
			fmt.Fprintf(out, "      %s\n", t)
		}
	}
	return failed, nil
}
