//go:build goexperiment.simd && amd64

package cpu

import (
	"os"
	"simd/archsimd"
	"unsafe"

	"github.com/reprise-ml/reprise/accel"
)

// The quantized matmul's vector kernels are 256-bit (AVX2): AVX2 is on
// every x86-64 CPU of the last decade, AVX-512 ones included, and the
// machine they were written and measured on had no AVX-512 (a 512-bit
// variant of the same loops is future work, untested here). They read each
// 16-output panel as two 8-output halves. The same hazard rules hold as for
// the AVX-512 kernels (simd.go), plus one more: no constant-count shifts in
// a loop (see mmQ4_0).

// quantVecBuilt: this build and CPU can run them (REPRISE_CPU_SIMD=0 and
// GOAMD64=v3 builds turn them off as they do the others).
var quantVecBuilt = archsimd.X86.AVX2() && !goamd64v3 && os.Getenv(EnvSIMD) != "0"

func init() { quantVec.Store(quantVecBuilt) }

// qKernel is a packed quantized matmul block: one row of quantized x (qx
// int8 per input, dx float32 per block, sx int32 per 32 inputs, or per 16
// for the K-quants) times one panel of 16 outputs over nb blocks, into 16
// float32 at y.
type qKernel func(y, qx, dx, sx, w unsafe.Pointer, nb int)

// runMatMulQuantVec runs the vector kernels on W's packed panels, reporting
// false (nothing written) where this type or build has none.
//
//go:norace
func runMatMulQuantVec(c *rcall, a *qacts, p *packed, lo, hi, t0, t1 int, k *kctx) bool {
	if !quantVec.Load() || !quantPacks(p.dt) {
		return false
	}
	var kern qKernel
	var kern4, kern2 qKernel4 // many rows (quant_rows_amd64.go), two rows
	rows := 4                 // kern4's rows
	switch p.dt {
	case accel.Q4_0:
		kern, kern4, kern2, rows = mmQ4_0, mmQ4_0x3, mmQ4_0x2, 3
	case accel.Q8_0:
		kern, kern4, kern2, rows = mmQ8_0, mmQ8_0x3, mmQ8_0x2, 3
	case accel.Q4_K:
		kern, kern4, kern2, rows = mmQ4_K, mmQ4_Kx3, mmQ4_Kx2, 3
	case accel.Q6_K:
		kern, kern4, kern2, rows = mmQ6_K, mmQ6_Kx3, mmQ6_Kx2, 3
	}
	y := c.o[0]
	in, out := c.o[1].cols, y.cols
	nb := in / p.dt.BlockSize()
	ns := in / 32 // sums per row: one per block of 32, or per 16 of a super-block
	if kBlocks(p.dt) {
		ns = in / 16
	}
	yf := y.f32()
	ys := uintptr(out) * 4
	// Panel by panel, so that a panel's weights stay in the nearest cache
	// for every row; several rows at a time (quantRowStep).
	for pn := lo; pn < hi; pn++ {
		o0 := pn * panelWidth
		full := o0+panelWidth <= out
		wp := p.panel(pn)
		for t := t0; t < t1; {
			r := t - t0
			qx := unsafe.Pointer(&a.qx[r*in])
			dx := unsafe.Pointer(&a.dx[r*nb])
			sx := unsafe.Pointer(&a.sx[r*ns])
			m := quantRowStep(t1-t, rows, kern4 != nil, kern2 != nil)
			if m == 1 {
				if full {
					kern(unsafe.Pointer(&yf[t*out+o0]), qx, dx, sx, wp, nb)
				} else {
					kern(unsafe.Pointer(&k.tail[0]), qx, dx, sx, wp, nb)
					copyF32(yf[t*out+o0:(t+1)*out], k.tail[:out-o0])
				}
				t++
				continue
			}
			km := kern4
			if m == 2 {
				km = kern2
			}
			if full {
				km(unsafe.Pointer(&yf[t*out+o0]), ys, qx, uintptr(in), dx, sx, uintptr(nb)*4, uintptr(ns)*4, wp, nb)
			} else {
				km(unsafe.Pointer(&k.tail[0]), panelWidth*4, qx, uintptr(in), dx, sx, uintptr(nb)*4, uintptr(ns)*4, wp, nb)
				for i := 0; i < m; i++ {
					copyF32(yf[(t+i)*out+o0:(t+i+1)*out], k.tail[i*panelWidth:i*panelWidth+out-o0])
				}
			}
			t += m
		}
	}
	return true
}

