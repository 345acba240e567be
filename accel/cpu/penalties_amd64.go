//go:build goexperiment.simd && amd64

package cpu

import (
	"simd/archsimd"
	"unsafe"
)

// The penalty pass's AVX2 kernels (penalties.go), run where the log
// probabilities' are (lpVecOn), with the plain Go's bits.

// penalizeShortVec sets y[j] = (x[j] + b[j]) - f0 for every j (at most 64)
// whose count word c[j] is 0, and marks the others, whose y[j] it sets to
// x[j] (y may be x: Penalize then still reads the logit).
//
//go:norace
func penalizeShortVec(y, x []float32, c []int32, b []float32, f0 float32) uint64 {
	n := len(y)
	if n == 0 {
		return 0
	}
	var m uint64
	if g := n &^ 7; g > 0 {
		m = vPenalizeShort(unsafe.Pointer(&y[0]), unsafe.Pointer(&x[0]), unsafe.Pointer(&c[0]), unsafe.Pointer(&b[0]), g, f0)
	}
	for j := n &^ 7; j < n; j++ {
		if c[j] != 0 {
			y[j] = x[j]
			m |= 1 << j
		} else {
			y[j] = x[j] + b[j] - f0
		}
	}
	return m
}

// vPenalizeShort is penalizeShortVec's whole groups of eight (n of them).
//
//go:noinline
//go:norace
//go:nocheckptr
func vPenalizeShort(y, x, c, b unsafe.Pointer, n int, f0 float32) uint64 {
	fv := archsimd.BroadcastFloat32x8(f0)
	var zero archsimd.Int32x8
	var m uint64
	for g := 0; g < n; g += 8 {
		xv := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(x, 4*g)))
		bv := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(b, 4*g)))
		cv := archsimd.LoadInt32x8((*[8]int32)(unsafe.Add(c, 4*g)))
		z := cv.Equal(zero)
		xv.Add(bv).Sub(fv).Merge(xv, z).Store((*[8]float32)(unsafe.Add(y, 4*g)))
		m |= uint64(^z.ToBits()) << g
	}
	archsimd.ClearAVXUpperBits()
	return m
}

// minPVec sets y[j] to -Inf where (y[j] - m) / t < lo, for every j (at
// most 64), and marks the j where lo <= (y[j] - m) / t <= hi.
//
//go:norace
func minPVec(y []float32, m, t, lo, hi float32) uint64 {
	if len(y) == 0 {
		return 0
	}
	return vMinP(y, m, t, lo, hi)
}

//go:noinline
//go:norace
//go:nocheckptr
func vMinP(y []float32, m, t, lo, hi float32) uint64 {
	mv, tv := archsimd.BroadcastFloat32x8(m), archsimd.BroadcastFloat32x8(t)
	lv, hv := archsimd.BroadcastFloat32x8(lo), archsimd.BroadcastFloat32x8(hi)
	ninf := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Pointer(&negInf16)))
	var u uint64
	g := 0
	for ; g+8 <= len(y); g += 8 {
		p := (*[8]float32)(unsafe.Pointer(&y[g]))
		z := archsimd.LoadFloat32x8(p)
		d := z.Sub(mv).Div(tv)
		ninf.Merge(z, d.Less(lv)).Store(p)
		u |= uint64(d.GreaterEqual(lv).And(d.LessEqual(hv)).ToBits()) << g
	}
	if g < len(y) {
		valid := archsimd.LoadInt32x8(&avx2Masks[uint8(0xff)>>(8-(len(y)-g))]).ToMask()
		p := (*[8]float32)(unsafe.Pointer(&y[g]))
		z := archsimd.LoadMaskedFloat32x8(p, valid)
		d := z.Sub(mv).Div(tv)
		ninf.Merge(z, d.Less(lv)).StoreMasked(p, valid)
		u |= uint64(d.GreaterEqual(lv).And(d.LessEqual(hv)).And(valid).ToBits()) << g
	}
	archsimd.ClearAVXUpperBits()
	return u
}
