//go:build dockerfile

package e2e

import (
	"bufio"
	"debug/buildinfo"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
)

// dockerBuildLine returns the Dockerfile's `RUN CGO_ENABLED=0 GOEXPERIMENT=simd go build ...`
// line, without RUN. No Docker engine runs on the CI machine, so the test
// runs this line itself: the binary it checks is built exactly as the image's.
func dockerBuildLine(t *testing.T) string {
	t.Helper()
	f, err := os.Open("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var found []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); strings.HasPrefix(line, "RUN CGO_ENABLED=0 GOEXPERIMENT=simd go build ") {
			found = append(found, strings.TrimPrefix(line, "RUN "))
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(found) != 1 {
		t.Fatalf("Dockerfile has %d `RUN CGO_ENABLED=0 GOEXPERIMENT=simd go build` lines, want exactly 1", len(found))
	}
	return found[0]
}

// TestDockerfileBuild builds the binary with the Dockerfile's own command line
// and checks what the image promises: a static executable (no ELF interpreter,
// no shared libraries, so distroless/static can run it) whose `version` prints
// the stamped version and commit. It is a full -trimpath build of every
// package, too slow for every go test run, so it is built only with the
// dockerfile tag (.ci/run: go test -tags dockerfile -run TestDockerfileBuild
// ./e2e).
func TestDockerfileBuild(t *testing.T) {
	line := dockerBuildLine(t)
	out := t.TempDir()
	// The Dockerfile's build args and output path, filled in as docker would.
	line = strings.NewReplacer("${VERSION}", "v9.8.7-test", "${COMMIT}", "0123456789abcdef", "/out/tandem", filepath.Join(out, "tandem")).Replace(line)
	cmd := exec.Command("sh", "-c", line)
	cmd.Dir = ".."
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", line, err, b)
	}
	bin := filepath.Join(out, "tandem")

	ef, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	for _, p := range ef.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("binary has an ELF interpreter: it is dynamically linked")
		}
	}
	if libs, err := ef.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Errorf("binary needs shared libraries %v (err %v)", libs, err)
	}
	if ef.Section(".debug_info") != nil || ef.Section(".symtab") != nil {
		t.Error("binary keeps DWARF or a symbol table: -s -w not applied")
	}
	// The image's native engine runs the vector kernels.
	if bi, err := buildinfo.ReadFile(bin); err != nil || !slices.Contains(bi.Settings, debug.BuildSetting{Key: "GOEXPERIMENT", Value: "simd"}) {
		t.Errorf("binary not built with GOEXPERIMENT=simd (build info %v, %v)", bi, err)
	}

	v, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if got := string(v); !strings.HasPrefix(got, "tandem v9.8.7-test (commit 0123456789abcdef, go") {
		t.Errorf("tandem version = %q", got)
	}
	fi, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("static binary: %.1f MB", float64(fi.Size())/1e6)
}
