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
		name:     "avx2",
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
// values of expTab) and of the eight-lane float32 code around it.
var exp4Tab = func() (t exp4Consts) {
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
}()

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

// vExpShift8 is vExpShift on eight lanes at a time: x[i] = exp32(x[i] -
// m[i%16]) for the lanes it is sure of, the others left as they were and
// reported in flags (bit j of flags[g]: element 16g+j), returning whether
// any was left.
//
//go:noinline
//go:norace
//go:nocheckptr
func vExpShift8(x []float32, m *[16]float32, flags *[expBlock / 16]uint16) bool {
	t := &exp4Tab
	var any uint8
	for g := 0; 8*g < len(x); g++ {
		valid := uint8(0xff)
		if r := len(x) - 8*g; r < 8 {
			valid >>= 8 - r
		}
		xp := (*[8]float32)(unsafe.Pointer(&x[8*g]))
		mv := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(unsafe.Pointer(m), (g&1)*32)))
		var v archsimd.Float32x8
		if valid == 0xff {
			v = archsimd.LoadFloat32x8(xp).Sub(mv)
		} else {
			v = archsimd.LoadMaskedFloat32x8(xp, archsimd.LoadInt32x8(&avx2Masks[valid]).ToMask()).Sub(mv)
		}
		ok := v.GreaterEqual(archsimd.LoadFloat32x8(&t.lo)).And(v.LessEqual(archsimd.LoadFloat32x8(&t.hi)))
		uf := v.Less(archsimd.LoadFloat32x8(&t.under))
		keep := v.GreaterEqual(archsimd.LoadFloat32x8(&t.under))
		xda := v.GetLo().ConvertToFloat64()
		ta := xda.MulAdd(archsimd.LoadFloat64x4(&t.log2e), archsimd.LoadFloat64x4(&t.magic))
		ka := ta.Sub(archsimd.LoadFloat64x4(&t.magic))
		ra := xda.Sub(ka.Mul(archsimd.LoadFloat64x4(&t.ln2hi))).Sub(ka.Mul(archsimd.LoadFloat64x4(&t.ln2lo)))
		r2a := ra.Mul(ra)
		r4a := r2a.Mul(r2a)
		p0a := archsimd.LoadFloat64x4(&t.coef[10]).MulAdd(ra, archsimd.LoadFloat64x4(&t.coef[11]))
		p2a := archsimd.LoadFloat64x4(&t.coef[8]).MulAdd(ra, archsimd.LoadFloat64x4(&t.coef[9]))
		p4a := archsimd.LoadFloat64x4(&t.coef[6]).MulAdd(ra, archsimd.LoadFloat64x4(&t.coef[7]))
		p6a := archsimd.LoadFloat64x4(&t.coef[4]).MulAdd(ra, archsimd.LoadFloat64x4(&t.coef[5]))
		p8a := archsimd.LoadFloat64x4(&t.coef[2]).MulAdd(ra, archsimd.LoadFloat64x4(&t.coef[3]))
		p10a := archsimd.LoadFloat64x4(&t.coef[0]).MulAdd(ra, archsimd.LoadFloat64x4(&t.coef[1]))
		q0a := p2a.MulAdd(r2a, p0a)
		q1a := p6a.MulAdd(r2a, p4a)
		q2a := p10a.MulAdd(r2a, p8a)
		ya := q2a.MulAdd(r4a, q1a).MulAdd(r4a, q0a)
		ya = ya.Mul(ta.AsUint64x4().Add(archsimd.LoadUint64x4(&t.bias)).ShiftLeft(archsimd.LoadUint64x4(&t.shl52)).AsFloat64x4())
		neara := archsimd.LoadInt64x4(&t.marg2).Greater(ya.AsInt64x4().Add(archsimd.LoadInt64x4(&t.shift29)).And(archsimd.LoadInt64x4(&t.mant29)))
		xdb := v.GetHi().ConvertToFloat64()
		tb := xdb.MulAdd(archsimd.LoadFloat64x4(&t.log2e), archsimd.LoadFloat64x4(&t.magic))
		kb := tb.Sub(archsimd.LoadFloat64x4(&t.magic))
		rb := xdb.Sub(kb.Mul(archsimd.LoadFloat64x4(&t.ln2hi))).Sub(kb.Mul(archsimd.LoadFloat64x4(&t.ln2lo)))
		r2b := rb.Mul(rb)
		r4b := r2b.Mul(r2b)
		p0b := archsimd.LoadFloat64x4(&t.coef[10]).MulAdd(rb, archsimd.LoadFloat64x4(&t.coef[11]))
		p2b := archsimd.LoadFloat64x4(&t.coef[8]).MulAdd(rb, archsimd.LoadFloat64x4(&t.coef[9]))
		p4b := archsimd.LoadFloat64x4(&t.coef[6]).MulAdd(rb, archsimd.LoadFloat64x4(&t.coef[7]))
		p6b := archsimd.LoadFloat64x4(&t.coef[4]).MulAdd(rb, archsimd.LoadFloat64x4(&t.coef[5]))
		p8b := archsimd.LoadFloat64x4(&t.coef[2]).MulAdd(rb, archsimd.LoadFloat64x4(&t.coef[3]))
		p10b := archsimd.LoadFloat64x4(&t.coef[0]).MulAdd(rb, archsimd.LoadFloat64x4(&t.coef[1]))
		q0b := p2b.MulAdd(r2b, p0b)
		q1b := p6b.MulAdd(r2b, p4b)
		q2b := p10b.MulAdd(r2b, p8b)
		yb := q2b.MulAdd(r4b, q1b).MulAdd(r4b, q0b)
		yb = yb.Mul(tb.AsUint64x4().Add(archsimd.LoadUint64x4(&t.bias)).ShiftLeft(archsimd.LoadUint64x4(&t.shl52)).AsFloat64x4())
		nearb := archsimd.LoadInt64x4(&t.marg2).Greater(yb.AsInt64x4().Add(archsimd.LoadInt64x4(&t.shift29)).And(archsimd.LoadInt64x4(&t.mant29)))
		fl := (^ok.ToBits() | neara.ToBits() | nearb.ToBits()<<4) &^ uf.ToBits() & valid
		e := v.SetLo(ya.ConvertToFloat32()).SetHi(yb.ConvertToFloat32()).Masked(keep)
		if st := valid &^ fl; st == 0xff {
			e.Store(xp)
		} else {
			e.StoreMasked(xp, archsimd.LoadInt32x8(&avx2Masks[st]).ToMask())
		}
		if g&1 == 0 {
			flags[g>>1] = uint16(fl)
		} else {
			flags[g>>1] |= uint16(fl) << 8
		}
		any |= fl
	}
	archsimd.ClearAVXUpperBits()
	return any != 0
}

