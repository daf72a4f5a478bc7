package structured

import (
	"container/list"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
)

// Kinds of constraint (engine.ConstraintKind's values).
const (
	KindJSONSchema = "json"
	KindJSONObject = "json_object"
	KindRegex      = "regex"
	KindChoice     = "choice"
	KindGrammar    = "grammar"
	KindToolCalls  = "tool_calls"
)

// ToolCallsSpec is the Spec of a tool_calls constraint: one or more calls
// in the model family's syntax, each naming one of Tools with arguments
// valid against its parameters.
type ToolCallsSpec struct {
	// Format is the tool-call syntax, named as the chat parser that reads
	// it back (chatparse's tool parsers): "hermes" (Qwen, Hermes: the
	// default) writes <tool_call>\n{"name": ..., "arguments": ...}\n</tool_call>,
	// calls separated by a newline; "llama3_json" (Llama 3.1/3.2 JSON
	// tool calls) {"name": ..., "parameters": ...}, calls separated by
	// "; "; "mistral" [TOOL_CALLS][{"name": ..., "arguments": ...}, ...].
	// Others are refused: a forced call in a syntax the reply's parser
	// does not read would come back as text.
	Format string `json:"format,omitempty"`
	Tools  []struct {
		Name       string          `json:"name"`
		Parameters json.RawMessage `json:"parameters,omitempty"`
	} `json:"tools"`
	// Single allows exactly one call (parallel_tool_calls false).
	Single bool `json:"single,omitempty"`
}

// CompileSpec compiles a constraint to a vocabulary-independent grammar.
func CompileSpec(kind, spec string) (*Grammar, error) {
	switch kind {
	case KindJSONSchema:
		return CompileJSONSchema([]byte(spec))
	case KindJSONObject:
		return CompileJSONObject()
	case KindRegex:
		return CompileRegex(spec)
	case KindChoice:
		var choices []string
		if err := json.Unmarshal([]byte(spec), &choices); err != nil {
			return nil, fmt.Errorf("structured: choice: %w", err)
		}
		return CompileChoice(choices)
	case KindGrammar:
		return CompileGBNF(spec)
	case KindToolCalls:
		var tc ToolCallsSpec
		if err := json.Unmarshal([]byte(spec), &tc); err != nil {
			return nil, fmt.Errorf("structured: tool_calls: %w", err)
		}
		return CompileToolCalls(&tc)
	}
	return nil, fmt.Errorf("structured: unknown constraint kind %q", kind)
}

// CompileToolCalls compiles a tool-call constraint.
func CompileToolCalls(tc *ToolCallsSpec) (*Grammar, error) {
	// Each format: the text before a call's name, between the name and
	// the arguments, after the arguments, between calls, and around the
	// whole list.
	var open, mid, closeCall, sep, begin, end string
	switch tc.Format {
	case "", "hermes":
		open, mid, closeCall, sep = "<tool_call>\n{\"name\": ", ", \"arguments\": ", "}\n</tool_call>", "\n"
	case "llama3_json":
		open, mid, closeCall, sep = "{\"name\": ", ", \"parameters\": ", "}", "; "
	case "mistral":
		open, mid, closeCall, sep = "{\"name\": ", ", \"arguments\": ", "}", ", "
		begin, end = "[TOOL_CALLS][", "]"
	default:
		return nil, &UnsupportedError{Keyword: "format", Path: "tool_calls", Reason: fmt.Sprintf("tool-call format %q", tc.Format)}
	}
	if len(tc.Tools) == 0 {
		return nil, fmt.Errorf("%w: no tools", ErrUnsatisfiable)
	}
	b := newBuilder()
	c := &schemaCompiler{b: b, j: newJSONRules(b), refs: map[string]int32{}}
	call := b.newRule("call")
	for i, t := range tc.Tools {
		params := t.Parameters
		if len(params) == 0 || string(params) == "null" {
			params = []byte(`{"type":"object"}`)
		}
		root, err := parseJSON(params)
		if err != nil {
			return nil, fmt.Errorf("tool %q: %w", t.Name, err)
		}
		c.root, c.refs = root, map[string]int32{}
		args, err := c.compile(root, fmt.Sprintf("#/tools/%d/parameters", i))
		if err != nil {
			return nil, fmt.Errorf("tool %q: %w", t.Name, err)
		}
		var name strings.Builder
		writeJSONString(&name, t.Name)
		head := open + name.String() + mid
		b.alt(call, append(lit(head), append([]elem{ref(args)}, lit(closeCall)...)...)...)
	}
	calls := []elem{ref(call)}
	if !tc.Single {
		calls = append(calls, ref(b.star(append(lit(sep), ref(call))...)))
	}
	b.alt(0, append(append(lit(begin), calls...), lit(end)...)...)
	return b.finish()
}

