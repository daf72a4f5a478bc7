package engine

// Memory is an in-process engine's memory as /health shows it per worker.
type Memory struct {
	// WeightsBytes is the model's weights in memory. Workers of one
	// process share one copy: WeightsSharedBy says how many, and the
	// process holds WeightsBytes once, not once per worker.
	WeightsBytes    int64
	WeightsSharedBy int
	// WeightsMappedBytes is the part of WeightsBytes read in place from
	// the model file's read-only mapping (the page cache's pages, shared
	// with any process mapping the file); the rest was copied into the
	// heap at load (a layout the kernels need).
	WeightsMappedBytes int64
	// KVBytes is the KV cache this worker allocated, for KVTokens token
	// slots; KVSizedBy says how its size was chosen (the flag, one full
	// context, or the machine's memory).
	KVBytes   int64
	KVTokens  int
	KVSizedBy string
}

// MemoryReporter is implemented by in-process engines that account for
// their memory (engine/native).
type MemoryReporter interface {
	Memory() Memory
}
