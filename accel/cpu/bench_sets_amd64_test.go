//go:build goexperiment.simd && amd64

package cpu

// benchExtraSets are kernel sets that only the benchmarks run: the
// AVX-512 set on gen_simd.go's archsimd float32 kernels
// ("avx512-archsimd"), the kernels its Go assembly replaced, to compare the
// two in one run.
func benchExtraSets() []*vecOps {
	v := avx512Ops()
	if v == nil || goamd64v3 {
		return nil
	}
	v.name = "avx512-archsimd"
	v.f32 = simdF32Kernels
	// Its blocks before the assembly: 2x3 78-84 GFLOP/s on one core, 3x2
	// 70-74.
	v.blocks.f32, v.blocks.f32Row = [2]int{2, 3}, [2]int{1, 4}
	return []*vecOps{v}
}
