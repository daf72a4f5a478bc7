package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Every command the docs show is checked here, so that a page that drifts
// from the code fails the suite:
//
//   - TestDocCommands reads every shell block of README.md, docs/*.md and
//     docs/benchmarks/*.md through bash itself (docRecorder: each command is
//     expanded as bash would, recorded, and not run) and every backticked
//     `tandem ...` span of their prose, and validates each command against
//     the code: a tandem command line must be accepted by the built binary
//     (its subcommand path exists, every flag is one of that subcommand's
//     and its value parses: `tandem ARGS --help` exits 0), a `go test`
//     names existing packages and tests, a `go build`/`go run` an existing
//     package, a script exists and is executable. A program that is not
//     Tandem's (vLLM, kubectl, docker, ...) must be listed in docExternal
//     with the reason it is not run.
//   - TestDocQuickStarts runs the short ones exactly as written (bash, the
//     page's own text): the README's serve and curl, the native quick
//     start, the security quick start, the multi-process disaggregation
//     block and the doctor line that checks it.

// docPage is one Markdown file, relative to the repository root.
type docPage struct {
	path  string
	lines []string
}

// docBlock is one fenced code block.
type docBlock struct {
	page  string
	start int // the page's line number of the block's first line
	lang  string
	text  string
}

// shellLangs are the fence languages whose blocks are commands.
var shellLangs = map[string]bool{"sh": true, "bash": true, "shell": true, "console": true}

// docPagesForCommands lists README.md, docs/*.md and docs/benchmarks/*.md.
func docPagesForCommands(t *testing.T) []docPage {
	t.Helper()
	root := filepath.Join("..")
	names := []string{"README.md"}
	for _, glob := range []string{"docs/*.md", "docs/benchmarks/*.md"} {
		m, err := filepath.Glob(filepath.Join(root, glob))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range m {
			rel, _ := filepath.Rel(root, p)
			names = append(names, filepath.ToSlash(rel))
		}
	}
	var pages []docPage
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(root, n))
		if err != nil {
			t.Fatal(err)
		}
		pages = append(pages, docPage{path: n, lines: strings.Split(string(b), "\n")})
	}
	return pages
}

// blocks returns the page's fenced code blocks.
func (p docPage) blocks() []docBlock {
	var out []docBlock
	var cur *docBlock
	var body []string
	for i, line := range p.lines {
		if strings.HasPrefix(line, "```") {
			if cur == nil {
				cur = &docBlock{page: p.path, start: i + 2, lang: strings.TrimSpace(line[3:])}
				body = body[:0]
				continue
			}
			cur.text = strings.Join(body, "\n") + "\n"
			out = append(out, *cur)
			cur = nil
			continue
		}
		if cur != nil {
			body = append(body, line)
		}
	}
	return out
}

// commandWords are the first words (after VAR=value assignments) that make
// an untagged block of docs/benchmarks/*.md a shell block; an untagged
// block starting otherwise is output. README.md and docs/*.md tag every
// block (TestDocCommands refuses an untagged one there).
var commandWords = regexp.MustCompile(`^(?:[A-Z_][A-Z0-9_]*=\S*\s+)*(?:tandem|go|git|curl|sudo|taskset|nice|gcc|for|cd|scripts/\S+|\./\S+|/tmp/\S+)(?:\s|$)`)

func (b docBlock) isShell() bool {
	if shellLangs[b.lang] {
		return true
	}
	if b.lang != "" {
		return false
	}
	for line := range strings.SplitSeq(b.text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		return commandWords.MatchString(line)
	}
	return false
}

// docCommand is one command a page shows.
type docCommand struct {
	page   string
	line   int
	args   []string
	inline bool // a backticked span of prose: a flag may be named without its value
}

func (c docCommand) String() string {
	return fmt.Sprintf("%s:%d: %s", c.page, c.line, strings.Join(c.args, " "))
}

