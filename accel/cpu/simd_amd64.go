//go:build goexperiment.simd && amd64

package cpu

import (
	"math"
	"math/bits"
	"simd/archsimd"
	"unsafe"
)

//go:generate go run gen_simd.go

// fusedMatMul: the float32 and bf16 matmuls fuse each product with its
// add, one rounding per term, on every kernel set of this build (the
// vector kernels' VFMADD, the plain-Go kernels' fma32; see fma32.go).
const fusedMatMul = true

// The archsimd kernels. Each vector kernel (a function that holds archsimd
// values) is //go:noinline, holds no scalar float arithmetic (a scalar float
// enters only as the argument of a broadcast), and calls ClearAVXUpperBits
// before it returns; the plain functions around them hold no vector values.
// See simd.go and hazard_test.go.

// vecRunnable are the sets this CPU runs, fastest first: AVX-512, AVX2
// (with FMA). The tests check each against the plain-Go kernels.
var vecRunnable = runnableOps()

var vecBuilt = func() *vecOps {
	if len(vecRunnable) == 0 {
		return nil
	}
	return vecRunnable[0]
}()

func runnableOps() []*vecOps {
	var vs []*vecOps
	for _, v := range []*vecOps{avx512Ops(), avx2Ops()} {
		if v != nil {
			vs = append(vs, v)
		}
	}
	return vs
}

func avx512Ops() *vecOps {
	if !archsimd.X86.AVX512() {
		return nil
	}
	return &vecOps{
		name: "avx512",
		// Go assembly (gen_avx512fma.go).
		f32:         avx512F32Kernels,
		bf16:        avx512BF16Kernels,
		blocks:      mmBlocks{f32: [2]int{6, 4}, bf16: [2]int{6, 4}, f32Row: [2]int{1, 4}, bf16Row: [2]int{1, 4}},
		scale:       vScaleGo,
		expShift:    vExpShiftGo,
		div:         vDivGo,
		silu:        vSiLUGo,
		ropePairs:   vRoPEPairs,
		ropeHalves:  vRoPEHalves,
		scores:      vScoresGo,
		av:          vAttnAVGo,
		scoresT:     vScoresT16Go,
		scoresT2:    vScoresT16x2Go,
		avRows:      vAVRows16Go,
		keysT8:      vKeysT8Go,
		attn8:       attn8Go,
		attnDec:     attnDec512,
		attnDecHalf: attnDec512Half,
		sum:         vSumGo,
		max:         vMaxGo,
		rowSums4:    vRowSums4Go,
		quant:       avx512Quant(),
	}
}

// avx512Quant is the avx512 set's own quantized kernels: the VNNI ones
// where the CPU has AVX512_VNNI (and BW and VL, which AVX512 includes),
// else none (the AVX2 kernels).
func avx512Quant() *quantOps {
	if !archsimd.X86.AVX512VNNI() {
		return nil
	}
	return vnniQuant
}

func vScaleGo(out, x, w []float32, s float32) {
	n := len(x)
	vScale(out[:n], x, w[:n], s)
}

// vScale sets out[j] = w[j] * (s * x[j]), two roundings per element as the
// scalar code.
//
//go:noinline
//go:norace
//go:nocheckptr
func vScale(out, x, w []float32, s float32) {
	n := len(x)
	sv := archsimd.BroadcastFloat32x16(s)
	i := 0
	for ; i+16 <= n; i += 16 {
		xv := archsimd.LoadFloat32x16Slice(x[i:])
		wv := archsimd.LoadFloat32x16Slice(w[i:])
		wv.Mul(sv.Mul(xv)).StoreSlice(out[i:])
	}
	if i < n {
		xv := archsimd.LoadFloat32x16SlicePart(x[i:])
		wv := archsimd.LoadFloat32x16SlicePart(w[i:])
		wv.Mul(sv.Mul(xv)).StoreSlicePart(out[i:])
	}
	archsimd.ClearAVXUpperBits()
}

