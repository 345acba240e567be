//go:build goexperiment.simd && amd64

package cpu

import (
	"math"
	"simd/archsimd"
	"unsafe"

	"github.com/reprise-ml/reprise/quant"
)

// Vector quantization of x (Q8_0 and Q8_K numerics), the same bits as
// quantRowQ8_0 and quantRowQ8K. Two kernels and scalar code between them,
// since a kernel may hold no scalar float arithmetic (simd.go):
//   - qExtremes finds each block's largest value and largest magnitude
//     among its negative values, on the float bits as integers (for a
//     float of either sign its bits as int32 order like its value, and
//     those of -v like -v's; NaNs compare above infinity, so they show);
//   - scalar code turns them into the block's scale and its inverse exactly
//     as the scalar functions do (a block holding a NaN, or for Q8_K one
//     whose largest magnitude occurs with both signs, so that the first in
//     order decides, is left to the scalar function);
//   - qRound rounds x·inverse to the nearest integer by ggml's (and
//     quant.NearestInt's) magic add, takes each value's low byte as the
//     int8 and sums them.

// Byte gathers for qRound: the low byte of each of a vector's 32-bit lanes,
// for vector j of four, to bytes 4j..4j+3 of each 128-bit half (the others
// zero).
var qGather = func() (g [4][32]int8) {
	for j := range g {
		for i := range g[j] {
			g[j][i] = -128
		}
		for h := 0; h < 2; h++ {
			for l := 0; l < 4; l++ {
				g[j][16*h+4*j+l] = int8(4 * l)
			}
		}
	}
	return
}()

// qDwords puts the gathered 32-bit groups in input order: after the gathers
// group g of half h holds inputs 8g+4h..8g+4h+3.
var qDwords = [8]uint32{0, 4, 1, 5, 2, 6, 3, 7}

// quantActsVec quantizes x (whole blocks) into a's qx, dx and sx from
// index 0, reporting false where this build has no vector kernels.
//
//go:norace
func quantActsVec(a *qacts, x []float32, k bool) bool {
	bl := quant.QK
	if k {
		bl = quant.QKK
	}
	nb := len(x) / bl
	if nb == 0 {
		return true
	}
	a.ext = grow(a.ext, 2*nb)
	a.inv = grow(a.inv, nb)
	// Q8_0's scales of each run of eight blocks come from a kernel too
	// (qScales, from qExtremes's largest magnitudes): the scalar code
	// below, two divisions and the float16 rounding per block, was as
	// slow as the rest of the quantization. Blocks it flags (zero,
	// infinite or NaN, or a scale outside float16's normal range) and
	// the last nb%8 take the scalar code.
	var am unsafe.Pointer
	nb8 := 0
	if !k {
		nb8 = nb &^ 7
		a.am = grow(a.am, nb8+1)
		a.okb = grow(a.okb, nb8/8+1)
		am = unsafe.Pointer(&a.am[0])
	}
	qExtremes(unsafe.Pointer(&x[0]), unsafe.Pointer(&a.ext[0]), am, nb, bl/8)
	if nb8 > 0 {
		qScales(am, unsafe.Pointer(&a.dx[0]), unsafe.Pointer(&a.inv[0]), unsafe.Pointer(&a.okb[0]), nb8/8)
	}
	a.slow = a.slow[:0]
	for b := 0; b < nb; b++ {
		if b < nb8 && a.okb[b>>3]>>(b&7)&1 != 0 {
			continue
		}
		p, n := a.ext[2*b], a.ext[2*b+1]
		am := max(p, n)
		if am > 0x7f800000 || (k && p == n && am != 0) {
			// A NaN, or a tie of signs: the scalar function decides.
			a.slow = append(a.slow, int32(b))
			a.inv[b] = 0
			continue
		}
		amax := math.Float32frombits(uint32(am))
		var inv float32
		if !k {
			a.dx[b] = quant.HalfToFloat(quant.FloatToHalf(amax / 127))
			if amax != 0 {
				inv = 127 / amax
			}
		} else if am != 0 {
			mx := amax
			if n > p {
				mx = -amax
			}
			inv = -127 / mx
			a.dx[b] = 1 / inv
		} else {
			a.dx[b] = 0
		}
		if math.IsInf(float64(inv), 0) {
			// A scale so small that its inverse overflows: the values
			// leave int8, where the scalar function's truncation decides.
			a.slow = append(a.slow, int32(b))
			inv = 0
		}
		a.inv[b] = inv
	}
	// One rounding kernel for both: Q8_0's blocks are its groups of 32, a
	// Q8_K super-block's eight groups share its inverse; the clamp at 127
	// changes nothing for Q8_0 (|x·127/amax| rounds to at most 127).
	ng := len(x) / 32
	inv, sums := a.inv, a.sx
	if k {
		a.inv32 = grow(a.inv32, ng)
		for g := range a.inv32 {
			a.inv32[g] = a.inv[g/8]
		}
		inv = a.inv32
	} else {
		a.s16 = grow(a.s16, 2*ng)
		sums = a.s16
	}
	qRound(unsafe.Pointer(&x[0]), unsafe.Pointer(&inv[0]), unsafe.Pointer(&a.qx[0]), unsafe.Pointer(&sums[0]), ng)
	if !k {
		for b := range nb {
			a.sx[b] = a.s16[2*b] + a.s16[2*b+1]
		}
	}
	for _, b := range a.slow {
		xb, qb := x[int(b)*bl:int(b+1)*bl], a.qx[int(b)*bl:int(b+1)*bl]
		if k {
			a.dx[b] = quantRowQ8K(xb, qb, a.sx[16*b:16*b+16])
		} else {
			a.dx[b], a.sx[b] = quantRowQ8_0(xb, qb)
		}
	}
	return true
}

