//go:build !(goexperiment.simd && amd64)

package cpu

// vecSets: this build has no vector kernels.
func vecSets() []*vecOps { return nil }