// vRoPEPairs is vecOps.ropePairs: per 16 lanes of a head, v·cos2 plus
// v's pairs swapped times sin2, each product rounded, so that lane 2i is
// v[2i]·cos − v[2i+1]·sin (x + (−y) is x − y exactly) and lane 2i+1 is
// v[2i+1]·cos + v[2i]·sin, rotateHead's values (the same bits, up to which
// NaN's payload a sum of two NaN products keeps: the odd lanes add in the
// other order).
//
//go:noinline
//go:norace
//go:nocheckptr
func vRoPEPairs(v, cos2, sin2 []float32) {
	hd := len(cos2)
	sin2 = sin2[:hd]
	for o := 0; o+hd <= len(v); o += hd {
		h := v[o : o+hd]
		i := 0
		for ; i+16 <= hd; i += 16 {
			x := archsimd.LoadFloat32x16Slice(h[i:])
			sw := x.AsInt32x16().PermuteScalarsGrouped(1, 0, 3, 2).AsFloat32x16()
			c := archsimd.LoadFloat32x16Slice(cos2[i:])
			s := archsimd.LoadFloat32x16Slice(sin2[i:])
			x.Mul(c).Add(sw.Mul(s)).StoreSlice(h[i:])
		}
		if i < hd {
			x := archsimd.LoadFloat32x16SlicePart(h[i:])
			sw := x.AsInt32x16().PermuteScalarsGrouped(1, 0, 3, 2).AsFloat32x16()
			c := archsimd.LoadFloat32x16SlicePart(cos2[i:])
			s := archsimd.LoadFloat32x16SlicePart(sin2[i:])
			x.Mul(c).Add(sw.Mul(s)).StoreSlicePart(h[i:])
		}
	}
	archsimd.ClearAVXUpperBits()
}

// vRoPEHalves is vecOps.ropeHalves: rotateHalves on 16 pairs at a time.
//
//go:noinline
//go:norace
//go:nocheckptr
func vRoPEHalves(v, cos, sin []float32) {
	n := len(cos)
	sin = sin[:n]
	for o := 0; o+2*n <= len(v); o += 2 * n {
		a, b := v[o:o+n], v[o+n:o+2*n]
		i := 0
		for ; i+16 <= n; i += 16 {
			x, y := archsimd.LoadFloat32x16Slice(a[i:]), archsimd.LoadFloat32x16Slice(b[i:])
			c, s := archsimd.LoadFloat32x16Slice(cos[i:]), archsimd.LoadFloat32x16Slice(sin[i:])
			x.Mul(c).Sub(y.Mul(s)).StoreSlice(a[i:])
			x.Mul(s).Add(y.Mul(c)).StoreSlice(b[i:])
		}
		if i < n {
			x, y := archsimd.LoadFloat32x16SlicePart(a[i:]), archsimd.LoadFloat32x16SlicePart(b[i:])
			c, s := archsimd.LoadFloat32x16SlicePart(cos[i:]), archsimd.LoadFloat32x16SlicePart(sin[i:])
			x.Mul(c).Sub(y.Mul(s)).StoreSlicePart(a[i:])
			x.Mul(s).Add(y.Mul(c)).StoreSlicePart(b[i:])
		}
	}
	archsimd.ClearAVXUpperBits()
}

func vDivGo(x []float32, s float32) { vDiv(x, s) }

// vDiv sets x[i] /= s (correctly rounded division, as the scalar code).
//
//go:noinline
//go:norace
//go:nocheckptr
func vDiv(x []float32, s float32) {
	n := len(x)
	sv := archsimd.BroadcastFloat32x16(s)
	i := 0
	for ; i+16 <= n; i += 16 {
		archsimd.LoadFloat32x16Slice(x[i:]).Div(sv).StoreSlice(x[i:])
	}
	if i < n {
		archsimd.LoadFloat32x16SlicePart(x[i:]).Div(sv).StoreSlicePart(x[i:])
	}
	archsimd.ClearAVXUpperBits()
}

