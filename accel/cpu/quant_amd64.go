//go:build goexperiment.simd && amd64

package cpu

import (
	"os"
	"runtime"
	"simd/archsimd"
	"unsafe"

	"github.com/reprise-ml/reprise/accel"
)

// The quantized matmul's archsimd vector kernels are 256-bit (AVX2): AVX2
// is on every x86-64 CPU of the last decade, AVX-512 ones included. They
// read each 16-output panel as two 8-output halves. The avx512 kernel set
// runs its own 512-bit kernels instead where the CPU has AVX512_VNNI
// (quant_vnni_amd64.go: VPDPBUSD, in assembly), on the same panels with
// the same bits; runMatMulQuantVec picks them by the set in use. The same hazard rules hold as for
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

// The panels hold the blocks' scales as the file's float16 (quant_pack.go),
// and the kernels widen them in registers (archsimd has no VCVTPH2PS), all
// sixteen of a panel's at once, exactly: the float32 whose bits are sign |
// (h&0x7fff)<<13 is h's value times 2^-112 for every finite float16 h (a
// float16 subnormal's mantissa becomes a float32 subnormal's), and its high
// 16 bits are h shifted right by 3 (arithmetically, VPSRAW) with bits 14..12
// cleared (f16Hi), its low 16 bits h shifted left by 13 (VPSLLW): VPUNPCKLWD
// and VPUNPCKHWD of the two give outputs 0..7 and 8..15, each 128-bit half
// of them from its own half of the sixteen (f16Pos, the order the pack
// stores them in). Then times 2^112 (f16Scale), or, in the Q8_0 and Q4_0
// one-row kernels, x's scale times 2^112: exact either way (x's Q8_0 scale is
// a float16's, at most 65504, so the product is finite), and d·dx is the
// same product rounded once. An infinite or NaN h would come out finite:
// packQuant packs no such scale (quantPackable). Six instructions per
// sixteen scales, where float32 scales were two loads.

// f16Hi keeps the sign and bits 11..0 of a float16 shifted right by 3
// (0x8fff in every 16-bit lane).
var f16Hi = [16]int16{-0x7001, -0x7001, -0x7001, -0x7001, -0x7001, -0x7001, -0x7001, -0x7001, -0x7001, -0x7001, -0x7001, -0x7001, -0x7001, -0x7001, -0x7001, -0x7001}

// f16Scale is 2^112 in every lane: a float16 exponent's bias (15) from a
// float32's (127).
var f16Scale = [8]float32{0x1p112, 0x1p112, 0x1p112, 0x1p112, 0x1p112, 0x1p112, 0x1p112, 0x1p112}

