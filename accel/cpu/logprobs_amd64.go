//go:build goexperiment.simd && amd64

package cpu

import (
	"math"
	"simd/archsimd"
	"unsafe"
)

// The log probabilities' AVX2 kernels (logprobs.go): 256-bit, run wherever
// a vector kernel set is in use (an AVX-512 CPU has AVX2 too), with the
// plain Go's bits.

// lpVecBuilt: this CPU runs the kernels (the variable shift is AVX2's).
var lpVecBuilt = archsimd.X86.AVX2()

// lpVecOn reports whether the kernels run: built, and a vector set in use
// (REPRISE_CPU_SIMD=0, GOAMD64=v3 builds and the tests' plain-Go modes turn
// them off with the others).
func lpVecOn() bool { return lpVecBuilt && simdOps() != nil }

// expSumLPVec adds expLP(x[i] - m) into acc[i mod 8] for the whole groups
// of eight of x, in element order, and reports how many elements it took.
func expSumLPVec(x []float32, m float32, acc *[8]float64) int {
	n := len(x) &^ 7
	if n == 0 {
		return 0
	}
	vExpSumLP8(unsafe.Pointer(&x[0]), n, m, acc)
	return n
}

// lpConsts are expLP's constants, eight lanes each, for the kernel's loads.
type lpConsts struct {
	log2e, ln2hi, ln2lo, c6, c5, c4, c3, c2, one, lo, hi, inf [8]float32
	bias, shift                                               [8]int32
}

var lpTab = func() (t lpConsts) {
	inf := float32(math.Inf(1))
	for j := 0; j < 8; j++ {
		t.log2e[j], t.ln2hi[j], t.ln2lo[j] = lpLog2E, lpLn2Hi, lpLn2Lo
		t.c6[j], t.c5[j], t.c4[j], t.c3[j], t.c2[j], t.one[j] = lpC6, lpC5, lpC4, lpC3, lpC2, 1
		t.lo[j], t.hi[j], t.inf[j] = lpExpMin, lpExpMax, inf
		t.bias[j], t.shift[j] = 127, 23
	}
	return
}()

// vExpSumLP8 is expLP on eight lanes, operation for operation (the
// rounding to k by VROUNDPS, 2^k from k's bits by a per-lane shift), the
// results widened to float64 and added into two four-lane accumulators,
// lanes 0-3 and 4-7 of each group. n is a multiple of 8.
//
//go:noinline
//go:norace
//go:nocheckptr
func vExpSumLP8(x unsafe.Pointer, n int, m float32, acc *[8]float64) {
	t := &lpTab
	mv := archsimd.BroadcastFloat32x8(m)
	log2e := archsimd.LoadFloat32x8(&t.log2e)
	ln2hi, ln2lo := archsimd.LoadFloat32x8(&t.ln2hi), archsimd.LoadFloat32x8(&t.ln2lo)
	c6, c5, c4 := archsimd.LoadFloat32x8(&t.c6), archsimd.LoadFloat32x8(&t.c5), archsimd.LoadFloat32x8(&t.c4)
	c3, c2, one := archsimd.LoadFloat32x8(&t.c3), archsimd.LoadFloat32x8(&t.c2), archsimd.LoadFloat32x8(&t.one)
	emin, emax, inf := archsimd.LoadFloat32x8(&t.lo), archsimd.LoadFloat32x8(&t.hi), archsimd.LoadFloat32x8(&t.inf)
	bias, shift := archsimd.LoadInt32x8(&t.bias), archsimd.LoadInt32x8(&t.shift)
	a0 := archsimd.LoadFloat64x4((*[4]float64)(unsafe.Pointer(&acc[0])))
	a1 := archsimd.LoadFloat64x4((*[4]float64)(unsafe.Pointer(&acc[4])))
	for i := 0; i < n; i += 8 {
		a := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(x, 4*i))).Sub(mv)
		kf := a.Mul(log2e).RoundToEven()
		r := a.Sub(kf.Mul(ln2hi))
		r = r.Sub(kf.Mul(ln2lo))
		r2 := r.Mul(r)
		r4 := r2.Mul(r2)
		lo := c3.Mul(r).Add(c2)
		hi := c5.Mul(r).Add(c4)
		hi = hi.Add(c6.Mul(r2))
		p := one.Add(r).Add(r2.Mul(lo))
		p = p.Add(r4.Mul(hi))
		p2 := kf.ConvertToInt32().Add(bias).ShiftLeft(shift).AsFloat32x8()
		e := p.Mul(p2).Merge(inf, a.LessEqual(emax)).Masked(a.GreaterEqual(emin))
		a0 = a0.Add(e.GetLo().ConvertToFloat64())
		a1 = a1.Add(e.GetHi().ConvertToFloat64())
	}
	a0.Store((*[4]float64)(unsafe.Pointer(&acc[0])))
	a1.Store((*[4]float64)(unsafe.Pointer(&acc[4])))
	archsimd.ClearAVXUpperBits()
}