// The float64 exponential: k = round(x·log2 e) (by adding and subtracting
// 1.5·2^52, which also leaves k in the low bits of the sum, ready to become
// the exponent of 2^k), r = x - k·ln2 (in two parts; k·ln2Hi is exact), e^r
// by its Taylor polynomial of degree 11 evaluated by Estrin's scheme with
// fused multiply-adds (truncation below 2^-46.7 relative for |r| <= ln2/2;
// the rounding of the evaluation adds a few 2^-53), times 2^k. So the
// float64 result is within 2^-46 of e^x, 2^7 float64 ulps; math.Exp is
// within one. A lane is handed to the scalar path when its result lies
// within expMargin ulps of a float32 rounding boundary (the 29 bits below a
// float32's mantissa within expMargin of one half: (bits + expMargin - 2^28)
// mod 2^29 < 2·expMargin), where the two could round differently (one lane
// in 2^16 on average), or when its argument is NaN or outside [-87, 88]
// (float32 subnormals, overflow) but not below expUnder, where the result
// is +0. TestVecExpExhaustive checks all 2^32 float32 inputs.
const (
	expLog2e = 1.4426950408889634
	expLn2Hi = 6.93147180369123816490e-01
	expLn2Lo = 1.90821492927058770002e-10
	expMagic = 0x1.8p52
	expMin   = -87
	expMax   = 88
	// expUnder: below it e^x is under half the least float32 subnormal
	// (e^-104 = 6.8e-46 < 7.0e-46), so exp32 is exactly +0 and the vector
	// kernels give it without the scalar path: a softmax over a long causal
	// row takes many such lanes.
	expUnder  = -104
	expMargin = 1 << 12
)

// expTab holds the exponential kernels' constants, each repeated in eight
// lanes so that the kernels read them as memory operands (a broadcast per
// use would cost a shuffle, and there are not registers enough to keep
// them); expTabB is the same for the kernels' second half (gen_simd.go).
var expTab, expTabB = newExpConsts(), newExpConsts()

type expConsts struct {
	coef                         [12][8]float64 // 1/n!, n = 11 down to 0
	log2e, ln2hi, ln2lo, magic   [8]float64
	bias, shift29, mant29, marg2 [8]uint64
	lo, hi, under                [8]float32
	one                          [16]float32
	sign                         [16]uint32
}

func newExpConsts() (t expConsts) {
	for i := 0; i < 12; i++ {
		n := 11 - i
		f := 1.0
		for m := 2; m <= n; m++ {
			f *= float64(m)
		}
		for j := range t.coef[i] {
			t.coef[i][j] = 1 / f
		}
	}
	for j := 0; j < 8; j++ {
		t.log2e[j], t.ln2hi[j], t.ln2lo[j], t.magic[j] = expLog2e, expLn2Hi, expLn2Lo, expMagic
		t.bias[j], t.mant29[j] = 1023, 1<<29-1
		t.shift29[j], t.marg2[j] = 1<<29+expMargin-1<<28, 2*expMargin
		t.lo[j], t.hi[j], t.under[j] = expMin, expMax, expUnder
	}
	for j := 0; j < 16; j++ {
		t.one[j], t.sign[j] = 1, 1<<31
	}
	return
}

// expBlock is the most elements one call of the exponential kernels takes.
const expBlock = 512

func vExpShiftGo(x []float32, m float32) {
	var mp [16]float32
	for i := range mp {
		mp[i] = m
	}
	vExpShiftPattern(x, &mp)
}

// vExpShiftPattern sets x[i] = exp32(x[i] - m[i%16]): the vector kernel,
// then the scalar exponential for the lanes it was unsure of.
func vExpShiftPattern(x []float32, m *[16]float32) { expShiftPattern(x, m, true) }

// expShiftPattern is vExpShiftPattern on the AVX-512 kernel (wide) or the
// AVX2 one (the kernels are called directly: through a function value,
// flags would escape to the heap).
func expShiftPattern(x []float32, m *[16]float32, wide bool) {
	var flags [expBlock / 16]uint16
	for base := 0; base < len(x); base += expBlock {
		blk := x[base:min(len(x), base+expBlock)]
		var any bool
		if wide {
			any = vExpShift(blk, m, &flags)
		} else {
			any = vExpShift8(blk, m, &flags)
		}
		if any {
			for g := 0; 16*g < len(blk); g++ {
				for f := flags[g]; f != 0; f &= f - 1 {
					i := 16*g + bits.TrailingZeros16(f)
					blk[i] = exp32(blk[i] - m[i%16])
				}
			}
		}
	}
}

func vSiLUGo(out, a, b []float32) { siluVec(out, a, b, true) }