// runMatMulQuantVec runs the vector kernels on W's packed panels, reporting
// false (nothing written) where this type or build has none.
//
//go:norace
func runMatMulQuantVec(c *rcall, a *qacts, p *packed, lo, hi, t0, t1 int, k *kctx) bool {
	if !quantVec.Load() || !quantPacks(p.dt) {
		return false
	}
	if ks := vec.Load().quantKernels(p.dt); ks != nil {
		runQuantVNNI(c, a, p, ks, lo, hi, t0, t1, k)
		return true
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
	if p.dt == accel.Q6_K {
		// mmQ6_K reads x's sums as q6Pairs (every row's: a few scalar
		// operations per 16 inputs).
		a.cp = grow(a.cp, (t1-t0)*ns)
		q6Pairs(a.cp, a.sx[:(t1-t0)*ns])
	}
	yf := y.f32()
	ys := uintptr(out) * 4
	wide := quantWide(p.dt, t1-t0)
	if wide {
		kern4, kern2, rows = wideKernels(p.dt)
	}
	sb := spreadBytes(p.dt, in)
	if sb > 0 && !(k.reuseActs && a.xsFor == p.dt && !a.xsVNNI) {
		// (Kept for a next matmul of this type that reuses this
		// quantization: runMatMulQuant.)
		a.xsFor, a.xsVNNI = p.dt, false
		// The one-row kernel reads x spread (spreadRow): those rows that
		// it runs, the j-th of them at j·sb.
		n1 := 0
		for t := t0; t < t1; {
			m := quantRowStep(t1-t, rows, kern4 != nil, kern2 != nil)
			if m == 1 {
				n1++
			}
			t += m
		}
		a.xs = grow(a.xs, n1*sb)
		j := 0
		for t := t0; t < t1; {
			m := quantRowStep(t1-t, rows, kern4 != nil, kern2 != nil)
			if m == 1 {
				spreadRow(p.dt, unsafe.Pointer(&a.qx[(t-t0)*in]), unsafe.Pointer(&a.xs[j*sb]), in)
				j++
			}
			t += m
		}
	}
	// Panel by panel, so that a panel's weights stay in the nearest cache
	// for every row; several rows at a time (quantRowStep).
	for pn := lo; pn < hi; pn++ {
		o0 := pn * panelWidth
		full := o0+panelWidth <= out
		wp := p.panel(pn)
		wm := wp // the many-row kernels' panel
		if wide {
			wm = widenPanel(k, p.dt, wp, nb)
		}
		j := 0 // one-row calls so far in this panel (their spread rows)
		for t := t0; t < t1; {
			r := t - t0
			qx := unsafe.Pointer(&a.qx[r*in])
			dx := unsafe.Pointer(&a.dx[r*nb])
			sx := unsafe.Pointer(&a.sx[r*ns])
			m := quantRowStep(t1-t, rows, kern4 != nil, kern2 != nil)
			if m == 1 {
				if sb > 0 {
					qx = unsafe.Pointer(&a.xs[j*sb])
					j++
				}
				if p.dt == accel.Q6_K {
					sx = unsafe.Pointer(&a.cp[r*ns])
				}
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
				km(unsafe.Pointer(&yf[t*out+o0]), ys, qx, uintptr(in), dx, sx, uintptr(nb)*4, uintptr(ns)*4, wm, nb)
			} else {
				km(unsafe.Pointer(&k.tail[0]), panelWidth*4, qx, uintptr(in), dx, sx, uintptr(nb)*4, uintptr(ns)*4, wm, nb)
				for i := 0; i < m; i++ {
					copyF32(yf[(t+i)*out+o0:(t+i+1)*out], k.tail[i*panelWidth:i*panelWidth+out-o0])
				}
			}
			t += m
		}
	}
	return true
}

// mmQ4_0: one row by one Q4_0 panel, x spread (qSpread). Per block: the
// nibbles of each vector are split, multiplied with x's bytes by
// VPMADDUBSW (unsigned weights 0..15 times signed x: |pair| <= 3810, so
// the eight pair sums of a block add in int16 without overflow), folded
// to int32 per output by
// VPMADDWD, less 8·Σx; then (dw·dx)·sum added to the output's float32 sum.
// The high nibbles are shifted on 16-bit lanes by an immediate count (the
// mask keeps each byte's own bits), and the loops end on pointers.
//
//go:noinline
//go:norace
//go:nocheckptr
func mmQ4_0(y, qx, dx, sx, w unsafe.Pointer, nb int) {
	var acc0, acc1 archsimd.Float32x8
	m0f := archsimd.BroadcastUint8x32(0x0f)
	ones := archsimd.BroadcastInt16x16(1)
	wb, xb := w, qx
	for b := 0; b < nb; b++ {
		// The first vector starts the sums.
		u0 := archsimd.LoadUint8x32((*[32]uint8)(unsafe.Add(wb, 32)))
		u1 := archsimd.LoadUint8x32((*[32]uint8)(unsafe.Add(wb, 64)))
		xl := archsimd.LoadInt8x32((*[32]int8)(xb))
		xh := archsimd.LoadInt8x32((*[32]int8)(unsafe.Add(xb, 128)))
		s0 := u0.And(m0f).DotProductPairsSaturated(xl).Add(u0.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m0f).DotProductPairsSaturated(xh))
		s1 := u1.And(m0f).DotProductPairsSaturated(xl).Add(u1.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m0f).DotProductPairsSaturated(xh))
		px := unsafe.Add(xb, 32)
		for wv, we := unsafe.Add(wb, 96), unsafe.Add(wb, 32+4*64); wv != we; wv = unsafe.Add(wv, 64) {
			u0 := archsimd.LoadUint8x32((*[32]uint8)(wv))
			u1 := archsimd.LoadUint8x32((*[32]uint8)(unsafe.Add(wv, 32)))
			xl := archsimd.LoadInt8x32((*[32]int8)(px))
			xh := archsimd.LoadInt8x32((*[32]int8)(unsafe.Add(px, 128)))
			s0 = s0.Add(u0.And(m0f).DotProductPairsSaturated(xl))
			s0 = s0.Add(u0.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m0f).DotProductPairsSaturated(xh))
			s1 = s1.Add(u1.And(m0f).DotProductPairsSaturated(xl))
			s1 = s1.Add(u1.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m0f).DotProductPairsSaturated(xh))
			px = unsafe.Add(px, 32)
		}
		off := archsimd.BroadcastInt32x8(8 * *(*int32)(unsafe.Add(sx, uintptr(b)*4)))
		// The float16 scales widened, times dx·2^112 (f16Hi).
		dxv := archsimd.BroadcastFloat32x8(*(*float32)(unsafe.Add(dx, uintptr(b)*4))).Mul(archsimd.LoadFloat32x8(&f16Scale))
		sc := archsimd.LoadInt16x16((*[16]int16)(wb))
		sh, sl := sc.ShiftAllRight(3).And(archsimd.LoadInt16x16(&f16Hi)), sc.ShiftAllLeft(13)
		d0 := sl.InterleaveLoGrouped(sh).AsFloat32x8().Mul(dxv)
		d1 := sl.InterleaveHiGrouped(sh).AsFloat32x8().Mul(dxv)
		acc0 = acc0.Add(d0.Mul(s0.DotProductPairs(ones).Sub(off).ConvertToFloat32()))
		acc1 = acc1.Add(d1.Mul(s1.DotProductPairs(ones).Sub(off).ConvertToFloat32()))
		wb = unsafe.Add(wb, 32+4*64)
		xb = unsafe.Add(xb, 256)
	}
	acc0.Store((*[8]float32)(y))
	acc1.Store((*[8]float32)(unsafe.Add(y, 32)))
	archsimd.ClearAVXUpperBits()
}

