//go:build !(goexperiment.simd && amd64)

package cpu

// quantVecBuilt: no quantized vector kernels in this build.
const quantVecBuilt = false

// runMatMulQuantVec: no vector kernels in this build.
func runMatMulQuantVec(c *rcall, a *qacts, p *packed, lo, hi, t0, t1 int, k *kctx) bool { return false }

// quantActsVec: no vector kernels in this build.
func quantActsVec(a *qacts, x []float32, k bool) bool { return false }

// quantOps: no set's own quantized kernels in this build.
type quantOps struct{}
