//go:build goexperiment.simd && amd64

package cpu

import (
	"simd/archsimd"
	"unsafe"
)

// The elementwise and attention kernels for CPUs with AVX2 and FMA but no
// AVX-512: 256-bit vectors, the same bits as the plain-Go kernels and the
// AVX-512 ones, by the same means (simd.go). Where the AVX-512 kernels take
// sixteen lanes, these take eight, and a sixteen-lane pattern (the shifts of
// the exponentials) is read as its two eight-lane halves; the exponential
// runs the AVX-512 kernels' float64 evaluation operation for operation, in
// four-lane float64 vectors, so that a lane is computed, and handed to the
// scalar path, exactly where theirs is. Masks are vectors here: a mask of
// lanes chosen at run time (a tail, the lanes a kernel is sure of) is read
// from avx2Masks. Besides the rules of simd.go, no constant-count vector
// shifts (see mmQ4_0).
//
// The scores (vScores) and the four-row sums (vRowSums4) are 256- and
// 128-bit kernels already and run as they are. The eight-wide-head path
// (attn8) stays AVX-512 only: its transposes are two-vector permutes of
// sixteen lanes, which AVX2 has no single instruction for; heads of eight
// take the general path, with the same bits.

// avx2Ops is the AVX2 set where the CPU has AVX2 and FMA, else nil. It is
// the device's set where the CPU has no AVX-512 (avx512Ops's is the faster
// one where it has); on an AVX-512 CPU the tests still run it.
//
// Its matmul tables are empty: float32 and bf16 weights are then not
// packed (packingOn) and run on the row-major plain-Go kernels, as without
// vector kernels, or, where packing is forced, on the plain-Go panel
// kernel.
func avx2Ops() *vecOps {
	if !archsimd.X86.AVX2() || !archsimd.X86.FMA() {
		return nil
	}
	return &vecOps{
		name: "avx2",
		f32:  avx2F32Kernels,
		bf16: avx2BF16Kernels,
		// The largest blocks that fit in registers (gen_avx2mm.go).
		blocks:   mmBlocks{f32: [2]int{2, 2}, bf16: [2]int{2, 1}, f32Row: [2]int{1, 3}, bf16Row: [2]int{1, 2}},
		scale:    vScale8Go,
		expShift: vExpShift8Go,
		div:      vDiv8,
		silu:     vSiLU8Go,
		scores:   vScoresGo,
		av:       vAttnAV8Go,
		sum:      vSum8Go,
		max:      vMax8Go,
		rowSums4: vRowSums4Go,
	}
}

// avx2Masks[b] is the lane mask of the bits b: lane j is -1 where bit j is
// set, else 0.
var avx2Masks = func() (t [256][8]int32) {
	for b := range t {
		for j := range t[b] {
			if b>>j&1 != 0 {
				t[b][j] = -1
			}
		}
	}
	return
}()

// exp4Tab holds the constants of the four-lane float64 exponential (the
// values of expTab) and of the eight-lane float32 code around it, for the
// kernels vExpShift8 and vSiLU8 (simd_gen_amd64.go, written by gen_simd.go);
// exp4TabB is the same for their second half, as expTabB.
var exp4Tab, exp4TabB = newExp4Consts(), newExp4Consts()

func newExp4Consts() (t exp4Consts) {
	for i := range t.coef {
		for j := range t.coef[i] {
			t.coef[i][j] = expTab.coef[i][0]
		}
	}
	for j := 0; j < 4; j++ {
		t.log2e[j], t.ln2hi[j], t.ln2lo[j], t.magic[j] = expLog2e, expLn2Hi, expLn2Lo, expMagic
		t.bias[j], t.shl52[j] = 1023, 52
		t.mant29[j], t.shift29[j], t.marg2[j] = 1<<29-1, 1<<29+expMargin-1<<28, 2*expMargin
	}
	for j := 0; j < 8; j++ {
		t.lo[j], t.hi[j], t.under[j] = expMin, expMax, expUnder
		t.one[j], t.sign[j] = 1, 1<<31
	}
	return
}

