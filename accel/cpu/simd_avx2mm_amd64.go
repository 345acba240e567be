//go:build goexperiment.simd && amd64

package cpu

//go:generate go run gen_avx2mm.go
//go:generate go run gen_avx2fma.go

// The AVX2 set's packed matmul kernels (avx2Ops) are in
// simd_gen_avx2_amd64.go, written by gen_avx2mm.go: they give the plain-Go
// and the AVX-512 kernels' bits (each output one chain in input order, a
// fused multiply-add per term).
