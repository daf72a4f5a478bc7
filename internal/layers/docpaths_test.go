package layers

import (
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDocPathsExist: every repository path the docs name still exists, so a
// folder move cannot leave a page pointing at a file that is gone; and every
// `go test ./pkg -run Name` (or -bench) they give finds Name in pkg. The docs
// are README.md, docs/*.md, docs/benchmarks/**/*.md and deploy/**/README.md.
// A path is checked when it is a Markdown link's target or a backticked
// span of one word that has a slash and ends in a file extension or a
// slash (`nodes/serve/serve.go`, `docs/benchmarks/`), or a word starting
// with ./ inside a backticked command (`go test ./router/kvindex`). Links
// resolve against the page's folder; backticked paths against the
// repository root, then the page's folder.
func TestDocPathsExist(t *testing.T) {
	root := filepath.Join("..", "..")
	for _, page := range docPages(t, root) {
		b, err := os.ReadFile(filepath.Join(root, page))
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			for _, ref := range docPaths(line) {
				if !pathExists(root, page, ref) {
					t.Errorf("%s:%d names %s, which does not exist", page, i+1, ref.path)
				}
			}
			for _, c := range docTestCommands(line) {
				for _, name := range c.names {
					if !testFuncExists(t, root, c.pkg, name) {
						t.Errorf("%s:%d runs %s in ./%s, which has no such test or benchmark", page, i+1, name, c.pkg)
					}
				}
			}
		}
	}
}

// TestDocPathsParse holds the extraction rules to examples.
func TestDocPathsParse(t *testing.T) {
	tests := []struct {
		line string
		want []string
	}{
		{"see `nodes/serve/serve.go` and [the page](docs/testing.md#fault)", []string{"nodes/serve/serve.go", "docs/testing.md"}},
		{"`go test ./router/kvindex -run X` then `./e2e/...`", []string{"router/kvindex", "e2e"}},
		{"`docs/benchmarks/` and `internal/layers/doc.go:12`", []string{"docs/benchmarks/", "internal/layers/doc.go"}},
		{"`text/template`, `application/json`, `/v1/chat/completions`, `~/.cache/tandem/bin/`", nil},
		{"[vLLM](https://github.com/vllm-project/vllm/blob/main/x.py), `http://h/x.md`", nil},
		{"`<dir>/x.md`, `$HOME/x.go`, `a/*.go`, `v0/x.tar.gz`", []string{"v0/x.tar.gz"}},
		{"`kv_events.py` (no slash), `1/2` (no extension)", nil},
		{"`(cd control/operator && go test ./...)`, `cd control/operator && go build ./cmd/tandem-operator`", []string{"control/operator", "control/operator/cmd/tandem-operator"}},
		{"`go build -C control/operator -o /tmp/op ./cmd/tandem-operator`, `cd /tmp && go run ./x`", []string{"control/operator/cmd/tandem-operator"}},
		{"`engine/engines.Config`, `gopkg.in/yaml.v3`, `vllm/distributed/kv_events.py`", nil},
	}
	for _, tt := range tests {
		var got []string
		for _, r := range docPaths(tt.line) {
			got = append(got, r.path)
		}
		if strings.Join(got, "|") != strings.Join(tt.want, "|") {
			t.Errorf("docPaths(%q) = %q, want %q", tt.line, got, tt.want)
		}
	}
}

// TestDocTestCommandsParse holds the go test command rules to examples.
func TestDocTestCommandsParse(t *testing.T) {
	tests := []struct {
		line string
		want []string // pkg:name
	}{
		{"`go test ./router -run '^$' -bench 'Decision|Pick' -benchtime 5000x`", []string{"router:Decision", "router:Pick"}},
		{"`TANDEM_X=1 go test -count=1 -run 'TestMultiProcessFailover/kube' -v ./e2e`", []string{"e2e:TestMultiProcessFailover"}},
		{"`go test ./nodes/serve -run xxx -bench FrontendOverhead -benchtime 3000x -count 3`", []string{"nodes/serve:FrontendOverhead"}},
		{"`go test -run XXX -bench BenchmarkMask -benchtime 1x ./structured`", []string{"structured:BenchmarkMask"}},
		{"`go test ./e2e/kvrouting -v -count=1`, `go test ./...`", nil},
		{"`go test ./a ./b -run X`", nil}, // two packages: which holds X is not said
		{"`(cd control/operator && go test -run TestCRDUpToDate ./api/v1alpha1)`", []string{"control/operator/api/v1alpha1:TestCRDUpToDate"}},
		{"`cd control/operator && go test -run TestOperator ./`", []string{"control/operator:TestOperator"}},
	}
	for _, tt := range tests {
		var got []string
		for _, c := range docTestCommands(tt.line) {
			for _, n := range c.names {
				got = append(got, c.pkg+":"+n)
			}
		}
		if strings.Join(got, " ") != strings.Join(tt.want, " ") {
			t.Errorf("docTestCommands(%q) = %q, want %q", tt.line, got, tt.want)
		}
	}
}

