package structured

import "testing"

// For the external test package (native_corpus_test.go), which runs the
// native engine and so cannot live in this package.

// CorpusSchema is one schema of the corpus: its name and the document
// whose root is it.
type CorpusSchema struct {
	Name string
	Doc  []byte
}

// LoadCorpus is loadCorpus for the external test package.
func LoadCorpus(t testing.TB) []CorpusSchema {
	var out []CorpusSchema
	for _, c := range loadCorpus(t) {
		out = append(out, CorpusSchema{Name: c.name, Doc: c.rooted()})
	}
	return out
}

// reset empties the cache (benchmarks of a process's first schema).
func (s *shapeCache) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m, s.bytes = nil, 0
}

// reset empties the cache (benchmarks of a process's first schema).
func (c *composedCache) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m, c.bytes = nil, 0
}