// docRecorder is sourced before a block: with extdebug, the DEBUG trap
// records every simple command, expanded by bash exactly as it would run
// (variables, quotes, loops), and skips it; only assignments and compound
// commands run. Programs found through PATH inside a command substitution
// are recorded by command_not_found_handle (PATH leads nowhere). A record
// is the block's line, the argument count and the arguments, NUL-separated.
const docRecorder = `set -f
shopt -s extdebug
PATH=/nonexistent
__docrec() {
	local a
	for a in "$@"; do
		if ! [[ $a =~ ^[A-Za-z_][A-Za-z0-9_]*= ]]; then
			printf '%s\0' "$__docline" "$#" "$@" >>"$__DOCREC"
			return 1
		fi
	done
	return 0
}
command_not_found_handle() { __docrec "$@"; return 0; }
__doctrap() {
	case $BASH_COMMAND in
	for\ * | while\ * | until\ * | if\ * | case\ * | select\ * | '[['* | '(('* | __doc* | source\ * | wait) return 0 ;;
	esac
	__docline=$1
	eval "__docrec $BASH_COMMAND"
}
trap '__doctrap $LINENO' DEBUG
`

// recordBlock runs a block through docRecorder and returns its commands.
func recordBlock(t *testing.T, b docBlock) ([]docCommand, error) {
	t.Helper()
	dir := t.TempDir()
	script := filepath.Join(dir, "block.sh")
	rec := filepath.Join(dir, "rec")
	pre := filepath.Join(dir, "pre.sh")
	if err := os.WriteFile(script, []byte(b.text), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pre, []byte(docRecorder), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "--norc", "--noprofile", "-c", `source "$1"; source "$2"; wait`, "bash", pre, script)
	cmd.Dir = dir // what a block writes (> api-keys) lands here
	cmd.Env = append(os.Environ(), "__DOCREC="+rec)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("bash: %w: %s", err, stderr.String())
	}
	if stderr.Len() > 0 {
		return nil, fmt.Errorf("bash: %s", stderr.String())
	}
	raw, err := os.ReadFile(rec)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	fields := strings.Split(strings.TrimSuffix(string(raw), "\x00"), "\x00")
	var out []docCommand
	for len(fields) >= 2 {
		line, err1 := strconv.Atoi(fields[0])
		n, err2 := strconv.Atoi(fields[1])
		if err1 != nil || err2 != nil || n < 0 || n > len(fields)-2 {
			return nil, fmt.Errorf("bad record %q", fields[:2])
		}
		out = append(out, docCommand{page: b.page, line: b.start + line - 1, args: fields[2 : 2+n]})
		fields = fields[2+n:]
	}
	return out, nil
}

// inlineTandem returns the `tandem SUBCOMMAND ...` spans of a page's prose
// (outside code blocks), split into words: quotes grouped, an alternative
// a|b taken as a.
func inlineTandem(p docPage, subcommands map[string]bool) []docCommand {
	var out []docCommand
	in := false
	for i, line := range p.lines {
		if strings.HasPrefix(line, "```") {
			in = !in
			continue
		}
		if in {
			continue
		}
		for _, m := range backtickSpan.FindAllStringSubmatch(line, -1) {
			words := splitWords(m[1])
			if len(words) < 2 || words[0] != "tandem" {
				continue
			}
			sub, _, _ := strings.Cut(words[1], "|")
			if !subcommands[sub] {
				continue // `tandem v0.14.0 (commit ...)`: output, not a command
			}
			for j, w := range words {
				if !strings.HasPrefix(w, "-") || !strings.Contains(w, "|") {
					words[j], _, _ = strings.Cut(w, "|")
				}
			}
			out = append(out, docCommand{page: p.path, line: i + 1, args: words, inline: true})
		}
	}
	return out
}

var backtickSpan = regexp.MustCompile("`([^`]+)`")

// splitWords splits s at spaces outside single or double quotes.
func splitWords(s string) []string {
	var out []string
	var cur strings.Builder
	var quote rune
	has := false
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			quote, has = r, true
		case r == ' ' || r == '\t':
			if has || cur.Len() > 0 {
				out = append(out, cur.String())
			}
			cur.Reset()
			has = false
		default:
			cur.WriteRune(r)
		}
	}
	if has || cur.Len() > 0 {
		out = append(out, cur.String())
	}
	return out
}

