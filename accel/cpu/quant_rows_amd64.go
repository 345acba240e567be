//go:build goexperiment.simd && amd64

package cpu

//go:generate go run gen_quantrows.go

import (
	"simd/archsimd"
	"unsafe"
)

// Many-row quantized kernels: one panel's weights applied to several rows
// of x at once, each weight vector loaded (and split into nibbles, or made
// signed) once for those rows (prefill and batched decode). Every output's
// float32 sum takes the same terms in the same order as the one-row
// kernels and the plain-Go reference (quant.go; the integer sums are exact
// in any order), so a row's result does not depend on the rows beside it.
// The Q8_0, Q4_0 and Q4_K kernels take three rows by the whole 16-output
// panel, so that each broadcast of x serves both 8-output halves' weight
// vectors (the row count is what fits the registers); the Q6_K kernel four
// rows, one half at a time.
//
// The Q8_0, Q4_0 and Q4_K kernels are generated (gen_quantrows.go says why:
// the compiler's scheduler keeps a written-out block in source order, and a
// loop's sums spill) into quant_rows_gen_amd64.go. Two things about their
// code are not obvious from it:
//   - Fences. The scheduler issues the loads of a whole written-out block
//     first (they depend on nothing in it), which would hold every group's
//     broadcasts of x in registers at once, spilled (an XMM spill is a
//     legacy-SSE store that stalls on the dirty upper AVX state). So each
//     group ends by storing one of its sums to a local array that nothing
//     reads: a load may not move above a store, so each group's loads come
//     after the previous group's work. One store per group of four rows by
//     8 outputs by 4 inputs; runtime.KeepAlive keeps the stores from being
//     dropped as dead.
//   - Q8_0's sign trick (ggml's AVX2 dot product). VPMADDUBSW multiplies
//     unsigned bytes by signed ones, with pair sums that saturate at 2^15,
//     and a Q8_0 weight is signed. The old kernel split w+128 into nibbles
//     (two VPMADDUBSW, two int16 sums per row and output, less 128·Σx);
//     this one gives VPMADDUBSW |w| (at most 128 as an unsigned byte) and x
//     with w's sign (VPSIGNB; |x| <= 127, so x·sign(w) is an int8 too):
//     pair sums of at most 2·128·127 that cannot saturate, widened to int32
//     by VPMADDWD. The same two multiplies per four inputs, half the sums to
//     keep, no correction (docs/BENCH.md has the figures). Exact for every
//     byte a file may hold (-128 included: TestQuantMatMulRowsExtremes).

// qKernel4 is a many-row kernel (three or four rows: runMatMulQuantVec
// knows which): rows r = 0, 1, ... of x at qx + r·xs (dx at dx + r·ds, sx
// at sx + r·ss) times one panel of 16 outputs over nb blocks, into 16
// float32 at y + r·ys.
type qKernel4 func(y unsafe.Pointer, ys uintptr, qx unsafe.Pointer, xs uintptr, dx, sx unsafe.Pointer, ds, ss uintptr, w unsafe.Pointer, nb int)

// quantRowStep is how many of the n rows left the next kernel call takes:
// the many-row kernel's rows while that leaves no single row behind when
// there is a two-row kernel (n = 3a + 2b: a lone row runs on the one-row
// kernel, which reuses no weight vector), else as many as it takes, else 1.
func quantRowStep(n, rows int, many, two bool) int {
	switch {
	case many && (n == rows || n >= rows+2 || (n > rows && !two)):
		return rows
	case two && n >= 2:
		return 2
	}
	return 1
}

// clearY4 clears four rows' 8 float32 at y0..y3 (Go stores: a zero vector
// would stay live, and be spilled, across the kernels' loops).
func clearY4(y0, y1, y2, y3 unsafe.Pointer) {
	*(*[8]float32)(y0) = [8]float32{}
	*(*[8]float32)(y1) = [8]float32{}
	*(*[8]float32)(y2) = [8]float32{}
	*(*[8]float32)(y3) = [8]float32{}
}

// q8Flip is 0x80 in every byte: a Q8_0 panel's bytes are the values plus
// 128 (quant_pack.go), and xor with it gives them back. mmQ8_0x4 loads it
// from memory at each block instead of keeping it in a register across the
// block loop.
var q8Flip = [32]uint8{
	0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
	0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
}

// q8Low is 0x0f in every byte: the low-nibble mask, loaded where it is
// needed (as q16Ones).
var q8Low = [32]uint8{
	0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f,
	0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f,
}

// q16Ones is 1 in every int16 lane, for VPMADDWD's widening of pair sums:
// a kernel loads it where it needs it, so that the compiler cannot keep it
// in a register (or spill it) across the loop before.
var q16Ones = [16]int16{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}

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
