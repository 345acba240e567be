//go:build !(goexperiment.simd && amd64)

package cpu

// expShiftPattern is the vector kernels' (simd_amd64.go); the tests that
// call it skip in this build.
func expShiftPattern(x []float32, m *[16]float32, wide bool) {
	panic("cpu: no vector kernels in this build")
}