type exp4Consts struct {
	coef                       [12][4]float64 // 1/n!, n = 11 down to 0
	log2e, ln2hi, ln2lo, magic [4]float64
	bias, shl52                [4]uint64
	mant29, shift29, marg2     [4]int64
	lo, hi, under, one         [8]float32
	sign                       [8]uint32
}

func vScale8Go(out, x, w []float32, s float32) {
	n := len(x)
	vScale8(out[:n], x, w[:n], s)
}

// vScale8 sets out[j] = w[j] * (s * x[j]), two roundings per element as
// the scalar code.
//
//go:noinline
//go:norace
//go:nocheckptr
func vScale8(out, x, w []float32, s float32) {
	n := len(x)
	sv := archsimd.BroadcastFloat32x8(s)
	i := 0
	for ; i+8 <= n; i += 8 {
		xv := archsimd.LoadFloat32x8Slice(x[i:])
		wv := archsimd.LoadFloat32x8Slice(w[i:])
		wv.Mul(sv.Mul(xv)).StoreSlice(out[i:])
	}
	if i < n {
		xv := archsimd.LoadFloat32x8SlicePart(x[i:])
		wv := archsimd.LoadFloat32x8SlicePart(w[i:])
		wv.Mul(sv.Mul(xv)).StoreSlicePart(out[i:])
	}
	archsimd.ClearAVXUpperBits()
}

// vDiv8 sets x[i] /= s (correctly rounded division, as the scalar code).
//
//go:noinline
//go:norace
//go:nocheckptr
func vDiv8(x []float32, s float32) {
	n := len(x)
	sv := archsimd.BroadcastFloat32x8(s)
	i := 0
	for ; i+8 <= n; i += 8 {
		archsimd.LoadFloat32x8Slice(x[i:]).Div(sv).StoreSlice(x[i:])
	}
	if i < n {
		archsimd.LoadFloat32x8SlicePart(x[i:]).Div(sv).StoreSlicePart(x[i:])
	}
	archsimd.ClearAVXUpperBits()
}

func vExpShift8Go(x []float32, m float32) {
	var mp [16]float32
	for i := range mp {
		mp[i] = m
	}
	expShiftPattern(x, &mp, false)
}

func vSiLU8Go(out, a, b []float32) { siluVec(out, a, b, false) }

func vAttnAV8Go(dst, vc []float32, offs []int, maxOff int, att []float32) {
	attnAV(dst, vc, offs, maxOff, att, false)
}

// vAV64x8 and vAV32x8 add att[p] * v_p to 64 or 32 elements of dst for
// every position p in order, eight or four eight-lane chains: each element
// is its own chain, in the reference's position order.
//
//go:noinline
//go:norace
//go:nocheckptr
func vAV64x8(dst, vc unsafe.Pointer, offs []int, att unsafe.Pointer) {
	d0 := archsimd.LoadFloat32x8((*[8]float32)(dst))
	d1 := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(dst, 32)))
	d2 := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(dst, 64)))
	d3 := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(dst, 96)))
	d4 := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(dst, 128)))
	d5 := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(dst, 160)))
	d6 := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(dst, 192)))
	d7 := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(dst, 224)))
	for p, o := range offs {
		a := archsimd.BroadcastFloat32x8(*(*float32)(unsafe.Add(att, p*4)))
		v := unsafe.Add(vc, uintptr(o)*4)
		d0 = d0.Add(a.Mul(archsimd.LoadFloat32x8((*[8]float32)(v))))
		d1 = d1.Add(a.Mul(archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(v, 32)))))
		d2 = d2.Add(a.Mul(archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(v, 64)))))
		d3 = d3.Add(a.Mul(archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(v, 96)))))
		d4 = d4.Add(a.Mul(archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(v, 128)))))
		d5 = d5.Add(a.Mul(archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(v, 160)))))
		d6 = d6.Add(a.Mul(archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(v, 192)))))
		d7 = d7.Add(a.Mul(archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(v, 224)))))
	}
	d0.Store((*[8]float32)(dst))
	d1.Store((*[8]float32)(unsafe.Add(dst, 32)))
	d2.Store((*[8]float32)(unsafe.Add(dst, 64)))
	d3.Store((*[8]float32)(unsafe.Add(dst, 96)))
	d4.Store((*[8]float32)(unsafe.Add(dst, 128)))
	d5.Store((*[8]float32)(unsafe.Add(dst, 160)))
	d6.Store((*[8]float32)(unsafe.Add(dst, 192)))
	d7.Store((*[8]float32)(unsafe.Add(dst, 224)))
	archsimd.ClearAVXUpperBits()
}

