//go:build goexperiment.simd && amd64

package cpu

import (
	"math"
	"simd/archsimd"
	"unsafe"

	"github.com/reprise-ml/reprise/quant"
)

// Vector quantization of x (Q8_0 and Q8_K numerics), the same bits as
// quantRowQ8_0 and quantRowQ8K. Two kernels and scalar code between them,
// since a kernel may hold no scalar float arithmetic (simd.go):
//   - qExtremes finds each block's largest value and largest magnitude
//     among its negative values, on the float bits as integers (for a
//     float of either sign its bits as int32 order like its value, and
//     those of -v like -v's; NaNs compare above infinity, so they show);
//   - scalar code turns them into the block's scale and its inverse exactly
//     as the scalar functions do (a block holding a NaN, or for Q8_K one
//     whose largest magnitude occurs with both signs, so that the first in
//     order decides, is left to the scalar function);
//   - qRound rounds x·inverse to the nearest integer by ggml's (and
//     quant.NearestInt's) magic add, takes each value's low byte as the
//     int8 and sums them.

// Byte gathers for qRound: the low byte of each of a vector's 32-bit lanes,
// for vector j of four, to bytes 4j..4j+3 of each 128-bit half (the others
// zero).
var qGather = func() (g [4][32]int8) {
	for j := range g {
		for i := range g[j] {
			g[j][i] = -128
		}
		for h := 0; h < 2; h++ {
			for l := 0; l < 4; l++ {
				g[j][16*h+4*j+l] = int8(4 * l)
			}
		}
	}
	return
}()

// qDwords puts the gathered 32-bit groups in input order: after the gathers
// group g of half h holds inputs 8g+4h..8g+4h+3.
var qDwords = [8]uint32{0, 4, 1, 5, 2, 6, 3, 7}

// quantActsVec quantizes x (whole blocks) into a's qx, dx and sx from
// index 0, reporting false where this build has no vector kernels.
//
//go:norace
func quantActsVec(a *qacts, x []float32, k bool) bool {
	bl := quant.QK
	if k {
		bl = quant.QKK
	}
	nb := len(x) / bl
	if nb == 0 {
		return true
	}
	a.ext = grow(a.ext, 2*nb)
	a.inv = grow(a.inv, nb)
	qExtremes(unsafe.Pointer(&x[0]), unsafe.Pointer(&a.ext[0]), nb, bl/8)
	a.slow = a.slow[:0]
	for b := 0; b < nb; b++ {
		p, n := a.ext[2*b], a.ext[2*b+1]
		am := max(p, n)
		if am > 0x7f800000 || (k && p == n && am != 0) {
			// A NaN, or a tie of signs: the scalar function decides.
			a.slow = append(a.slow, int32(b))
			a.inv[b] = 0
			continue
		}
		amax := math.Float32frombits(uint32(am))
		var inv float32
		if !k {
			a.dx[b] = quant.HalfToFloat(quant.FloatToHalf(amax / 127))
			if amax != 0 {
				inv = 127 / amax
			}
		} else if am != 0 {
			mx := amax
			if n > p {
				mx = -amax
			}
			inv = -127 / mx
			a.dx[b] = 1 / inv
		} else {
			a.dx[b] = 0
		}
		if math.IsInf(float64(inv), 0) {
			// A scale so small that its inverse overflows: the values
			// leave int8, where the scalar function's truncation decides.
			a.slow = append(a.slow, int32(b))
			inv = 0
		}
		a.inv[b] = inv
	}
	// One rounding kernel for both: Q8_0's blocks are its groups of 32, a
	// Q8_K super-block's eight groups share its inverse; the clamp at 127
	// changes nothing for Q8_0 (|x·127/amax| rounds to at most 127).
	ng := len(x) / 32
	inv, sums := a.inv, a.sx
	if k {
		a.inv32 = grow(a.inv32, ng)
		for g := range a.inv32 {
			a.inv32[g] = a.inv[g/8]
		}
		inv = a.inv32
	} else {
		a.s16 = grow(a.s16, 2*ng)
		sums = a.s16
	}
	qRound(unsafe.Pointer(&x[0]), unsafe.Pointer(&inv[0]), unsafe.Pointer(&a.qx[0]), unsafe.Pointer(&sums[0]), ng)
	if !k {
		for b := range nb {
			a.sx[b] = a.s16[2*b] + a.s16[2*b+1]
		}
	}
	for _, b := range a.slow {
		xb, qb := x[int(b)*bl:int(b+1)*bl], a.qx[int(b)*bl:int(b+1)*bl]
		if k {
			a.dx[b] = quantRowQ8K(xb, qb, a.sx[16*b:16*b+16])
		} else {
			a.dx[b], a.sx[b] = quantRowQ8_0(xb, qb)
		}
	}
	return true
}