// siluVec is SiLUMul on the AVX-512 kernel (wide) or the AVX2 one, then
// the scalar code for the lanes it was unsure of.
func siluVec(out, a, b []float32, wide bool) {
	var flags [expBlock / 16]uint16
	a, b = a[:len(out)], b[:len(out)]
	for len(out) > 0 {
		n := min(len(out), expBlock)
		o, x, y := out[:n], a[:n], b[:n]
		out, a, b = out[n:], a[n:], b[n:]
		var any bool
		if wide {
			any = vSiLU(o, x, y, &flags)
		} else {
			any = vSiLU8(o, x, y, &flags)
		}
		if any {
			for g := 0; 16*g < n; g++ {
				for f := flags[g]; f != 0; f &= f - 1 {
					i := 16*g + bits.TrailingZeros16(f)
					siluMulGo(o[i:i+1], x[i:i+1], y[i:i+1])
				}
			}
		}
	}
}

func vScoresGo(att, kc []float32, offs []int, maxOff int, q, qb []float32, scale float32) {
	n, hd := len(att), len(q)
	if n == 0 {
		return
	}
	// Every row the kernel reads, checked here: it reads unchecked.
	if maxOff+hd > len(kc) || len(offs) < n || hd%8 != 0 || len(qb) < 8*hd {
		panic("cpu: attention scores: a cache row out of range")
	}
	vBcast8(unsafe.Pointer(&qb[0]), unsafe.Pointer(&q[0]), hd)
	if n8 := n &^ 7; n8 > 0 {
		vScores(unsafe.Pointer(&att[0]), unsafe.Pointer(&kc[0]), offs[:n8], unsafe.Pointer(&qb[0]), hd, scale)
	}
	if r := n % 8; r > 0 {
		// The last positions, with the lanes past them repeating the last
		// one's row: each lane is its own chain, so the others' scores
		// come out as if alone.
		var o8 [8]int
		var a8 [8]float32
		last := offs[n-r : n]
		for j := range o8 {
			o8[j] = last[min(j, r-1)]
		}
		vScores(unsafe.Pointer(&a8[0]), unsafe.Pointer(&kc[0]), o8[:], unsafe.Pointer(&qb[0]), hd, scale)
		copy(att[n-r:n], a8[:r])
	}
}

// vBcast8 sets qb[8*i+j] = q[i] for i < n, j < 8.
//
//go:noinline
//go:norace
//go:nocheckptr
func vBcast8(qb, q unsafe.Pointer, n int) {
	for i := 0; i < n; i++ {
		archsimd.BroadcastUint32x8(*(*uint32)(unsafe.Add(q, 4*i))).Store((*[8]uint32)(unsafe.Add(qb, 32*i)))
	}
	archsimd.ClearAVXUpperBits()
}

