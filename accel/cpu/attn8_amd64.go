//go:build goexperiment.simd && amd64

package cpu

import (
	"math/bits"
	"simd/archsimd"
	"unsafe"
)

// The attention of eight-wide heads with two query heads per KV head (the
// stories260K layout), one token at a time, for a range of whole KV groups.
//
// The general path (scoresHead, softmaxRows, avHead) takes one head at a
// time, and with eight-element heads every step of it is short: a score is
// eight products, so each group of eight positions costs a transpose as
// large as its arithmetic, and a head's output is one eight-lane add chain
// bound by the add latency. This path lays its vectors out across heads
// instead. With G KV heads in the range and P = 16/G positions per block:
//
//   - scores: lane p*G+g of a block holds position p of KV head g. The
//     block's K rows (16 rows of 8: 128 floats, eight vector loads) are
//     transposed by three rounds of two-vector permutes into K_0..K_7
//     (K_i lane p*G+g = k_p[g*8+i]); each of the group's two query heads
//     then sums its products over i in order, from zero, exactly as the
//     reference's dot product does, and divides by the scale;
//   - the scores land in S[p][e*G+g] (position-major, H = 2G heads per
//     position): the softmax's maximum, exponentials and divisions are
//     elementwise with a sixteen-lane pattern of per-head values, and its
//     sums add one position's H heads at a time, in position order;
//   - values: one eight-lane chain per head (its probability broadcast
//     times its KV head's value row, in position order), the range's H
//     heads side by side, so the add latency is paid once per position,
//     not once per head and position.
//
// Every output is the general path's, bit for bit (TestAttn8MatchesGeneral).

// attn8Tabs holds the permute indices for G KV heads in the range.
type attn8Tabs struct {
	il [2][16]uint32  // scores of the two query heads into S[p][e*G+g]
	q  [16][16]uint32 // query row into pattern e*8+i: lane p*G+g = q[(g*2+e)*8+i]
	lg uint           // log2 G
}

// attn8T holds the transpose's indices (the same for every G): stage s, half
// c. Rows r = 0..15 of the block are in vector r/2, lanes (r%2)*8 + col.
var attn8T [3][2][16]uint32

// attn8ByG is indexed by G (2 or 4).
var attn8ByG [5]attn8Tabs

func init() {
	for l := 0; l < 16; l++ {
		for c := 0; c < 2; c++ {
			// Stage 1, from vectors (2a, 2a+1) (rows 4a..4a+3): lane
			// col*4+rr = row 4a+rr, column 4c+col.
			col, rr := l/4, l%4
			attn8T[0][c][l] = uint32((rr/2)*16 + (rr%2)*8 + 4*c + col)
			// Stage 2, from stage-1 vectors of rows 0-3 and 4-7 (or 8-11
			// and 12-15) and one column half: lane cc*8+r8 = row r8, column
			// 2c+cc of the half.
			cc, r8 := l/8, l%8
			attn8T[1][c][l] = uint32((r8/4)*16 + (2*c+cc)*4 + r8%4)
			// Stage 3, from stage-2 vectors of rows 0-7 and 8-15: lane r =
			// row r of column c of the pair.
			attn8T[2][c][l] = uint32((l/8)*16 + c*8 + l%8)
		}
	}
	for _, G := range []int{2, 4} {
		t := &attn8ByG[G]
		t.lg = uint(bits.TrailingZeros(uint(G)))
		P, H := 16/G, 2*G
		for k := 0; k < 2; k++ {
			for l := 0; l < 16; l++ {
				// Output k covers positions k*P/2 .. (k+1)*P/2-1, H lanes
				// each; lane l is head e*G+g of position p.
				p := k*P/2 + l/H
				e, g := (l%H)/G, l%G
				t.il[k][l] = uint32(e*16 + p*G + g)
			}
		}
		for e := 0; e < 2; e++ {
			for i := 0; i < 8; i++ {
				for l := 0; l < 16; l++ {
					t.q[e*8+i][l] = uint32(((l%G)*2+e)*8 + i)
				}
			}
		}
	}
}

