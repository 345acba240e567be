//go:build goexperiment.simd && amd64

package cpu

import (
	"simd/archsimd"
	"unsafe"
)

// Four-row quantized kernels: one panel's weights applied to four rows of
// x at once, each weight vector loaded and split into nibbles once for the
// four rows (prefill and batched decode). Every output's float32 sum takes
// the same terms in the same order as the one-row kernels (the integer sums
// are exact in any order), so a row's result does not depend on the rows
// beside it. They run one 8-output half of the panel at a time, to keep the
// four rows' sums in registers.

// qKernel4 is a four-row kernel: rows r = 0..3 of x at qx + r·xs (dx at
// dx + r·ds, sx at sx + r·ss) times one panel of 16 outputs over nb
// blocks, into 16 float32 at y + r·ys.
type qKernel4 func(y unsafe.Pointer, ys uintptr, qx unsafe.Pointer, xs uintptr, dx, sx unsafe.Pointer, ds, ss uintptr, w unsafe.Pointer, nb int)

// mmQ4_0x4: four rows by one Q4_0 panel (mmQ4_0's numerics).
//
//go:noinline
//go:norace
//go:nocheckptr
func mmQ4_0x4(y unsafe.Pointer, ys uintptr, qx unsafe.Pointer, xs uintptr, dx, sx unsafe.Pointer, ds, ss uintptr, w unsafe.Pointer, nb int) {
	m0f := archsimd.BroadcastUint8x32(0x0f)
	// A per-lane shift (VPSRLVD), as in mmQ4_0.
	fours := archsimd.BroadcastUint32x8(4)
	for h := uintptr(0); h < 2; h++ {
		var a0, a1, a2, a3 archsimd.Float32x8
		for b := 0; b < nb; b++ {
			wb := unsafe.Add(w, uintptr(b)*(64+4*64)+32*h)
			x0 := unsafe.Add(qx, uintptr(b)*32)
			x1 := unsafe.Add(x0, xs)
			x2 := unsafe.Add(x1, xs)
			x3 := unsafe.Add(x2, xs)
			var s0, s1, s2, s3 archsimd.Int16x16
			for v := uintptr(0); v < 4; v++ {
				u := archsimd.LoadUint8x32((*[32]uint8)(unsafe.Add(wb, 64+v*64)))
				lo := u.And(m0f)
				hi := u.AsUint32x8().ShiftRight(fours).AsUint8x32().And(m0f)
				s0 = s0.Add(lo.DotProductPairsSaturated(archsimd.BroadcastInt32x8(*(*int32)(unsafe.Add(x0, v*4))).AsInt8x32()))
				s0 = s0.Add(hi.DotProductPairsSaturated(archsimd.BroadcastInt32x8(*(*int32)(unsafe.Add(x0, 16+v*4))).AsInt8x32()))
				s1 = s1.Add(lo.DotProductPairsSaturated(archsimd.BroadcastInt32x8(*(*int32)(unsafe.Add(x1, v*4))).AsInt8x32()))
				s1 = s1.Add(hi.DotProductPairsSaturated(archsimd.BroadcastInt32x8(*(*int32)(unsafe.Add(x1, 16+v*4))).AsInt8x32()))
				s2 = s2.Add(lo.DotProductPairsSaturated(archsimd.BroadcastInt32x8(*(*int32)(unsafe.Add(x2, v*4))).AsInt8x32()))
				s2 = s2.Add(hi.DotProductPairsSaturated(archsimd.BroadcastInt32x8(*(*int32)(unsafe.Add(x2, 16+v*4))).AsInt8x32()))
				s3 = s3.Add(lo.DotProductPairsSaturated(archsimd.BroadcastInt32x8(*(*int32)(unsafe.Add(x3, v*4))).AsInt8x32()))
				s3 = s3.Add(hi.DotProductPairsSaturated(archsimd.BroadcastInt32x8(*(*int32)(unsafe.Add(x3, 16+v*4))).AsInt8x32()))
			}
			ones := archsimd.BroadcastInt16x16(1)
			dw := archsimd.LoadFloat32x8((*[8]float32)(wb))
			bo := uintptr(b) * 4
			d0, s0p := unsafe.Add(dx, bo), unsafe.Add(sx, bo)
			a0 = a0.Add(dw.Mul(archsimd.BroadcastFloat32x8(*(*float32)(d0))).Mul(s0.DotProductPairs(ones).Sub(archsimd.BroadcastInt32x8(8 * *(*int32)(s0p))).ConvertToFloat32()))
			d1, s1p := unsafe.Add(d0, ds), unsafe.Add(s0p, ss)
			a1 = a1.Add(dw.Mul(archsimd.BroadcastFloat32x8(*(*float32)(d1))).Mul(s1.DotProductPairs(ones).Sub(archsimd.BroadcastInt32x8(8 * *(*int32)(s1p))).ConvertToFloat32()))
			d2, s2p := unsafe.Add(d1, ds), unsafe.Add(s1p, ss)
			a2 = a2.Add(dw.Mul(archsimd.BroadcastFloat32x8(*(*float32)(d2))).Mul(s2.DotProductPairs(ones).Sub(archsimd.BroadcastInt32x8(8 * *(*int32)(s2p))).ConvertToFloat32()))
			d3, s3p := unsafe.Add(d2, ds), unsafe.Add(s2p, ss)
			a3 = a3.Add(dw.Mul(archsimd.BroadcastFloat32x8(*(*float32)(d3))).Mul(s3.DotProductPairs(ones).Sub(archsimd.BroadcastInt32x8(8 * *(*int32)(s3p))).ConvertToFloat32()))
		}
		yh := unsafe.Add(y, 32*h)
		a0.Store((*[8]float32)(yh))
		a1.Store((*[8]float32)(unsafe.Add(yh, ys)))
		a2.Store((*[8]float32)(unsafe.Add(yh, 2*ys)))
		a3.Store((*[8]float32)(unsafe.Add(yh, 3*ys)))
	}
	archsimd.ClearAVXUpperBits()
}

