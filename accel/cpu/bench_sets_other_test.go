//go:build !(goexperiment.simd && amd64)

package cpu

// benchExtraSets: none without the vector kernels (bench_sets_amd64_test.go).
func benchExtraSets() []*vecOps { return nil }
