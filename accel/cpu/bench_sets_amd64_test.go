//go:build goexperiment.simd && amd64

package cpu

// benchExtraSets are kernel sets that only the benchmarks run: the
// AVX-512 set on gen_simd.go's archsimd matmul kernels
// ("avx512-archsimd"), the kernels its Go assembly replaced, to compare the
// two in one run.
func benchExtraSets() []*vecOps {
	v := avx512Ops()
	if v == nil || goamd64v3 {
		return nil
	}
	v.name = "avx512-archsimd"
	v.f32, v.bf16 = simdF32Kernels, simdBF16Kernels
	// Its blocks before the assembly: float32 2x3 78-84 GFLOP/s on one
	// core, 3x2 70-74; bf16 2x2 68-70, 2x3 and 3x2 spill: 40-43 (bf16
	// needs registers for the widened halves).
	v.blocks = mmBlocks{f32: [2]int{2, 3}, bf16: [2]int{2, 2}, f32Row: [2]int{1, 4}, bf16Row: [2]int{1, 4}}
	return []*vecOps{v}
}