// mmQ4_0: one row by one Q4_0 panel. Per block: the nibbles of each
// vector are split, multiplied with x's bytes by VPMADDUBSW (unsigned
// weights 0..15 times signed x: |pair| <= 3810, so the eight pair sums of a
// block add in int16 without overflow), folded to int32 per output by
// VPMADDWD, less 8·Σx; then (dw·dx)·sum added to the output's float32 sum.
//
//go:noinline
//go:norace
//go:nocheckptr
func mmQ4_0(y, qx, dx, sx, w unsafe.Pointer, nb int) {
	var acc0, acc1 archsimd.Float32x8
	m0f := archsimd.BroadcastUint8x32(0x0f)
	// A per-lane shift (VPSRLVD): a shift by a constant count is
	// compiled with the count moved into an XMM register by a legacy-SSE
	// MOVQ in the loop, which stalls on dirty upper AVX state.
	fours := archsimd.BroadcastUint32x8(4)
	ones := archsimd.BroadcastInt16x16(1)
	for b := 0; b < nb; b++ {
		wb := unsafe.Add(w, uintptr(b)*(64+4*64))
		xb := unsafe.Add(qx, uintptr(b)*32)
		var s0, s1 archsimd.Int16x16
		for v := uintptr(0); v < 4; v++ {
			u0 := archsimd.LoadUint8x32((*[32]uint8)(unsafe.Add(wb, 64+v*64)))
			u1 := archsimd.LoadUint8x32((*[32]uint8)(unsafe.Add(wb, 96+v*64)))
			xl := archsimd.BroadcastInt32x8(*(*int32)(unsafe.Add(xb, v*4))).AsInt8x32()
			xh := archsimd.BroadcastInt32x8(*(*int32)(unsafe.Add(xb, (v+4)*4))).AsInt8x32()
			s0 = s0.Add(u0.And(m0f).DotProductPairsSaturated(xl))
			s0 = s0.Add(u0.AsUint32x8().ShiftRight(fours).AsUint8x32().And(m0f).DotProductPairsSaturated(xh))
			s1 = s1.Add(u1.And(m0f).DotProductPairsSaturated(xl))
			s1 = s1.Add(u1.AsUint32x8().ShiftRight(fours).AsUint8x32().And(m0f).DotProductPairsSaturated(xh))
		}
		off := archsimd.BroadcastInt32x8(8 * *(*int32)(unsafe.Add(sx, uintptr(b)*4)))
		dxv := archsimd.BroadcastFloat32x8(*(*float32)(unsafe.Add(dx, uintptr(b)*4)))
		d0 := archsimd.LoadFloat32x8((*[8]float32)(wb)).Mul(dxv)
		d1 := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(wb, 32))).Mul(dxv)
		acc0 = acc0.Add(d0.Mul(s0.DotProductPairs(ones).Sub(off).ConvertToFloat32()))
		acc1 = acc1.Add(d1.Mul(s1.DotProductPairs(ones).Sub(off).ConvertToFloat32()))
	}
	acc0.Store((*[8]float32)(y))
	acc1.Store((*[8]float32)(unsafe.Add(y, 32)))
	archsimd.ClearAVXUpperBits()
}

