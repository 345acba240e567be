//go:build !(goexperiment.simd && amd64)

package cpu

// exp64VecBuilt: no vector exponential in this build.
const exp64VecBuilt = false

// expShift64Vec: no vector exponential in this build.
func expShift64Vec(out []float64, x []float32, m float32) int { return 0 }
