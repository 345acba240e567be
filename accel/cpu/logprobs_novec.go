//go:build !(goexperiment.simd && amd64)

package cpu

// No vector kernels for the log probabilities in this build.
func lpVecOn() bool { return false }

func expSumLPVec(x []float32, m float32, acc *[8]float64) int { return 0 }

func atLeastLPVec(x []float32, th float32, bi *[lpBuckets]int32, marks []uint64) {}

func rankLPVec(bv *[lpBuckets]float32, bi *[lpBuckets]int32, beaten *[lpBuckets]uint32) {}

func bucketMaxLPVec(x []float32, bv *[lpBuckets]float32, bi *[lpBuckets]int32) int { return -1 }

// lpVecBuilt: no kernels built.
const lpVecBuilt = false
