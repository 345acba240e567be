package cpu

// The attention of a prefill: many queries of one sequence read the same
// keys. runAttention's per-token path transposes eight keys inside the
// scores kernel for every query (its lanes are positions, so that each
// score stays one sequential chain over the head); here the keys of a
// sequence are transposed once per head and piece, and every query of the
// piece reads them with plain loads (vecOps.scoresT). The arithmetic of a
// score, a softmax and a weighted sum is the per-token path's, whatever
// queries share the piece: the order of the work changes, not its chains.

// attnRunMin is the fewest queries of one sequence and head in a piece for
// which the keys are transposed (fewer take the per-token kernels, for the
// same bits). A transposition costs several queries' scores: see
// BenchmarkAttentionRuns. A variable for that benchmark.
var attnRunMin = 8

// hasRun reports whether attnRunMin consecutive tokens share a cache row
// (a prompt's tokens in a prefill step): only then do the runs pay; a
// decode step's tokens, one per sequence, keep the token-major loop, which
// looks a token's cache rows up once for all its heads.
func hasRun(rows []int32) bool {
	n := 0
	for t := range rows {
		if t > 0 && rows[t] == rows[t-1] {
			n++
		} else {
			n = 1
		}
		if n >= attnRunMin {
			return true
		}
	}
	return false
}

// runAttentionRuns is runAttention for kernel sets with scoresT and heads
// of a multiple of eight: for each head of the units [lo, hi) (head-major:
// one head's tokens are contiguous), its tokens in runs of one sequence.
//
//go:norace
func runAttentionRuns(c *rcall, lo, hi int, k *kctx, vk *vecOps) {
	out := c.o[0].f32()
	rows := c.o[4].i32()
	nh, hd := c.i[0], c.i[2]
	T := c.o[1].rows
	if T == 0 {
		return
	}
	for h := lo / T; h < nh && h*T < hi; h++ {
		ta, tb := max(0, lo-h*T), min(T, hi-h*T)
		for t := ta; t < tb; t++ {
			clearF32(out[t*nh*hd+h*hd : t*nh*hd+(h+1)*hd])
		}
		for t := ta; t < tb; {
			te := t + 1
			for te < tb && rows[te] == rows[t] {
				te++
			}
			attnRun(c, h, t, te, k, vk)
			t = te
		}
	}
}

// attnValid is token t's context length and whether its row, position and
// pages are in range (else its output stays zero, as runAttention's).
func attnValid(c *rcall, t int) (int, bool) {
	return attnValidIn(c, t, -1)
}

// attnValidIn is attnValid where good, if not negative, is how many of
// the pages of t's row, from the first, are in range (rowGoodPages): the
// tokens of a run share a row, and walking its page table once for the
// run, not once per token and head, was a tenth of a prefill's attention.
func attnValidIn(c *rcall, t, good int) (int, bool) {
	rows, pos := c.o[4].i32(), c.o[5].i32()
	page := c.i[3]
	nrows, ppr := c.o[6].rows, c.o[6].cols
	r, n := int(rows[t]), int(pos[t])+1
	if r < 0 || r >= nrows || n <= 0 || n > ppr*page {
		return 0, false
	}
	if good < 0 {
		good = rowGoodPages(c, r, (n+page-1)/page)
	}
	if (n+page-1)/page > good {
		return 0, false
	}
	return n, true
}

// rowGoodPages is how many of the first np pages of row r (in range) are
// in the cache, counted from the first up to one that is not.
func rowGoodPages(c *rcall, r, np int) int {
	pages := c.o[6].i32()
	ppr := c.o[6].cols
	npages := c.o[2].rows / c.i[3]
	pt := pages[r*ppr : (r+1)*ppr]
	for p := 0; p < np; p++ {
		if pt[p] < 0 || int(pt[p]) >= npages {
			return p
		}
	}
	return np
}