// qExtremes sets ext[2b] to the largest of block b's values as int32 bits
// and ext[2b+1] to the largest of their negations' (nv vectors of 8 per
// block), and where am is not nil am[b] to the larger of the two for the
// blocks of whole runs of eight. Eight blocks at a time, their sixteen vectors of extremes are
// reduced together, by interleaving pairs of them and taking the larger
// (three steps, each halving the vectors), instead of each vector stored
// and its lanes compared as scalars: the reduction was most of this
// function's time, and this a few percent of a batched step's matmuls.
//
//go:noinline
//go:norace
//go:nocheckptr
func qExtremes(x, ext, am unsafe.Pointer, nb, nv int) {
	sign := archsimd.BroadcastInt32x8(math.MinInt32)
	least := sign
	// (Written out, not in helper functions: a vector kernel takes and
	// returns no vectors, simd.go.) Block k of eight: its extremes p and
	// n; an even block's wait in pe and ne for the odd one after it, and
	// the two are interleaved into lanes (e0∨e2, o0∨o2, e1∨e3, o1∨o3) of
	// each 128-bit half (pp, np); two such pairs then into each half's
	// lane j block j's extreme over that half (quads: blocks 0..3 in pq
	// and nq till 4..7's are made), and the two quads into lane j block
	// j's extreme.
	b := 0
	for ; b+8 <= nb; b += 8 {
		var pe, ne, pq, nq, rp, rn archsimd.Int32x8
		for k := 0; k < 8; k++ {
			xb := unsafe.Add(x, uintptr((b+k)*nv)*32)
			p, n := least, least
			for v := 0; v < nv; v++ {
				u := archsimd.LoadInt32x8((*[8]int32)(unsafe.Add(xb, uintptr(v)*32)))
				p = p.Max(u)
				n = n.Max(u.Xor(sign))
			}
			if k%2 == 0 {
				pe, ne = p, n
				continue
			}
			pp := pe.InterleaveLoGrouped(p).Max(pe.InterleaveHiGrouped(p)).AsInt64x4()
			np := ne.InterleaveLoGrouped(n).Max(ne.InterleaveHiGrouped(n)).AsInt64x4()
			if k%4 == 1 {
				pq, nq = pp.AsInt32x8(), np.AsInt32x8()
				continue
			}
			p64, n64 := pq.AsInt64x4(), nq.AsInt64x4()
			pq = p64.InterleaveLoGrouped(pp).AsInt32x8().Max(p64.InterleaveHiGrouped(pp).AsInt32x8())
			nq = n64.InterleaveLoGrouped(np).AsInt32x8().Max(n64.InterleaveHiGrouped(np).AsInt32x8())
			if k == 3 {
				rp, rn = pq, nq
			}
		}
		rp, rn = rp.Select128FromPair(0, 2, pq).Max(rp.Select128FromPair(1, 3, pq)), rn.Select128FromPair(0, 2, nq).Max(rn.Select128FromPair(1, 3, nq))
		// (p, n) pairs in block order.
		lo, hi := rp.InterleaveLoGrouped(rn), rp.InterleaveHiGrouped(rn)
		e := unsafe.Add(ext, 8*b)
		lo.Select128FromPair(0, 2, hi).Store((*[8]int32)(e))
		lo.Select128FromPair(1, 3, hi).Store((*[8]int32)(unsafe.Add(e, 32)))
		if am != nil {
			rp.Max(rn).Store((*[8]int32)(unsafe.Add(am, 4*b)))
		}
	}
	var t [8]int32
	for ; b < nb; b++ {
		xb := unsafe.Add(x, uintptr(b*nv)*32)
		p, n := least, least
		for v := 0; v < nv; v++ {
			u := archsimd.LoadInt32x8((*[8]int32)(unsafe.Add(xb, uintptr(v)*32)))
			p = p.Max(u)
			n = n.Max(u.Xor(sign))
		}
		p.Store(&t)
		mp := max(max(t[0], t[1], t[2], t[3]), max(t[4], t[5], t[6], t[7]))
		n.Store(&t)
		mn := max(max(t[0], t[1], t[2], t[3]), max(t[4], t[5], t[6], t[7]))
		*(*int32)(unsafe.Add(ext, 8*b)) = mp
		*(*int32)(unsafe.Add(ext, 8*b+4)) = mn
	}
	archsimd.ClearAVXUpperBits()
}