// docExternal are the programs the docs show that are not Tandem's, each
// with why its lines are not run or validated here.
var docExternal = map[string]string{
	"curl":          "HTTP client; TestDocQuickStarts runs the quick starts' curl lines",
	"head":          "shell utility",
	"base64":        "shell utility",
	"sleep":         "shell utility",
	"grep":          "shell utility",
	"tar":           "shell utility",
	"cd":            "shell builtin",
	"echo":          "shell builtin",
	"kill":          "shell builtin",
	"git":           "version control: the lines pick which commit a figure was measured on",
	"docker":        "needs a Docker engine; TestDockerfileBuild (.ci/run) runs the Dockerfile's own build line",
	"kubectl":       "needs a Kubernetes cluster; the operator's tests run against a real kube-apiserver",
	"helm":          "needs a cluster; scripts/helm-check.sh (.ci/run) lints and renders the chart",
	"vllm":          "vLLM on a GPU; TestDocsEnginesCommandLines runs the Tandem side against stand-ins",
	"python":        "SGLang on a GPU; TestDocsEnginesCommandLines runs the Tandem side against stand-ins",
	"llama-server":  "llama.cpp's server; TestDocsEnginesCommandLines runs the Tandem side against a stand-in",
	"promtool":      "Debian prometheus; .ci/run runs these lines",
	"gcc":           "builds llama2.c's C reference for a benchmark comparison",
	"./llama2c-ref": "the C reference the gcc line builds",
}

// docWrappers run the rest of their arguments as a command; each maps to
// how many arguments of its own it takes before the command (-1: options
// and assignments until the first other word).
var docWrappers = map[string]bool{"sudo": true, "nice": true, "taskset": true, "env": true, "time": true, "timeout": true}

var assignmentRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)

// unwrap strips VAR=value assignments and wrapper programs (sudo, nice -n
// N, taskset -c CPUS, timeout D, env) from a command.
func unwrap(args []string) []string {
	for {
		for len(args) > 0 && assignmentRE.MatchString(args[0]) {
			args = args[1:]
		}
		if len(args) == 0 || !docWrappers[args[0]] {
			return args
		}
		w := args[0]
		args = args[1:]
		for len(args) > 0 && strings.HasPrefix(args[0], "-") {
			takesValue := (w == "nice" && args[0] == "-n") || (w == "taskset" && args[0] == "-c") || (w == "timeout" && (args[0] == "-s" || args[0] == "-k"))
			args = args[1:]
			if takesValue && len(args) > 0 {
				args = args[1:]
			}
		}
		if w == "timeout" && len(args) > 0 {
			args = args[1:] // the duration
		}
	}
}

// dropOptional removes [optional groups] of words: `[--trials N]`.
func dropOptional(args []string) []string {
	var out []string
	depth := 0
	for _, a := range args {
		if depth == 0 && strings.HasPrefix(a, "[") && !strings.Contains(a, "]") {
			depth = 1
			continue
		}
		if depth == 0 && strings.HasPrefix(a, "[") && strings.HasSuffix(a, "]") {
			continue
		}
		if depth > 0 {
			if strings.HasSuffix(a, "]") {
				depth = 0
			}
			continue
		}
		out = append(out, a)
	}
	return out
}

// dropEllipses removes the words ... and … that stand for more words
// (`tandem frontend --otlp-endpoint ADDR ...`); one right after a flag is
// that flag's value and stays (`--serve …`).
func dropEllipses(args []string) []string {
	var out []string
	for i, a := range args {
		if (a == "..." || a == "…") && (i == 0 || !strings.HasPrefix(args[i-1], "-")) {
			continue
		}
		out = append(out, a)
	}
	return out
}

// docChecker validates commands, caching tandem's verdicts.
type docChecker struct {
	root    string
	mu      sync.Mutex
	tandem  map[string]error
	testBin map[string]string // page + " " + test binary's base name -> package
}

// check validates one command; it returns nil for a command it accepts.
func (c *docChecker) check(cmd docCommand) error {
	args := unwrap(dropEllipses(dropOptional(cmd.args)))
	if len(args) == 0 {
		return nil
	}
	prog := args[0]
	switch {
	case prog == "tandem" || prog == "./tandem":
		return c.checkTandem(args[1:], cmd.inline)
	case prog == "go":
		return c.checkGo(cmd.page, args[1:])
	case strings.HasPrefix(prog, "scripts/"):
		fi, err := os.Stat(filepath.Join(c.root, prog))
		if err != nil {
			return err
		}
		if fi.Mode()&0o111 == 0 {
			return fmt.Errorf("%s is not executable", prog)
		}
		return nil
	case strings.HasSuffix(prog, ".test"):
		return c.checkTestBinary(cmd.page, args)
	}
	if _, ok := docExternal[prog]; ok {
		return nil
	}
	return fmt.Errorf("program %q is neither Tandem's nor in docExternal (add it with the reason it is not run)", prog)
}

