// Package safetensors reads and writes the safetensors format of Hugging
// Face model directories (https://github.com/huggingface/safetensors): an
// 8-byte little-endian header length, a JSON header naming each tensor's
// dtype, shape and [begin, end) byte range, then the raw little-endian
// tensor bytes. Sharded checkpoints add model.safetensors.index.json, whose
// weight_map names the shard of every tensor.
//
// Files are mapped read-only (package mmapfile). Every header field is
// checked against the bytes present: a truncated or corrupt file gives an
// error naming the file and the tensor, never a panic.
package safetensors