// mmQ8_0: one row by one Q8_0 panel. The values are stored plus 128 as
// unsigned bytes u (0..255), and x comes split into nibbles and spread
// (qSplit): for each group of four inputs, xl = x&15 (0..15) and then xh =
// x>>4 (-8..7), each as its four bytes repeated in all eight lanes, so that
// Σu·x = 16·Σu·xh + Σu·xl, less 128·Σx. VPMADDUBSW of u by either cannot
// saturate (a pair is at most 2·255·15 = 7650 by xl, within -4080..3570 by
// xh), so four groups' pair sums of xl and all eight of xh add in int16
// without overflow before VPMADDWD folds them to int32: two VPMADDUBSW per
// 32 weights and no masks or shifts (splitting the weights' bytes into
// nibbles instead, as this kernel did, took seven vector operations per 32
// weights to this one's four). x spread in memory is a plain vector load
// where a broadcast of four bytes was two instructions (VMOVD and
// VPBROADCASTD, which takes a vector port): 1.05-1.17x from cache
// (docs/BENCH.md). The integer sums are exact, so the result is the same
// bits as the other kernels'.
//
//go:noinline
//go:norace
//go:nocheckptr
func mmQ8_0(y, qx, dx, sx, w unsafe.Pointer, nb int) {
	var acc0, acc1 archsimd.Float32x8
	ones := archsimd.BroadcastInt16x16(1)
	sixteens := archsimd.BroadcastInt16x16(16)
	wb, px := w, qx
	for b := 0; b < nb; b++ {
		// Groups 0-3: the first starts the sums.
		u0 := archsimd.LoadUint8x32((*[32]uint8)(unsafe.Add(wb, 32)))
		u1 := archsimd.LoadUint8x32((*[32]uint8)(unsafe.Add(wb, 64)))
		xl := archsimd.LoadInt8x32((*[32]int8)(px))
		xh := archsimd.LoadInt8x32((*[32]int8)(unsafe.Add(px, 32)))
		l0 := u0.DotProductPairsSaturated(xl)
		h0 := u0.DotProductPairsSaturated(xh)
		l1 := u1.DotProductPairsSaturated(xl)
		h1 := u1.DotProductPairsSaturated(xh)
		px = unsafe.Add(px, 64)
		for wv, we := unsafe.Add(wb, 96), unsafe.Add(wb, 32+4*64); wv != we; wv = unsafe.Add(wv, 64) {
			u0 := archsimd.LoadUint8x32((*[32]uint8)(wv))
			u1 := archsimd.LoadUint8x32((*[32]uint8)(unsafe.Add(wv, 32)))
			xl := archsimd.LoadInt8x32((*[32]int8)(px))
			xh := archsimd.LoadInt8x32((*[32]int8)(unsafe.Add(px, 32)))
			l0 = l0.Add(u0.DotProductPairsSaturated(xl))
			h0 = h0.Add(u0.DotProductPairsSaturated(xh))
			l1 = l1.Add(u1.DotProductPairsSaturated(xl))
			h1 = h1.Add(u1.DotProductPairsSaturated(xh))
			px = unsafe.Add(px, 64)
		}
		i0 := l0.DotProductPairs(ones)
		i1 := l1.DotProductPairs(ones)
		// Groups 4-7: xl's sums start again. (The two loops folded into
		// one over the halves, with zeroed sums, reloaded two spilled
		// vectors on every group.)
		u0 = archsimd.LoadUint8x32((*[32]uint8)(unsafe.Add(wb, 32+4*64)))
		u1 = archsimd.LoadUint8x32((*[32]uint8)(unsafe.Add(wb, 64+4*64)))
		xl = archsimd.LoadInt8x32((*[32]int8)(px))
		xh = archsimd.LoadInt8x32((*[32]int8)(unsafe.Add(px, 32)))
		l0 = u0.DotProductPairsSaturated(xl)
		h0 = h0.Add(u0.DotProductPairsSaturated(xh))
		l1 = u1.DotProductPairsSaturated(xl)
		h1 = h1.Add(u1.DotProductPairsSaturated(xh))
		px = unsafe.Add(px, 64)
		for wv, we := unsafe.Add(wb, 96+4*64), unsafe.Add(wb, 32+8*64); wv != we; wv = unsafe.Add(wv, 64) {
			u0 := archsimd.LoadUint8x32((*[32]uint8)(wv))
			u1 := archsimd.LoadUint8x32((*[32]uint8)(unsafe.Add(wv, 32)))
			xl := archsimd.LoadInt8x32((*[32]int8)(px))
			xh := archsimd.LoadInt8x32((*[32]int8)(unsafe.Add(px, 32)))
			l0 = l0.Add(u0.DotProductPairsSaturated(xl))
			h0 = h0.Add(u0.DotProductPairsSaturated(xh))
			l1 = l1.Add(u1.DotProductPairsSaturated(xl))
			h1 = h1.Add(u1.DotProductPairsSaturated(xh))
			px = unsafe.Add(px, 64)
		}
		off := archsimd.BroadcastInt32x8(128 * *(*int32)(unsafe.Add(sx, uintptr(b)*4)))
		// The float16 scales widened, times dx·2^112 (f16Hi).
		dxv := archsimd.BroadcastFloat32x8(*(*float32)(unsafe.Add(dx, uintptr(b)*4))).Mul(archsimd.LoadFloat32x8(&f16Scale))
		sc := archsimd.LoadInt16x16((*[16]int16)(wb))
		sh, sl := sc.ShiftAllRight(3).And(archsimd.LoadInt16x16(&f16Hi)), sc.ShiftAllLeft(13)
		d0 := sl.InterleaveLoGrouped(sh).AsFloat32x8().Mul(dxv)
		d1 := sl.InterleaveHiGrouped(sh).AsFloat32x8().Mul(dxv)
		i0 = i0.Add(l0.DotProductPairs(ones)).Add(h0.DotProductPairs(sixteens)).Sub(off)
		i1 = i1.Add(l1.DotProductPairs(ones)).Add(h1.DotProductPairs(sixteens)).Sub(off)
		acc0 = acc0.Add(d0.Mul(i0.ConvertToFloat32()))
		acc1 = acc1.Add(d1.Mul(i1.ConvertToFloat32()))
		wb = unsafe.Add(wb, 32+8*64)
	}
	acc0.Store((*[8]float32)(y))
	acc1.Store((*[8]float32)(unsafe.Add(y, 32)))
	archsimd.ClearAVXUpperBits()
}