// checkTandem runs `tandem WORDS --help FLAGS` (WORDS: the words before
// the first flag): cobra parses every flag (an unknown one, or a value that
// does not parse, fails) and prints the usage of the subcommand it found,
// whose path must be WORDS' first words; --help comes before the flags so
// that no flag can take it for its value and run the command. A span of
// prose (inline) may name a flag without its value.
func (c *docChecker) checkTandem(args []string, inline bool) error {
	args = dropOptional(args)
	key := fmt.Sprint(inline, strings.Join(args, "\x00"))
	c.mu.Lock()
	err, ok := c.tandem[key]
	c.mu.Unlock()
	if ok {
		return err
	}
	err = c.runTandemHelp(args)
	if err != nil && inline && strings.Contains(err.Error(), "flag needs an argument") {
		err = nil
	}
	if err == nil {
		// A bench run's --serve value is itself serve's flags.
		for i, a := range args {
			v, isServe := "", false
			if a == "--serve" && i+1 < len(args) {
				v, isServe = args[i+1], true
			} else if after, ok := strings.CutPrefix(a, "--serve="); ok {
				v, isServe = after, true
			}
			if isServe && len(args) > 0 && args[0] == "bench" {
				words := slices.DeleteFunc(splitWords(v), func(w string) bool {
					return strings.Contains(w, "…") || strings.Contains(w, "...") || strings.HasPrefix(w, "$")
				})
				if e := c.checkTandem(append([]string{"serve"}, words...), inline); e != nil {
					err = fmt.Errorf("--serve %q: %w", v, e)
					break
				}
			}
		}
	}
	c.mu.Lock()
	c.tandem[key] = err
	c.mu.Unlock()
	return err
}

var usageLineRE = regexp.MustCompile(`(?m)^Usage:\n  (tandem(?: [a-z][a-z-]*)*)(.*)$`)

func (c *docChecker) runTandemHelp(args []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	n := slices.IndexFunc(args, func(a string) bool { return strings.HasPrefix(a, "-") })
	if n < 0 {
		n = len(args)
	}
	argv := append(append(slices.Clone(args[:n]), "--help"), args[n:]...)
	cmd := exec.CommandContext(ctx, tandemBin, argv...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("tandem %s --help: %w: %s", strings.Join(args, " "), err, tailBytes(out.Bytes(), 600))
	}
	m := usageLineRE.FindStringSubmatch(out.String())
	if m == nil {
		return fmt.Errorf("tandem %s --help printed no usage line: %s", strings.Join(args, " "), tailBytes(out.Bytes(), 600))
	}
	path := strings.Fields(m[1])[1:]
	// Tandem's docs name the subcommand first, before any flag.
	for i, p := range path {
		if i >= len(args) || args[i] != p {
			return fmt.Errorf("tandem %s: the subcommand is %q", strings.Join(args, " "), strings.Join(path, " "))
		}
	}
	if len(args) > len(path) && !strings.HasPrefix(args[len(path)], "-") {
		if rest := strings.TrimSpace(m[2]); rest == "" || rest == "[flags]" {
			return fmt.Errorf("tandem %s: %q takes no argument %q (a subcommand it does not have?)", strings.Join(args, " "), strings.Join(m[1:2], ""), args[len(path)])
		}
		if a := args[len(path)]; strings.Contains(a, "/") && !strings.HasPrefix(a, "/") && !strings.ContainsAny(a, "~$") {
			if _, err := os.Stat(filepath.Join(c.root, a)); err != nil {
				return fmt.Errorf("tandem %s: %w", strings.Join(args, " "), err)
			}
		}
	}
	return nil
}