// qScales is quantActsVec's Q8_0 scales for ng runs of eight blocks from
// their largest magnitudes am (float32 bits): dx = amax/127 rounded to
// float16 and widened, inv = 127/amax, the same divisions as the scalar
// code's (IEEE, correctly rounded either way). The rounding is the scalar
// FloatToHalf's for a float16 normal: ties to even at the 13 bits that
// float16 drops, the carry running into the exponent; HalfToFloat gives
// those bits back as they are. Bit b%8 of ok[b/8] says block b's results
// stand: its scale's exponent is float16's normal range's (so amax is
// neither zero, infinite nor NaN, and inv finite) and rounding left it
// there; the others are the scalar code's.
//
//go:noinline
//go:norace
//go:nocheckptr
func qScales(am, dx, inv, ok unsafe.Pointer, ng int) {
	c127 := archsimd.BroadcastFloat32x8(127)
	half := archsimd.BroadcastInt32x8(0xfff)
	one := archsimd.BroadcastInt32x8(1)
	keep := archsimd.BroadcastInt32x8(^0x1fff)
	lo := archsimd.BroadcastInt32x8(113<<23 - 1) // 2^-14 less one ulp: float16's least normal
	hi := archsimd.BroadcastInt32x8(0x47800000)  // 65536: float16's overflow
	for g := 0; g < ng; g++ {
		amax := archsimd.LoadInt32x8((*[8]int32)(unsafe.Add(am, 32*g))).AsFloat32x8()
		d := amax.Div(c127).AsInt32x8()
		r := d.Add(half).Add(d.ShiftAllRight(13).And(one)).And(keep)
		r.Store((*[8]int32)(unsafe.Add(dx, 32*g)))
		c127.Div(amax).Store((*[8]float32)(unsafe.Add(inv, 32*g)))
		*(*uint8)(unsafe.Add(ok, g)) = d.Greater(lo).And(hi.Greater(r)).ToBits()
	}
	archsimd.ClearAVXUpperBits()
}

