//go:build goexperiment.simd && amd64

package cpu

// vecSets are the vector kernel sets this build has and this CPU runs
// (AVX-512 where it has AVX-512, AVX2 where it has AVX2), whichever is the
// default: the tests check each against the plain-Go kernels.
func vecSets() []*vecOps {
	var sets []*vecOps
	for _, s := range []*vecOps{avx512Ops(), avx2MatOps()} {
		if s != nil && !goamd64v3 {
			sets = append(sets, s)
		}
	}
	return sets
}
