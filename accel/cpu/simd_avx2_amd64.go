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
		// float32: 12 accumulators in assembly (gen_avx2fma.go); bf16: the
		// largest blocks that fit in the compiler's registers (gen_avx2mm.go).
		blocks:     mmBlocks{f32: [2]int{3, 2}, bf16: [2]int{2, 1}, f32Row: [2]int{1, 3}, bf16Row: [2]int{1, 2}},
		scale:      vScale8Go,
		expShift:   vExpShift8Go,
		div:        vDiv8,
		silu:       vSiLU8Go,
		ropePairs:  vRoPEPairs8,
		ropeHalves: vRoPEHalves8,
		scores:     vScoresGo,
		av:         vAttnAV8Go,
		scoresT:    vScoresT8Go,
		avRows:     vAVRows8Go,
		keysT8:     vKeysT8Go,
		sum:        vSum8Go,
		max:        vMax8Go,
		rowSums4:   vRowSums4Go,
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

// vAttnAV8Go is av on the AVX2 kernels: the positions in chunks of
// avChunk, and for each chunk and piece of the head (64 elements, then 32,
// then 8) the addresses of its rows in an array, so that the kernels load
// a row's vectors at constant offsets from one register (from a cache
// offset, the compiler computes every vector's address with two LEAs).
// Each element's chain continues from chunk to chunk in position order.
func vAttnAV8Go(dst, vc []float32, offs []int, maxOff int, att []float32) {
	hd := len(dst)
	if len(offs) == 0 || hd == 0 {
		return
	}
	if maxOff+hd > len(vc) {
		panic("cpu: attention values: a cache row out of range")
	}
	_ = att[:len(offs)]
	var rows [avChunk]unsafe.Pointer
	d := unsafe.Pointer(&dst[0])
	v := unsafe.Pointer(&vc[0])
	for p0 := 0; p0 < len(offs); p0 += avChunk {
		o := offs[p0:min(p0+avChunk, len(offs))]
		a := unsafe.Pointer(&att[p0])
		for c := 0; c < hd; {
			vcc := unsafe.Add(v, c*4)
			for i, off := range o {
				if off < 0 {
					panic("cpu: attention values: a negative cache offset")
				}
				rows[i] = unsafe.Add(vcc, uintptr(off)*4)
			}
			dc := unsafe.Add(d, c*4)
			switch {
			case hd-c >= 64:
				vAV64x8(dc, &rows, len(o), a)
				c += 64
			case hd-c >= 32:
				vAV32x8(dc, &rows, len(o), a)
				c += 32
			default:
				vAV8x8(dc, &rows, len(o), a)
				c += 8
			}
		}
	}
}

// avChunk is the positions vAttnAV8Go gives its kernels at a time.
const avChunk = 64

