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

// clearY4 clears four rows' 8 float32 at y0..y3 (Go stores: a zero vector
// would stay live, and be spilled, across the kernels' loops).
func clearY4(y0, y1, y2, y3 unsafe.Pointer) {
	*(*[8]float32)(y0) = [8]float32{}
	*(*[8]float32)(y1) = [8]float32{}
	*(*[8]float32)(y2) = [8]float32{}
	*(*[8]float32)(y3) = [8]float32{}
}

// mmQ4_0x4: four rows by one Q4_0 panel (mmQ4_0's numerics). Each
// output's float32 sum is kept in y (cleared first: 0 + t is t, as in a
// register) and the vector loop ends on a pointer: in registers, or with a
// counter, the compiler spilled and reloaded them on every vector.
//
//go:noinline
//go:norace
//go:nocheckptr
func mmQ4_0x4(y unsafe.Pointer, ys uintptr, qx unsafe.Pointer, xs uintptr, dx, sx unsafe.Pointer, ds, ss uintptr, w unsafe.Pointer, nb int) {
	for h := uintptr(0); h < 2; h++ {
		y0 := unsafe.Add(y, 32*h)
		y1 := unsafe.Add(y0, ys)
		y2 := unsafe.Add(y1, ys)
		y3 := unsafe.Add(y2, ys)
		clearY4(y0, y1, y2, y3)
		wb := unsafe.Add(w, 32*h)
		x0 := qx
		x1 := unsafe.Add(x0, xs)
		x2 := unsafe.Add(x1, xs)
		x3 := unsafe.Add(x2, xs)
		d0, s0p := dx, sx
		for b := 0; b < nb; b++ {
			m0f := archsimd.BroadcastUint8x32(0x0f)
			// The first vector starts the sums (no zero vector to keep
			// live across the loop: the compiler would spill it).
			u := archsimd.LoadUint8x32((*[32]uint8)(unsafe.Add(wb, 64)))
			lo := u.And(m0f)
			hi := u.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m0f)
			s0 := lo.DotProductPairsSaturated(archsimd.BroadcastInt32x8(*(*int32)(x0)).AsInt8x32()).Add(hi.DotProductPairsSaturated(archsimd.BroadcastInt32x8(*(*int32)(unsafe.Add(x0, 16))).AsInt8x32()))
			s1 := lo.DotProductPairsSaturated(archsimd.BroadcastInt32x8(*(*int32)(x1)).AsInt8x32()).Add(hi.DotProductPairsSaturated(archsimd.BroadcastInt32x8(*(*int32)(unsafe.Add(x1, 16))).AsInt8x32()))
			s2 := lo.DotProductPairsSaturated(archsimd.BroadcastInt32x8(*(*int32)(x2)).AsInt8x32()).Add(hi.DotProductPairsSaturated(archsimd.BroadcastInt32x8(*(*int32)(unsafe.Add(x2, 16))).AsInt8x32()))
			s3 := lo.DotProductPairsSaturated(archsimd.BroadcastInt32x8(*(*int32)(x3)).AsInt8x32()).Add(hi.DotProductPairsSaturated(archsimd.BroadcastInt32x8(*(*int32)(unsafe.Add(x3, 16))).AsInt8x32()))
			x0, x1, x2, x3 = unsafe.Add(x0, 4), unsafe.Add(x1, 4), unsafe.Add(x2, 4), unsafe.Add(x3, 4)
			wv := unsafe.Add(wb, 128)
			we := unsafe.Add(wb, 64+4*64)
			for ; wv != we; wv = unsafe.Add(wv, 64) {
				u := archsimd.LoadUint8x32((*[32]uint8)(wv))
				lo := u.And(m0f)
				hi := u.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m0f)
				s0 = s0.Add(lo.DotProductPairsSaturated(archsimd.BroadcastInt32x8(*(*int32)(x0)).AsInt8x32())).Add(hi.DotProductPairsSaturated(archsimd.BroadcastInt32x8(*(*int32)(unsafe.Add(x0, 16))).AsInt8x32()))
				s1 = s1.Add(lo.DotProductPairsSaturated(archsimd.BroadcastInt32x8(*(*int32)(x1)).AsInt8x32())).Add(hi.DotProductPairsSaturated(archsimd.BroadcastInt32x8(*(*int32)(unsafe.Add(x1, 16))).AsInt8x32()))
				s2 = s2.Add(lo.DotProductPairsSaturated(archsimd.BroadcastInt32x8(*(*int32)(x2)).AsInt8x32())).Add(hi.DotProductPairsSaturated(archsimd.BroadcastInt32x8(*(*int32)(unsafe.Add(x2, 16))).AsInt8x32()))
				s3 = s3.Add(lo.DotProductPairsSaturated(archsimd.BroadcastInt32x8(*(*int32)(x3)).AsInt8x32())).Add(hi.DotProductPairsSaturated(archsimd.BroadcastInt32x8(*(*int32)(unsafe.Add(x3, 16))).AsInt8x32()))
				x0, x1, x2, x3 = unsafe.Add(x0, 4), unsafe.Add(x1, 4), unsafe.Add(x2, 4), unsafe.Add(x3, 4)
			}
			ones := archsimd.BroadcastInt16x16(1)
			dw := archsimd.LoadFloat32x8((*[8]float32)(wb))
			d1, s1p := unsafe.Add(d0, ds), unsafe.Add(s0p, ss)
			d2, s2p := unsafe.Add(d1, ds), unsafe.Add(s1p, ss)
			d3, s3p := unsafe.Add(d2, ds), unsafe.Add(s2p, ss)
			t := dw.Mul(archsimd.BroadcastFloat32x8(*(*float32)(d0))).Mul(s0.DotProductPairs(ones).Sub(archsimd.BroadcastInt32x8(8 * *(*int32)(s0p))).ConvertToFloat32())
			archsimd.LoadFloat32x8((*[8]float32)(y0)).Add(t).Store((*[8]float32)(y0))
			t = dw.Mul(archsimd.BroadcastFloat32x8(*(*float32)(d1))).Mul(s1.DotProductPairs(ones).Sub(archsimd.BroadcastInt32x8(8 * *(*int32)(s1p))).ConvertToFloat32())
			archsimd.LoadFloat32x8((*[8]float32)(y1)).Add(t).Store((*[8]float32)(y1))
			t = dw.Mul(archsimd.BroadcastFloat32x8(*(*float32)(d2))).Mul(s2.DotProductPairs(ones).Sub(archsimd.BroadcastInt32x8(8 * *(*int32)(s2p))).ConvertToFloat32())
			archsimd.LoadFloat32x8((*[8]float32)(y2)).Add(t).Store((*[8]float32)(y2))
			t = dw.Mul(archsimd.BroadcastFloat32x8(*(*float32)(d3))).Mul(s3.DotProductPairs(ones).Sub(archsimd.BroadcastInt32x8(8 * *(*int32)(s3p))).ConvertToFloat32())
			archsimd.LoadFloat32x8((*[8]float32)(y3)).Add(t).Store((*[8]float32)(y3))
			wb = unsafe.Add(wb, 64+4*64)
			x0, x1, x2, x3 = unsafe.Add(x0, 16), unsafe.Add(x1, 16), unsafe.Add(x2, 16), unsafe.Add(x3, 16)
			d0, s0p = unsafe.Add(d0, 4), unsafe.Add(s0p, 4)
		}
	}
	archsimd.ClearAVXUpperBits()
}

