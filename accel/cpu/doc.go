// Package cpu is reprise's reference device, in pure Go: it runs everywhere
// (tests, CI, laptops) and is the default backend, registered as "cpu".
//
// Its "device memory" is an arena with a capacity (REPRISE_CPU_MEMORY or
// Options.MemoryLimit; by default a quarter of the machine's RAM), so capture
// planning and out-of-memory are real and exact: segments of the caching
// allocator and the memory of instantiated graphs are charged against it.
//
// Each stream runs its work on its own goroutine, so a launch returns before
// the work runs and host planning overlaps device work, as on a GPU. Kernels
// split large work across a pool of persistent worker goroutines
// (REPRISE_CPU_THREADS, default GOMAXPROCS).
//
// Capture records calls instead of running them; an instantiated graph is the
// list of recorded calls with their operands resolved to memory once, and a
// replay runs them in order on the stream's goroutine.
//
// Invariants:
//   - Kernels are deterministic: each output element is computed by one worker
//     in a fixed order, so the same inputs give the same bits whatever the
//     batch size, the padding, the number of threads, or eager against replay.
//   - Kernels reproduce the arithmetic of the llama2.c reference
//     implementation in float32 (sequential dot products, no fused
//     multiply-add), so greedy generation matches it byte for byte.
package cpu