// vAV64x8, vAV32x8 and vAV8x8 add att[p] * v_p to 64, 32 or 8 elements of
// dst for every p < n in order, v_p the row at rows[p]: eight, four or one
// eight-lane chains, each element its own chain in the reference's
// position order.
//
// vAV64x8's loop body is two blocks (the test of the row's address between
// them never fails): the compiler schedules each block's loads first, and eight
// accumulators, eight loaded vectors and the broadcast in one block would
// not fit the fifteen registers it allocates (it spilled two accumulators
// per position); four vectors a block fit.
//
//go:noinline
//go:norace
//go:nocheckptr
func vAV64x8(dst unsafe.Pointer, rows *[avChunk]unsafe.Pointer, n int, att unsafe.Pointer) {
	d0 := archsimd.LoadFloat32x8((*[8]float32)(dst))
	d1 := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(dst, 32)))
	d2 := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(dst, 64)))
	d3 := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(dst, 96)))
	d4 := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(dst, 128)))
	d5 := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(dst, 160)))
	d6 := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(dst, 192)))
	d7 := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(dst, 224)))
	for p, v := range rows[:n] {
		a := archsimd.BroadcastUint32x8(*(*uint32)(unsafe.Add(att, p*4))).AsFloat32x8()
		d0 = d0.Add(a.Mul(archsimd.LoadFloat32x8((*[8]float32)(v))))
		d1 = d1.Add(a.Mul(archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(v, 32)))))
		d2 = d2.Add(a.Mul(archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(v, 64)))))
		d3 = d3.Add(a.Mul(archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(v, 96)))))
		if uintptr(v) == 0 {
			panic("cpu: attention values: a nil row")
		}
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
func vAV32x8(dst unsafe.Pointer, rows *[avChunk]unsafe.Pointer, n int, att unsafe.Pointer) {
	d0 := archsimd.LoadFloat32x8((*[8]float32)(dst))
	d1 := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(dst, 32)))
	d2 := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(dst, 64)))
	d3 := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(dst, 96)))
	for p, v := range rows[:n] {
		a := archsimd.BroadcastUint32x8(*(*uint32)(unsafe.Add(att, p*4))).AsFloat32x8()
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

//go:noinline
//go:norace
//go:nocheckptr
func vAV8x8(dst unsafe.Pointer, rows *[avChunk]unsafe.Pointer, n int, att unsafe.Pointer) {
	d0 := archsimd.LoadFloat32x8((*[8]float32)(dst))
	for p, v := range rows[:n] {
		a := archsimd.BroadcastUint32x8(*(*uint32)(unsafe.Add(att, p*4))).AsFloat32x8()
		d0 = d0.Add(a.Mul(archsimd.LoadFloat32x8((*[8]float32)(v))))
	}
	d0.Store((*[8]float32)(dst))
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

// vScoresT8Go is scoresT: the keys of a sequence transposed once
// (attn_runs.go), so that a query's scores load eight positions' elements
// with one load and no shuffles.
func vScoresT8Go(att, kt []float32, width int, q []float32, scale float32) {
	hd, n := len(q), len(att)
	if n == 0 || hd == 0 {
		return
	}
	if n%8 != 0 || n > width || (hd-1)*width+n > len(kt) {
		panic("cpu: attention scores: transposed keys out of range")
	}
	vScoresT(unsafe.Pointer(&att[0]), unsafe.Pointer(&kt[0]), uintptr(width)*4, unsafe.Pointer(&q[0]), hd, n/8, scale)
}

// vScoresT computes nb blocks of eight scores: lane j of block b is
// position 8b+j, summed over the head's elements in order from zero with a
// separate multiply and add (the reference's chain), then divided by
// scale. Six blocks run side by side (six chains hide the add latency; six
// accumulators, six loads and the broadcast fit in the registers), then
// three, then one. The loops keep the form of gen_avx2mm.go's (the test at
// the bottom) so that the compiler schedules them in source order.
//
//go:noinline
//go:norace
//go:nocheckptr
func vScoresT(att, kt unsafe.Pointer, rs uintptr, q unsafe.Pointer, hd, nb int, scale float32) {
	sv := archsimd.BroadcastFloat32x8(scale)
	b := 0
	for ; b+6 <= nb; b += 6 {
		var a0, a1, a2, a3, a4, a5 archsimd.Float32x8
		kp, qp := unsafe.Add(kt, b*32), q
		for i := 0; ; {
			qv := archsimd.BroadcastUint32x8(*(*uint32)(qp)).AsFloat32x8()
			a0 = a0.Add(qv.Mul(archsimd.LoadFloat32x8((*[8]float32)(kp))))
			a1 = a1.Add(qv.Mul(archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(kp, 32)))))
			a2 = a2.Add(qv.Mul(archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(kp, 64)))))
			a3 = a3.Add(qv.Mul(archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(kp, 96)))))
			a4 = a4.Add(qv.Mul(archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(kp, 128)))))
			a5 = a5.Add(qv.Mul(archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(kp, 160)))))
			i++
			if i >= hd {
				break
			}
			kp, qp = unsafe.Add(kp, rs), unsafe.Add(qp, 4)
		}
		o := unsafe.Add(att, b*32)
		a0.Div(sv).Store((*[8]float32)(o))
		a1.Div(sv).Store((*[8]float32)(unsafe.Add(o, 32)))
		a2.Div(sv).Store((*[8]float32)(unsafe.Add(o, 64)))
		a3.Div(sv).Store((*[8]float32)(unsafe.Add(o, 96)))
		a4.Div(sv).Store((*[8]float32)(unsafe.Add(o, 128)))
		a5.Div(sv).Store((*[8]float32)(unsafe.Add(o, 160)))
	}
	for ; b+3 <= nb; b += 3 {
		var a0, a1, a2 archsimd.Float32x8
		kp, qp := unsafe.Add(kt, b*32), q
		for i := 0; ; {
			qv := archsimd.BroadcastUint32x8(*(*uint32)(qp)).AsFloat32x8()
			a0 = a0.Add(qv.Mul(archsimd.LoadFloat32x8((*[8]float32)(kp))))
			a1 = a1.Add(qv.Mul(archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(kp, 32)))))
			a2 = a2.Add(qv.Mul(archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(kp, 64)))))
			i++
			if i >= hd {
				break
			}
			kp, qp = unsafe.Add(kp, rs), unsafe.Add(qp, 4)
		}
		o := unsafe.Add(att, b*32)
		a0.Div(sv).Store((*[8]float32)(o))
		a1.Div(sv).Store((*[8]float32)(unsafe.Add(o, 32)))
		a2.Div(sv).Store((*[8]float32)(unsafe.Add(o, 64)))
	}
	for ; b < nb; b++ {
		var a0 archsimd.Float32x8
		kp, qp := unsafe.Add(kt, b*32), q
		for i := 0; ; {
			qv := archsimd.BroadcastUint32x8(*(*uint32)(qp)).AsFloat32x8()
			a0 = a0.Add(qv.Mul(archsimd.LoadFloat32x8((*[8]float32)(kp))))
			i++
			if i >= hd {
				break
			}
			kp, qp = unsafe.Add(kp, rs), unsafe.Add(qp, 4)
		}
		a0.Div(sv).Store((*[8]float32)(unsafe.Add(att, b*32)))
	}
	archsimd.ClearAVXUpperBits()
}

