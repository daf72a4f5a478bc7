// Package gguf reads and writes GGUF (version 2 and 3) files: the
// metadata key/values, the tensor directory and the raw tensor bytes. It
// knows nothing about transformers; engine/native/model maps tensors to
// weights. The project writes its own test models with Writer, so the
// native engine's GGUF path is tested without downloads.
//
// Every length, count and offset read from a file is checked against the
// bytes actually present before it is used, so a truncated or hostile file
// yields an error, never a panic or a huge allocation.
package gguf
