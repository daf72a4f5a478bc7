// Package mmapfile maps model files read-only (PROT_READ, MAP_SHARED) for
// the GGUF and safetensors readers, so weights are paged in from the page
// cache on first touch instead of being copied into the heap at load, and
// are shared by every process serving the same file. Platforms without
// mmap read the file instead.
package mmapfile
