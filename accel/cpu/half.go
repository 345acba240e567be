package cpu

import "github.com/reprise-ml/reprise/quant"

// F16 KV caches (accel.F16): OpKVWrite rounds each element to binary16 as
// quant.FloatToHalf does, and OpAttention widens the rows a piece reads into
// float32 scratch first (widenRows), then runs the float32 kernels on it:
// the output is the float32 cache's over the widened values, bit for bit,
// on every kernel set, and a decode step reads half the bytes from memory.
// The widened rows of one token (or one head of a prefill's run) stay in
// the worker's cache while the kernels read them.

// widenHalf and narrowHalf convert len(dst) elements; on amd64 with F16C
// they are VCVTPH2PS and VCVTPS2PH (round to nearest even), which give
// quant's bits (half_test.go checks every binary16 and the float32 values
// around each rounding boundary).
var (
	widenHalf  = widenHalfGo
	narrowHalf = narrowHalfGo
)

func widenHalfGo(dst []float32, src []uint16) {
	src = src[:len(dst)]
	for i, h := range src {
		dst[i] = quant.HalfToFloat(h)
	}
}

func narrowHalfGo(dst []uint16, src []float32) {
	src = src[:len(dst)]
	for i, f := range src {
		dst[i] = quant.FloatToHalf(f)
	}
}

// widenRows widens the n cache rows at offs (elements of kh and vh, rows
// of kvd) into the worker's scratch, columns [c0, c1) of each: row i at
// i*kvd, so that the float32 kernels index the scratch as they index a
// cache (offs is rewritten to i*kvd; columns outside [c0, c1) are not
// written and must not be read). It returns the scratch and the largest
// offset.
//
//go:norace
func widenRows(k *kctx, kh, vh []uint16, offs []int, kvd, c0, c1 int) (kc, vc []float32, maxOff int) {
	n := len(offs)
	if cap(k.kw) < n*kvd {
		k.kw = make([]float32, n*kvd)
		k.vw = make([]float32, n*kvd)
	}
	kc, vc = k.kw[:n*kvd], k.vw[:n*kvd]
	for i, o := range offs {
		widenHalf(kc[i*kvd+c0:i*kvd+c1], kh[o+c0:o+c1])
		widenHalf(vc[i*kvd+c0:i*kvd+c1], vh[o+c0:o+c1])
		offs[i] = i * kvd
	}
	return kc, vc, max(0, n-1) * kvd
}