// atLeastLPVec sets bit i%64 of marks[i/64] where x[i] >= th and x[i] is
// no bucket's maximum (bi[i mod lpBuckets] is not i), clears the others.
func atLeastLPVec(x []float32, th float32, bi *[lpBuckets]int32, marks []uint64) {
	n := len(x) &^ 7
	clear(marks)
	if n > 0 {
		vAtLeastLP(unsafe.Pointer(&x[0]), n, th, bi, unsafe.Pointer(&marks[0]))
	}
	for i := n; i < len(x); i++ {
		if x[i] >= th && bi[i%lpBuckets] != int32(i) {
			marks[i/64] |= 1 << (i % 64)
		}
	}
}

// vAtLeastLP: n a multiple of 8; marks zeroed. The buckets' lanes of the
// group of eight at g are g mod 32 to g mod 32 + 7; the marks of 32
// logits are made in a register and stored at once.
//
//go:noinline
//go:norace
//go:nocheckptr
func vAtLeastLP(x unsafe.Pointer, n int, th float32, bi *[lpBuckets]int32, marks unsafe.Pointer) {
	tv := archsimd.BroadcastFloat32x8(th)
	idx := archsimd.LoadInt32x8((*[8]int32)(lpLanes[0:8]))
	eight := archsimd.LoadInt32x8(&lpEight)
	b0 := archsimd.LoadInt32x8((*[8]int32)(bi[0:8]))
	b1 := archsimd.LoadInt32x8((*[8]int32)(bi[8:16]))
	b2 := archsimd.LoadInt32x8((*[8]int32)(bi[16:24]))
	b3 := archsimd.LoadInt32x8((*[8]int32)(bi[24:32]))
	g := 0
	for ; g+32 <= n; g += 32 {
		p := unsafe.Add(x, 4*g)
		i1 := idx.Add(eight)
		i2 := i1.Add(eight)
		i3 := i2.Add(eight)
		m0 := archsimd.LoadFloat32x8((*[8]float32)(p)).GreaterEqual(tv).ToBits() &^ idx.Equal(b0).ToBits()
		m1 := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(p, 32))).GreaterEqual(tv).ToBits() &^ i1.Equal(b1).ToBits()
		m2 := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(p, 64))).GreaterEqual(tv).ToBits() &^ i2.Equal(b2).ToBits()
		m3 := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(p, 96))).GreaterEqual(tv).ToBits() &^ i3.Equal(b3).ToBits()
		idx = i3.Add(eight)
		w := uint64(m0) | uint64(m1)<<8 | uint64(m2)<<16 | uint64(m3)<<24
		*(*uint64)(unsafe.Add(marks, 8*(g/64))) |= w << (g % 64)
	}
	// The groups of eight past the last whole 32 (their buckets' lanes are
	// the first groups').
	bs := [3]archsimd.Int32x8{b0, b1, b2}
	for q := 0; g < n; g, q = g+8, q+1 {
		m := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(x, 4*g))).GreaterEqual(tv).ToBits() &^ idx.Equal(bs[q]).ToBits()
		idx = idx.Add(eight)
		*(*uint64)(unsafe.Add(marks, 8*(g/64))) |= uint64(m) << (g % 64)
	}
	archsimd.ClearAVXUpperBits()
}

// lpEight is eight in every lane: the step of vAtLeastLP's indices.
var lpEight = [8]int32{8, 8, 8, 8, 8, 8, 8, 8}

// rankLPVec sets the bits of beaten[i] to the buckets' maxima that come
// before bv[i] in the top k's order: larger, or equal with a lower index.
func rankLPVec(bv *[lpBuckets]float32, bi *[lpBuckets]int32, beaten *[lpBuckets]uint32) {
	vRankLP(bv, bi, beaten)
}

