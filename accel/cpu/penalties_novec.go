//go:build !(goexperiment.simd && amd64)

package cpu

func penalizeShortVec(y, x []float32, c []int32, b []float32, f0 float32) uint64 { return 0 }

func minPVec(y []float32, m, t, lo, hi float32) uint64 { return 0 }