// vAVRows8Go is avRows: the head in pieces of 32 elements, then 8; two
// queries at once where d1 is given, so that each row of values is loaded
// once for both.
func vAVRows8Go(d0, d1, vb, a0, a1 []float32) {
	hd, n := len(d0), len(a0)
	if n == 0 || hd == 0 {
		return
	}
	if hd%8 != 0 || len(vb) < n*hd || (d1 != nil && (len(d1) != hd || len(a1) != n)) {
		panic("cpu: attention values: rows out of range")
	}
	vs := uintptr(hd) * 4
	p0, v, q0 := unsafe.Pointer(&d0[0]), unsafe.Pointer(&vb[0]), unsafe.Pointer(&a0[0])
	for c := 0; c < hd; {
		w := 8
		if hd-c >= 32 {
			w = 32
		}
		o := uintptr(c) * 4
		switch {
		case d1 != nil && w == 32:
			vAV2x32(unsafe.Add(p0, o), unsafe.Pointer(&d1[c]), unsafe.Add(v, o), vs, q0, unsafe.Pointer(&a1[0]), n)
		case d1 != nil:
			vAV2x8(unsafe.Add(p0, o), unsafe.Pointer(&d1[c]), unsafe.Add(v, o), vs, q0, unsafe.Pointer(&a1[0]), n)
		case w == 32:
			vAV1x32(unsafe.Add(p0, o), unsafe.Add(v, o), vs, q0, n)
		default:
			vAV1x8(unsafe.Add(p0, o), unsafe.Add(v, o), vs, q0, n)
		}
		c += w
	}
}

// vAV2x32 adds a0[p] * v_p to d0[:32] and a1[p] * v_p to d1[:32] for p < n
// in order, v_p the 32 floats at v + p*vs: eight chains, each row loaded
// once for both queries. The loops here keep gen_avx2mm.go's form (the
// test at the bottom), under which the compiler schedules in source order.
//
//go:noinline
//go:norace
//go:nocheckptr
func vAV2x32(d0, d1, v unsafe.Pointer, vs uintptr, a0, a1 unsafe.Pointer, n int) {
	x0 := archsimd.LoadFloat32x8((*[8]float32)(d0))
	x1 := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(d0, 32)))
	x2 := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(d0, 64)))
	x3 := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(d0, 96)))
	y0 := archsimd.LoadFloat32x8((*[8]float32)(d1))
	y1 := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(d1, 32)))
	y2 := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(d1, 64)))
	y3 := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(d1, 96)))
	for p := 0; ; {
		b0 := archsimd.BroadcastUint32x8(*(*uint32)(a0)).AsFloat32x8()
		b1 := archsimd.BroadcastUint32x8(*(*uint32)(a1)).AsFloat32x8()
		v0 := archsimd.LoadFloat32x8((*[8]float32)(v))
		x0 = x0.Add(b0.Mul(v0))
		y0 = y0.Add(b1.Mul(v0))
		v1 := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(v, 32)))
		x1 = x1.Add(b0.Mul(v1))
		y1 = y1.Add(b1.Mul(v1))
		v2 := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(v, 64)))
		x2 = x2.Add(b0.Mul(v2))
		y2 = y2.Add(b1.Mul(v2))
		v3 := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(v, 96)))
		x3 = x3.Add(b0.Mul(v3))
		y3 = y3.Add(b1.Mul(v3))
		p++
		if p >= n {
			break
		}
		v, a0, a1 = unsafe.Add(v, vs), unsafe.Add(a0, 4), unsafe.Add(a1, 4)
	}
	x0.Store((*[8]float32)(d0))
	x1.Store((*[8]float32)(unsafe.Add(d0, 32)))
	x2.Store((*[8]float32)(unsafe.Add(d0, 64)))
	x3.Store((*[8]float32)(unsafe.Add(d0, 96)))
	y0.Store((*[8]float32)(d1))
	y1.Store((*[8]float32)(unsafe.Add(d1, 32)))
	y2.Store((*[8]float32)(unsafe.Add(d1, 64)))
	y3.Store((*[8]float32)(unsafe.Add(d1, 96)))
	archsimd.ClearAVXUpperBits()
}

