package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// secureFlag runs the multi-process tests with every protection on (see
// secure_test.go): go test ./e2e -run TestMultiProcess -args -secure.
var secureFlag = flag.Bool("secure", false, "run the multi-process tests with mutual TLS, API keys, HTTPS and NATS auth on")

// tandemBin is the tandem binary TestMain builds once; every test starts
// it as a user does.
var tandemBin string

// TestMain builds cmd/tandem into a temporary directory (with the race
// detector when the tests have it, so the processes' races are reported
// too; not under -short, where every test skips), sets up the secure mode's certificates when -secure is given, and
// runs the tests.
func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if testing.Short() {
		// Every test starts the binary; none runs under -short, so none
		// is built.
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "tandem-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	tandemBin = filepath.Join(dir, "tandem")
	args := []string{"build", "-o", tandemBin}
	if raceEnabled {
		args = append(args, "-race")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, "go", append(args, "github.com/tandemllm/tandem/cmd/tandem")...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: go build ./cmd/tandem:", err)
		return 1
	}
	cleanup, err := setUpSecure(*secureFlag)
	if err != nil {
		fmt.Fprintln(os.Stderr, "secure test mode:", err)
		return 1
	}
	defer cleanup()
	return m.Run()
}

// runCLI runs `tandem args...` to completion (at most a minute) and
// returns its stdout; a failed run's error carries its stderr.
func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	skipShort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, tandemBin, args...)
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("tandem %s: %w: %s", strings.Join(args, " "), err, tailBytes(stderr.Bytes(), 4000))
	}
	return out.String(), nil
}

type proc struct {
	cmd   *exec.Cmd
	out   *bufio.Reader
	url   string
	model string // the banner's model line, when it has one
}

// startTandem starts `tandem args` (with the secure mode's flags added)
// and waits for its banner's URL line.
func startTandem(t *testing.T, args string) *proc {
	t.Helper()
	skipShort(t)
	cmd := exec.Command(tandemBin, strings.Fields(secureArgs(args))...)
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	p := &proc{cmd: cmd, out: bufio.NewReader(stdout)}
	urlRE := regexp.MustCompile(`url:\s+(https?://\S+)/v1`)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		line, err := p.out.ReadString('\n')
		if err != nil {
			t.Fatalf("tandem exited before its banner: %v", err)
		}
		if m := urlRE.FindStringSubmatch(line); m != nil {
			p.url = m[1]
			if next, err := p.out.ReadString('\n'); err == nil {
				if name, ok := strings.CutPrefix(strings.TrimSpace(next), "model:"); ok {
					p.model = strings.TrimSpace(name)
				}
			}
			go func() { _, _ = io.Copy(io.Discard, p.out) }()
			return p
		}
	}
	t.Fatal("no banner within 30s")
	return nil
}

// exitCode is a finished command's exit status, or -1 when err is not
// an exit.
func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

// skipShort skips a test under -short: every test here starts tandem.
func skipShort(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts tandem processes")
	}
}

// longParallel marks one of the package's longest tests (tens of seconds,
// mostly waiting on processes, leases and scrapes) as parallel: they run
// two at a time (go test's -parallel, GOMAXPROCS by default) once the
// package's serial tests are done, so that go test ./... is not left
// running them one after the other on one core at its end. Each starts
// its own processes on ports and directories of its own (freeAddr picks
// random ports below the ephemeral range; t.TempDir), and none sets
// environment variables or changes directory.
func longParallel(t *testing.T) {
	t.Helper()
	skipShort(t)
	t.Parallel()
}