// mmQ8_0x4: four rows by one Q8_0 panel (mmQ8_0's numerics). The four
// rows' low and high nibble sums fill the registers, so each output's
// float32 sum is kept in y (cleared first: 0 + t is t, as in a register);
// the group loop ends on a pointer, as in mmQ4_0x4.
//
//go:noinline
//go:norace
//go:nocheckptr
func mmQ8_0x4(y unsafe.Pointer, ys uintptr, qx unsafe.Pointer, xs uintptr, dx, sx unsafe.Pointer, ds, ss uintptr, w unsafe.Pointer, nb int) {
	for h := uintptr(0); h < 2; h++ {
		y0 := unsafe.Add(y, 32*h)
		y1 := unsafe.Add(y0, ys)
		y2 := unsafe.Add(y1, ys)
		y3 := unsafe.Add(y2, ys)
		clearY4(y0, y1, y2, y3)
		wb := unsafe.Add(w, 32*h)
		x0 := qx
		x1 := unsafe.Add(x0, xs)
		x2 := unsafe.Add(x1, xs)
		x3 := unsafe.Add(x2, xs)
		d0, s0p := dx, sx
		for b := 0; b < nb; b++ {
			m0f := archsimd.BroadcastUint8x32(0x0f)
			// The first group starts the sums, as in mmQ4_0x4.
			u := archsimd.LoadUint8x32((*[32]uint8)(unsafe.Add(wb, 64)))
			lo := u.And(m0f)
			hi := u.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m0f)
			xg := archsimd.BroadcastInt32x8(*(*int32)(x0)).AsInt8x32()
			l0, h0 := lo.DotProductPairsSaturated(xg), hi.DotProductPairsSaturated(xg)
			xg = archsimd.BroadcastInt32x8(*(*int32)(x1)).AsInt8x32()
			l1, h1 := lo.DotProductPairsSaturated(xg), hi.DotProductPairsSaturated(xg)
			xg = archsimd.BroadcastInt32x8(*(*int32)(x2)).AsInt8x32()
			l2, h2 := lo.DotProductPairsSaturated(xg), hi.DotProductPairsSaturated(xg)
			xg = archsimd.BroadcastInt32x8(*(*int32)(x3)).AsInt8x32()
			l3, h3 := lo.DotProductPairsSaturated(xg), hi.DotProductPairsSaturated(xg)
			x0, x1, x2, x3 = unsafe.Add(x0, 4), unsafe.Add(x1, 4), unsafe.Add(x2, 4), unsafe.Add(x3, 4)
			wv := unsafe.Add(wb, 128)
			we := unsafe.Add(wb, 64+8*64)
			for ; wv != we; wv = unsafe.Add(wv, 64) {
				u := archsimd.LoadUint8x32((*[32]uint8)(wv))
				lo := u.And(m0f)
				hi := u.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m0f)
				xg := archsimd.BroadcastInt32x8(*(*int32)(x0)).AsInt8x32()
				l0 = l0.Add(lo.DotProductPairsSaturated(xg))
				h0 = h0.Add(hi.DotProductPairsSaturated(xg))
				xg = archsimd.BroadcastInt32x8(*(*int32)(x1)).AsInt8x32()
				l1 = l1.Add(lo.DotProductPairsSaturated(xg))
				h1 = h1.Add(hi.DotProductPairsSaturated(xg))
				xg = archsimd.BroadcastInt32x8(*(*int32)(x2)).AsInt8x32()
				l2 = l2.Add(lo.DotProductPairsSaturated(xg))
				h2 = h2.Add(hi.DotProductPairsSaturated(xg))
				xg = archsimd.BroadcastInt32x8(*(*int32)(x3)).AsInt8x32()
				l3 = l3.Add(lo.DotProductPairsSaturated(xg))
				h3 = h3.Add(hi.DotProductPairsSaturated(xg))
				x0, x1, x2, x3 = unsafe.Add(x0, 4), unsafe.Add(x1, 4), unsafe.Add(x2, 4), unsafe.Add(x3, 4)
			}
			ones := archsimd.BroadcastInt16x16(1)
			sixteens := archsimd.BroadcastInt16x16(16)
			dw := archsimd.LoadFloat32x8((*[8]float32)(wb))
			d1, s1p := unsafe.Add(d0, ds), unsafe.Add(s0p, ss)
			d2, s2p := unsafe.Add(d1, ds), unsafe.Add(s1p, ss)
			d3, s3p := unsafe.Add(d2, ds), unsafe.Add(s2p, ss)
			i := l0.DotProductPairs(ones).Add(h0.DotProductPairs(sixteens)).Sub(archsimd.BroadcastInt32x8(128 * *(*int32)(s0p)))
			t := dw.Mul(archsimd.BroadcastFloat32x8(*(*float32)(d0))).Mul(i.ConvertToFloat32())
			archsimd.LoadFloat32x8((*[8]float32)(y0)).Add(t).Store((*[8]float32)(y0))
			i = l1.DotProductPairs(ones).Add(h1.DotProductPairs(sixteens)).Sub(archsimd.BroadcastInt32x8(128 * *(*int32)(s1p)))
			t = dw.Mul(archsimd.BroadcastFloat32x8(*(*float32)(d1))).Mul(i.ConvertToFloat32())
			archsimd.LoadFloat32x8((*[8]float32)(y1)).Add(t).Store((*[8]float32)(y1))
			i = l2.DotProductPairs(ones).Add(h2.DotProductPairs(sixteens)).Sub(archsimd.BroadcastInt32x8(128 * *(*int32)(s2p)))
			t = dw.Mul(archsimd.BroadcastFloat32x8(*(*float32)(d2))).Mul(i.ConvertToFloat32())
			archsimd.LoadFloat32x8((*[8]float32)(y2)).Add(t).Store((*[8]float32)(y2))
			i = l3.DotProductPairs(ones).Add(h3.DotProductPairs(sixteens)).Sub(archsimd.BroadcastInt32x8(128 * *(*int32)(s3p)))
			t = dw.Mul(archsimd.BroadcastFloat32x8(*(*float32)(d3))).Mul(i.ConvertToFloat32())
			archsimd.LoadFloat32x8((*[8]float32)(y3)).Add(t).Store((*[8]float32)(y3))
			wb = unsafe.Add(wb, 64+8*64)
			d0, s0p = unsafe.Add(d0, 4), unsafe.Add(s0p, 4)
		}
	}
	archsimd.ClearAVXUpperBits()
}