// attn8Go is the vector path of one token's attention for the heads
// [h0,h1); it reports false (having written nothing) where it does not apply
// or the scores hold a NaN, and the caller runs the general path. orow and
// qrow are the token's output and query rows (all heads); offs[p] is
// position p's row in kc and vc; k's scratch is reused.
func attn8Go(orow, qrow, kc, vc []float32, offs []int, maxOff, h0, h1, group, hd int, scale float32, k *kctx) bool {
	n := len(offs)
	if hd != 8 || group != 2 || h0%2 != 0 || h1%2 != 0 || n == 0 {
		return false
	}
	G := (h1 - h0) / 2
	if G != 2 && G != 4 {
		return false
	}
	t := &attn8ByG[G]
	H, P := 2*G, 16/G
	g0 := h0 / 2
	kvOff := g0 * 8
	if maxOff+kvOff+16*((G+1)/2) > len(kc) || maxOff+kvOff+16*((G+1)/2) > len(vc) {
		return false // the kernels read G*8 floats of a cache row
	}
	nb := (n + P - 1) / P
	need := nb * P * H // the scores, whole blocks
	if cap(k.att) < need {
		k.att = make([]float32, 0, max(need, 1024))
	}
	S := k.att[:need]
	// Pad the positions to whole blocks with position 0: a copy of a score
	// changes no maximum, and the sums and values stop at n.
	if cap(k.offs) < nb*P {
		o := make([]int, nb*P, max(nb*P, 1024))
		copy(o, offs)
		k.offs, offs = o, o
	}
	po := k.offs[:nb*P]
	if &po[0] != &offs[0] {
		copy(po, offs)
	}
	for p := n; p < nb*P; p++ {
		po[p] = offs[0]
	}
	// Query patterns: qp[e*8+i] lane p*G+g = q[head (g0+g)*2+e][i].
	if cap(k.qb) < 16*16 {
		k.qb = make([]float32, 16*16)
	}
	qp := k.qb[:16*16]
	vQPattern8(unsafe.Pointer(&qp[0]), unsafe.Pointer(&qrow[h0*8]), G, t)
	kb := unsafe.Pointer(&kc[kvOff])
	vb := unsafe.Pointer(&vc[kvOff])
	sv := [16]float32{}
	for i := range sv {
		sv[i] = scale
	}
	vScores8(unsafe.Pointer(&S[0]), kb, po, nb, t, unsafe.Pointer(&qp[0]), &sv)

	// Softmax over positions, per head: S[:n*H] holds n positions.
	var m16 [16]float32
	if vMax(S[:nb*P*H], &m16) {
		return false // a NaN: the general path's scalar maximum decides
	}
	var pat [16]float32
	for hl := 0; hl < H; hl++ {
		m := m16[hl]
		for l := hl + H; l < 16; l += H {
			if m16[l] > m {
				m = m16[l]
			}
		}
		for l := hl; l < 16; l += H {
			pat[l] = m
		}
	}
	vExpShiftPattern(S[:n*H], &pat)
	if H == 4 {
		vColSums4(S[:n*H], &pat)
	} else {
		vColSums8(S[:n*H], &pat)
	}
	for l := H; l < 16; l++ {
		pat[l] = pat[l%H]
	}
	vDivPattern(S[:n*H], &pat)

	out := orow[h0*8 : h1*8]
	if G == 2 {
		vAV8H4(unsafe.Pointer(&out[0]), vb, po[:n], unsafe.Pointer(&S[0]))
	} else {
		vAV8H8(unsafe.Pointer(&out[0]), vb, po[:n], unsafe.Pointer(&S[0]))
	}
	return true
}

