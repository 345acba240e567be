//go:build goexperiment.simd && amd64

package cpu

//go:generate go run gen_avx512fma.go

// The AVX-512 set's float32 and bf16 packed matmul kernels (avx512Ops) are
// Go assembly, simd_avx512fma_amd64.s, written by gen_avx512fma.go with their
// declarations in simd_gen_avx512fma_amd64.go: each output one chain in
// input order, a fused multiply-add per term (VFMADD231PS), the plain-Go
// kernels' bits. The archsimd matmul kernels of gen_simd.go
// (simdF32Kernels, simdBF16Kernels) stay for the benchmarks that compare
// the two (benchExtraSets).