// mmQ4_Kx4: four rows by one Q4_K panel (mmQ4_K's numerics), one 8-output
// half at a time. Per super-block: for each pair of sub-blocks the four
// rows' nibble sums in int16 (as mmQ8_0x4's, filling the registers), folded
// to int32 and times the sub-blocks' scales into A (kept in a, memory);
// then the mins times x's sums of 32 into B (the registers are free by
// then), and (d·dx)·A - (dmin·dx)·B added to y, where each output's float32
// sum is kept (cleared first).
//
//go:noinline
//go:norace
//go:nocheckptr
func mmQ4_Kx4(y unsafe.Pointer, ys uintptr, qx unsafe.Pointer, xs uintptr, dx, sx unsafe.Pointer, ds, ss uintptr, w unsafe.Pointer, nb int) {
	var a [4][8]int32
	ap := unsafe.Pointer(&a[0][0])
	for h := uintptr(0); h < 2; h++ {
		y0 := unsafe.Add(y, 32*h)
		y1 := unsafe.Add(y0, ys)
		y2 := unsafe.Add(y1, ys)
		y3 := unsafe.Add(y2, ys)
		clearY4(y0, y1, y2, y3)
		for b := 0; b < nb; b++ {
			wb := unsafe.Add(w, uintptr(b)*2432+32*h)
			// The scales and mins are bytes: this half's are 8 on.
			sm := unsafe.Add(w, uintptr(b)*2432+8*h)
			x0 := unsafe.Add(qx, uintptr(b)*256)
			x1 := unsafe.Add(x0, xs)
			x2 := unsafe.Add(x1, xs)
			x3 := unsafe.Add(x2, xs)
			a = [4][8]int32{}
			for c := uintptr(0); c < 4; c++ {
				m0f := archsimd.BroadcastUint8x32(0x0f)
				// The first group starts the sums, as in mmQ4_0x4.
				wv := unsafe.Add(wb, 384+8*64*c)
				u := archsimd.LoadUint8x32((*[32]uint8)(wv))
				lo := u.And(m0f)
				hi := u.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m0f)
				l0, h0 := lo.DotProductPairsSaturated(archsimd.BroadcastInt32x8(*(*int32)(x0)).AsInt8x32()), hi.DotProductPairsSaturated(archsimd.BroadcastInt32x8(*(*int32)(unsafe.Add(x0, 32))).AsInt8x32())
				l1, h1 := lo.DotProductPairsSaturated(archsimd.BroadcastInt32x8(*(*int32)(x1)).AsInt8x32()), hi.DotProductPairsSaturated(archsimd.BroadcastInt32x8(*(*int32)(unsafe.Add(x1, 32))).AsInt8x32())
				l2, h2 := lo.DotProductPairsSaturated(archsimd.BroadcastInt32x8(*(*int32)(x2)).AsInt8x32()), hi.DotProductPairsSaturated(archsimd.BroadcastInt32x8(*(*int32)(unsafe.Add(x2, 32))).AsInt8x32())
				l3, h3 := lo.DotProductPairsSaturated(archsimd.BroadcastInt32x8(*(*int32)(x3)).AsInt8x32()), hi.DotProductPairsSaturated(archsimd.BroadcastInt32x8(*(*int32)(unsafe.Add(x3, 32))).AsInt8x32())
				x0, x1, x2, x3 = unsafe.Add(x0, 4), unsafe.Add(x1, 4), unsafe.Add(x2, 4), unsafe.Add(x3, 4)
				we := unsafe.Add(wv, 8*64)
				for wv = unsafe.Add(wv, 64); wv != we; wv = unsafe.Add(wv, 64) {
					u := archsimd.LoadUint8x32((*[32]uint8)(wv))
					lo := u.And(m0f)
					hi := u.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m0f)
					l0 = l0.Add(lo.DotProductPairsSaturated(archsimd.BroadcastInt32x8(*(*int32)(x0)).AsInt8x32()))
					h0 = h0.Add(hi.DotProductPairsSaturated(archsimd.BroadcastInt32x8(*(*int32)(unsafe.Add(x0, 32))).AsInt8x32()))
					l1 = l1.Add(lo.DotProductPairsSaturated(archsimd.BroadcastInt32x8(*(*int32)(x1)).AsInt8x32()))
					h1 = h1.Add(hi.DotProductPairsSaturated(archsimd.BroadcastInt32x8(*(*int32)(unsafe.Add(x1, 32))).AsInt8x32()))
					l2 = l2.Add(lo.DotProductPairsSaturated(archsimd.BroadcastInt32x8(*(*int32)(x2)).AsInt8x32()))
					h2 = h2.Add(hi.DotProductPairsSaturated(archsimd.BroadcastInt32x8(*(*int32)(unsafe.Add(x2, 32))).AsInt8x32()))
					l3 = l3.Add(lo.DotProductPairsSaturated(archsimd.BroadcastInt32x8(*(*int32)(x3)).AsInt8x32()))
					h3 = h3.Add(hi.DotProductPairsSaturated(archsimd.BroadcastInt32x8(*(*int32)(unsafe.Add(x3, 32))).AsInt8x32()))
					x0, x1, x2, x3 = unsafe.Add(x0, 4), unsafe.Add(x1, 4), unsafe.Add(x2, 4), unsafe.Add(x3, 4)
				}
				x0, x1, x2, x3 = unsafe.Add(x0, 32), unsafe.Add(x1, 32), unsafe.Add(x2, 32), unsafe.Add(x3, 32)
				ones := archsimd.BroadcastInt16x16(1)
				scl := archsimd.LoadInt8x16((*[16]int8)(unsafe.Add(sm, 128+16*2*c))).ExtendLo8ToInt32()
				sch := archsimd.LoadInt8x16((*[16]int8)(unsafe.Add(sm, 128+16*(2*c+1)))).ExtendLo8ToInt32()
				p := (*[8]int32)(ap)
				archsimd.LoadInt32x8(p).Add(l0.DotProductPairs(ones).Mul(scl)).Add(h0.DotProductPairs(ones).Mul(sch)).Store(p)
				p = (*[8]int32)(unsafe.Add(ap, 32))
				archsimd.LoadInt32x8(p).Add(l1.DotProductPairs(ones).Mul(scl)).Add(h1.DotProductPairs(ones).Mul(sch)).Store(p)
				p = (*[8]int32)(unsafe.Add(ap, 64))
				archsimd.LoadInt32x8(p).Add(l2.DotProductPairs(ones).Mul(scl)).Add(h2.DotProductPairs(ones).Mul(sch)).Store(p)
				p = (*[8]int32)(unsafe.Add(ap, 96))
				archsimd.LoadInt32x8(p).Add(l3.DotProductPairs(ones).Mul(scl)).Add(h3.DotProductPairs(ones).Mul(sch)).Store(p)
			}
			// B: the mins times each row's sums of 32.
			s0 := unsafe.Add(sx, uintptr(b)*64)
			s1 := unsafe.Add(s0, ss)
			s2 := unsafe.Add(s1, ss)
			s3 := unsafe.Add(s2, ss)
			var b0, b1, b2, b3 archsimd.Int32x8
			for s := uintptr(0); s < 8; s++ {
				mv := archsimd.LoadInt8x16((*[16]int8)(unsafe.Add(sm, 256+16*s))).ExtendLo8ToInt32()
				b0 = b0.Add(mv.Mul(archsimd.BroadcastInt32x8(*(*int32)(unsafe.Add(s0, 8*s)) + *(*int32)(unsafe.Add(s0, 8*s+4)))))
				b1 = b1.Add(mv.Mul(archsimd.BroadcastInt32x8(*(*int32)(unsafe.Add(s1, 8*s)) + *(*int32)(unsafe.Add(s1, 8*s+4)))))
				b2 = b2.Add(mv.Mul(archsimd.BroadcastInt32x8(*(*int32)(unsafe.Add(s2, 8*s)) + *(*int32)(unsafe.Add(s2, 8*s+4)))))
				b3 = b3.Add(mv.Mul(archsimd.BroadcastInt32x8(*(*int32)(unsafe.Add(s3, 8*s)) + *(*int32)(unsafe.Add(s3, 8*s+4)))))
			}
			dw := archsimd.LoadFloat32x8((*[8]float32)(wb))
			dm := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(wb, 64)))
			d0 := unsafe.Add(dx, uintptr(b)*4)
			dxv := archsimd.BroadcastFloat32x8(*(*float32)(d0))
			t := dw.Mul(dxv).Mul(archsimd.LoadInt32x8((*[8]int32)(ap)).ConvertToFloat32()).Sub(dm.Mul(dxv).Mul(b0.ConvertToFloat32()))
			archsimd.LoadFloat32x8((*[8]float32)(y0)).Add(t).Store((*[8]float32)(y0))
			dxv = archsimd.BroadcastFloat32x8(*(*float32)(unsafe.Add(d0, ds)))
			t = dw.Mul(dxv).Mul(archsimd.LoadInt32x8((*[8]int32)(unsafe.Add(ap, 32))).ConvertToFloat32()).Sub(dm.Mul(dxv).Mul(b1.ConvertToFloat32()))
			archsimd.LoadFloat32x8((*[8]float32)(y1)).Add(t).Store((*[8]float32)(y1))
			dxv = archsimd.BroadcastFloat32x8(*(*float32)(unsafe.Add(d0, 2*ds)))
			t = dw.Mul(dxv).Mul(archsimd.LoadInt32x8((*[8]int32)(unsafe.Add(ap, 64))).ConvertToFloat32()).Sub(dm.Mul(dxv).Mul(b2.ConvertToFloat32()))
			archsimd.LoadFloat32x8((*[8]float32)(y2)).Add(t).Store((*[8]float32)(y2))
			dxv = archsimd.BroadcastFloat32x8(*(*float32)(unsafe.Add(d0, 3*ds)))
			t = dw.Mul(dxv).Mul(archsimd.LoadInt32x8((*[8]int32)(unsafe.Add(ap, 96))).ConvertToFloat32()).Sub(dm.Mul(dxv).Mul(b3.ConvertToFloat32()))
			archsimd.LoadFloat32x8((*[8]float32)(y3)).Add(t).Store((*[8]float32)(y3))
		}
	}
	archsimd.ClearAVXUpperBits()
}