// vSiLU8 sets out[i] = (a[i] * (1 / (1 + exp32(-a[i])))) * b[i] for the
// lanes it is sure of, as vExpShift8.
//
//go:noinline
//go:norace
//go:nocheckptr
func vSiLU8(out, a, b []float32, flags *[expBlock / 16]uint16) bool {
	t := &exp4Tab
	var any uint8
	for g := 0; 8*g < len(out); g++ {
		valid := uint8(0xff)
		if r := len(out) - 8*g; r < 8 {
			valid >>= 8 - r
		}
		ap := (*[8]float32)(unsafe.Pointer(&a[8*g]))
		bp := (*[8]float32)(unsafe.Pointer(&b[8*g]))
		var av, bv archsimd.Float32x8
		if valid == 0xff {
			av, bv = archsimd.LoadFloat32x8(ap), archsimd.LoadFloat32x8(bp)
		} else {
			vm := archsimd.LoadInt32x8(&avx2Masks[valid]).ToMask()
			av, bv = archsimd.LoadMaskedFloat32x8(ap, vm), archsimd.LoadMaskedFloat32x8(bp, vm)
		}
		v := av.AsUint32x8().Xor(archsimd.LoadUint32x8(&t.sign)).AsFloat32x8()
		ok := v.GreaterEqual(archsimd.LoadFloat32x8(&t.lo)).And(v.LessEqual(archsimd.LoadFloat32x8(&t.hi)))
		uf := v.Less(archsimd.LoadFloat32x8(&t.under))
		keep := v.GreaterEqual(archsimd.LoadFloat32x8(&t.under))
		xda := v.GetLo().ConvertToFloat64()
		ta := xda.MulAdd(archsimd.LoadFloat64x4(&t.log2e), archsimd.LoadFloat64x4(&t.magic))
		ka := ta.Sub(archsimd.LoadFloat64x4(&t.magic))
		ra := xda.Sub(ka.Mul(archsimd.LoadFloat64x4(&t.ln2hi))).Sub(ka.Mul(archsimd.LoadFloat64x4(&t.ln2lo)))
		r2a := ra.Mul(ra)
		r4a := r2a.Mul(r2a)
		p0a := archsimd.LoadFloat64x4(&t.coef[10]).MulAdd(ra, archsimd.LoadFloat64x4(&t.coef[11]))
		p2a := archsimd.LoadFloat64x4(&t.coef[8]).MulAdd(ra, archsimd.LoadFloat64x4(&t.coef[9]))
		p4a := archsimd.LoadFloat64x4(&t.coef[6]).MulAdd(ra, archsimd.LoadFloat64x4(&t.coef[7]))
		p6a := archsimd.LoadFloat64x4(&t.coef[4]).MulAdd(ra, archsimd.LoadFloat64x4(&t.coef[5]))
		p8a := archsimd.LoadFloat64x4(&t.coef[2]).MulAdd(ra, archsimd.LoadFloat64x4(&t.coef[3]))
		p10a := archsimd.LoadFloat64x4(&t.coef[0]).MulAdd(ra, archsimd.LoadFloat64x4(&t.coef[1]))
		q0a := p2a.MulAdd(r2a, p0a)
		q1a := p6a.MulAdd(r2a, p4a)
		q2a := p10a.MulAdd(r2a, p8a)
		ya := q2a.MulAdd(r4a, q1a).MulAdd(r4a, q0a)
		ya = ya.Mul(ta.AsUint64x4().Add(archsimd.LoadUint64x4(&t.bias)).ShiftLeft(archsimd.LoadUint64x4(&t.shl52)).AsFloat64x4())
		neara := archsimd.LoadInt64x4(&t.marg2).Greater(ya.AsInt64x4().Add(archsimd.LoadInt64x4(&t.shift29)).And(archsimd.LoadInt64x4(&t.mant29)))
		xdb := v.GetHi().ConvertToFloat64()
		tb := xdb.MulAdd(archsimd.LoadFloat64x4(&t.log2e), archsimd.LoadFloat64x4(&t.magic))
		kb := tb.Sub(archsimd.LoadFloat64x4(&t.magic))
		rb := xdb.Sub(kb.Mul(archsimd.LoadFloat64x4(&t.ln2hi))).Sub(kb.Mul(archsimd.LoadFloat64x4(&t.ln2lo)))
		r2b := rb.Mul(rb)
		r4b := r2b.Mul(r2b)
		p0b := archsimd.LoadFloat64x4(&t.coef[10]).MulAdd(rb, archsimd.LoadFloat64x4(&t.coef[11]))
		p2b := archsimd.LoadFloat64x4(&t.coef[8]).MulAdd(rb, archsimd.LoadFloat64x4(&t.coef[9]))
		p4b := archsimd.LoadFloat64x4(&t.coef[6]).MulAdd(rb, archsimd.LoadFloat64x4(&t.coef[7]))
		p6b := archsimd.LoadFloat64x4(&t.coef[4]).MulAdd(rb, archsimd.LoadFloat64x4(&t.coef[5]))
		p8b := archsimd.LoadFloat64x4(&t.coef[2]).MulAdd(rb, archsimd.LoadFloat64x4(&t.coef[3]))
		p10b := archsimd.LoadFloat64x4(&t.coef[0]).MulAdd(rb, archsimd.LoadFloat64x4(&t.coef[1]))
		q0b := p2b.MulAdd(r2b, p0b)
		q1b := p6b.MulAdd(r2b, p4b)
		q2b := p10b.MulAdd(r2b, p8b)
		yb := q2b.MulAdd(r4b, q1b).MulAdd(r4b, q0b)
		yb = yb.Mul(tb.AsUint64x4().Add(archsimd.LoadUint64x4(&t.bias)).ShiftLeft(archsimd.LoadUint64x4(&t.shl52)).AsFloat64x4())
		nearb := archsimd.LoadInt64x4(&t.marg2).Greater(yb.AsInt64x4().Add(archsimd.LoadInt64x4(&t.shift29)).And(archsimd.LoadInt64x4(&t.mant29)))
		fl := (^ok.ToBits() | neara.ToBits() | nearb.ToBits()<<4) &^ uf.ToBits() & valid
		e := v.SetLo(ya.ConvertToFloat32()).SetHi(yb.ConvertToFloat32()).Masked(keep)
		one := archsimd.LoadFloat32x8(&t.one)
		s := av.Mul(one.Div(one.Add(e))).Mul(bv)
		op := (*[8]float32)(unsafe.Pointer(&out[8*g]))
		if st := valid &^ fl; st == 0xff {
			s.Store(op)
		} else {
			s.StoreMasked(op, archsimd.LoadInt32x8(&avx2Masks[st]).ToMask())
		}
		if g&1 == 0 {
			flags[g>>1] = uint16(fl)
		} else {
			flags[g>>1] |= uint16(fl) << 8
		}
		any |= fl
	}
	archsimd.ClearAVXUpperBits()
	return any != 0
}

