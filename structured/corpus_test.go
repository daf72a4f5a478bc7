package structured

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// corpusEntry is one schema of the real-world corpus: a document and the
// pointer of the schema inside it.
type corpusEntry struct {
	name string
	doc  []byte // whole document (definitions, components)
	ptr  string // "#/definitions/X", "#/components/schemas/X" or "#"
}

// The modules whose test data holds the Kubernetes part of the corpus, at
// pinned versions (the versions the corpus figures in docs/benchmarks.md
// were measured with). They are no requirement of go.mod: the main module
// links no Kubernetes code, and moduleDir fetches them on their own.
const (
	clientGoModule    = "k8s.io/client-go@v0.37.2"
	kubeOpenAPIModule = "k8s.io/kube-openapi@v0.0.0-20260721132016-d427ff9ee9ad"
)

// moduleDir is a module's directory in the module cache, downloaded there
// by `go mod download` (module@version) if it is not yet; the test skips
// when that fails (no network, no go command).
func moduleDir(t testing.TB, modVersion string) string {
	mod, _, _ := strings.Cut(modVersion, "@")
	if root := os.Getenv("TANDEM_SO_CORPUS_ROOT"); root != "" {
		// A copy of the modules' test data (a machine without the module
		// cache).
		return filepath.Join(root, mod)
	}
	out, err := exec.Command("go", "mod", "download", "-json", modVersion).Output()
	var info struct {
		Dir   string
		Error string
	}
	if err == nil {
		err = json.Unmarshal(out, &info)
	}
	if err == nil && info.Error != "" {
		err = errors.New(info.Error)
	}
	if err == nil && info.Dir == "" {
		err = errors.New("no directory")
	}
	if err != nil {
		t.Skipf("module %s: %v", modVersion, err)
	}
	return info.Dir
}

// loadCorpus gathers the schemas: Kubernetes OpenAPI definitions and
// components (client-go's and kube-openapi's test data), the CRDs in
// kube-openapi's test data, and the JSON Schema Test Suite (draft 4) cases
// with at least one valid instance, duplicates (by content) dropped; and
// the function-calling schemas of testdata/tools.json.
func loadCorpus(t testing.TB) []corpusEntry {
	var out []corpusEntry
	seen := map[[32]byte]bool{}
	addDoc := func(path string) {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var d struct {
			Definitions map[string]json.RawMessage `json:"definitions"`
			Components  struct {
				Schemas map[string]json.RawMessage `json:"schemas"`
			} `json:"components"`
		}
		if err := json.Unmarshal(raw, &d); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		add := func(prefix string, m map[string]json.RawMessage) {
			names := make([]string, 0, len(m))
			for k := range m {
				names = append(names, k)
			}
			sort.Strings(names)
			for _, k := range names {
				h := sha256.Sum256(append([]byte(k+"\x00"), m[k]...))
				if seen[h] {
					continue
				}
				seen[h] = true
				// The definitions k reaches, and nothing else.
				need := map[string]bool{k: true}
				queue := []string{k}
				for len(queue) > 0 {
					x := queue[0]
					queue = queue[1:]
					for _, mm := range refRE.FindAllSubmatch(m[x], -1) {
						r := string(mm[2])
						if _, ok := m[r]; ok && !need[r] {
							need[r] = true
							queue = append(queue, r)
						}
					}
				}
				var b bytes.Buffer
				ptr := prefix + strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1")
				p, _ := json.Marshal(ptr)
				fmt.Fprintf(&b, `{"$ref":%s,`, p)
				if prefix == "#/definitions/" {
					b.WriteString(`"definitions":{`)
				} else {
					b.WriteString(`"components":{"schemas":{`)
				}
				first := true
				for _, n := range names {
					if !need[n] {
						continue
					}
					if !first {
						b.WriteByte(',')
					}
					first = false
					q, _ := json.Marshal(n)
					b.Write(q)
					b.WriteByte(':')
					b.Write(m[n])
				}
				b.WriteString("}}")
				if prefix != "#/definitions/" {
					b.WriteByte('}')
				}
				out = append(out, corpusEntry{name: filepath.Base(path) + ":" + k, doc: b.Bytes(), ptr: ptr})
			}
		}
		add("#/definitions/", d.Definitions)
		add("#/components/schemas/", d.Components.Schemas)
	}
	cg := moduleDir(t, clientGoModule)
	files, _ := filepath.Glob(filepath.Join(cg, "openapi/openapitest/testdata/*.json"))
	ko := moduleDir(t, kubeOpenAPIModule)
	more, _ := filepath.Glob(filepath.Join(ko, "pkg/schemaconv/testdata/crds/*/*.json"))
	files = append(files, more...)
	files = append(files, filepath.Join(ko, "pkg/util/proto/testdata/swagger.json"), filepath.Join(ko, "pkg/schemaconv/testdata/swagger.json"),
		filepath.Join(ko, "pkg/util/proto/testdata/swagger_next.json"))
	for _, f := range files {
		addDoc(f)
	}
	suite, _ := filepath.Glob(filepath.Join(ko, "pkg/validation/validate/fixtures/jsonschema_suite/*.json"))
	for _, f := range suite {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var cases []struct {
			Description string          `json:"description"`
			Schema      json.RawMessage `json:"schema"`
			Tests       []struct {
				Valid bool `json:"valid"`
			} `json:"tests"`
		}
		if json.Unmarshal(raw, &cases) != nil {
			continue
		}
		for _, c := range cases {
			if !slices.ContainsFunc(c.Tests, func(x struct {
				Valid bool `json:"valid"`
			}) bool {
				return x.Valid
			}) {
				continue
			}
			out = append(out, corpusEntry{name: filepath.Base(f) + ":" + c.Description, doc: c.Schema, ptr: "#"})
		}
	}
	// Function-calling and structured-output schemas, written here in the
	// shapes of published tool definitions (testdata/tools.json names
	// each one's source).
	raw, err := os.ReadFile(filepath.Join("testdata", "tools.json"))
	if err != nil {
		t.Fatal(err)
	}
	var tools []struct {
		Name   string          `json:"name"`
		Schema json.RawMessage `json:"schema"`
	}
	if err := json.Unmarshal(raw, &tools); err != nil {
		t.Fatalf("testdata/tools.json: %v", err)
	}
	for _, tl := range tools {
		out = append(out, corpusEntry{name: "tools.json:" + tl.Name, doc: tl.Schema, ptr: "#"})
	}
	return out
}