// qRound: the values (at most 127) of ng groups of 32, each group's
// x·inv[g] rounded, and the sums of each 16. Four groups' eight sums are
// reduced together as qExtremes reduces its extremes (adding where it
// takes the larger; the sums are exact in any order), instead of each
// vector of partial sums stored and its lanes added as scalars; the last
// ng%4 groups as before.
//
//go:noinline
//go:norace
//go:nocheckptr
func qRound(x, inv, q, sx unsafe.Pointer, ng int) {
	magic := archsimd.BroadcastFloat32x8(12582912)
	low := archsimd.BroadcastInt32x8(0x7fffff)
	off := archsimd.BroadcastInt32x8(0x400000)
	top := archsimd.BroadcastInt32x8(127)
	g0 := archsimd.LoadInt8x32(&qGather[0])
	g1 := archsimd.LoadInt8x32(&qGather[1])
	g2 := archsimd.LoadInt8x32(&qGather[2])
	g3 := archsimd.LoadInt8x32(&qGather[3])
	perm := archsimd.LoadUint32x8(&qDwords)
	// (Written out: a vector kernel takes and returns no vectors.) Group
	// g's two vectors of partial sums, of its two sixteens, interleaved
	// into lanes (s0, s1, s0, s1) of each 128-bit half (pr); two groups'
	// (the first waiting in u) into each half's lanes (g.s0, g.s1, g+1.s0,
	// g+1.s1) over that half (the first two groups' waiting in w), and two
	// of those into the four groups' eight sums in order.
	g := 0
	var t [8]int32
	for g < ng {
		four := g+4 <= ng
		var u, w archsimd.Int32x8
		for k := 0; k < 4; k++ {
			id := archsimd.BroadcastFloat32x8(*(*float32)(unsafe.Add(inv, uintptr(g)*4)))
			xb := unsafe.Add(x, uintptr(g)*128)
			r0 := archsimd.LoadFloat32x8((*[8]float32)(xb)).Mul(id).Add(magic).AsInt32x8().And(low).Sub(off).Min(top)
			r1 := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(xb, 32))).Mul(id).Add(magic).AsInt32x8().And(low).Sub(off).Min(top)
			r2 := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(xb, 64))).Mul(id).Add(magic).AsInt32x8().And(low).Sub(off).Min(top)
			r3 := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(xb, 96))).Mul(id).Add(magic).AsInt32x8().And(low).Sub(off).Min(top)
			bytes := r0.AsInt8x32().PermuteOrZeroGrouped(g0).Or(r1.AsInt8x32().PermuteOrZeroGrouped(g1)).
				Or(r2.AsInt8x32().PermuteOrZeroGrouped(g2)).Or(r3.AsInt8x32().PermuteOrZeroGrouped(g3))
			bytes.AsInt32x8().Permute(perm).Store((*[8]int32)(unsafe.Add(q, uintptr(g)*32)))
			s0, s1 := r0.Add(r1), r2.Add(r3)
			pr := s0.InterleaveLoGrouped(s1).Add(s0.InterleaveHiGrouped(s1))
			g++
			if !four {
				// One of the last ng%4 groups.
				pr.Store(&t)
				*(*int32)(unsafe.Add(sx, uintptr(2*g-2)*4)) = t[0] + t[2] + t[4] + t[6]
				*(*int32)(unsafe.Add(sx, uintptr(2*g-1)*4)) = t[1] + t[3] + t[5] + t[7]
				break
			}
			if k%2 == 0 {
				u = pr
				continue
			}
			u64, v64 := u.AsInt64x4(), pr.AsInt64x4()
			h := u64.InterleaveLoGrouped(v64).AsInt32x8().Add(u64.InterleaveHiGrouped(v64).AsInt32x8())
			if k == 1 {
				w = h
				continue
			}
			w.Select128FromPair(0, 2, h).Add(w.Select128FromPair(1, 3, h)).Store((*[8]int32)(unsafe.Add(sx, uintptr(2*g-8)*4)))
		}
	}
	archsimd.ClearAVXUpperBits()
}
