// Package cpu is reprise's reference device, in pure Go: it runs everywhere
// (tests, CI, laptops) and is the default backend, registered as "cpu".
//
// Its "device memory" is an arena with a capacity (REPRISE_CPU_MEMORY or
// Options.MemoryLimit; by default a quarter of the machine's RAM), so capture
// planning and out-of-memory are real and exact: segments of the caching
// allocator, the memory of instantiated graphs and the packed copies of
// weight matrices (below) are charged against it.
//
// A weight the caller holds in host memory exactly as the device stores it
// (a memory-mapped model file's pages) can be used in place instead of
// copied (AliasHost, accel.HostAliaser): the segment reads the caller's
// bytes, is charged to the arena like any other, and is read only, every
// launch or copy that would write it being refused (alias.go).
//
// Each stream runs its work on its own goroutine, so a launch returns before
// the work runs and host planning overlaps device work, as on a GPU.
//
// # Kernels
//
// Built with GOEXPERIMENT=simd on amd64 and run on a CPU with AVX-512, the
// heavy kernels (matmul, the exponentials of SiLU and softmax, attention's
// scores and weighted sums, RMSNorm's scaling) run on simd/archsimd vector
// code (simd_amd64.go, attn8_amd64.go for eight-wide heads,
// attn_runs512_amd64.go for a prefill's attention), the float32 and bf16
// matmuls on Go assembly (simd_avx512fma_amd64.s from gen_avx512fma.go);
// on a CPU with AVX2 and FMA but not
// AVX-512 all of them but the eight-wide heads' attention run on 256-bit
// kernels (simd_avx2_amd64.go, and simd_gen_avx2_amd64.go from
// gen_avx2mm.go for the matmuls); every other
// build runs the plain-Go kernels (REPRISE_CPU_SIMD=0 forces them). Both give
// the same bits (simd.go says how, and how the two hazards of archsimd code
// are kept out; hazard_test.go checks the code's structure).
//
// A decode token's attention on the AVX-512 set, for heads of a multiple of
// 16 (attn_dec512_amd64.go), scores sixteen positions per chain after an
// in-register transpose of their keys (assembly) and sums two heads'
// values side by side, requesting the next head's rows meanwhile; each
// score and sum keeps the general path's chain.
//
// F16 KV caches (half.go; Capability.KVCacheF16): OpKVWrite rounds with
// VCVTPS2PH where the CPU has F16C (quant.FloatToHalf's bits otherwise too),
// and OpAttention runs the float32 kernels on the exactly widened values,
// so its bits are the float32 cache's over them: the AVX-512 decode kernels
// widen each row as they load it (scoresDec16h, vAVDec2x64h), the other
// paths widen a token's rows (or a prefill run's, per head) into the
// worker's scratch first.
//
// Attention on both vector sets takes a prefill's queries by runs of one
// sequence (attn_runs.go): per head and piece, the sequence's keys are
// transposed once into panels and its values gathered in rows, and its
// queries read them four at a time; each score, softmax and weighted sum
// keeps the per-token path's chain, so the runs change the order of the
// work, never a row's bits, whatever else shares the step.
//
// A MatMul reads its weights in a packed layout: panels of 16 output rows,
// transposed, so one vector load holds the 16 outputs' weights for one input
// and each lane of the kernel is one output's sequential sum, exactly the
// reference's (bf16: pairs of inputs interleaved, widened by one shift or one
// and). The float32 and bf16 kernels walk a group of panels over every row
// block; under 128 rows each block after a group's first prefetches into
// L2 half a panel of the next group, so that its first block does not wait
// on memory (matmul.go; BenchmarkMatMulCold). The packed copy is made at a matrix's first MatMul or by
// PackWeights, cached per (segment, offset, shape, dtype), charged to the
// arena, and dropped before any write to its bytes lands (pack.go). On
// Linux, where transparent huge pages are "always" or "madvise", packs of
// 64 KiB and more are cut, 64-byte aligned, from 2 MiB-aligned anonymous
// mappings advised MADV_HUGEPAGE (hugepages.go), so that a decode step
// streaming them takes a TLB miss per 2 MiB rather than per 4 KiB
// (REPRISE_CPU_HUGEPAGES=0, other systems and any failure: the Go heap,
// the same bytes). Such a mapping is not Go memory: every pack cut from it
// references its owner object, whose cleanup unmaps it, so it lives as
// long as any pack in it can be used, the packs a running kernel holds
// after the cache dropped them included (their callers keep them alive
// until the kernel returns); the budget is charged each pack's bytes, not
// a mapping's untouched tail.
//
// Quantized weights (Q8_0, Q4_0, Q4_K, Q6_K) multiply as ggml's CPU code
// does: each row of x quantized to 8 bits per block, exact integer block
// dot products, one float32 sum per output in block order (quant.go). The
// vector kernels for them are AVX2 (quant_amd64.go: on any x86-64 CPU with
// AVX2) over packed panels of the same shape (quant_pack.go), and, for the
// avx512 set on a CPU with AVX512_VNNI, VPDPBUSD kernels in Go assembly on
// the same panels (quant_vnni_amd64.go, gen_quantvnni.go), which prefetch
// the next panel while the device's packed weights fit in the last-level
// cache and not once they stream from memory (prefetch.go; measured slower
// there); the plain-Go kernels read ggml's blocks as they are. REPRISE_CPU_SIMD=avx2 runs the
// AVX2 set on an AVX-512 CPU (the same bits), for comparison.
// x's quantization has AVX2 kernels too (quant_acts_amd64.go), and Q4_0 and
// Q8_0 have four-row kernels that split each weight vector once for four
// rows (quant_rows_amd64.go); both give the scalar code's bits, so a row's
// result is the same in any batch.
//
// The sampling ops have AVX2 kernels too, used wherever a vector set is
// (logprobs_amd64.go, penalties_amd64.go), with the plain Go's bits: the
// log probabilities' float32 exponentials summed in eight float64 lanes
// and their top k found from the buckets' maxima (logprobs.go), the
// penalty pass's short path for tokens never seen, and min_p's comparisons
// against float32 bounds that decide as its float64 test does.
//
// # Threads
//
// A pool of persistent worker goroutines (REPRISE_CPU_THREADS, default
// GOMAXPROCS, counting the stream's own goroutine) spins after each job,
// then yields, then parks (workers.go). Eager launches fork and join per
// kernel above a size. An instantiated graph instead gets a static schedule
// (schedule.go): each kernel's work split into whole heads, panels of hidden
// units, or rows, the same pieces for every kernel of a worker's chain, and
// barriers only where one worker needs another's output, with no allocation
// and no channel hand-off during a replay. A matmul split by panels over
// many rows (a prefill's, a batch's float32 one) is shared instead: its
// workers claim chunks of panels from one counter as they come (share.go),
// so that the faster core takes more of it.
//
// Invariants:
//   - Kernels are deterministic: each output element is computed by one
//     piece of code in a fixed order, so the same inputs give the same bits
//     whatever the batch size, the padding, the number of threads, the
//     kernel set (vector or plain Go), or eager against replay.
//   - Kernels reproduce the arithmetic of the llama2.c reference
//     implementation in float32 (sequential dot products, transcendental
//     functions in float64 rounded once), except that in builds with the
//     vector kernels (GOEXPERIMENT=simd, amd64: fusedMatMul) the float32
//     and bf16 matmuls fuse each multiply with its add (one rounding per
//     term, as the FMA instructions do; that build's plain-Go kernels
//     through fma32), where llama2.c rounds the product first; builds
//     without them round it first as llama2.c does (fma32.go says why): greedy generation on stories260K
//     still matches the reference byte for byte (its tests). Every other
//     product (attention, norms, elementwise ops) is rounded before it is
//     added. bf16 weights are exact with respect to their rounded
//     values. Quantized weights follow ggml's integer scheme instead (see
//     quant.go), the same bits from either kernel set.
package cpu