// mmQ6_Kx4: four rows by one Q6_K panel (mmQ6_K's numerics), one 8-output
// half at a time. Unpacking the 6-bit values (nibble or'ed with its two
// high bits) is most of mmQ6_K's work, so per super-block the half's
// values are unpacked once into u (as mmQ6_K does, in its order) and each
// of the four rows then reads them as plain bytes; the float32 sums are
// kept in y (cleared first).
//
//go:noinline
//go:norace
//go:nocheckptr
func mmQ6_Kx4(y unsafe.Pointer, ys uintptr, qx unsafe.Pointer, xs uintptr, dx, sx unsafe.Pointer, ds, ss uintptr, w unsafe.Pointer, nb int) {
	var u [64][32]uint8
	var a [8]int32
	up, ap := unsafe.Pointer(&u[0][0]), unsafe.Pointer(&a[0])
	for h := uintptr(0); h < 2; h++ {
		y0 := unsafe.Add(y, 32*h)
		clearY4(y0, unsafe.Add(y0, ys), unsafe.Add(y0, 2*ys), unsafe.Add(y0, 3*ys))
		for b := 0; b < nb; b++ {
			wb := unsafe.Add(w, uintptr(b)*3392+32*h)
			q6Unpack(up, wb)
			sc := unsafe.Add(w, uintptr(b)*3392+64+8*h)
			for r := uintptr(0); r < 4; r++ {
				xb := unsafe.Add(qx, r*xs+uintptr(b)*256)
				sb := unsafe.Add(sx, r*ss+uintptr(b)*64)
				q6Row(ap, up, xb, sb, sc)
				yr := (*[8]float32)(unsafe.Add(y0, r*ys))
				dxv := archsimd.BroadcastFloat32x8(*(*float32)(unsafe.Add(dx, r*ds+uintptr(b)*4)))
				d := archsimd.LoadFloat32x8((*[8]float32)(wb))
				archsimd.LoadFloat32x8(yr).Add(d.Mul(dxv).Mul(archsimd.LoadInt32x8(&a).ConvertToFloat32())).Store(yr)
			}
		}
	}
	archsimd.ClearAVXUpperBits()
}