// mmQ8_0: one row by one Q8_0 panel. The values are stored plus 128 as
// unsigned bytes and split into nibbles, so that VPMADDUBSW cannot
// saturate (15·127·2 per pair, as for Q4_0): Σ(w+128)·x = 16·Σhi·x + Σlo·x,
// less 128·Σx.
//
//go:noinline
//go:norace
//go:nocheckptr
func mmQ8_0(y, qx, dx, sx, w unsafe.Pointer, nb int) {
	var acc0, acc1 archsimd.Float32x8
	m0f := archsimd.BroadcastUint8x32(0x0f)
	// A per-lane shift (VPSRLVD): a shift by a constant count is
	// compiled with the count moved into an XMM register by a legacy-SSE
	// MOVQ in the loop, which stalls on dirty upper AVX state.
	fours := archsimd.BroadcastUint32x8(4)
	ones := archsimd.BroadcastInt16x16(1)
	sixteens := archsimd.BroadcastInt16x16(16)
	for b := 0; b < nb; b++ {
		wb := unsafe.Add(w, uintptr(b)*(64+8*64))
		xb := unsafe.Add(qx, uintptr(b)*32)
		var l0, h0, l1, h1 archsimd.Int16x16
		for g := uintptr(0); g < 8; g++ {
			u0 := archsimd.LoadUint8x32((*[32]uint8)(unsafe.Add(wb, 64+g*64)))
			u1 := archsimd.LoadUint8x32((*[32]uint8)(unsafe.Add(wb, 96+g*64)))
			xg := archsimd.BroadcastInt32x8(*(*int32)(unsafe.Add(xb, g*4))).AsInt8x32()
			l0 = l0.Add(u0.And(m0f).DotProductPairsSaturated(xg))
			h0 = h0.Add(u0.AsUint32x8().ShiftRight(fours).AsUint8x32().And(m0f).DotProductPairsSaturated(xg))
			l1 = l1.Add(u1.And(m0f).DotProductPairsSaturated(xg))
			h1 = h1.Add(u1.AsUint32x8().ShiftRight(fours).AsUint8x32().And(m0f).DotProductPairsSaturated(xg))
		}
		off := archsimd.BroadcastInt32x8(128 * *(*int32)(unsafe.Add(sx, uintptr(b)*4)))
		dxv := archsimd.BroadcastFloat32x8(*(*float32)(unsafe.Add(dx, uintptr(b)*4)))
		d0 := archsimd.LoadFloat32x8((*[8]float32)(wb)).Mul(dxv)
		d1 := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(wb, 32))).Mul(dxv)
		i0 := l0.DotProductPairs(ones).Add(h0.DotProductPairs(sixteens)).Sub(off)
		i1 := l1.DotProductPairs(ones).Add(h1.DotProductPairs(sixteens)).Sub(off)
		acc0 = acc0.Add(d0.Mul(i0.ConvertToFloat32()))
		acc1 = acc1.Add(d1.Mul(i1.ConvertToFloat32()))
	}
	acc0.Store((*[8]float32)(y))
	acc1.Store((*[8]float32)(unsafe.Add(y, 32)))
	archsimd.ClearAVXUpperBits()
}