// Cache holds compiled constraints per (kind, spec, vocabulary), least
// recently used dropped first, within a count and a memory bound.
type Cache struct {
	mu       sync.Mutex
	max      int
	maxBytes int64
	ll       *list.List
	items    map[cacheKey]*list.Element
}

type cacheKey struct {
	kind, spec string
	vocab      *Vocab
}

type cacheEntry struct {
	key cacheKey
	c   *Compiled // (kind, spec, vocab) entries
	g   *Grammar  // (kind, spec) entries
}

// NewCache keeps up to max compiled constraints holding up to maxBytes
// (their automata and the masks of their own, as estimated when one is
// added: both grow as masks are computed).
func NewCache(max int, maxBytes int64) *Cache {
	return &Cache{max: max, maxBytes: maxBytes, ll: list.New(), items: map[cacheKey]*list.Element{}}
}

// maxCachedSpec: longer specs are compiled but not cached.
const maxCachedSpec = 1 << 20

// Get returns the compiled constraint, compiling it on a miss. Errors are
// not cached.
func (c *Cache) Get(kind, spec string, v *Vocab) (*Compiled, error) {
	k := cacheKey{kind, spec, v}
	c.mu.Lock()
	if e, ok := c.items[k]; ok {
		c.ll.MoveToFront(e)
		c.mu.Unlock()
		return e.Value.(*cacheEntry).c, nil
	}
	c.mu.Unlock()
	g, err := c.Grammar(kind, spec)
	if err != nil {
		return nil, err
	}
	comp := Bind(g, v)
	if len(spec) > maxCachedSpec {
		return comp, nil
	}
	c.put(k, &cacheEntry{key: k, c: comp})
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[k]; ok {
		return e.Value.(*cacheEntry).c, nil
	}
	return comp, nil
}

// Grammar returns the compiled grammar of a constraint, cached per
// (kind, spec) whatever the vocabulary: the frontend checks a constraint
// with it before any token is generated, and an in-process engine binds
// the same grammar to its vocabulary.
func (c *Cache) Grammar(kind, spec string) (*Grammar, error) {
	k := cacheKey{kind: kind, spec: spec}
	c.mu.Lock()
	if e, ok := c.items[k]; ok {
		c.ll.MoveToFront(e)
		c.mu.Unlock()
		return e.Value.(*cacheEntry).g, nil
	}
	c.mu.Unlock()
	g, err := CompileSpec(kind, spec)
	if err != nil || len(spec) > maxCachedSpec {
		return g, err
	}
	c.put(k, &cacheEntry{key: k, g: g})
	return g, nil
}

func (c *Cache) put(k cacheKey, e *cacheEntry) {
	c.mu.Lock()
	if _, ok := c.items[k]; ok {
		c.mu.Unlock()
		return
	}
	c.items[k] = c.ll.PushFront(e)
	for c.ll.Len() > c.max {
		c.remove(c.ll.Back())
	}
	entries := make([]*cacheEntry, 0, c.ll.Len())
	for el := c.ll.Front(); el != nil; el = el.Next() {
		entries = append(entries, el.Value.(*cacheEntry))
	}
	c.mu.Unlock()
	c.trim(entries)
}

// trim drops the least recently used entries while the cache holds more
// than maxBytes (the newest entry stays, whatever its size). entries is
// the list, most recent first, as put left it; sizes are taken without
// the cache's lock (a grammar's lock may be held by a mask walk), and an
// automaton is counted once however many entries share it.
func (c *Cache) trim(entries []*cacheEntry) {
	own := make([]int64, len(entries))
	users := map[*Grammar]int{}
	grammarBytes := map[*Grammar]int64{}
	var total int64
	for i, e := range entries {
		g := e.g
		if e.c != nil {
			own[i] = e.c.heapBytes()
			g = e.c.g
		}
		total += own[i]
		if users[g]++; users[g] == 1 {
			grammarBytes[g] = g.heapBytes()
			total += grammarBytes[g]
		}
	}
	if total <= c.maxBytes {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := len(entries) - 1; i > 0 && total > c.maxBytes; i-- {
		e := entries[i]
		el, ok := c.items[e.key]
		if !ok || el.Value.(*cacheEntry) != e {
			continue // dropped or replaced meanwhile
		}
		c.remove(el)
		total -= own[i]
		g := e.g
		if e.c != nil {
			g = e.c.g
		}
		if users[g]--; users[g] == 0 {
			total -= grammarBytes[g]
		}
	}
}

// remove drops an element; the caller holds c.mu.
func (c *Cache) remove(el *list.Element) {
	c.ll.Remove(el)
	delete(c.items, el.Value.(*cacheEntry).key)
}

// Shared is the process-wide cache the engines use: 256 constraints, 512
// MiB. A bound grammar of a large schema holds up to about 8 MB once bound
// (a Kubernetes object's; docs/benchmarks/structured.md), a small one
// under 1 MB.
var Shared = NewCache(256, 512<<20)