type testCommand struct {
	pkg   string
	names []string // each top-level alternative of -run and -bench
}

var (
	runFlagRE = regexp.MustCompile(`-(?:test\.)?(?:run|bench)[ =]['"]?([^ '"]+)`)
	pkgArgRE  = regexp.MustCompile(`^\./([A-Za-z0-9_/.-]*)`)
)

// docTestCommands returns the `go test` commands of one line that name
// one package and tests in it; patterns that select nothing on purpose
// (^$, xxx) name none.
func docTestCommands(line string) []testCommand {
	var out []testCommand
	for _, m := range backtickRE.FindAllStringSubmatch(line, -1) {
		span := m[1]
		if !strings.Contains(span, "go test") {
			continue
		}
		// Package arguments, under the folder a `cd DIR` or `-C DIR`
		// before them moved to.
		var pkgs []string
		dir, ok := "", true
		fields := strings.Fields(span)
		for i, f := range fields {
			if d, moved := cdTo(fields, i); moved {
				dir, ok = d, repoDir(d)
				continue
			}
			if m := pkgArgRE.FindStringSubmatch(f); m != nil && ok {
				pkgs = append(pkgs, path.Join(dir, m[1]))
			}
		}
		if len(pkgs) != 1 || strings.Contains(pkgs[0], "...") {
			continue
		}
		c := testCommand{pkg: strings.TrimSuffix(pkgs[0], "/")}
		for _, f := range runFlagRE.FindAllStringSubmatch(span, -1) {
			top, _, _ := strings.Cut(f[1], "/")
			for _, alt := range strings.Split(strings.ReplaceAll(top, `\|`, "|"), "|") {
				alt = strings.Trim(alt, "^$")
				switch strings.ToLower(alt) {
				case "", "xxx", ".":
					continue
				}
				c.names = append(c.names, alt)
			}
		}
		if len(c.names) > 0 {
			out = append(out, c)
		}
	}
	return out
}

