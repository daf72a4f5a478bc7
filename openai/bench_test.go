package openai

import "testing"

// BenchmarkAppendChunk is the per-token cost of a content chunk (the hot
// path without return_token_ids).
func BenchmarkAppendChunk(b *testing.B) {
	h := ChunkHeader{ID: "chatcmpl-0123456789abcdef01234567", Model: "tandem-mock", Created: 1700000000, Chat: true}
	buf := make([]byte, 0, 4096)
	b.ReportAllocs()
	for b.Loop() {
		buf = h.AppendChunk(buf[:0], " token", "")
	}
}

// BenchmarkAppendChunkIDs is the same chunk with return_token_ids.
func BenchmarkAppendChunkIDs(b *testing.B) {
	h := ChunkHeader{ID: "chatcmpl-0123456789abcdef01234567", Model: "tandem-mock", Created: 1700000000, Chat: true}
	buf := make([]byte, 0, 4096)
	ids := []int32{48291}
	b.ReportAllocs()
	for b.Loop() {
		buf = h.AppendChunkIDs(buf[:0], " token", "", nil, ids)
	}
}