var refRE = regexp.MustCompile(`"\$ref"\s*:\s*"#/(definitions|components/schemas)/([^"]+)"`)

// rooted is the schema as compiled: the document, whose root is a $ref to
// the entry's schema.
func (c corpusEntry) rooted() []byte { return c.doc }

// TestCorpus: with TANDEM_SO_CORPUS=1, every schema of the corpus is
// compiled; each accepted one is walked (the mocker's sampling over the
// o200k vocabulary) and every output must parse and validate with
// santhosh-tekuri/jsonschema (formats asserted). Refusals are counted by
// keyword (TANDEM_SO_CORPUS_MATCH=substring keeps the schemas whose name
// holds it). Figures for docs/benchmarks.md.
func TestCorpus(t *testing.T) {
	if os.Getenv("TANDEM_SO_CORPUS") == "" {
		t.Skip("set TANDEM_SO_CORPUS=1 for the full corpus run")
	}
	walks := 1
	if n, err := strconv.Atoi(os.Getenv("TANDEM_SO_CORPUS_WALKS")); err == nil && n > 0 {
		walks = n
	}
	if p := os.Getenv("TANDEM_SO_PRECOMPUTE"); p != "" {
		// masks,microseconds: Bind's precomputation bounds.
		var n, us int
		if _, err := fmt.Sscanf(p, "%d,%d", &n, &us); err != nil {
			t.Fatalf("TANDEM_SO_PRECOMPUTE=%q: want masks,microseconds", p)
		}
		defer func(n int, d time.Duration) { precomputeMasks, precomputeTime = n, d }(precomputeMasks, precomputeTime)
		precomputeMasks, precomputeTime = n, time.Duration(us)*time.Microsecond
	}
	corpus := loadCorpus(t)
	if sub := os.Getenv("TANDEM_SO_CORPUS_MATCH"); sub != "" {
		corpus = slices.DeleteFunc(corpus, func(c corpusEntry) bool { return !strings.Contains(c.name, sub) })
	}
	v := testO200k(t)
	if os.Getenv("TANDEM_SO_CORPUS") == "qwen3" {
		v = testQwen3(t)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	rng := rand.New(rand.NewPCG(11, 12))
	refused := map[string]int{}
	var compiled, outputs, unterminated int
	var compileTimes, bindTimes, maskTimes, maskCPU []time.Duration
	// TANDEM_SO_BINDMEM=1: the heap each Bind adds (after a collection on
	// either side; the vocabulary's shared caches' growth included).
	bindMem := os.Getenv("TANDEM_SO_BINDMEM") != ""
	var bindBytes []int64
	validators := map[string]*jsonschema.Compiler{}
	for _, c := range corpus {
		t0 := time.Now()
		g, err := CompileJSONSchema(c.rooted())
		compileTimes = append(compileTimes, time.Since(t0))
		if err != nil {
			var ue *UnsupportedError
			switch {
			case errors.As(err, &ue):
				refused[ue.Keyword]++
			case errors.Is(err, ErrUnsatisfiable):
				refused["(unsatisfiable)"]++
			default:
				refused["(other: "+err.Error()+")"]++
			}
			continue
		}
		compiled++
		var before runtime.MemStats
		if bindMem {
			runtime.GC()
			runtime.ReadMemStats(&before)
		}
		t1 := time.Now()
		comp := Bind(g, v)
		bindTimes = append(bindTimes, time.Since(t1))
		if bindMem {
			var after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&after)
			bindBytes = append(bindBytes, int64(after.HeapAlloc)-int64(before.HeapAlloc))
			runtime.KeepAlive(comp)
		}
		key := fmt.Sprintf("%x", sha256.Sum256(c.doc))
		vc := validators[key]
		if vc == nil {
			doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(c.doc))
			if err != nil {
				t.Fatal(err)
			}
			vc = jsonschema.NewCompiler()
			vc.AssertFormat()
			vc.DefaultDraft(jsonschema.Draft4)
			if err := vc.AddResource("doc.json", doc); err != nil {
				t.Fatal(err)
			}
			validators[key] = vc
		}
		sch, err := vc.Compile("doc.json")
		if err != nil {
			t.Fatalf("%s: validator: %v", c.name, err)
		}
		for range walks {
			m := comp.NewMatcher()
			var out []byte
			done := false
			for range 3000 {
				c0 := threadCPU()
				t0 := time.Now()
				_, err := m.Mask()
				maskTimes = append(maskTimes, time.Since(t0))
				maskCPU = append(maskCPU, threadCPU()-c0)
				if err != nil {
					t.Fatalf("%s: %v", c.name, err)
				}
				id, err := m.Pick(rng.Uint64())
				if err != nil {
					t.Fatalf("%s: %v", c.name, err)
				}
				if err := m.Accept(id); err != nil {
					t.Fatalf("%s: %v", c.name, err)
				}
				if m.Done() {
					done = true
					break
				}
				out = append(out, v.Token(id)...)
			}
			if !done {
				unterminated++
				continue
			}
			outputs++
			inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(out))
			if err != nil {
				t.Errorf("%s: output does not parse: %v\n%s", c.name, err, out)
				continue
			}
			if err := sch.Validate(inst); err != nil {
				t.Errorf("%s: output invalid: %v\n%s", c.name, err, out)
			}
		}
	}
	q := func(d []time.Duration, p float64) time.Duration {
		slices.Sort(d)
		return d[int(float64(len(d)-1)*p)]
	}
	t.Logf("corpus %d schemas: %d compiled, %d refused; %d outputs validated, %d walks unfinished at 3000 tokens",
		len(corpus), compiled, len(corpus)-compiled, outputs, unterminated)
	t.Logf("compile p50 %v p99 %v; mask p50 %v p99 %v (thread CPU p50 %v p99 %v) over %d steps (cold: each schema's first walk included)",
		q(compileTimes, 0.5), q(compileTimes, 0.99), q(maskTimes, 0.5), q(maskTimes, 0.99), q(maskCPU, 0.5), q(maskCPU, 0.99), len(maskTimes))
	t.Logf("bind (masks precomputed) p50 %v p99 %v", q(bindTimes, 0.5), q(bindTimes, 0.99))
	if bindMem {
		slices.Sort(bindBytes)
		t.Logf("bind heap added: p50 %d B, p99 %d B, max %d B over %d schemas",
			bindBytes[len(bindBytes)/2], bindBytes[(len(bindBytes)-1)*99/100], bindBytes[len(bindBytes)-1], len(bindBytes))
	}
	keys := make([]string, 0, len(refused))
	for k := range refused {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		t.Logf("refused %s: %d", k, refused[k])
	}
}