var testFuncRE = regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Fuzz|Example)\w*)\(`)

// testFuncExists reports whether pattern (a go test -run or -bench
// regular expression's top level) matches a test, benchmark, fuzz target
// or example in pkg's test files, whatever their build tags.
func testFuncExists(t *testing.T, root, pkg, pattern string) bool {
	t.Helper()
	re, err := regexp.Compile(pattern)
	if err != nil {
		t.Errorf("./%s: -run pattern %q: %v", pkg, pattern, err)
		return true
	}
	files, err := filepath.Glob(filepath.Join(root, filepath.FromSlash(pkg), "*_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range testFuncRE.FindAllStringSubmatch(string(b), -1) {
			if re.MatchString(m[1]) {
				return true
			}
		}
	}
	return false
}

// docPages lists the pages TestDocPathsExist reads, relative to root.
func docPages(t *testing.T, root string) []string {
	t.Helper()
	pages := []string{"README.md"}
	for _, dir := range []string{"docs", "docs/benchmarks", "deploy"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(p string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			rel = filepath.ToSlash(rel)
			if d.IsDir() {
				if dir == "docs" && rel != "docs" {
					return filepath.SkipDir // docs/benchmarks is walked on its own
				}
				return nil
			}
			switch {
			case dir == "deploy" && d.Name() == "README.md",
				dir != "deploy" && strings.HasSuffix(d.Name(), ".md"):
				pages = append(pages, rel)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return pages
}

type docRef struct {
	path string
	link bool // a Markdown link's target: resolves against the page's folder first
}

var (
	backtickRE = regexp.MustCompile("`([^`]+)`")
	linkRE     = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	extRE      = regexp.MustCompile(`\.[a-z][a-z0-9]{0,5}$`)
	lineNumRE  = regexp.MustCompile(`(:\d+)+$`)
)

// docPaths returns the repository paths one line of Markdown names.
func docPaths(line string) []docRef {
	var refs []docRef
	for _, m := range backtickRE.FindAllStringSubmatch(line, -1) {
		span := m[1]
		fields := strings.Fields(span)
		if len(fields) == 1 {
			if p, ok := filePath(span); ok {
				refs = append(refs, docRef{path: p})
				continue
			}
		}
		dir, ok := "", true // the folder a `cd DIR` or `-C DIR` moved to
		for i, f := range fields {
			if d, moved := cdTo(fields, i); moved {
				dir, ok = d, repoDir(d)
				continue
			}
			if p, isPath := strings.CutPrefix(strings.TrimRight(f, ");"), "./"); isPath && ok {
				p = strings.TrimSuffix(strings.TrimSuffix(p, "..."), "/")
				if !strings.ContainsAny(p, "*<>{}$'\"|") && (p != "" || dir != "") {
					refs = append(refs, docRef{path: path.Join(dir, p)})
				}
			}
		}
	}
	for _, m := range linkRE.FindAllStringSubmatch(line, -1) {
		target := m[1]
		if strings.Contains(target, "://") || strings.HasPrefix(target, "#") || strings.HasPrefix(target, "mailto:") {
			continue
		}
		target, _, _ = strings.Cut(target, "#")
		if target != "" {
			refs = append(refs, docRef{path: target, link: true})
		}
	}
	return refs
}

// cdTo reports whether fields[i] is the folder argument of a `cd` (also
// `(cd`) or of go's -C flag, and returns that folder.
func cdTo(fields []string, i int) (string, bool) {
	if i == 0 {
		return "", false
	}
	switch fields[i-1] {
	case "cd", "(cd", "-C":
		return strings.TrimSuffix(strings.TrimSuffix(fields[i], ")"), "/"), true
	}
	return "", false
}

// repoDir reports whether a cd target is a folder of the repository
// (relative, no variables), whose ./paths are then checked under it.
func repoDir(d string) bool {
	return d != "" && !strings.HasPrefix(d, "/") && !strings.HasPrefix(d, "~") && !strings.ContainsAny(d, "$*<>{}'\"")
}

// upstreamPaths are the prefixes of files the docs name in other projects'
// trees: vLLM's and SGLang's sources, the tinyllamas checkpoint's files.
var upstreamPaths = []string{"vllm/", "python/sglang/", "managers/", "disaggregation/", "stories260K/"}

// filePath reports whether a one-word backticked span is a repository file
// or folder path, and returns it without a trailing line number.
func filePath(s string) (string, bool) {
	s = strings.TrimPrefix(s, "./")
	first, _, _ := strings.Cut(s, "/")
	if strings.Contains(first, ".") { // a module or host path: gopkg.in/yaml.v3
		return "", false
	}
	for _, p := range upstreamPaths {
		if strings.HasPrefix(s, p) {
			return "", false
		}
	}
	if !strings.Contains(s, "/") || strings.Contains(s, "://") || strings.HasPrefix(s, "/") ||
		strings.HasPrefix(s, "~") || strings.ContainsAny(s, "*<>{}$'\"|=,()[]") {
		return "", false
	}
	s = lineNumRE.ReplaceAllString(s, "")
	if strings.HasSuffix(s, "/") || extRE.MatchString(s) {
		return s, true
	}
	return "", false
}

// pathExists resolves ref against the repository root and the page's
// folder, in the order its kind asks for.
func pathExists(root, page string, ref docRef) bool {
	bases := []string{root, filepath.Join(root, filepath.Dir(page))}
	if ref.link {
		bases[0], bases[1] = bases[1], bases[0]
	}
	for _, base := range bases {
		if _, err := os.Stat(filepath.Join(base, filepath.FromSlash(ref.path))); err == nil {
			return true
		}
	}
	return false
}