// qSplit writes ng groups of 32 of x's values at qx split into nibbles and
// spread at xs, as mmQ8_0 reads them: for each four inputs, 32 bytes of the
// low nibbles x&15 (0..15), then 32 of the high ones x>>4 (-8..7), x =
// 16·(x>>4) + x&15, each four-byte group repeated in all eight 32-bit
// lanes (spreadBytes per row).
//
//go:noinline
//go:norace
//go:nocheckptr
func qSplit(qx, xs unsafe.Pointer, ng int) {
	m0f := archsimd.BroadcastUint8x32(0x0f)
	eight := archsimd.BroadcastUint8x32(8)
	for g := uintptr(0); g < uintptr(ng); g++ {
		v := archsimd.LoadUint8x32((*[32]uint8)(unsafe.Add(qx, 32*g)))
		lo := v.And(m0f).AsInt32x8()
		// The high nibble as 0..15, then sign-extended: (h^8)-8.
		h := v.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m0f).Xor(eight)
		hi := h.AsInt8x32().Sub(eight.AsInt8x32()).AsInt32x8()
		o := unsafe.Add(xs, 512*g)
		for q := uintptr(0); q < 8; q++ {
			// Lane q everywhere (VPERMD): the indices from memory, as a
			// register each would be eight more live vectors.
			ix := archsimd.LoadUint32x8(&qLane[q])
			lo.Permute(ix).Store((*[8]int32)(unsafe.Add(o, 64*q)))
			hi.Permute(ix).Store((*[8]int32)(unsafe.Add(o, 64*q+32)))
		}
	}
	archsimd.ClearAVXUpperBits()
}

// spreadBytes is the bytes of one row of x (in inputs) spread as dt's
// one-row kernel reads it, 0 where it reads x as it is.
func spreadBytes(dt accel.DType, in int) int {
	switch dt {
	case accel.Q8_0:
		return 16 * in // split into two halves, each spread
	case accel.Q4_0, accel.Q4_K:
		return 8 * in
	}
	return 0
}

// spreadRow writes one row of quantized x (in inputs) at qx spread for dt's
// one-row kernel at xs (spreadBytes).
func spreadRow(dt accel.DType, qx, xs unsafe.Pointer, in int) {
	if dt == accel.Q8_0 {
		qSplit(qx, xs, in/32)
	} else {
		qSpread(qx, xs, in/32)
	}
}

// qSpread writes ng groups of 32 of x's values at qx spread at xs, as
// mmQ4_0 and mmQ4_K read them: each four inputs' bytes repeated in all eight
// 32-bit lanes of a 32-byte vector, in input order (8 bytes per input). A
// vector load of them is one instruction where the broadcast of four bytes
// is two, one of them on a vector port.
//
//go:noinline
//go:norace
//go:nocheckptr
func qSpread(qx, xs unsafe.Pointer, ng int) {
	for g := uintptr(0); g < uintptr(ng); g++ {
		v := archsimd.LoadInt32x8((*[8]int32)(unsafe.Add(qx, 32*g)))
		o := unsafe.Add(xs, 256*g)
		for q := uintptr(0); q < 8; q++ {
			v.Permute(archsimd.LoadUint32x8(&qLane[q])).Store((*[8]int32)(unsafe.Add(o, 32*q)))
		}
	}
	archsimd.ClearAVXUpperBits()
}

// qLane[q] is q in all eight lanes: qSplit's VPERMD indices.
var qLane = func() (l [8][8]uint32) {
	for q := range l {
		for i := range l[q] {
			l[q][i] = uint32(q)
		}
	}
	return
}()

