package structured

import (
	"fmt"
	"testing"
)

// TestCacheByteBound: past its memory bound the cache drops its least
// recently used constraints (an automaton shared by a grammar entry and
// its bound entries counted once), keeps the newest whatever its size,
// and keeps everything while under the bound.
func TestCacheByteBound(t *testing.T) {
	v := testO200k(t)
	schema := func(i int) string {
		return fmt.Sprintf(`{"type":"object","properties":{"k%d":{"type":"string","maxLength":%d},"n":{"type":"integer"}},"required":["k%d","n"]}`, i, 8+i, i)
	}
	size := func(c *Cache) (n int, bytes int64) {
		c.mu.Lock()
		defer c.mu.Unlock()
		seen := map[*Grammar]bool{}
		for el := c.ll.Front(); el != nil; el = el.Next() {
			e := el.Value.(*cacheEntry)
			g := e.g
			if e.c != nil {
				bytes += e.c.heapBytes()
				g = e.c.g
			}
			if !seen[g] {
				seen[g] = true
				bytes += g.heapBytes()
			}
			n++
		}
		return n, bytes
	}
	roomy := NewCache(100, 1<<40)
	for i := range 6 {
		if _, err := roomy.Get(KindJSONSchema, schema(i), v); err != nil {
			t.Fatal(err)
		}
	}
	n, one := size(roomy)
	if n != 12 { // a grammar and a bound entry per schema
		t.Fatalf("unbounded cache holds %d entries, want 12", n)
	}
	per := one / 6
	tight := NewCache(100, 2*per)
	for i := range 6 {
		if _, err := tight.Get(KindJSONSchema, schema(i), v); err != nil {
			t.Fatal(err)
		}
		if n, b := size(tight); b > 2*per && n > 2 {
			t.Fatalf("after schema %d: %d entries of %d bytes, bound %d", i, n, b, 2*per)
		}
	}
	tight.mu.Lock()
	_, newest := tight.items[cacheKey{KindJSONSchema, schema(5), v}]
	_, oldest := tight.items[cacheKey{KindJSONSchema, schema(0), v}]
	tight.mu.Unlock()
	if !newest || oldest {
		t.Fatalf("newest kept %v, oldest kept %v; want the newest only", newest, oldest)
	}
	t.Logf("a bound schema of this shape holds about %d bytes", per)
}