// q6Unpack writes the 6-bit values of one Q6_K super-block's panel half at
// wb to u: for each group k of four inputs (0..15) the vectors of inputs
// 4k, 64+4k, 128+4k and 192+4k (mmQ6_K's v1, v3, v2 and v4) at u[4k..4k+3].
//
//go:noinline
//go:norace
//go:nocheckptr
func q6Unpack(u, wb unsafe.Pointer) {
	m0f := archsimd.BroadcastUint8x32(0x0f)
	m30 := archsimd.BroadcastUint8x32(0x30)
	for k := uintptr(0); k < 16; k++ {
		hb := archsimd.LoadUint8x32((*[32]uint8)(unsafe.Add(wb, 2368+64*k))).AsInt16x16()
		na := archsimd.LoadUint8x32((*[32]uint8)(unsafe.Add(wb, 320+64*k)))
		nc := archsimd.LoadUint8x32((*[32]uint8)(unsafe.Add(wb, 320+64*(k+16))))
		uk := unsafe.Add(u, 128*k)
		// Input 4k+j's high bits are bits 0-1 of hb's byte, 128+4k+j's
		// bits 2-3, 64+4k+j's bits 4-5, 192+4k+j's bits 6-7. The shifts
		// are on 16-bit lanes (immediate counts), the masks keep each
		// byte's own bits.
		na.And(m0f).Or(hb.ShiftAllLeft(4).AsUint8x32().And(m30)).Store((*[32]uint8)(uk))
		nc.And(m0f).Or(hb.AsUint8x32().And(m30)).Store((*[32]uint8)(unsafe.Add(uk, 32)))
		na.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m0f).Or(hb.ShiftAllLeft(2).AsUint8x32().And(m30)).Store((*[32]uint8)(unsafe.Add(uk, 64)))
		nc.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m0f).Or(hb.ShiftAllRight(2).AsUint8x32().And(m30)).Store((*[32]uint8)(unsafe.Add(uk, 96)))
	}
	archsimd.ClearAVXUpperBits()
}