func vAttnAV8Go(dst, vc []float32, offs []int, maxOff int, att []float32) {
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
		switch {
		case hd-c >= 64:
			vAV64x8(unsafe.Add(d, c*4), unsafe.Add(v, c*4), offs, a)
			c += 64
		case hd-c >= 32:
			vAV32x8(unsafe.Add(d, c*4), unsafe.Add(v, c*4), offs, a)
			c += 32
		default:
			vAV8(unsafe.Add(d, c*4), unsafe.Add(v, c*4), offs, a)
			c += 8
		}
	}
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

func vSum8Go(x []float32) float32 {
	if len(x) < 32 {
		var s float32
		for _, v := range x {
			s += v
		}
		return s
	}
	var out [8]float32
	vSum32(x[:len(x)&^31], &out)
	var s float32
	for _, v := range out {
		s += v
	}
	for _, v := range x[len(x)&^31:] {
		s += v
	}
	return s
}

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

func vMax8Go(x []float32) (float32, bool) {
	if len(x) == 0 {
		return 0, false
	}
	var out [8]float32
	if vMax8(x, &out) {
		return 0, false // a NaN: the caller's scalar loop decides
	}
	m := out[0]
	for _, v := range out[1:] {
		if v > m {
			m = v
		}
	}
	return m, true
}

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