// attnRun is head h of tokens [t0, t1), all of one cache row.
//
//go:norace
func attnRun(c *rcall, h, t0, t1 int, k *kctx, vk *vecOps) {
	out, q := c.o[0].f32(), c.o[1].f32()
	kc, vc, kh, vh, half := caches(c.o[2], c.o[3])
	rows, pages := c.o[4].i32(), c.o[6].i32()
	nh, nkv, hd, page := c.i[0], c.i[1], c.i[2], c.i[3]
	ppr := c.o[6].cols
	kvd := nkv * hd
	koff := (h / (nh / nkv)) * hd
	scale := sqrt32(float32(hd))
	// ns[t-t0] is token t's context length, 0 where it is not valid.
	if cap(k.ns) < t1-t0 {
		k.ns = make([]int, 0, max(t1-t0, 64))
	}
	ns := k.ns[:t1-t0]
	nmax, valid := 0, 0
	good := 0 // leading pages of the row in range, where the row is
	if r := int(rows[t0]); r >= 0 && r < c.o[6].rows {
		good = rowGoodPages(c, r, ppr)
	}
	for t := t0; t < t1; t++ {
		n, ok := attnValidIn(c, t, good) // n is 0 where !ok
		ns[t-t0] = n
		if ok {
			nmax = max(nmax, n)
			valid++
		}
	}
	if valid == 0 {
		return
	}
	offs, maxOff := cacheOffs(k, pages[int(rows[t0])*ppr:(int(rows[t0])+1)*ppr], nmax, page, kvd)
	if half {
		// This head's rows widened, one after another: offsets of hd.
		kc, vc, maxOff = widenRows(k, kh[koff:], vh[koff:], offs, hd, 0, hd)
		koff = 0
	}
	if maxOff+koff+hd > len(kc) || maxOff+koff+hd > len(vc) {
		panic("cpu: attention: a cache row out of range")
	}
	if valid < attnRunMin {
		// Too few queries to pay for a transposition: the per-token path.
		for t := t0; t < t1; t++ {
			n := ns[t-t0]
			if n == 0 {
				continue
			}
			if cap(k.att) < n {
				k.att = make([]float32, 0, max(n, 1024))
			}
			S := k.att[:n]
			scoresHead(S, q[t*nh*hd+h*hd:t*nh*hd+(h+1)*hd], kc[koff:], offs[:n], maxOff, scale, vk, k)
			softmaxRows(S, 1, n, vk, k)
			avHead(out[t*nh*hd+h*hd:t*nh*hd+(h+1)*hd], vc[koff:], offs[:n], maxOff, S, vk)
		}
		return
	}
	// The keys transposed, in panels of attnPanel positions (the last one
	// narrower): element i of key p is kt[p0*hd+i*w+(p-p0)] in the panel
	// of width w starting at position p0. Positions past nmax are zero
	// (their scores are computed and not used). A panel (12 KiB at heads
	// of 64) stays in L1 while every query of a group reads it; one strided
	// array across all positions would map each element's row to the same
	// few cache sets.
	stride := (nmax + 7) &^ 7
	if cap(k.kt) < hd*stride {
		k.kt = make([]float32, hd*stride)
	}
	kt := k.kt[:hd*stride]
	for p0 := 0; p0 < stride; p0 += attnPanel {
		w := min(attnPanel, stride-p0)
		kp := kt[p0*hd : (p0+w)*hd]
		j := 0
		for ; j+8 <= w && p0+j+8 <= nmax; j += 8 {
			vk.keysT8(kp[j:], w, kc[koff:], offs[p0+j:p0+j+8], hd)
		}
		for ; j < w; j++ {
			if p0+j >= nmax {
				for i := 0; i < hd; i++ {
					kp[i*w+j] = 0
				}
				continue
			}
			o := koff + offs[p0+j]
			for i, v := range kc[o : o+hd] {
				kp[i*w+j] = v
			}
		}
	}
	// The values in rows, so that the weighted sums walk them with one
	// pointer.
	if cap(k.vb) < nmax*hd {
		k.vb = make([]float32, nmax*hd)
	}
	vb := k.vb[:nmax*hd]
	for p, o := range offs {
		copy(vb[p*hd:(p+1)*hd], vc[koff+o:koff+o+hd])
	}
	// Four queries at a time share the softmax's row sums (rowSums4) and
	// each panel of keys and block of values while it is in L1.
	if cap(k.att) < 4*stride {
		k.att = make([]float32, 0, max(4*stride, 1024))
	}
	var grp [4]int // tokens
	var gn [4]int  // their context lengths
	g := 0
	flush := func() {
		attnGroup(c, h, grp[:g], gn[:g], stride, kt, vb, scale, k, vk)
		g = 0
	}
	for t := t0; t < t1; t++ {
		n := ns[t-t0]
		if n == 0 {
			continue
		}
		grp[g], gn[g] = t, n
		g++
		if g == 4 {
			flush()
		}
	}
	if g > 0 {
		flush()
	}
}