// vScores8 computes the scores of nb blocks (see the top of the file):
// S[b*32 ...] receives block b as S[p][e*G+g], P positions of 2G heads.
//
//go:noinline
//go:norace
//go:nocheckptr
func vScores8(S, kc unsafe.Pointer, offs []int, nb int, t *attn8Tabs, qp unsafe.Pointer, scale *[16]float32) {
	lg := uintptr(t.lg)
	P := 16 >> lg
	gm := uintptr(1)<<lg - 1
	_ = offs[nb*P-1]
	sv := archsimd.LoadFloat32x16(scale)
	var zero archsimd.Float32x16
	for b := 0; b < nb; b++ {
		o := offs[b*P:]
		z0 := archsimd.LoadFloat32x16(kRows8(kc, o, 0, lg, gm))
		z1 := archsimd.LoadFloat32x16(kRows8(kc, o, 1, lg, gm))
		z2 := archsimd.LoadFloat32x16(kRows8(kc, o, 2, lg, gm))
		z3 := archsimd.LoadFloat32x16(kRows8(kc, o, 3, lg, gm))
		z4 := archsimd.LoadFloat32x16(kRows8(kc, o, 4, lg, gm))
		z5 := archsimd.LoadFloat32x16(kRows8(kc, o, 5, lg, gm))
		z6 := archsimd.LoadFloat32x16(kRows8(kc, o, 6, lg, gm))
		z7 := archsimd.LoadFloat32x16(kRows8(kc, o, 7, lg, gm))
		// Stage 1: rows 4a..4a+3 by column half.
		u00 := z0.ConcatPermute(z1, archsimd.LoadUint32x16(&attn8T[0][0]))
		u01 := z0.ConcatPermute(z1, archsimd.LoadUint32x16(&attn8T[0][1]))
		u10 := z2.ConcatPermute(z3, archsimd.LoadUint32x16(&attn8T[0][0]))
		u11 := z2.ConcatPermute(z3, archsimd.LoadUint32x16(&attn8T[0][1]))
		u20 := z4.ConcatPermute(z5, archsimd.LoadUint32x16(&attn8T[0][0]))
		u21 := z4.ConcatPermute(z5, archsimd.LoadUint32x16(&attn8T[0][1]))
		u30 := z6.ConcatPermute(z7, archsimd.LoadUint32x16(&attn8T[0][0]))
		u31 := z6.ConcatPermute(z7, archsimd.LoadUint32x16(&attn8T[0][1]))
		// Columns 0-3 (stage-1 vectors u?0), then 4-7 (u?1): stage 2 gives
		// rows 0-7 and 8-15 of a column pair, stage 3 one column of all
		// sixteen rows, and each query head adds its product in column order.
		var a0, a1, wl, wh, k archsimd.Float32x16
		wl, wh = u00.ConcatPermute(u10, archsimd.LoadUint32x16(&attn8T[1][0])), u20.ConcatPermute(u30, archsimd.LoadUint32x16(&attn8T[1][0]))
		k = wl.ConcatPermute(wh, archsimd.LoadUint32x16(&attn8T[2][0]))
		a0 = zero.Add(archsimd.LoadFloat32x16((*[16]float32)(qp)).Mul(k))
		a1 = zero.Add(archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(qp, 512))).Mul(k))
		k = wl.ConcatPermute(wh, archsimd.LoadUint32x16(&attn8T[2][1]))
		a0 = a0.Add(archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(qp, 64))).Mul(k))
		a1 = a1.Add(archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(qp, 576))).Mul(k))
		wl, wh = u00.ConcatPermute(u10, archsimd.LoadUint32x16(&attn8T[1][1])), u20.ConcatPermute(u30, archsimd.LoadUint32x16(&attn8T[1][1]))
		k = wl.ConcatPermute(wh, archsimd.LoadUint32x16(&attn8T[2][0]))
		a0 = a0.Add(archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(qp, 128))).Mul(k))
		a1 = a1.Add(archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(qp, 640))).Mul(k))
		k = wl.ConcatPermute(wh, archsimd.LoadUint32x16(&attn8T[2][1]))
		a0 = a0.Add(archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(qp, 192))).Mul(k))
		a1 = a1.Add(archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(qp, 704))).Mul(k))
		wl, wh = u01.ConcatPermute(u11, archsimd.LoadUint32x16(&attn8T[1][0])), u21.ConcatPermute(u31, archsimd.LoadUint32x16(&attn8T[1][0]))
		k = wl.ConcatPermute(wh, archsimd.LoadUint32x16(&attn8T[2][0]))
		a0 = a0.Add(archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(qp, 256))).Mul(k))
		a1 = a1.Add(archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(qp, 768))).Mul(k))
		k = wl.ConcatPermute(wh, archsimd.LoadUint32x16(&attn8T[2][1]))
		a0 = a0.Add(archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(qp, 320))).Mul(k))
		a1 = a1.Add(archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(qp, 832))).Mul(k))
		wl, wh = u01.ConcatPermute(u11, archsimd.LoadUint32x16(&attn8T[1][1])), u21.ConcatPermute(u31, archsimd.LoadUint32x16(&attn8T[1][1]))
		k = wl.ConcatPermute(wh, archsimd.LoadUint32x16(&attn8T[2][0]))
		a0 = a0.Add(archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(qp, 384))).Mul(k))
		a1 = a1.Add(archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(qp, 896))).Mul(k))
		k = wl.ConcatPermute(wh, archsimd.LoadUint32x16(&attn8T[2][1]))
		a0 = a0.Add(archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(qp, 448))).Mul(k))
		a1 = a1.Add(archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(qp, 960))).Mul(k))
		a0, a1 = a0.Div(sv), a1.Div(sv)
		s := unsafe.Add(S, b*32*4)
		a0.ConcatPermute(a1, archsimd.LoadUint32x16(&t.il[0])).Store((*[16]float32)(s))
		a0.ConcatPermute(a1, archsimd.LoadUint32x16(&t.il[1])).Store((*[16]float32)(unsafe.Add(s, 64)))
	}
	archsimd.ClearAVXUpperBits()
}