// mmQ8_0x4: four rows by one Q8_0 panel (mmQ8_0's numerics). The four
// rows' low and high nibble sums fill the registers, so each output's
// float32 sum is kept in y (cleared first: 0 + t is t, as in a register).
//
//go:noinline
//go:norace
//go:nocheckptr
func mmQ8_0x4(y unsafe.Pointer, ys uintptr, qx unsafe.Pointer, xs uintptr, dx, sx unsafe.Pointer, ds, ss uintptr, w unsafe.Pointer, nb int) {
	m0f := archsimd.BroadcastUint8x32(0x0f)
	fours := archsimd.BroadcastUint32x8(4)
	var zero archsimd.Float32x8
	for h := uintptr(0); h < 2; h++ {
		yh := unsafe.Add(y, 32*h)
		for r := uintptr(0); r < 4; r++ {
			zero.Store((*[8]float32)(unsafe.Add(yh, r*ys)))
		}
		for b := 0; b < nb; b++ {
			wb := unsafe.Add(w, uintptr(b)*(64+8*64)+32*h)
			x0 := unsafe.Add(qx, uintptr(b)*32)
			x1 := unsafe.Add(x0, xs)
			x2 := unsafe.Add(x1, xs)
			x3 := unsafe.Add(x2, xs)
			var l0, h0, l1, h1, l2, h2, l3, h3 archsimd.Int16x16
			for g := uintptr(0); g < 8; g++ {
				u := archsimd.LoadUint8x32((*[32]uint8)(unsafe.Add(wb, 64+g*64)))
				lo := u.And(m0f)
				hi := u.AsUint32x8().ShiftRight(fours).AsUint8x32().And(m0f)
				xg := archsimd.BroadcastInt32x8(*(*int32)(unsafe.Add(x0, g*4))).AsInt8x32()
				l0 = l0.Add(lo.DotProductPairsSaturated(xg))
				h0 = h0.Add(hi.DotProductPairsSaturated(xg))
				xg = archsimd.BroadcastInt32x8(*(*int32)(unsafe.Add(x1, g*4))).AsInt8x32()
				l1 = l1.Add(lo.DotProductPairsSaturated(xg))
				h1 = h1.Add(hi.DotProductPairsSaturated(xg))
				xg = archsimd.BroadcastInt32x8(*(*int32)(unsafe.Add(x2, g*4))).AsInt8x32()
				l2 = l2.Add(lo.DotProductPairsSaturated(xg))
				h2 = h2.Add(hi.DotProductPairsSaturated(xg))
				xg = archsimd.BroadcastInt32x8(*(*int32)(unsafe.Add(x3, g*4))).AsInt8x32()
				l3 = l3.Add(lo.DotProductPairsSaturated(xg))
				h3 = h3.Add(hi.DotProductPairsSaturated(xg))
			}
			ones := archsimd.BroadcastInt16x16(1)
			sixteens := archsimd.BroadcastInt16x16(16)
			dw := archsimd.LoadFloat32x8((*[8]float32)(wb))
			bo := uintptr(b) * 4
			dp, sp, yp := unsafe.Add(dx, bo), unsafe.Add(sx, bo), yh
			i := l0.DotProductPairs(ones).Add(h0.DotProductPairs(sixteens)).Sub(archsimd.BroadcastInt32x8(128 * *(*int32)(sp)))
			t := dw.Mul(archsimd.BroadcastFloat32x8(*(*float32)(dp))).Mul(i.ConvertToFloat32())
			archsimd.LoadFloat32x8((*[8]float32)(yp)).Add(t).Store((*[8]float32)(yp))
			dp, sp, yp = unsafe.Add(dp, ds), unsafe.Add(sp, ss), unsafe.Add(yp, ys)
			i = l1.DotProductPairs(ones).Add(h1.DotProductPairs(sixteens)).Sub(archsimd.BroadcastInt32x8(128 * *(*int32)(sp)))
			t = dw.Mul(archsimd.BroadcastFloat32x8(*(*float32)(dp))).Mul(i.ConvertToFloat32())
			archsimd.LoadFloat32x8((*[8]float32)(yp)).Add(t).Store((*[8]float32)(yp))
			dp, sp, yp = unsafe.Add(dp, ds), unsafe.Add(sp, ss), unsafe.Add(yp, ys)
			i = l2.DotProductPairs(ones).Add(h2.DotProductPairs(sixteens)).Sub(archsimd.BroadcastInt32x8(128 * *(*int32)(sp)))
			t = dw.Mul(archsimd.BroadcastFloat32x8(*(*float32)(dp))).Mul(i.ConvertToFloat32())
			archsimd.LoadFloat32x8((*[8]float32)(yp)).Add(t).Store((*[8]float32)(yp))
			dp, sp, yp = unsafe.Add(dp, ds), unsafe.Add(sp, ss), unsafe.Add(yp, ys)
			i = l3.DotProductPairs(ones).Add(h3.DotProductPairs(sixteens)).Sub(archsimd.BroadcastInt32x8(128 * *(*int32)(sp)))
			t = dw.Mul(archsimd.BroadcastFloat32x8(*(*float32)(dp))).Mul(i.ConvertToFloat32())
			archsimd.LoadFloat32x8((*[8]float32)(yp)).Add(t).Store((*[8]float32)(yp))
		}
	}
	archsimd.ClearAVXUpperBits()
}