// vAV1x32 is vAV2x32 for one query.
//
//go:noinline
//go:norace
//go:nocheckptr
func vAV1x32(d0, v unsafe.Pointer, vs uintptr, a0 unsafe.Pointer, n int) {
	x0 := archsimd.LoadFloat32x8((*[8]float32)(d0))
	x1 := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(d0, 32)))
	x2 := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(d0, 64)))
	x3 := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(d0, 96)))
	for p := 0; ; {
		b0 := archsimd.BroadcastUint32x8(*(*uint32)(a0)).AsFloat32x8()
		x0 = x0.Add(b0.Mul(archsimd.LoadFloat32x8((*[8]float32)(v))))
		x1 = x1.Add(b0.Mul(archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(v, 32)))))
		x2 = x2.Add(b0.Mul(archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(v, 64)))))
		x3 = x3.Add(b0.Mul(archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(v, 96)))))
		p++
		if p >= n {
			break
		}
		v, a0 = unsafe.Add(v, vs), unsafe.Add(a0, 4)
	}
	x0.Store((*[8]float32)(d0))
	x1.Store((*[8]float32)(unsafe.Add(d0, 32)))
	x2.Store((*[8]float32)(unsafe.Add(d0, 64)))
	x3.Store((*[8]float32)(unsafe.Add(d0, 96)))
	archsimd.ClearAVXUpperBits()
}

// vAV2x8 is vAV2x32 for eight elements.
//
//go:noinline
//go:norace
//go:nocheckptr
func vAV2x8(d0, d1, v unsafe.Pointer, vs uintptr, a0, a1 unsafe.Pointer, n int) {
	x0 := archsimd.LoadFloat32x8((*[8]float32)(d0))
	y0 := archsimd.LoadFloat32x8((*[8]float32)(d1))
	for p := 0; ; {
		b0 := archsimd.BroadcastUint32x8(*(*uint32)(a0)).AsFloat32x8()
		b1 := archsimd.BroadcastUint32x8(*(*uint32)(a1)).AsFloat32x8()
		v0 := archsimd.LoadFloat32x8((*[8]float32)(v))
		x0 = x0.Add(b0.Mul(v0))
		y0 = y0.Add(b1.Mul(v0))
		p++
		if p >= n {
			break
		}
		v, a0, a1 = unsafe.Add(v, vs), unsafe.Add(a0, 4), unsafe.Add(a1, 4)
	}
	x0.Store((*[8]float32)(d0))
	y0.Store((*[8]float32)(d1))
	archsimd.ClearAVXUpperBits()
}

// vAV1x8 is vAV2x32 for one query and eight elements.
//
//go:noinline
//go:norace
//go:nocheckptr
func vAV1x8(d0, v unsafe.Pointer, vs uintptr, a0 unsafe.Pointer, n int) {
	x0 := archsimd.LoadFloat32x8((*[8]float32)(d0))
	for p := 0; ; {
		b0 := archsimd.BroadcastUint32x8(*(*uint32)(a0)).AsFloat32x8()
		x0 = x0.Add(b0.Mul(archsimd.LoadFloat32x8((*[8]float32)(v))))
		p++
		if p >= n {
			break
		}
		v, a0 = unsafe.Add(v, vs), unsafe.Add(a0, 4)
	}
	x0.Store((*[8]float32)(d0))
	archsimd.ClearAVXUpperBits()
}

// vKeysT8Go is keysT8.
func vKeysT8Go(dst []float32, width int, kc []float32, offs []int, hd int) {
	if hd == 0 {
		return
	}
	o := offs[:8]
	for _, v := range o {
		if v < 0 || v+hd > len(kc) {
			panic("cpu: attention keys: a cache row out of range")
		}
	}
	if hd%8 != 0 || (hd-1)*width+8 > len(dst) {
		panic("cpu: attention keys: transposed keys out of range")
	}
	vKeysT8(unsafe.Pointer(&dst[0]), uintptr(width)*4, unsafe.Pointer(&kc[0]), o, hd)
}