//go:noinline
//go:norace
//go:nocheckptr
func vRankLP(bv *[lpBuckets]float32, bi *[lpBuckets]int32, beaten *[lpBuckets]uint32) {
	v0 := archsimd.LoadFloat32x8((*[8]float32)(bv[0:8]))
	v1 := archsimd.LoadFloat32x8((*[8]float32)(bv[8:16]))
	v2 := archsimd.LoadFloat32x8((*[8]float32)(bv[16:24]))
	v3 := archsimd.LoadFloat32x8((*[8]float32)(bv[24:32]))
	i0 := archsimd.LoadInt32x8((*[8]int32)(bi[0:8]))
	i1 := archsimd.LoadInt32x8((*[8]int32)(bi[8:16]))
	i2 := archsimd.LoadInt32x8((*[8]int32)(bi[16:24]))
	i3 := archsimd.LoadInt32x8((*[8]int32)(bi[24:32]))
	for j := 0; j < lpBuckets; j++ {
		b := archsimd.BroadcastFloat32x8(bv[j])
		c := archsimd.BroadcastInt32x8(bi[j])
		m0 := v0.Greater(b).Or(v0.Equal(b).And(i0.Less(c))).ToBits()
		m1 := v1.Greater(b).Or(v1.Equal(b).And(i1.Less(c))).ToBits()
		m2 := v2.Greater(b).Or(v2.Equal(b).And(i2.Less(c))).ToBits()
		m3 := v3.Greater(b).Or(v3.Equal(b).And(i3.Less(c))).ToBits()
		beaten[j] = uint32(m0) | uint32(m1)<<8 | uint32(m2)<<16 | uint32(m3)<<24
	}
	archsimd.ClearAVXUpperBits()
}

// bucketMaxLPVec sets bv[j] and bi[j] to the largest of x[i], i mod 32 = j
// (x[j] to start with), and its index, over the whole groups of 32 of x
// (at least one), and reports how many elements it took, -1 where one of
// them is NaN.
func bucketMaxLPVec(x []float32, bv *[lpBuckets]float32, bi *[lpBuckets]int32) int {
	n := len(x) &^ (lpBuckets - 1)
	if vBucketMaxLP(unsafe.Pointer(&x[0]), n, bv, bi) {
		return -1
	}
	return n
}

// lpLanes are 0..31, the first group's indices.
var lpLanes = func() (t [lpBuckets]int32) {
	for i := range t {
		t[i] = int32(i)
	}
	return
}()

var lpStep = [8]int32{lpBuckets, lpBuckets, lpBuckets, lpBuckets, lpBuckets, lpBuckets, lpBuckets, lpBuckets}

// vBucketMaxLP: four eight-lane maxima (x > m keeps the first of equals)
// with their indices, and the NaN lanes.
//
//go:noinline
//go:norace
//go:nocheckptr
func vBucketMaxLP(x unsafe.Pointer, n int, bv *[lpBuckets]float32, bi *[lpBuckets]int32) bool {
	m0 := archsimd.LoadFloat32x8((*[8]float32)(x))
	m1 := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(x, 32)))
	m2 := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(x, 64)))
	m3 := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(x, 96)))
	i0 := archsimd.LoadInt32x8((*[8]int32)(lpLanes[0:8]))
	i1 := archsimd.LoadInt32x8((*[8]int32)(lpLanes[8:16]))
	i2 := archsimd.LoadInt32x8((*[8]int32)(lpLanes[16:24]))
	i3 := archsimd.LoadInt32x8((*[8]int32)(lpLanes[24:32]))
	step := archsimd.LoadInt32x8(&lpStep)
	c0, c1, c2, c3 := i0, i1, i2, i3
	nan := m0.IsNaN().ToInt32x8().Or(m1.IsNaN().ToInt32x8()).Or(m2.IsNaN().ToInt32x8()).Or(m3.IsNaN().ToInt32x8())
	for i := lpBuckets; i < n; i += lpBuckets {
		c0, c1, c2, c3 = c0.Add(step), c1.Add(step), c2.Add(step), c3.Add(step)
		p := unsafe.Add(x, 4*i)
		v0 := archsimd.LoadFloat32x8((*[8]float32)(p))
		v1 := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(p, 32)))
		v2 := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(p, 64)))
		v3 := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(p, 96)))
		nan = nan.Or(v0.IsNaN().ToInt32x8()).Or(v1.IsNaN().ToInt32x8()).Or(v2.IsNaN().ToInt32x8()).Or(v3.IsNaN().ToInt32x8())
		g0, g1, g2, g3 := v0.Greater(m0), v1.Greater(m1), v2.Greater(m2), v3.Greater(m3)
		m0, m1, m2, m3 = v0.Merge(m0, g0), v1.Merge(m1, g1), v2.Merge(m2, g2), v3.Merge(m3, g3)
		i0, i1, i2, i3 = c0.Merge(i0, g0), c1.Merge(i1, g1), c2.Merge(i2, g2), c3.Merge(i3, g3)
	}
	m0.Store((*[8]float32)(bv[0:8]))
	m1.Store((*[8]float32)(bv[8:16]))
	m2.Store((*[8]float32)(bv[16:24]))
	m3.Store((*[8]float32)(bv[24:32]))
	i0.Store((*[8]int32)(bi[0:8]))
	i1.Store((*[8]int32)(bi[8:16]))
	i2.Store((*[8]int32)(bi[16:24]))
	i3.Store((*[8]int32)(bi[24:32]))
	isNaN := !nan.IsZero()
	archsimd.ClearAVXUpperBits()
	return isNaN
}
