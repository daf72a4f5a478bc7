// Package tokenid holds the one definition of a vocabulary id, ID, at the
// bottom of the import layers: the tokenizer, the KV block pool and the
// engine seam (engine.Token) all speak it without depending on one another.
package tokenid

// ID is a vocabulary id. int32 covers every vocabulary in use (o200k,
// Qwen3's 151k) and halves the memory of prompts held by schedulers and
// indexes compared with int. It is an alias so that token lists cross the
// request plane's generated code ([]int32) without a copy.
type ID = int32