// attnPanel is the width in positions of a panel of transposed keys: six
// blocks of eight (vScoresT's widest), three of sixteen (vScoresT16x2's).
const attnPanel = 48

// attnAVBlock is how many positions' values the queries of a group add in
// turn (16 KiB at heads of 64): each output element still adds its
// positions in order, a block after another.
const attnAVBlock = 64

// attnGroup is head h of up to four tokens ts (context lengths ns) of one
// sequence from its transposed keys: each query's scores, its softmax as
// softmaxRows's (maximum, exponentials, a sum in position order, the
// divisions; softmax32 under eight positions), its weighted sum of values.
//
//go:norace
func attnGroup(c *rcall, h int, ts, ns []int, stride int, kt, vb []float32, scale float32, k *kctx, vk *vecOps) {
	out, q := c.o[0].f32(), c.o[1].f32()
	nh, hd := c.i[0], c.i[2]
	att := k.att[:4*stride]
	var S [4][]float32
	var sums [4]float32
	nlong := 0
	for _, n := range ns {
		nlong = max(nlong, n)
	}
	qh := func(t int) []float32 { return q[t*nh*hd+h*hd : t*nh*hd+(h+1)*hd] }
	for p0 := 0; p0 < nlong; p0 += attnPanel {
		w := min(attnPanel, stride-p0)
		kp := kt[p0*hd : (p0+w)*hd]
		for i := 0; i < len(ts); i++ {
			e := min((ns[i]+7)&^7, p0+w)
			if vk.scoresT2 != nil && i+1 < len(ts) {
				// Two queries over the longer one's positions of the
				// panel: the shorter one's scores past its own length
				// (at most the rest of the panel, inside its row of
				// stride) are computed and not used.
				e = max(e, min((ns[i+1]+7)&^7, p0+w))
				if e > p0 {
					vk.scoresT2(att[i*stride+p0:i*stride+e], att[(i+1)*stride+p0:(i+1)*stride+e], kp, w, qh(ts[i]), qh(ts[i+1]), scale)
				}
				i++
				continue
			}
			if e > p0 {
				vk.scoresT(att[i*stride+p0:i*stride+e], kp, w, qh(ts[i]), scale)
			}
		}
	}
	nmin := stride
	for i, n := range ns {
		S[i] = att[i*stride : i*stride+n]
		if n < 8 {
			softmax32(S[i])
			continue
		}
		nmin = min(nmin, n)
		vk.expShift(S[i], rowMax(S[i], vk))
	}
	long := 0 // rows of eight or more positions
	for _, n := range ns {
		if n >= 8 {
			long++
		}
	}
	if long == 4 {
		rs, s4 := &k.rows4, &k.sums4
		*rs = S
		vk.rowSums4(rs, nmin, s4)
		sums = *s4
	}
	for i, n := range ns {
		if n < 8 {
			continue
		}
		s, from := float32(0), 0
		if long == 4 {
			s, from = sums[i], nmin
		}
		for _, e := range S[i][from:] {
			s += e
		}
		vk.div(S[i], s)
	}
	// The weighted sums: queries in pairs over the positions both have
	// (each row of values loaded once for two), then each alone over the
	// rest of its own, block after block.
	dst := func(i int) []float32 { return out[ts[i]*nh*hd+h*hd : ts[i]*nh*hd+(h+1)*hd] }
	for p0 := 0; p0 < nlong; p0 += attnAVBlock {
		for i := 0; i < len(ts); i += 2 {
			e0 := min(ns[i], p0+attnAVBlock)
			if i+1 == len(ts) {
				if e0 > p0 {
					vk.avRows(dst(i), nil, vb[p0*hd:e0*hd], S[i][p0:e0], nil)
				}
				continue
			}
			e1 := min(ns[i+1], p0+attnAVBlock)
			both := min(e0, e1)
			if both > p0 {
				vk.avRows(dst(i), dst(i+1), vb[p0*hd:both*hd], S[i][p0:both], S[i+1][p0:both])
			}
			if s := max(p0, both); e0 > s {
				vk.avRows(dst(i), nil, vb[s*hd:e0*hd], S[i][s:e0], nil)
			}
			if s := max(p0, both); e1 > s {
				vk.avRows(dst(i+1), nil, vb[s*hd:e1*hd], S[i+1][s:e1], nil)
			}
		}
	}
}