// vScores sets att[p] = (sum over i in order of q[i]*k_p[i]) / scale for
// groups of eight positions p, lane j of a group being position p+j: each
// lane is the scalar dot product's chain. The eight key rows of a group are
// loaded eight dimensions at a time and transposed in registers (two 4x4
// shuffles per 128-bit half, then 128-bit selects). qb holds each q[i]
// broadcast to eight lanes (vBcast8). (Broadcasting q[i] in the loop
// instead runs out of the sixteen registers: the compiler's spills then
// take the legacy-SSE encoding.)
//
//go:noinline
//go:norace
//go:nocheckptr
func vScores(att, kc unsafe.Pointer, offs []int, qb unsafe.Pointer, hd int, scale float32) {
	sv := archsimd.BroadcastFloat32x8(scale)
	for p := 0; p+8 <= len(offs); p += 8 {
		o := offs[p : p+8 : p+8]
		var acc archsimd.Float32x8
		for c := 0; c < hd; c += 8 {
			cb := uintptr(c) * 4
			r0 := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(kc, uintptr(o[0])*4+cb)))
			r1 := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(kc, uintptr(o[1])*4+cb)))
			r2 := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(kc, uintptr(o[2])*4+cb)))
			r3 := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(kc, uintptr(o[3])*4+cb)))
			t0 := r0.SelectFromPairGrouped(0, 1, 4, 5, r1)
			t1 := r2.SelectFromPairGrouped(0, 1, 4, 5, r3)
			t2 := r0.SelectFromPairGrouped(2, 3, 6, 7, r1)
			t3 := r2.SelectFromPairGrouped(2, 3, 6, 7, r3)
			a0 := t0.SelectFromPairGrouped(0, 2, 4, 6, t1)
			a1 := t0.SelectFromPairGrouped(1, 3, 5, 7, t1)
			a2 := t2.SelectFromPairGrouped(0, 2, 4, 6, t3)
			a3 := t2.SelectFromPairGrouped(1, 3, 5, 7, t3)
			r0 = archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(kc, uintptr(o[4])*4+cb)))
			r1 = archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(kc, uintptr(o[5])*4+cb)))
			r2 = archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(kc, uintptr(o[6])*4+cb)))
			r3 = archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(kc, uintptr(o[7])*4+cb)))
			t0 = r0.SelectFromPairGrouped(0, 1, 4, 5, r1)
			t1 = r2.SelectFromPairGrouped(0, 1, 4, 5, r3)
			t2 = r0.SelectFromPairGrouped(2, 3, 6, 7, r1)
			t3 = r2.SelectFromPairGrouped(2, 3, 6, 7, r3)
			b0 := t0.SelectFromPairGrouped(0, 2, 4, 6, t1)
			b1 := t0.SelectFromPairGrouped(1, 3, 5, 7, t1)
			b2 := t2.SelectFromPairGrouped(0, 2, 4, 6, t3)
			b3 := t2.SelectFromPairGrouped(1, 3, 5, 7, t3)
			qc := unsafe.Add(qb, uintptr(c)*32)
			acc = acc.Add(archsimd.LoadFloat32x8((*[8]float32)(qc)).Mul(a0.Select128FromPair(0, 2, b0)))
			acc = acc.Add(archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(qc, 32))).Mul(a1.Select128FromPair(0, 2, b1)))
			acc = acc.Add(archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(qc, 64))).Mul(a2.Select128FromPair(0, 2, b2)))
			acc = acc.Add(archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(qc, 96))).Mul(a3.Select128FromPair(0, 2, b3)))
			acc = acc.Add(archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(qc, 128))).Mul(a0.Select128FromPair(1, 3, b0)))
			acc = acc.Add(archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(qc, 160))).Mul(a1.Select128FromPair(1, 3, b1)))
			acc = acc.Add(archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(qc, 192))).Mul(a2.Select128FromPair(1, 3, b2)))
			acc = acc.Add(archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(qc, 224))).Mul(a3.Select128FromPair(1, 3, b3)))
		}
		acc.Div(sv).Store((*[8]float32)(unsafe.Add(att, uintptr(p)*4)))
	}
	archsimd.ClearAVXUpperBits()
}

func vAttnAVGo(dst, vc []float32, offs []int, maxOff int, att []float32) {
	attnAV(dst, vc, offs, maxOff, att)
}

// attnAV adds att[p] * vc[offs[p]:][:len(dst)] to dst for every p in order
// on the AVX-512 kernels, the head in pieces of 64, 16 and then 8 (the AVX2
// set's is vAttnAV8Go).
func attnAV(dst, vc []float32, offs []int, maxOff int, att []float32) {
	hd := len(dst)
	if len(offs) == 0 {
		return
	}
	if maxOff+hd > len(vc) {
		panic("cpu: attention values: a cache row out of range")
	}
	_ = att[:len(offs)]
	d := unsafe.Pointer(&dst[0])
	v := unsafe.Pointer(&vc[0])
	a := unsafe.Pointer(&att[0])
	for c := 0; c < hd; {
		dc, vcc := unsafe.Add(d, c*4), unsafe.Add(v, c*4)
		switch {
		case hd-c >= 64:
			vAV64(dc, vcc, offs, a)
			c += 64
		case hd-c >= 16:
			vAV16(dc, vcc, offs, a)
			c += 16
		default:
			vAV8(dc, vcc, offs, a)
			c += 8
		}
	}
}