// mmQ4_K: one row by one Q4_K panel. Per super-block and half-panel:
// each pair of sub-blocks' nibbles against x (int16 sums of eight pairs, as
// Q4_0), folded to int32, times the sub-blocks' 6-bit scales (VPMULLD) into
// A; the mins times x's sums of 32 into B; then (d·dx)·A - (dmin·dx)·B
// added to the output's float32 sum.
//
//go:noinline
//go:norace
//go:nocheckptr
func mmQ4_K(y, qx, dx, sx, w unsafe.Pointer, nb int) {
	var acc0, acc1 archsimd.Float32x8
	m0f := archsimd.BroadcastUint8x32(0x0f)
	// A per-lane shift (VPSRLVD): a shift by a constant count is
	// compiled with the count moved into an XMM register by a legacy-SSE
	// MOVQ in the loop, which stalls on dirty upper AVX state.
	fours := archsimd.BroadcastUint32x8(4)
	ones := archsimd.BroadcastInt16x16(1)
	for b := 0; b < nb; b++ {
		wb := unsafe.Add(w, uintptr(b)*2432)
		xb := unsafe.Add(qx, uintptr(b)*256)
		sb := unsafe.Add(sx, uintptr(b)*64)
		var a0, a1, m0, m1 archsimd.Int32x8
		for c := uintptr(0); c < 4; c++ {
			var l0, h0, l1, h1 archsimd.Int16x16
			for g := uintptr(0); g < 8; g++ {
				u0 := archsimd.LoadUint8x32((*[32]uint8)(unsafe.Add(wb, 384+(8*c+g)*64)))
				u1 := archsimd.LoadUint8x32((*[32]uint8)(unsafe.Add(wb, 384+(8*c+g)*64+32)))
				xl := archsimd.BroadcastInt32x8(*(*int32)(unsafe.Add(xb, 64*c+4*g))).AsInt8x32()
				xh := archsimd.BroadcastInt32x8(*(*int32)(unsafe.Add(xb, 64*c+32+4*g))).AsInt8x32()
				l0 = l0.Add(u0.And(m0f).DotProductPairsSaturated(xl))
				h0 = h0.Add(u0.AsUint32x8().ShiftRight(fours).AsUint8x32().And(m0f).DotProductPairsSaturated(xh))
				l1 = l1.Add(u1.And(m0f).DotProductPairsSaturated(xl))
				h1 = h1.Add(u1.AsUint32x8().ShiftRight(fours).AsUint8x32().And(m0f).DotProductPairsSaturated(xh))
			}
			sl := unsafe.Add(wb, 128+16*2*c)
			sh := unsafe.Add(wb, 128+16*(2*c+1))
			a0 = a0.Add(l0.DotProductPairs(ones).Mul(archsimd.LoadInt8x16((*[16]int8)(sl)).ExtendLo8ToInt32()))
			a0 = a0.Add(h0.DotProductPairs(ones).Mul(archsimd.LoadInt8x16((*[16]int8)(sh)).ExtendLo8ToInt32()))
			a1 = a1.Add(l1.DotProductPairs(ones).Mul(archsimd.LoadInt8x16((*[16]int8)(unsafe.Add(sl, 8))).ExtendLo8ToInt32()))
			a1 = a1.Add(h1.DotProductPairs(ones).Mul(archsimd.LoadInt8x16((*[16]int8)(unsafe.Add(sh, 8))).ExtendLo8ToInt32()))
			for s := 2 * c; s < 2*c+2; s++ {
				ml := unsafe.Add(wb, 256+16*s)
				bs := archsimd.BroadcastInt32x8(*(*int32)(unsafe.Add(sb, 8*s)) + *(*int32)(unsafe.Add(sb, 8*s+4)))
				m0 = m0.Add(archsimd.LoadInt8x16((*[16]int8)(ml)).ExtendLo8ToInt32().Mul(bs))
				m1 = m1.Add(archsimd.LoadInt8x16((*[16]int8)(unsafe.Add(ml, 8))).ExtendLo8ToInt32().Mul(bs))
			}
		}
		dxv := archsimd.BroadcastFloat32x8(*(*float32)(unsafe.Add(dx, uintptr(b)*4)))
		d0 := archsimd.LoadFloat32x8((*[8]float32)(wb)).Mul(dxv)
		d1 := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(wb, 32))).Mul(dxv)
		n0 := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(wb, 64))).Mul(dxv)
		n1 := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(wb, 96))).Mul(dxv)
		acc0 = acc0.Add(d0.Mul(a0.ConvertToFloat32()).Sub(n0.Mul(m0.ConvertToFloat32())))
		acc1 = acc1.Add(d1.Mul(a1.ConvertToFloat32()).Sub(n1.Mul(m1.ConvertToFloat32())))
	}
	acc0.Store((*[8]float32)(y))
	acc1.Store((*[8]float32)(unsafe.Add(y, 32)))
	archsimd.ClearAVXUpperBits()
}