// q6Row sets A (8 int32) to one row's A for one super-block half from
// q6Unpack's values: per sub-block of 16 the values against x by
// VPMADDUBSW, two groups in int16 (63·127·2·2 < 2^15), folded to int32,
// less 32·Σx, times the sub-block's scale.
//
//go:noinline
//go:norace
//go:nocheckptr
func q6Row(A, u, xb, sb, sc unsafe.Pointer) {
	var a archsimd.Int32x8
	ones := archsimd.BroadcastInt16x16(1)
	for sp := uintptr(0); sp < 4; sp++ {
		var i1, i2, i3, i4 archsimd.Int32x8
		for j := uintptr(0); j < 2; j++ {
			k := 4*sp + 2*j
			uk := unsafe.Add(u, 128*k)
			t1 := archsimd.LoadUint8x32((*[32]uint8)(uk)).DotProductPairsSaturated(archsimd.BroadcastInt32x8(*(*int32)(unsafe.Add(xb, 4*k))).AsInt8x32())
			t3 := archsimd.LoadUint8x32((*[32]uint8)(unsafe.Add(uk, 32))).DotProductPairsSaturated(archsimd.BroadcastInt32x8(*(*int32)(unsafe.Add(xb, 64+4*k))).AsInt8x32())
			t2 := archsimd.LoadUint8x32((*[32]uint8)(unsafe.Add(uk, 64))).DotProductPairsSaturated(archsimd.BroadcastInt32x8(*(*int32)(unsafe.Add(xb, 128+4*k))).AsInt8x32())
			t4 := archsimd.LoadUint8x32((*[32]uint8)(unsafe.Add(uk, 96))).DotProductPairsSaturated(archsimd.BroadcastInt32x8(*(*int32)(unsafe.Add(xb, 192+4*k))).AsInt8x32())
			uk = unsafe.Add(uk, 128)
			t1 = t1.Add(archsimd.LoadUint8x32((*[32]uint8)(uk)).DotProductPairsSaturated(archsimd.BroadcastInt32x8(*(*int32)(unsafe.Add(xb, 4*k+4))).AsInt8x32()))
			t3 = t3.Add(archsimd.LoadUint8x32((*[32]uint8)(unsafe.Add(uk, 32))).DotProductPairsSaturated(archsimd.BroadcastInt32x8(*(*int32)(unsafe.Add(xb, 64+4*k+4))).AsInt8x32()))
			t2 = t2.Add(archsimd.LoadUint8x32((*[32]uint8)(unsafe.Add(uk, 64))).DotProductPairsSaturated(archsimd.BroadcastInt32x8(*(*int32)(unsafe.Add(xb, 128+4*k+4))).AsInt8x32()))
			t4 = t4.Add(archsimd.LoadUint8x32((*[32]uint8)(unsafe.Add(uk, 96))).DotProductPairsSaturated(archsimd.BroadcastInt32x8(*(*int32)(unsafe.Add(xb, 192+4*k+4))).AsInt8x32()))
			i1 = i1.Add(t1.DotProductPairs(ones))
			i2 = i2.Add(t2.DotProductPairs(ones))
			i3 = i3.Add(t3.DotProductPairs(ones))
			i4 = i4.Add(t4.DotProductPairs(ones))
		}
		// Sub-blocks sp, 8+sp, 4+sp and 12+sp.
		a = a.Add(i1.Sub(archsimd.BroadcastInt32x8(32 * *(*int32)(unsafe.Add(sb, 4*sp)))).Mul(archsimd.LoadInt8x16((*[16]int8)(unsafe.Add(sc, 16*sp))).ExtendLo8ToInt32()))
		a = a.Add(i2.Sub(archsimd.BroadcastInt32x8(32 * *(*int32)(unsafe.Add(sb, 4*(8+sp))))).Mul(archsimd.LoadInt8x16((*[16]int8)(unsafe.Add(sc, 16*(8+sp)))).ExtendLo8ToInt32()))
		a = a.Add(i3.Sub(archsimd.BroadcastInt32x8(32 * *(*int32)(unsafe.Add(sb, 4*(4+sp))))).Mul(archsimd.LoadInt8x16((*[16]int8)(unsafe.Add(sc, 16*(4+sp)))).ExtendLo8ToInt32()))
		a = a.Add(i4.Sub(archsimd.BroadcastInt32x8(32 * *(*int32)(unsafe.Add(sb, 4*(12+sp))))).Mul(archsimd.LoadInt8x16((*[16]int8)(unsafe.Add(sc, 16*(12+sp)))).ExtendLo8ToInt32()))
	}
	a.Store((*[8]int32)(A))
	archsimd.ClearAVXUpperBits()
}