// checkGo validates go run, build, test, vet and the like: the packages
// exist, and a go test's -run/-bench names a test of its one package.
func (c *docChecker) checkGo(page string, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("go with no subcommand")
	}
	sub, rest := args[0], args[1:]
	switch sub {
	case "version", "env", "tool", "mod", "clean", "work":
		return nil
	case "run":
		for i, a := range rest {
			if strings.HasPrefix(a, "-") {
				continue
			}
			if a == "./cmd/tandem" {
				return c.checkTandem(rest[i+1:], false)
			}
			if strings.Contains(a, "@") {
				return nil // a pinned tool from the module proxy
			}
			return c.checkPackages([]string{a})
		}
		return fmt.Errorf("go run with no package")
	case "build", "vet", "install", "list", "generate", "test":
	default:
		return fmt.Errorf("go %s: not a go subcommand the docs use", sub)
	}
	var pkgs, names []string
	out := ""
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		flagName, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "-") {
			if !hasVal && goValueFlags[flagName] && i+1 < len(rest) {
				val = rest[i+1]
				i++
			}
			switch flagName {
			case "run", "bench":
				top, _, _ := strings.Cut(val, "/")
				for alt := range strings.SplitSeq(top, "|") {
					alt = strings.Trim(alt, "^$")
					switch strings.ToLower(alt) {
					case "", "xxx", ".":
						continue
					}
					if strings.HasPrefix(alt, "<") && strings.HasSuffix(alt, ">") {
						continue // a placeholder: '<name>'
					}
					names = append(names, alt)
				}
			case "o":
				out = val
			}
			continue
		}
		pkgs = append(pkgs, a)
	}
	if err := c.checkPackages(pkgs); err != nil {
		return err
	}
	if sub != "test" {
		return nil
	}
	if out != "" && len(pkgs) == 1 {
		c.mu.Lock()
		c.testBin[page+" "+filepath.Base(out)] = pkgs[0]
		c.mu.Unlock()
	}
	if len(pkgs) != 1 || strings.HasSuffix(pkgs[0], "...") {
		return nil
	}
	return c.checkTestNames(pkgs[0], names)
}

// goValueFlags are the go build/test flags that take a value as the next
// word.
var goValueFlags = map[string]bool{
	"run": true, "bench": true, "benchtime": true, "count": true, "cpu": true, "o": true, "timeout": true,
	"ldflags": true, "tags": true, "fuzz": true, "fuzztime": true, "cpuprofile": true, "memprofile": true,
	"p": true, "parallel": true, "skip": true, "mod": true, "gcflags": true, "coverprofile": true,
}

func (c *docChecker) checkPackages(pkgs []string) error {
	for _, p := range pkgs {
		if !strings.HasPrefix(p, "./") && p != "." {
			if strings.HasPrefix(p, "github.com/tandemllm/tandem/") {
				p = "./" + strings.TrimPrefix(p, "github.com/tandemllm/tandem/")
			} else {
				return fmt.Errorf("package %q: the docs name the repository's packages as ./path", p)
			}
		}
		dir := strings.TrimSuffix(strings.TrimSuffix(p, "..."), "/")
		gos, _ := filepath.Glob(filepath.Join(c.root, dir, "*.go"))
		if strings.HasSuffix(p, "...") {
			if fi, err := os.Stat(filepath.Join(c.root, dir)); err != nil || !fi.IsDir() {
				return fmt.Errorf("package pattern %s: no folder %s", p, dir)
			}
			continue
		}
		if len(gos) == 0 {
			return fmt.Errorf("package %s: no Go files", p)
		}
	}
	return nil
}