// vAV64, vAV16 and vAV8 add att[p] * v_p to 64, 16 or 8 elements of dst for
// every position p in order: each element is its own chain, in the
// reference's position order.
//
//go:noinline
//go:norace
//go:nocheckptr
func vAV64(dst, vc unsafe.Pointer, offs []int, att unsafe.Pointer) {
	d0 := archsimd.LoadFloat32x16((*[16]float32)(dst))
	d1 := archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(dst, 64)))
	d2 := archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(dst, 128)))
	d3 := archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(dst, 192)))
	for p, o := range offs {
		a := archsimd.BroadcastFloat32x16(*(*float32)(unsafe.Add(att, p*4)))
		v := unsafe.Add(vc, uintptr(o)*4)
		d0 = d0.Add(a.Mul(archsimd.LoadFloat32x16((*[16]float32)(v))))
		d1 = d1.Add(a.Mul(archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(v, 64)))))
		d2 = d2.Add(a.Mul(archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(v, 128)))))
		d3 = d3.Add(a.Mul(archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(v, 192)))))
	}
	d0.Store((*[16]float32)(dst))
	d1.Store((*[16]float32)(unsafe.Add(dst, 64)))
	d2.Store((*[16]float32)(unsafe.Add(dst, 128)))
	d3.Store((*[16]float32)(unsafe.Add(dst, 192)))
	archsimd.ClearAVXUpperBits()
}

//go:noinline
//go:norace
//go:nocheckptr
func vAV16(dst, vc unsafe.Pointer, offs []int, att unsafe.Pointer) {
	d0 := archsimd.LoadFloat32x16((*[16]float32)(dst))
	for p, o := range offs {
		a := archsimd.BroadcastFloat32x16(*(*float32)(unsafe.Add(att, p*4)))
		d0 = d0.Add(a.Mul(archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(vc, uintptr(o)*4)))))
	}
	d0.Store((*[16]float32)(dst))
	archsimd.ClearAVXUpperBits()
}

//go:noinline
//go:norace
//go:nocheckptr
func vAV8(dst, vc unsafe.Pointer, offs []int, att unsafe.Pointer) {
	d0 := archsimd.LoadFloat32x8((*[8]float32)(dst))
	for p, o := range offs {
		a := archsimd.BroadcastFloat32x8(*(*float32)(unsafe.Add(att, p*4)))
		d0 = d0.Add(a.Mul(archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(vc, uintptr(o)*4)))))
	}
	d0.Store((*[8]float32)(dst))
	archsimd.ClearAVXUpperBits()
}

func vSumGo(x []float32) float32 { return sumVec(x, true) }

// sumVec is the bandwidth probe's sum on the AVX-512 kernel (wide: blocks
// of 64) or the AVX2 one (blocks of 32).
func sumVec(x []float32, wide bool) float32 {
	blk := 32
	if wide {
		blk = 64
	}
	n := len(x) / blk * blk
	var out [16]float32
	if n > 0 && wide {
		vSum64(x[:n], &out)
	} else if n > 0 {
		vSum32(x[:n], (*[8]float32)(out[:8]))
	}
	var s float32
	for _, v := range out {
		s += v
	}
	for _, v := range x[n:] {
		s += v
	}
	return s
}

// vSum64 adds x (a multiple of 64 elements) into sixteen lanes, four
// accumulators deep: a memory-bandwidth probe, not a reference sum.
//
//go:noinline
//go:norace
//go:nocheckptr
func vSum64(x []float32, out *[16]float32) {
	var a0, a1, a2, a3 archsimd.Float32x16
	p := unsafe.Pointer(&x[0])
	for i := 0; i < len(x); i += 64 {
		q := unsafe.Add(p, i*4)
		a0 = a0.Add(archsimd.LoadFloat32x16((*[16]float32)(q)))
		a1 = a1.Add(archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(q, 64))))
		a2 = a2.Add(archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(q, 128))))
		a3 = a3.Add(archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(q, 192))))
	}
	a0.Add(a1).Add(a2.Add(a3)).Store(out)
	archsimd.ClearAVXUpperBits()
}

func vMaxGo(x []float32) (float32, bool) { return maxVec(x, true) }

// maxVec is the maximum of x on the AVX-512 kernel (wide) or the AVX2 one,
// false where x is empty or holds a NaN (the caller's scalar loop then
// decides).
func maxVec(x []float32, wide bool) (float32, bool) {
	if len(x) == 0 {
		return 0, false
	}
	var out [16]float32
	lanes := out[:]
	var nan bool
	if wide {
		nan = vMax(x, &out)
	} else {
		nan = vMax8(x, (*[8]float32)(out[:8]))
		lanes = out[:8]
	}
	if nan {
		return 0, false
	}
	m := lanes[0]
	for _, v := range lanes[1:] {
		if v > m {
			m = v
		}
	}
	return m, true
}