// kRows8 is where vScores8's vector j of a block starts: rows 2j and 2j+1,
// position (2j)>>lg, KV heads (2j)&gm and the next, side by side in the
// cache.
//
//go:nocheckptr
func kRows8(kc unsafe.Pointer, o []int, j, lg, gm uintptr) *[16]float32 {
	r := 2 * j
	return (*[16]float32)(unsafe.Add(kc, (uintptr(o[r>>lg])+(r&gm)*8)*4))
}

// vColSums4 and vColSums8 set sums[h] to the sum over positions, in order
// from zero, of S[p][h] for H = 4 or 8 heads per position.
//
//go:noinline
//go:norace
//go:nocheckptr
func vColSums4(S []float32, sums *[16]float32) {
	var s archsimd.Float32x4
	p := unsafe.Pointer(&S[0])
	for i := 0; i+4 <= len(S); i += 4 {
		s = s.Add(archsimd.LoadFloat32x4((*[4]float32)(unsafe.Add(p, i*4))))
	}
	s.Store((*[4]float32)(unsafe.Pointer(sums)))
	archsimd.ClearAVXUpperBits()
}

//go:noinline
//go:norace
//go:nocheckptr
func vColSums8(S []float32, sums *[16]float32) {
	var s archsimd.Float32x8
	p := unsafe.Pointer(&S[0])
	for i := 0; i+8 <= len(S); i += 8 {
		s = s.Add(archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(p, i*4))))
	}
	s.Store((*[8]float32)(unsafe.Pointer(sums)))
	archsimd.ClearAVXUpperBits()
}

// vDivPattern sets x[i] /= s[i%16].
//
//go:noinline
//go:norace
//go:nocheckptr
func vDivPattern(x []float32, s *[16]float32) {
	n := len(x)
	sv := archsimd.LoadFloat32x16(s)
	i := 0
	for ; i+16 <= n; i += 16 {
		archsimd.LoadFloat32x16Slice(x[i:]).Div(sv).StoreSlice(x[i:])
	}
	if i < n {
		archsimd.LoadFloat32x16SlicePart(x[i:]).Div(sv).StoreSlicePart(x[i:])
	}
	archsimd.ClearAVXUpperBits()
}

// vQPattern8 writes the sixteen query patterns of vScores8 from the query
// row of the range's 2G heads (G = 2: 32 floats; G = 4: 64, the lanes of
// KV heads 2 and 3 from the second half).
//
//go:noinline
//go:norace
//go:nocheckptr
func vQPattern8(qp, q unsafe.Pointer, G int, t *attn8Tabs) {
	q0 := archsimd.LoadFloat32x16((*[16]float32)(q))
	q1 := archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(q, 64)))
	if G == 2 {
		for j := 0; j < 16; j++ {
			q0.ConcatPermute(q1, archsimd.LoadUint32x16(&t.q[j])).Store((*[16]float32)(unsafe.Add(qp, j*64)))
		}
	} else {
		q2 := archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(q, 128)))
		q3 := archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(q, 192)))
		hi := archsimd.Mask32x16FromBits(0xcccc) // lanes of KV heads 2, 3
		for j := 0; j < 16; j++ {
			idx := archsimd.LoadUint32x16(&t.q[j])
			q2.ConcatPermute(q3, idx).Merge(q0.ConcatPermute(q1, idx), hi).Store((*[16]float32)(unsafe.Add(qp, j*64)))
		}
	}
	archsimd.ClearAVXUpperBits()
}

