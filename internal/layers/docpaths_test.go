package layers

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDocPathsExist: every repository path the docs name still exists, so a
// folder move cannot leave a page pointing at a file that is gone. The docs
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
		for _, f := range fields {
			if p, ok := strings.CutPrefix(f, "./"); ok {
				p = strings.TrimSuffix(strings.TrimSuffix(p, "..."), "/")
				if p != "" && !strings.ContainsAny(p, "*<>{}$'\"|") {
					refs = append(refs, docRef{path: p})
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