// vKeysT8 transposes eight key rows eight elements at a time in registers,
// with vScores's shuffles: a 4x4 transpose of each 128-bit half of rows 0-3
// and of rows 4-7, then 128-bit selects; vector i of a step is element c+i
// of the eight keys.
//
//go:noinline
//go:norace
//go:nocheckptr
func vKeysT8(dst unsafe.Pointer, ds uintptr, kc unsafe.Pointer, o []int, hd int) {
	o = o[:8:8]
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
		d := unsafe.Add(dst, uintptr(c)*ds)
		a0.Select128FromPair(0, 2, b0).Store((*[8]float32)(d))
		a1.Select128FromPair(0, 2, b1).Store((*[8]float32)(unsafe.Add(d, ds)))
		a2.Select128FromPair(0, 2, b2).Store((*[8]float32)(unsafe.Add(d, 2*ds)))
		a3.Select128FromPair(0, 2, b3).Store((*[8]float32)(unsafe.Add(d, 3*ds)))
		a0.Select128FromPair(1, 3, b0).Store((*[8]float32)(unsafe.Add(d, 4*ds)))
		a1.Select128FromPair(1, 3, b1).Store((*[8]float32)(unsafe.Add(d, 5*ds)))
		a2.Select128FromPair(1, 3, b2).Store((*[8]float32)(unsafe.Add(d, 6*ds)))
		a3.Select128FromPair(1, 3, b3).Store((*[8]float32)(unsafe.Add(d, 7*ds)))
	}
	archsimd.ClearAVXUpperBits()
}

// vRoPEPairs8 is vRoPEPairs (simd_amd64.go) on 8 lanes.
//
//go:noinline
//go:norace
//go:nocheckptr
func vRoPEPairs8(v, cos2, sin2 []float32) {
	hd := len(cos2)
	sin2 = sin2[:hd]
	for o := 0; o+hd <= len(v); o += hd {
		h := v[o : o+hd]
		i := 0
		for ; i+8 <= hd; i += 8 {
			x := archsimd.LoadFloat32x8Slice(h[i:])
			sw := x.AsInt32x8().PermuteScalarsGrouped(1, 0, 3, 2).AsFloat32x8()
			c := archsimd.LoadFloat32x8Slice(cos2[i:])
			s := archsimd.LoadFloat32x8Slice(sin2[i:])
			x.Mul(c).Add(sw.Mul(s)).StoreSlice(h[i:])
		}
		if i < hd {
			x := archsimd.LoadFloat32x8SlicePart(h[i:])
			sw := x.AsInt32x8().PermuteScalarsGrouped(1, 0, 3, 2).AsFloat32x8()
			c := archsimd.LoadFloat32x8SlicePart(cos2[i:])
			s := archsimd.LoadFloat32x8SlicePart(sin2[i:])
			x.Mul(c).Add(sw.Mul(s)).StoreSlicePart(h[i:])
		}
	}
	archsimd.ClearAVXUpperBits()
}

// vRoPEHalves8 is vRoPEHalves (simd_amd64.go) on 8 lanes.
//
//go:noinline
//go:norace
//go:nocheckptr
func vRoPEHalves8(v, cos, sin []float32) {
	n := len(cos)
	sin = sin[:n]
	for o := 0; o+2*n <= len(v); o += 2 * n {
		a, b := v[o:o+n], v[o+n:o+2*n]
		i := 0
		for ; i+8 <= n; i += 8 {
			x, y := archsimd.LoadFloat32x8Slice(a[i:]), archsimd.LoadFloat32x8Slice(b[i:])
			c, s := archsimd.LoadFloat32x8Slice(cos[i:]), archsimd.LoadFloat32x8Slice(sin[i:])
			x.Mul(c).Sub(y.Mul(s)).StoreSlice(a[i:])
			x.Mul(s).Add(y.Mul(c)).StoreSlice(b[i:])
		}
		if i < n {
			x, y := archsimd.LoadFloat32x8SlicePart(a[i:]), archsimd.LoadFloat32x8SlicePart(b[i:])
			c, s := archsimd.LoadFloat32x8SlicePart(cos[i:]), archsimd.LoadFloat32x8SlicePart(sin[i:])
			x.Mul(c).Sub(y.Mul(s)).StoreSlicePart(a[i:])
			x.Mul(s).Add(y.Mul(c)).StoreSlicePart(b[i:])
		}
	}
	archsimd.ClearAVXUpperBits()
}