// mmQ6_K: one row by one Q6_K panel, one 8-output half at a time. Per
// super-block, for each group of four inputs k (0..15) the nibble vectors
// k and k+16 and high-bit vector k give the values of inputs 4k, 64+4k,
// 128+4k and 192+4k (a nibble or'ed with its two high bits); each against
// x by VPMADDUBSW, two groups summed in int16 (63·127·2·2 < 2^15), folded
// to int32 per sub-block of 16, less 32·Σx, times the sub-block's scale
// into A; then (d·dx)·A added to the output's float32 sum.
//
//go:noinline
//go:norace
//go:nocheckptr
func mmQ6_K(y, qx, dx, sx, w unsafe.Pointer, nb int) {
	m0f := archsimd.BroadcastUint8x32(0x0f)
	m30 := archsimd.BroadcastUint8x32(0x30)
	// Per-lane shifts (VPSRLVD, VPSLLVD), as in mmQ4_0.
	fours := archsimd.BroadcastUint32x8(4)
	twos := archsimd.BroadcastUint32x8(2)
	for h := uintptr(0); h < 2; h++ {
		var acc archsimd.Float32x8
		for b := 0; b < nb; b++ {
			wb := unsafe.Add(w, uintptr(b)*3392+32*h)
			xb := unsafe.Add(qx, uintptr(b)*256)
			sb := unsafe.Add(sx, uintptr(b)*64)
			var A archsimd.Int32x8
			for sp := uintptr(0); sp < 4; sp++ {
				var i1, i2, i3, i4 archsimd.Int32x8
				for j := uintptr(0); j < 2; j++ {
					var t1, t2, t3, t4 archsimd.Int16x16
					for kk := uintptr(0); kk < 2; kk++ {
						k := 4*sp + 2*j + kk
						hb := archsimd.LoadUint8x32((*[32]uint8)(unsafe.Add(wb, 2368+64*k))).AsUint32x8()
						na := archsimd.LoadUint8x32((*[32]uint8)(unsafe.Add(wb, 320+64*k)))
						nc := archsimd.LoadUint8x32((*[32]uint8)(unsafe.Add(wb, 320+64*(k+16))))
						v1 := na.And(m0f).Or(hb.ShiftLeft(fours).AsUint8x32().And(m30))
						v2 := na.AsUint32x8().ShiftRight(fours).AsUint8x32().And(m0f).Or(hb.ShiftLeft(twos).AsUint8x32().And(m30))
						v3 := nc.And(m0f).Or(hb.AsUint8x32().And(m30))
						v4 := nc.AsUint32x8().ShiftRight(fours).AsUint8x32().And(m0f).Or(hb.ShiftRight(twos).AsUint8x32().And(m30))
						t1 = t1.Add(v1.DotProductPairsSaturated(archsimd.BroadcastInt32x8(*(*int32)(unsafe.Add(xb, 4*k))).AsInt8x32()))
						t2 = t2.Add(v2.DotProductPairsSaturated(archsimd.BroadcastInt32x8(*(*int32)(unsafe.Add(xb, 128+4*k))).AsInt8x32()))
						t3 = t3.Add(v3.DotProductPairsSaturated(archsimd.BroadcastInt32x8(*(*int32)(unsafe.Add(xb, 64+4*k))).AsInt8x32()))
						t4 = t4.Add(v4.DotProductPairsSaturated(archsimd.BroadcastInt32x8(*(*int32)(unsafe.Add(xb, 192+4*k))).AsInt8x32()))
					}
					ones := archsimd.BroadcastInt16x16(1)
					i1 = i1.Add(t1.DotProductPairs(ones))
					i2 = i2.Add(t2.DotProductPairs(ones))
					i3 = i3.Add(t3.DotProductPairs(ones))
					i4 = i4.Add(t4.DotProductPairs(ones))
				}
				// Sub-blocks sp, 8+sp, 4+sp and 12+sp.
				sc := unsafe.Add(wb, 64-32*h+8*h)
				A = A.Add(i1.Sub(archsimd.BroadcastInt32x8(32 * *(*int32)(unsafe.Add(sb, 4*sp)))).Mul(archsimd.LoadInt8x16((*[16]int8)(unsafe.Add(sc, 16*sp))).ExtendLo8ToInt32()))
				A = A.Add(i2.Sub(archsimd.BroadcastInt32x8(32 * *(*int32)(unsafe.Add(sb, 4*(8+sp))))).Mul(archsimd.LoadInt8x16((*[16]int8)(unsafe.Add(sc, 16*(8+sp)))).ExtendLo8ToInt32()))
				A = A.Add(i3.Sub(archsimd.BroadcastInt32x8(32 * *(*int32)(unsafe.Add(sb, 4*(4+sp))))).Mul(archsimd.LoadInt8x16((*[16]int8)(unsafe.Add(sc, 16*(4+sp)))).ExtendLo8ToInt32()))
				A = A.Add(i4.Sub(archsimd.BroadcastInt32x8(32 * *(*int32)(unsafe.Add(sb, 4*(12+sp))))).Mul(archsimd.LoadInt8x16((*[16]int8)(unsafe.Add(sc, 16*(12+sp)))).ExtendLo8ToInt32()))
			}
			dxv := archsimd.BroadcastFloat32x8(*(*float32)(unsafe.Add(dx, uintptr(b)*4)))
			d := archsimd.LoadFloat32x8((*[8]float32)(wb)).Mul(dxv)
			acc = acc.Add(d.Mul(A.ConvertToFloat32()))
		}
		acc.Store((*[8]float32)(unsafe.Add(y, 32*h)))
	}
	archsimd.ClearAVXUpperBits()
}