// mmQ4_K: one row by one Q4_K panel, x spread (qSpread). Per super-block
// and half-panel: each pair of sub-blocks' nibbles against x (int16 sums
// of eight pairs, as Q4_0), folded to int32 and times the sub-blocks' 6-bit scales in one
// VPMADDWD against each scale repeated in both 16-bit halves of its
// output's lane (VPSHUFB, VPMOVSXBW) into A; the mins times x's sums of
// 32 into B; then (d·dx)·A - (dmin·dx)·B added to the output's float32
// sum, kept in a stack array (cleared: 0 + t is t, as in a register) and
// stored to y at the end. The shifts
// have immediate counts and the index vectors are loaded where they are
// used: with a scale, a count and index registers the compiler spilled half
// the sums on every vector.
//
//go:noinline
//go:norace
//go:nocheckptr
func mmQ4_K(y, qx, dx, sx, w unsafe.Pointer, nb int) {
	// The sums are kept in acc, y written once at the end, so that y only
	// ever holds finished bits: schedule.go's replicable keeps a quantized
	// matmul off the replicated path (where every worker would write y at
	// once), and this kernel would stay right if that rule changed.
	var acc [16]float32
	ya := unsafe.Pointer(&acc[0])
	for b := 0; b < nb; b++ {
		wb := unsafe.Add(w, uintptr(b)*2368)
		m0f := archsimd.BroadcastUint8x32(0x0f)
		A0 := archsimd.BroadcastInt32x8(0)
		A1 := A0
		pv := unsafe.Add(wb, 320)
		px := unsafe.Add(qx, uintptr(b)*2048)
		ps := unsafe.Add(wb, 64) // sub-block s's scales at 16s, one byte per output
		for c := 0; c < 4; c++ {
			// The first group starts the sums.
			u0 := archsimd.LoadUint8x32((*[32]uint8)(pv))
			u1 := archsimd.LoadUint8x32((*[32]uint8)(unsafe.Add(pv, 32)))
			xl := archsimd.LoadInt8x32((*[32]int8)(px))
			xh := archsimd.LoadInt8x32((*[32]int8)(unsafe.Add(px, 256)))
			l0 := u0.And(m0f).DotProductPairsSaturated(xl)
			h0 := u0.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m0f).DotProductPairsSaturated(xh)
			l1 := u1.And(m0f).DotProductPairsSaturated(xl)
			h1 := u1.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m0f).DotProductPairsSaturated(xh)
			px = unsafe.Add(px, 32)
			pe := unsafe.Add(pv, 8*64)
			for pv = unsafe.Add(pv, 64); pv != pe; pv = unsafe.Add(pv, 64) {
				u0 := archsimd.LoadUint8x32((*[32]uint8)(pv))
				u1 := archsimd.LoadUint8x32((*[32]uint8)(unsafe.Add(pv, 32)))
				xl := archsimd.LoadInt8x32((*[32]int8)(px))
				xh := archsimd.LoadInt8x32((*[32]int8)(unsafe.Add(px, 256)))
				l0 = l0.Add(u0.And(m0f).DotProductPairsSaturated(xl))
				h0 = h0.Add(u0.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m0f).DotProductPairsSaturated(xh))
				l1 = l1.Add(u1.And(m0f).DotProductPairsSaturated(xl))
				h1 = h1.Add(u1.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m0f).DotProductPairsSaturated(xh))
				px = unsafe.Add(px, 32)
			}
			px = unsafe.Add(px, 256)
			sl := archsimd.LoadInt8x16((*[16]int8)(ps))
			sh := archsimd.LoadInt8x16((*[16]int8)(unsafe.Add(ps, 16)))
			A0 = A0.Add(l0.DotProductPairs(sl.PermuteOrZero(archsimd.LoadInt8x16(&q6Dup)).ExtendToInt16()))
			A0 = A0.Add(h0.DotProductPairs(sh.PermuteOrZero(archsimd.LoadInt8x16(&q6Dup)).ExtendToInt16()))
			A1 = A1.Add(l1.DotProductPairs(sl.PermuteOrZero(archsimd.LoadInt8x16(&q4Dup8)).ExtendToInt16()))
			A1 = A1.Add(h1.DotProductPairs(sh.PermuteOrZero(archsimd.LoadInt8x16(&q4Dup8)).ExtendToInt16()))
			ps = unsafe.Add(ps, 32)
		}
		// B: the mins times x's sums of each sub-block.
		sb := unsafe.Add(sx, uintptr(b)*64)
		var b0, b1 archsimd.Int32x8
		for s := uintptr(0); s < 8; s++ {
			bs := archsimd.BroadcastInt32x8(*(*int32)(unsafe.Add(sb, 8*s)) + *(*int32)(unsafe.Add(sb, 8*s+4)))
			ml := unsafe.Add(wb, 192+16*s)
			b0 = b0.Add(archsimd.LoadInt8x16((*[16]int8)(ml)).ExtendLo8ToInt32().Mul(bs))
			b1 = b1.Add(archsimd.LoadInt8x16((*[16]int8)(unsafe.Add(ml, 8))).ExtendLo8ToInt32().Mul(bs))
		}
		// d and dmin widened (f16Hi), then times dx (x's Q8_K scale
		// may be too large to take 2^112).
		dxv := archsimd.BroadcastFloat32x8(*(*float32)(unsafe.Add(dx, uintptr(b)*4)))
		p16 := archsimd.LoadFloat32x8(&f16Scale)
		sc := archsimd.LoadInt16x16((*[16]int16)(wb))
		sh, sl := sc.ShiftAllRight(3).And(archsimd.LoadInt16x16(&f16Hi)), sc.ShiftAllLeft(13)
		sc = archsimd.LoadInt16x16((*[16]int16)(unsafe.Add(wb, 32)))
		nh, nl := sc.ShiftAllRight(3).And(archsimd.LoadInt16x16(&f16Hi)), sc.ShiftAllLeft(13)
		d0 := sl.InterleaveLoGrouped(sh).AsFloat32x8().Mul(p16).Mul(dxv)
		n0 := nl.InterleaveLoGrouped(nh).AsFloat32x8().Mul(p16).Mul(dxv)
		y0 := (*[8]float32)(ya)
		archsimd.LoadFloat32x8(y0).Add(d0.Mul(A0.ConvertToFloat32()).Sub(n0.Mul(b0.ConvertToFloat32()))).Store(y0)
		d1 := sl.InterleaveHiGrouped(sh).AsFloat32x8().Mul(p16).Mul(dxv)
		n1 := nl.InterleaveHiGrouped(nh).AsFloat32x8().Mul(p16).Mul(dxv)
		y1 := (*[8]float32)(unsafe.Add(ya, 32))
		archsimd.LoadFloat32x8(y1).Add(d1.Mul(A1.ConvertToFloat32()).Sub(n1.Mul(b1.ConvertToFloat32()))).Store(y1)
	}
	archsimd.LoadFloat32x8((*[8]float32)(ya)).Store((*[8]float32)(y))
	archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(ya, 32))).Store((*[8]float32)(unsafe.Add(y, 32)))
	archsimd.ClearAVXUpperBits()
}