// vAV8H4 sets out (four heads of eight, in head order) to the sum over
// positions, in order from zero, of each head's probability times its KV
// head's value row: one eight-lane chain per head, the four side by side.
// S[p] holds the probabilities as S[p][e*2+g] for head 2g+e.
//
//go:noinline
//go:norace
//go:nocheckptr
func vAV8H4(out, vc unsafe.Pointer, offs []int, S unsafe.Pointer) {
	var d0, d1, d2, d3 archsimd.Float32x8
	for p, o := range offs {
		vp := unsafe.Add(vc, uintptr(o)*4)
		a := unsafe.Add(S, p*16)
		v0 := archsimd.LoadFloat32x8((*[8]float32)(vp))
		v1 := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(vp, 32)))
		d0 = d0.Add(archsimd.BroadcastFloat32x8(*(*float32)(a)).Mul(v0))
		d1 = d1.Add(archsimd.BroadcastFloat32x8(*(*float32)(unsafe.Add(a, 8))).Mul(v0))
		d2 = d2.Add(archsimd.BroadcastFloat32x8(*(*float32)(unsafe.Add(a, 4))).Mul(v1))
		d3 = d3.Add(archsimd.BroadcastFloat32x8(*(*float32)(unsafe.Add(a, 12))).Mul(v1))
	}
	d0.Store((*[8]float32)(out))
	d1.Store((*[8]float32)(unsafe.Add(out, 32)))
	d2.Store((*[8]float32)(unsafe.Add(out, 64)))
	d3.Store((*[8]float32)(unsafe.Add(out, 96)))
	archsimd.ClearAVXUpperBits()
}

// vAV8H8 is vAV8H4 for eight heads, S[p][e*4+g].
//
//go:noinline
//go:norace
//go:nocheckptr
func vAV8H8(out, vc unsafe.Pointer, offs []int, S unsafe.Pointer) {
	var d0, d1, d2, d3, d4, d5, d6, d7 archsimd.Float32x8
	for p, o := range offs {
		vp := unsafe.Add(vc, uintptr(o)*4)
		a := unsafe.Add(S, p*32)
		v := archsimd.LoadFloat32x8((*[8]float32)(vp))
		d0 = d0.Add(archsimd.BroadcastFloat32x8(*(*float32)(a)).Mul(v))
		d1 = d1.Add(archsimd.BroadcastFloat32x8(*(*float32)(unsafe.Add(a, 16))).Mul(v))
		v = archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(vp, 32)))
		d2 = d2.Add(archsimd.BroadcastFloat32x8(*(*float32)(unsafe.Add(a, 4))).Mul(v))
		d3 = d3.Add(archsimd.BroadcastFloat32x8(*(*float32)(unsafe.Add(a, 20))).Mul(v))
		v = archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(vp, 64)))
		d4 = d4.Add(archsimd.BroadcastFloat32x8(*(*float32)(unsafe.Add(a, 8))).Mul(v))
		d5 = d5.Add(archsimd.BroadcastFloat32x8(*(*float32)(unsafe.Add(a, 24))).Mul(v))
		v = archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(vp, 96)))
		d6 = d6.Add(archsimd.BroadcastFloat32x8(*(*float32)(unsafe.Add(a, 12))).Mul(v))
		d7 = d7.Add(archsimd.BroadcastFloat32x8(*(*float32)(unsafe.Add(a, 28))).Mul(v))
	}
	d0.Store((*[8]float32)(out))
	d1.Store((*[8]float32)(unsafe.Add(out, 32)))
	d2.Store((*[8]float32)(unsafe.Add(out, 64)))
	d3.Store((*[8]float32)(unsafe.Add(out, 96)))
	d4.Store((*[8]float32)(unsafe.Add(out, 128)))
	d5.Store((*[8]float32)(unsafe.Add(out, 160)))
	d6.Store((*[8]float32)(unsafe.Add(out, 192)))
	d7.Store((*[8]float32)(unsafe.Add(out, 224)))
	archsimd.ClearAVXUpperBits()
}