// vMax stores into out sixteen lanes whose maximum is the maximum of x, and
// reports whether x holds a NaN (then out means nothing). Without NaNs the
// maximum of floats does not depend on the order they are compared in (but
// for the sign of a zero maximum, which no exp(x - max) can tell).
//
//go:noinline
//go:norace
//go:nocheckptr
func vMax(x []float32, out *[16]float32) bool {
	ninf := archsimd.LoadFloat32x16(&negInf16)
	m := ninf
	var nan uint16
	for i := 0; i < len(x); i += 16 {
		p := (*[16]float32)(unsafe.Pointer(&x[i]))
		var v archsimd.Float32x16
		if len(x)-i >= 16 {
			v = archsimd.LoadFloat32x16(p)
		} else {
			valid := archsimd.Mask32x16FromBits(uint16(0xffff) >> (16 - (len(x) - i)))
			v = archsimd.LoadMaskedFloat32x16(p, valid).Merge(ninf, valid)
		}
		nan |= v.IsNaN().ToBits()
		m = m.Max(v)
	}
	m.Store(out)
	archsimd.ClearAVXUpperBits()
	return nan != 0
}

var negInf = math.Inf(-1)

var negInf16 = [16]float32{
	float32(negInf), float32(negInf), float32(negInf), float32(negInf), float32(negInf), float32(negInf), float32(negInf), float32(negInf),
	float32(negInf), float32(negInf), float32(negInf), float32(negInf), float32(negInf), float32(negInf), float32(negInf), float32(negInf),
}

func vRowSums4Go(rows *[4][]float32, n int, sums *[4]float32) {
	m := n &^ 3
	for _, r := range rows {
		_ = r[:n]
	}
	if m > 0 {
		vRowSums4(unsafe.Pointer(&rows[0][0]), unsafe.Pointer(&rows[1][0]), unsafe.Pointer(&rows[2][0]),
			unsafe.Pointer(&rows[3][0]), m, sums)
	} else {
		*sums = [4]float32{}
	}
	for i, r := range rows {
		s := sums[i]
		for _, v := range r[m:n] {
			s += v
		}
		sums[i] = s
	}
}

// vRowSums4 sums four rows of n elements (n a multiple of 4), each in
// element order, one row per lane: four elements of each row are loaded
// and transposed (a 4x4 shuffle), then added to the lanes one column after
// another, so each lane is the scalar sum's chain.
//
//go:noinline
//go:norace
//go:nocheckptr
func vRowSums4(r0, r1, r2, r3 unsafe.Pointer, n int, sums *[4]float32) {
	var acc archsimd.Float32x4
	for p := 0; p < n; p += 4 {
		o := uintptr(p) * 4
		a := archsimd.LoadFloat32x4((*[4]float32)(unsafe.Add(r0, o)))
		b := archsimd.LoadFloat32x4((*[4]float32)(unsafe.Add(r1, o)))
		c := archsimd.LoadFloat32x4((*[4]float32)(unsafe.Add(r2, o)))
		d := archsimd.LoadFloat32x4((*[4]float32)(unsafe.Add(r3, o)))
		t0 := a.SelectFromPair(0, 1, 4, 5, b) // a0 a1 b0 b1
		t1 := c.SelectFromPair(0, 1, 4, 5, d) // c0 c1 d0 d1
		t2 := a.SelectFromPair(2, 3, 6, 7, b) // a2 a3 b2 b3
		t3 := c.SelectFromPair(2, 3, 6, 7, d) // c2 c3 d2 d3
		acc = acc.Add(t0.SelectFromPair(0, 2, 4, 6, t1))
		acc = acc.Add(t0.SelectFromPair(1, 3, 5, 7, t1))
		acc = acc.Add(t2.SelectFromPair(0, 2, 4, 6, t3))
		acc = acc.Add(t2.SelectFromPair(1, 3, 5, 7, t3))
	}
	acc.Store(sums)
	archsimd.ClearAVXUpperBits()
}