// q4Dup8 is q6Dup for the second eight bytes.
var q4Dup8 = [16]int8{8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15}

// mmQ6_K: one row by one Q6_K panel, both 8-output halves in one pass.
// Per sub-block s of a super-block (16 inputs) the panel holds three
// 64-byte vectors (quant_pack.go): the values q' = 63-q of groups 4s, 4s+1
// and 4s+2 (four inputs each) in their bytes' low six bits (one AND each),
// group 4s+3's two bits at a time in their top two (shift, AND, OR). Each
// group against x's four bytes by VPMADDUBSW, two groups summed in int16
// (63·128·2·2 < 2^15), folded to int32 and scaled in one VPMADDWD against
// the sub-block's scale in both 16-bit halves of each output's lane; and
// the same scale pairs against -31·Σx_s split in two int16 halves (cp,
// q6Pairs), so that A' = Σ_s sc_s·(Σ q'·x - 31·Σx_s) = -Σ_s sc_s·Σ
// (q-32)·x: the plain-Go kernel's A, negated, an exact integer in any
// order. Then (d·dx)·(-A') is added to the output's float32 sum, kept in a
// stack array (cleared: 0 + t is t, as in a register) and stored to y at
// the end. x's groups are broadcast from one 32-byte load per pair of
// sub-blocks (VPERM2I128, VPSHUFD); the stores to fence order the halves,
// so that the compiler does not load every vector of the pair at once and
// spill. cp is the row's q6Pairs (runMatMulQuantVec), in place of x's sums.
//
//go:noinline
//go:norace
//go:nocheckptr
func mmQ6_K(y, qx, dx, cp, w unsafe.Pointer, nb int) {
	// The sums are kept in acc, y written once at the end (see mmQ4_K).
	var acc [16]float32
	ya := unsafe.Pointer(&acc[0])
	var fence [4][8]int32
	m := archsimd.BroadcastUint8x32(0x3f)
	for b := 0; b < nb; b++ {
		wb := unsafe.Add(w, uintptr(b)*3360)
		// (No software read-ahead: the panel is one stream in memory
		// order, which the hardware prefetchers follow. The read-ahead the
		// old layout's three streams needed, one word of each line of
		// super-block b+2, made this kernel 1.5x slower from memory and
		// 1.4x from cache: docs/BENCH.md.)
		A0 := archsimd.BroadcastInt32x8(0)
		A1 := A0
		pv := unsafe.Add(wb, 288)
		px := unsafe.Add(qx, uintptr(b)*256)
		pc := unsafe.Add(cp, uintptr(b)*64)
		psc := unsafe.Add(wb, 32)
		for pe := unsafe.Add(pv, 16*192); pv != pe; pv = unsafe.Add(pv, 2*192) {
			xp := archsimd.LoadInt32x8((*[8]int32)(px))
			{
				scb := archsimd.LoadInt8x16((*[16]int8)(unsafe.Add(psc, 0)))
				sc0 := scb.PermuteOrZero(archsimd.LoadInt8x16(&q6Dup)).ExtendToInt16()
				sc1 := scb.PermuteOrZero(archsimd.LoadInt8x16(&q4Dup8)).ExtendToInt16()
				cp := archsimd.BroadcastInt32x8(*(*int32)(unsafe.Add(pc, 0))).AsInt16x16()
				A0 = A0.Add(sc0.DotProductPairs(cp))
				A1 = A1.Add(sc1.DotProductPairs(cp))
				xd := xp.Select128FromPair(0, 0, xp)
				x0 := xd.PermuteScalarsGrouped(0, 0, 0, 0).AsInt8x32()
				x1 := xd.PermuteScalarsGrouped(1, 1, 1, 1).AsInt8x32()
				x2 := xd.PermuteScalarsGrouped(2, 2, 2, 2).AsInt8x32()
				x3 := xd.PermuteScalarsGrouped(3, 3, 3, 3).AsInt8x32()
				{
					// Sub-block 0 of the pair, outputs 0..7.
					s0 := archsimd.LoadUint8x32((*[32]uint8)(unsafe.Add(pv, 0)))
					t := s0.And(m).DotProductPairsSaturated(x0)
					v3 := s0.AsInt32x8().ShiftAllRight(6).AsUint8x32().And(archsimd.LoadUint8x32(&q6Masks[1]))
					s1 := archsimd.LoadUint8x32((*[32]uint8)(unsafe.Add(pv, 64)))
					t = t.Add(s1.And(m).DotProductPairsSaturated(x1))
					v3 = v3.Or(s1.AsInt32x8().ShiftAllRight(4).AsUint8x32().And(archsimd.LoadUint8x32(&q6Masks[2])))
					A0 = A0.Add(t.DotProductPairs(sc0))
					s2 := archsimd.LoadUint8x32((*[32]uint8)(unsafe.Add(pv, 128)))
					t = s2.And(m).DotProductPairsSaturated(x2)
					v3 = v3.Or(s2.AsInt32x8().ShiftAllRight(2).AsUint8x32().And(archsimd.LoadUint8x32(&q6Masks[3])))
					t = t.Add(v3.DotProductPairsSaturated(x3))
					A0 = A0.Add(t.DotProductPairs(sc0))
					A0.Store(&fence[0])
				}
				{
					// Sub-block 0 of the pair, outputs 8..15.
					s0 := archsimd.LoadUint8x32((*[32]uint8)(unsafe.Add(pv, 32)))
					t := s0.And(m).DotProductPairsSaturated(x0)
					v3 := s0.AsInt32x8().ShiftAllRight(6).AsUint8x32().And(archsimd.LoadUint8x32(&q6Masks[1]))
					s1 := archsimd.LoadUint8x32((*[32]uint8)(unsafe.Add(pv, 96)))
					t = t.Add(s1.And(m).DotProductPairsSaturated(x1))
					v3 = v3.Or(s1.AsInt32x8().ShiftAllRight(4).AsUint8x32().And(archsimd.LoadUint8x32(&q6Masks[2])))
					A1 = A1.Add(t.DotProductPairs(sc1))
					s2 := archsimd.LoadUint8x32((*[32]uint8)(unsafe.Add(pv, 160)))
					t = s2.And(m).DotProductPairsSaturated(x2)
					v3 = v3.Or(s2.AsInt32x8().ShiftAllRight(2).AsUint8x32().And(archsimd.LoadUint8x32(&q6Masks[3])))
					t = t.Add(v3.DotProductPairsSaturated(x3))
					A1 = A1.Add(t.DotProductPairs(sc1))
					A1.Store(&fence[1])
				}
			}
			{
				scb := archsimd.LoadInt8x16((*[16]int8)(unsafe.Add(psc, 16)))
				sc0 := scb.PermuteOrZero(archsimd.LoadInt8x16(&q6Dup)).ExtendToInt16()
				sc1 := scb.PermuteOrZero(archsimd.LoadInt8x16(&q4Dup8)).ExtendToInt16()
				cp := archsimd.BroadcastInt32x8(*(*int32)(unsafe.Add(pc, 4))).AsInt16x16()
				A0 = A0.Add(sc0.DotProductPairs(cp))
				A1 = A1.Add(sc1.DotProductPairs(cp))
				xd := xp.Select128FromPair(1, 1, xp)
				x0 := xd.PermuteScalarsGrouped(0, 0, 0, 0).AsInt8x32()
				x1 := xd.PermuteScalarsGrouped(1, 1, 1, 1).AsInt8x32()
				x2 := xd.PermuteScalarsGrouped(2, 2, 2, 2).AsInt8x32()
				x3 := xd.PermuteScalarsGrouped(3, 3, 3, 3).AsInt8x32()
				{
					// Sub-block 1 of the pair, outputs 0..7.
					s0 := archsimd.LoadUint8x32((*[32]uint8)(unsafe.Add(pv, 192)))
					t := s0.And(m).DotProductPairsSaturated(x0)
					v3 := s0.AsInt32x8().ShiftAllRight(6).AsUint8x32().And(archsimd.LoadUint8x32(&q6Masks[1]))
					s1 := archsimd.LoadUint8x32((*[32]uint8)(unsafe.Add(pv, 256)))
					t = t.Add(s1.And(m).DotProductPairsSaturated(x1))
					v3 = v3.Or(s1.AsInt32x8().ShiftAllRight(4).AsUint8x32().And(archsimd.LoadUint8x32(&q6Masks[2])))
					A0 = A0.Add(t.DotProductPairs(sc0))
					s2 := archsimd.LoadUint8x32((*[32]uint8)(unsafe.Add(pv, 320)))
					t = s2.And(m).DotProductPairsSaturated(x2)
					v3 = v3.Or(s2.AsInt32x8().ShiftAllRight(2).AsUint8x32().And(archsimd.LoadUint8x32(&q6Masks[3])))
					t = t.Add(v3.DotProductPairsSaturated(x3))
					A0 = A0.Add(t.DotProductPairs(sc0))
					A0.Store(&fence[2])
				}
				{
					// Sub-block 1 of the pair, outputs 8..15.
					s0 := archsimd.LoadUint8x32((*[32]uint8)(unsafe.Add(pv, 224)))
					t := s0.And(m).DotProductPairsSaturated(x0)
					v3 := s0.AsInt32x8().ShiftAllRight(6).AsUint8x32().And(archsimd.LoadUint8x32(&q6Masks[1]))
					s1 := archsimd.LoadUint8x32((*[32]uint8)(unsafe.Add(pv, 288)))
					t = t.Add(s1.And(m).DotProductPairsSaturated(x1))
					v3 = v3.Or(s1.AsInt32x8().ShiftAllRight(4).AsUint8x32().And(archsimd.LoadUint8x32(&q6Masks[2])))
					A1 = A1.Add(t.DotProductPairs(sc1))
					s2 := archsimd.LoadUint8x32((*[32]uint8)(unsafe.Add(pv, 352)))
					t = s2.And(m).DotProductPairsSaturated(x2)
					v3 = v3.Or(s2.AsInt32x8().ShiftAllRight(2).AsUint8x32().And(archsimd.LoadUint8x32(&q6Masks[3])))
					t = t.Add(v3.DotProductPairsSaturated(x3))
					A1 = A1.Add(t.DotProductPairs(sc1))
					A1.Store(&fence[3])
				}
			}
			px = unsafe.Add(px, 32)
			pc = unsafe.Add(pc, 8)
			psc = unsafe.Add(psc, 32)
		}
		// d widened (f16Hi), then times dx (x's Q8_K scale may be too
		// large to take 2^112).
		dxv := archsimd.BroadcastFloat32x8(*(*float32)(unsafe.Add(dx, uintptr(b)*4)))
		zero := archsimd.BroadcastInt32x8(0)
		sc := archsimd.LoadInt16x16((*[16]int16)(wb))
		sh, sl := sc.ShiftAllRight(3).And(archsimd.LoadInt16x16(&f16Hi)), sc.ShiftAllLeft(13)
		d0 := sl.InterleaveLoGrouped(sh).AsFloat32x8().Mul(archsimd.LoadFloat32x8(&f16Scale)).Mul(dxv)
		y0 := (*[8]float32)(ya)
		archsimd.LoadFloat32x8(y0).Add(d0.Mul(zero.Sub(A0).ConvertToFloat32())).Store(y0)
		d1 := sl.InterleaveHiGrouped(sh).AsFloat32x8().Mul(archsimd.LoadFloat32x8(&f16Scale)).Mul(dxv)
		y1 := (*[8]float32)(unsafe.Add(ya, 32))
		archsimd.LoadFloat32x8(y1).Add(d1.Mul(zero.Sub(A1).ConvertToFloat32())).Store(y1)
	}
	archsimd.LoadFloat32x8((*[8]float32)(ya)).Store((*[8]float32)(y))
	archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(ya, 32))).Store((*[8]float32)(unsafe.Add(y, 32)))
	runtime.KeepAlive(&fence)
	archsimd.ClearAVXUpperBits()
}

// q6Pairs writes mmQ6_K's cp for one row from its sums of 16, sx (ns of
// them): c = -31·Σx_s as two int16 halves, c>>1 in the low one and c -
// c>>1 in the high one, which a VPMADDWD against (scale, scale) pairs
// adds back to scale·c. (|c| <= 31·2048, so each half fits int16, where
// -32·Σx_s, the correction of unsigned values q, would not for Σx_s =
// -2048.)
func q6Pairs(cp []int32, sx []int32) {
	for i, x := range sx {
		c := -31 * x
		cl := c >> 1
		cp[i] = cl&0xffff | (c-cl)<<16
	}
}

// q6Masks are mmQ6_K's masks of a value's six bits (0x3f) and of group
// 4s+3's two-bit pieces once shifted into place (0x03, 0x0c, 0x30).
var q6Masks = [4][32]uint8{
	{0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f},
	{3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3},
	{0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c},
	{0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30},
}

// q6Dup repeats each of the first eight bytes (a half-panel's scales) in
// two bytes, for mmQ6_K's sign extension of its (scale, scale) pairs to
// 16 bits (VPSHUFB, VPMOVSXBW).
var q6Dup = [16]int8{0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7}