//go:noinline
//go:norace
//go:nocheckptr
func vAV32x8(dst, vc unsafe.Pointer, offs []int, att unsafe.Pointer) {
	d0 := archsimd.LoadFloat32x8((*[8]float32)(dst))
	d1 := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(dst, 32)))
	d2 := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(dst, 64)))
	d3 := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(dst, 96)))
	for p, o := range offs {
		a := archsimd.BroadcastFloat32x8(*(*float32)(unsafe.Add(att, p*4)))
		v := unsafe.Add(vc, uintptr(o)*4)
		d0 = d0.Add(a.Mul(archsimd.LoadFloat32x8((*[8]float32)(v))))
		d1 = d1.Add(a.Mul(archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(v, 32)))))
		d2 = d2.Add(a.Mul(archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(v, 64)))))
		d3 = d3.Add(a.Mul(archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(v, 96)))))
	}
	d0.Store((*[8]float32)(dst))
	d1.Store((*[8]float32)(unsafe.Add(dst, 32)))
	d2.Store((*[8]float32)(unsafe.Add(dst, 64)))
	d3.Store((*[8]float32)(unsafe.Add(dst, 96)))
	archsimd.ClearAVXUpperBits()
}

func vSum8Go(x []float32) float32 { return sumVec(x, false) }

// vSum32 adds x (a multiple of 32 elements) into eight lanes, four
// accumulators deep: a memory-bandwidth probe, not a reference sum.
//
//go:noinline
//go:norace
//go:nocheckptr
func vSum32(x []float32, out *[8]float32) {
	var a0, a1, a2, a3 archsimd.Float32x8
	p := unsafe.Pointer(&x[0])
	for i := 0; i < len(x); i += 32 {
		q := unsafe.Add(p, i*4)
		a0 = a0.Add(archsimd.LoadFloat32x8((*[8]float32)(q)))
		a1 = a1.Add(archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(q, 32))))
		a2 = a2.Add(archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(q, 64))))
		a3 = a3.Add(archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(q, 96))))
	}
	a0.Add(a1).Add(a2.Add(a3)).Store(out)
	archsimd.ClearAVXUpperBits()
}

func vMax8Go(x []float32) (float32, bool) { return maxVec(x, false) }

// vMax8 stores into out eight lanes whose maximum is the maximum of x, and
// reports whether x holds a NaN (then out means nothing), as vMax: two
// accumulators, whose order does not matter without NaNs.
//
//go:noinline
//go:norace
//go:nocheckptr
func vMax8(x []float32, out *[8]float32) bool {
	ninf := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Pointer(&negInf16)))
	m0, m1 := ninf, ninf
	var nan archsimd.Int32x8
	i := 0
	for ; i+16 <= len(x); i += 16 {
		v0 := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Pointer(&x[i])))
		v1 := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Pointer(&x[i+8])))
		nan = nan.Or(v0.IsNaN().ToInt32x8()).Or(v1.IsNaN().ToInt32x8())
		m0, m1 = m0.Max(v0), m1.Max(v1)
	}
	for ; i < len(x); i += 8 {
		p := (*[8]float32)(unsafe.Pointer(&x[i]))
		var v archsimd.Float32x8
		if len(x)-i >= 8 {
			v = archsimd.LoadFloat32x8(p)
		} else {
			valid := archsimd.LoadInt32x8(&avx2Masks[uint8(0xff)>>(8-(len(x)-i))]).ToMask()
			v = archsimd.LoadMaskedFloat32x8(p, valid).Merge(ninf, valid)
		}
		nan = nan.Or(v.IsNaN().ToInt32x8())
		m0 = m0.Max(v)
	}
	m0.Max(m1).Store(out)
	isNaN := !nan.IsZero()
	archsimd.ClearAVXUpperBits()
	return isNaN
}