var docTestFuncRE = regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Fuzz|Example)\w*)\(`)

func (c *docChecker) checkTestNames(pkg string, names []string) error {
	if len(names) == 0 {
		return nil
	}
	files, _ := filepath.Glob(filepath.Join(c.root, pkg, "*_test.go"))
	var funcs []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		for _, m := range docTestFuncRE.FindAllStringSubmatch(string(b), -1) {
			funcs = append(funcs, m[1])
		}
	}
	for _, n := range names {
		re, err := regexp.Compile(n)
		if err != nil {
			return fmt.Errorf("%s: pattern %q: %w", pkg, n, err)
		}
		if !slices.ContainsFunc(funcs, re.MatchString) {
			return fmt.Errorf("%s has no test or benchmark matching %q", pkg, n)
		}
	}
	return nil
}

// checkTestBinary validates a compiled test binary's -test.run and
// -test.bench against the package the page's `go test -c -o` built it
// from; one the page does not build is accepted with its flags unchecked.
func (c *docChecker) checkTestBinary(page string, args []string) error {
	c.mu.Lock()
	pkg, ok := c.testBin[page+" "+filepath.Base(args[0])]
	c.mu.Unlock()
	if !ok {
		return nil
	}
	var names []string
	for i := 1; i < len(args); i++ {
		a := strings.TrimPrefix(strings.TrimLeft(args[i], "-"), "test.")
		name, val, hasVal := strings.Cut(a, "=")
		if name != "run" && name != "bench" {
			continue
		}
		if !hasVal && i+1 < len(args) {
			val = args[i+1]
			i++
		}
		top, _, _ := strings.Cut(val, "/")
		for alt := range strings.SplitSeq(top, "|") {
			alt = strings.Trim(alt, "^$")
			switch strings.ToLower(alt) {
			case "", "xxx", ".":
				continue
			}
			names = append(names, alt)
		}
	}
	return c.checkTestNames(pkg, names)
}

// tandemSubcommands are the root's subcommands, from `tandem --help`.
func tandemSubcommands(t *testing.T) map[string]bool {
	t.Helper()
	out, err := exec.Command(tandemBin, "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("tandem --help: %v: %s", err, out)
	}
	subs := map[string]bool{}
	_, list, ok := strings.Cut(string(out), "Available Commands:\n")
	if !ok {
		t.Fatalf("tandem --help lists no commands: %s", out)
	}
	for line := range strings.SplitSeq(list, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(line, "  ") {
			break
		}
		subs[f[0]] = true
	}
	subs["operator"] = true // hidden: says where the operator went
	return subs
}

// TestDocCommands: every command of every doc page is accepted by the code
// it names (see the top of this file).
func TestDocCommands(t *testing.T) {
	skipShort(t)
	needBash(t)
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	pages := docPagesForCommands(t)
	var cmds []docCommand
	for _, p := range pages {
		for _, b := range p.blocks() {
			if b.lang == "" && !strings.HasPrefix(p.path, "docs/benchmarks/") {
				t.Errorf("%s:%d: a code block without a language: tag it sh (commands, checked here) or text, json, yaml", b.page, b.start-1)
				continue
			}
			if !b.isShell() {
				continue
			}
			got, err := recordBlock(t, b)
			if err != nil {
				t.Errorf("%s:%d: the block does not parse as shell: %v", b.page, b.start, err)
				continue
			}
			cmds = append(cmds, got...)
		}
	}
	subs := tandemSubcommands(t)
	for _, p := range pages {
		cmds = append(cmds, inlineTandem(p, subs)...)
	}
	if len(cmds) < 100 {
		t.Fatalf("only %d commands found in the docs", len(cmds))
	}
	c := &docChecker{root: root, tandem: map[string]error{}, testBin: map[string]string{}}
	// go test -c lines first, so that the test binaries they build are known.
	sort.SliceStable(cmds, func(i, j int) bool {
		return isGoTestC(cmds[i].args) && !isGoTestC(cmds[j].args)
	})
	errs := make([]error, len(cmds))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	nGoTestC := 0
	for nGoTestC < len(cmds) && isGoTestC(cmds[nGoTestC].args) {
		errs[nGoTestC] = c.check(cmds[nGoTestC])
		nGoTestC++
	}
	for i := nGoTestC; i < len(cmds); i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs[i] = c.check(cmds[i])
		}()
	}
	wg.Wait()
	tandemRuns := 0
	for i, cmd := range cmds {
		if a := unwrap(cmd.args); len(a) > 0 && (a[0] == "tandem" || a[0] == "./tandem" || len(a) > 2 && a[1] == "run" && a[2] == "./cmd/tandem") {
			tandemRuns++
		}
		if errs[i] != nil {
			t.Errorf("%s:%d: %v", cmd.page, cmd.line, errs[i])
		}
	}
	t.Logf("%d commands in %d pages; %d tandem command lines checked against the binary (%d distinct)", len(cmds), len(pages), tandemRuns, len(c.tandem))
}

func needBash(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skipf("the docs' shell blocks are read by bash: %v", err)
	}
}

func isGoTestC(args []string) bool {
	a := unwrap(args)
	return len(a) > 2 && a[0] == "go" && a[1] == "test" && slices.Contains(a, "-c")
}

// TestDocRecorder holds the shell recording to examples.
func TestDocRecorder(t *testing.T) {
	skipShort(t)
	needBash(t)
	b := docBlock{page: "x.md", start: 10, lang: "sh", text: `M="--mtls-ca certs/ca.crt"
tandem frontend $M --api-key-file api-keys \
    --x 'a b' &
head -c 32 /dev/urandom | base64 > keys    # a comment
for s in 1 2; do ./t.test -test.run "T$s"; done
go test -c -o /tmp/r.test ./router && cd e2e && X=1 taskset -c 0 ../r.test
curl -H "Authorization: Bearer $(head -1 keys)"
`}
	got, err := recordBlock(t, b)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, c := range got {
		lines = append(lines, fmt.Sprintf("%d %q", c.line, c.args))
	}
	sort.Strings(lines) // a pipeline's commands record concurrently
	want := []string{
		`11 ["tandem" "frontend" "--mtls-ca" "certs/ca.crt" "--api-key-file" "api-keys" "--x" "a b"]`,
		`13 ["base64"]`,
		`13 ["head" "-c" "32" "/dev/urandom"]`,
		`14 ["./t.test" "-test.run" "T1"]`,
		`14 ["./t.test" "-test.run" "T2"]`,
		`15 ["X=1" "taskset" "-c" "0" "../r.test"]`,
		`15 ["cd" "e2e"]`,
		`15 ["go" "test" "-c" "-o" "/tmp/r.test" "./router"]`,
		`16 ["curl" "-H" "Authorization: Bearer "]`,
		`16 ["head" "-1" "keys"]`,
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Fatalf("recorded:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	if u := unwrap([]string{"sudo", "A=1", "nice", "-n", "5", "taskset", "-c", "0,1", "go", "test"}); strings.Join(u, " ") != "go test" {
		t.Fatalf("unwrap: %q", u)
	}
	if d := dropOptional(strings.Fields("bench experiment F [--trials N] [--x] --y")); strings.Join(d, " ") != "bench experiment F --y" {
		t.Fatalf("dropOptional: %q", d)
	}
}

// TestDocChecker holds the checks to examples: each drift a page can
// have fails, the forms the docs use pass.
func TestDocChecker(t *testing.T) {
	skipShort(t)
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	c := &docChecker{root: root, tandem: map[string]error{}, testBin: map[string]string{}}
	tests := []struct {
		cmd    string
		inline bool
		want   string // a substring of the error; "" for none
	}{
		{cmd: "tandem serve --router-mode kv --workers 4", want: ""},
		{cmd: "go run ./cmd/tandem serve --router-mod kv", want: "unknown flag: --router-mod"},
		{cmd: "tandem serve --workers two", want: "invalid argument"},
		{cmd: "tandem servee --workers 2", want: "unknown command"},
		{cmd: "tandem bench synthtic --url http://x", want: "takes no argument"},
		{cmd: "tandem bench experiment docs/benchmarks/experiments/nope.yaml", want: "no such file"},
		{cmd: "tandem bench experiment docs/benchmarks/experiments/disagg-never-vs-auto.yaml [--trials N]", want: ""},
		{cmd: "tandem bench sweep --serve --workerz=2 --sweep concurrency=1", want: "unknown flag: --workerz"},
		{cmd: "tandem serve --prefill-workers", inline: true, want: ""},
		{cmd: "tandem serve --prefill-workers", want: "needs an argument"},
		{cmd: "tandem frontend --otlp-endpoint 127.0.0.1:4317 ...", want: ""},
		{cmd: "sudo TANDEM_NETNS_TESTS=1 go test -count=1 -run TestDisaggSlowLink ./nodes/serve/", want: ""},
		{cmd: "go test ./router -run xxx -bench NoSuchBenchmark", want: "no test or benchmark"},
		{cmd: "go test ./no/such/package", want: "no Go files"},
		{cmd: "go build -o tandem ./cmd/tandem", want: ""},
		{cmd: "scripts/no-such-script.sh", want: "no such file"},
		{cmd: "scripts/test.sh", want: ""},
		{cmd: "vllm serve Qwen/Qwen3-0.6B", want: ""},
		{cmd: "frobnicate --now", want: "neither Tandem's nor in docExternal"},
	}
	for _, tt := range tests {
		t.Run(tt.cmd, func(t *testing.T) {
			err := c.check(docCommand{page: "x.md", line: 1, args: strings.Fields(tt.cmd), inline: tt.inline})
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("want no error, got %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("want an error with %q, got %v", tt.want, err)
			}
		})
	}
}