// qExtremes sets ext[2b] to the largest of block b's values as int32 bits
// and ext[2b+1] to the largest of their negations' (nv vectors of 8 per
// block).
//
//go:noinline
//go:norace
//go:nocheckptr
func qExtremes(x, ext unsafe.Pointer, nb, nv int) {
	sign := archsimd.BroadcastInt32x8(math.MinInt32)
	var t [8]int32
	for b := 0; b < nb; b++ {
		xb := unsafe.Add(x, uintptr(b*nv)*32)
		p := archsimd.BroadcastInt32x8(math.MinInt32)
		n := p
		for v := 0; v < nv; v++ {
			u := archsimd.LoadInt32x8((*[8]int32)(unsafe.Add(xb, uintptr(v)*32)))
			p = p.Max(u)
			n = n.Max(u.Xor(sign))
		}
		p.Store(&t)
		mp := max(max(t[0], t[1], t[2], t[3]), max(t[4], t[5], t[6], t[7]))
		n.Store(&t)
		mn := max(max(t[0], t[1], t[2], t[3]), max(t[4], t[5], t[6], t[7]))
		*(*int32)(unsafe.Add(ext, 8*b)) = mp
		*(*int32)(unsafe.Add(ext, 8*b+4)) = mn
	}
	archsimd.ClearAVXUpperBits()
}

// qRound: the values (at most 127) of ng groups of 32, each group's
// x·inv[g] rounded, and the sums of each 16.
//
//go:noinline
//go:norace
//go:nocheckptr
func qRound(x, inv, q, sx unsafe.Pointer, ng int) {
	magic := archsimd.BroadcastFloat32x8(12582912)
	low := archsimd.BroadcastInt32x8(0x7fffff)
	off := archsimd.BroadcastInt32x8(0x400000)
	top := archsimd.BroadcastInt32x8(127)
	g0 := archsimd.LoadInt8x32(&qGather[0])
	g1 := archsimd.LoadInt8x32(&qGather[1])
	g2 := archsimd.LoadInt8x32(&qGather[2])
	g3 := archsimd.LoadInt8x32(&qGather[3])
	perm := archsimd.LoadUint32x8(&qDwords)
	var t [8]int32
	for g := 0; g < ng; g++ {
		id := archsimd.BroadcastFloat32x8(*(*float32)(unsafe.Add(inv, uintptr(g)*4)))
		xb := unsafe.Add(x, uintptr(g)*128)
		r0 := archsimd.LoadFloat32x8((*[8]float32)(xb)).Mul(id).Add(magic).AsInt32x8().And(low).Sub(off).Min(top)
		r1 := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(xb, 32))).Mul(id).Add(magic).AsInt32x8().And(low).Sub(off).Min(top)
		r2 := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(xb, 64))).Mul(id).Add(magic).AsInt32x8().And(low).Sub(off).Min(top)
		r3 := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(xb, 96))).Mul(id).Add(magic).AsInt32x8().And(low).Sub(off).Min(top)
		bytes := r0.AsInt8x32().PermuteOrZeroGrouped(g0).Or(r1.AsInt8x32().PermuteOrZeroGrouped(g1)).
			Or(r2.AsInt8x32().PermuteOrZeroGrouped(g2)).Or(r3.AsInt8x32().PermuteOrZeroGrouped(g3))
		bytes.AsInt32x8().Permute(perm).Store((*[8]int32)(unsafe.Add(q, uintptr(g)*32)))
		r0.Add(r1).Store(&t)
		*(*int32)(unsafe.Add(sx, uintptr(2*g)*4)) = t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7]
		r2.Add(r3).Store(&t)
		*(*int32)(unsafe.Add(sx, uintptr(2*g+1)*4)) = t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7]
	}
	archsimd.ClearAVXUpperBits()
}
