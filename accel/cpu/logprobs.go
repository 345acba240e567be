package cpu

import (
	"math"
	"math/bits"
)

// The log probabilities (OpLogProbs): per row, the top k (by value, then
// index), the row's maximum (the first of them), the sum of the
// exponentials of the row shifted by it, and the log-softmax of the
// sampled token and of the top k.
//
// A decode step at batch 64 runs this over every row's whole vocabulary,
// and on a small model (stories260K: 512 tokens, a step of about a
// millisecond) it weighs as much as the rest of the sampling: the
// exponentials are float32 (expLP: a degree-6 polynomial, a few float32
// ulps, enough for a log-softmax the API reports to 1e-5), summed in
// float64 in eight lanes (element i into lane i mod 8, each lane in element
// order, the lanes added in a fixed tree), so that the AVX2 kernel
// (logprobs_amd64.go) and the plain Go give the same bits, whatever the
// row's place in the batch. The top k are one set of keys (lpKey) however
// they are found: the plain Go scans the row keeping them in a sorted list,
// the vector path starts the list from the buckets' maxima and looks at
// only the logits that can still enter it (topLPVec).

const (
	lpLog2E = 1.44269504 // float32(log2 e)
	// lpLn2Hi + lpLn2Lo is ln 2; lpLn2Hi has 9 significant bits, so k·lpLn2Hi is
	// exact for |k| < 2^15.
	lpLn2Hi = 0.693359375
	lpLn2Lo = -2.12194440e-4
	// Taylor coefficients 1/n!, n = 6 down to 2.
	lpC6 = 1.0 / 720
	lpC5 = 1.0 / 120
	lpC4 = 1.0 / 24
	lpC3 = 1.0 / 6
	lpC2 = 0.5
	// Below lpExpMin the exponential is taken as 0 (e^-87 = 1.6e-38, a
	// normal float32, against a maximum's 1); above lpExpMax as +Inf.
	lpExpMin = -87
	lpExpMax = 88
)

// expLP is the log probabilities' float32 exponential: 0 below lpExpMin
// and for NaN, +Inf above lpExpMax, else 2^k · e^r with k = round(a·log2 e)
// and r = a - k·ln2 (|r| <= 0.35) by its Taylor polynomial of degree 6
// (evaluated by Estrin's scheme, for the vector kernel's latency),
// within about 4e-7 relative. Every product is rounded on its own (the
// explicit conversions), as the vector kernel's separate multiplies and
// adds do.
func expLP(a float32) float32 {
	if !(a >= lpExpMin) {
		return 0
	}
	if !(a <= lpExpMax) {
		return float32(math.Inf(1))
	}
	kf := float32(math.RoundToEven(float64(float32(a * lpLog2E))))
	r := a - float32(kf*lpLn2Hi)
	r -= float32(kf * lpLn2Lo)
	// Estrin's scheme: (1 + r) + r²·(c2 + c3·r) + r⁴·((c4 + c5·r) + c6·r²).
	r2 := float32(r * r)
	r4 := float32(r2 * r2)
	lo := float32(lpC3*r) + lpC2
	hi := float32(lpC5*r) + lpC4
	hi += float32(lpC6 * r2)
	p := (1 + r) + float32(r2*lo)
	p += float32(r4 * hi)
	return float32(p * math.Float32frombits(uint32(int32(kf)+127)<<23))
}

// sumExpLP is the sum of expLP(x[i] - m): element i into float64 lane
// i mod 8, each lane in element order, the lanes added in a fixed tree.
// The vector kernel takes the whole groups of eight where there is one.
//
//go:norace
func sumExpLP(x []float32, m float32) float64 {
	var acc [8]float64
	i := 0
	if lpVecOn() {
		i = expSumLPVec(x, m, &acc)
	}
	for ; i < len(x); i++ {
		acc[i&7] += float64(expLP(x[i] - m))
	}
	return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]))
}

// lpKey orders a row's logit x at index i as the top k do: by value (-0
// as +0), then by index, lower first, as one unsigned integer; NaN orders
// by its bits (but never passes the threshold's comparison, see topLP).
func lpKey(x float32, i int) uint64 {
	b := math.Float32bits(x + 0) // -0 + 0 is +0
	// Negative: all bits flipped; else the sign bit set (without a branch:
	// the signs of a row's logits are no pattern to predict).
	b ^= uint32(int32(b)>>31) | 1<<31
	return uint64(b)<<32 | uint64(^uint32(i))
}

// lpIndex is the index of a key's logit.
func lpIndex(key uint64) int { return int(^uint32(key)) }

// topLP sets best[:k] to the indices of the k largest logits of row,
// largest first, by their lpKeys (equal values by index, lower first):
// with the vector kernels by topLPVec where it applies (marks, of
// (len(row)+63)/64 words, its scratch), else by one scan
// that keeps the best k keys in a sorted list. The k largest keys are one
// set, however they are found, so both give the same indices.
//
//go:norace
func topLP(row []float32, best []int32, keys, marks []uint64) {
	k := len(best)
	keys = keys[:k]
	if !(lpVecOn() && topLPVec(row, keys, marks)) {
		for i, x := range row {
			if key := lpKey(x, i); i < k || key > keys[k-1] {
				lpInsert(keys, key, min(i, k-1))
			}
		}
	}
	for j, key := range keys {
		best[j] = int32(lpIndex(key))
	}
}

// lpInsert puts key into the sorted keys[:n+1] (keys[:n] the list, keys[n]
// the entry key replaces), behind the entries it does not beat.
func lpInsert(keys []uint64, key uint64, n int) {
	j := n
	for j > 0 && key > keys[j-1] {
		keys[j] = keys[j-1]
		j--
	}
	keys[j] = key
}

// lpBuckets is how many buckets topLPVec's first pass takes the maxima of.
const lpBuckets = 32

// topLPVec is the top k's fast path, for rows without NaN of at least
// 2·lpBuckets logits and k <= lpBuckets (false, and nothing written,
// otherwise). A first pass (vector) finds the largest logit of each bucket
// (logit i in bucket i mod lpBuckets) and whether the row holds a NaN; the
// buckets' maxima are ranked among themselves (vector: each one's rank is
// how many beat it, by value then index), and the k best are the list,
// whose last entry is then a lower bound of the row's k-th largest (k of
// the row's logits are at least it). A second pass (vector) marks the
// logits at least that threshold that are no bucket's maximum (those were
// all ranked); each is compared again against the current list (the
// threshold only rises), as the scalar scan would.
//
//go:norace
func topLPVec(row []float32, keys []uint64, marks []uint64) bool {
	k := len(keys)
	if k > lpBuckets || len(row) < 2*lpBuckets {
		return false
	}
	var bv [lpBuckets]float32
	var bi [lpBuckets]int32
	n := bucketMaxLPVec(row, &bv, &bi)
	if n < 0 {
		return false // a NaN
	}
	for i := n; i < len(row); i++ {
		x := row[i]
		if x != x {
			return false
		}
		if j := i % lpBuckets; x > bv[j] {
			bv[j], bi[j] = x, int32(i)
		}
	}
	var beaten [lpBuckets]uint32
	rankLPVec(&bv, &bi, &beaten)
	// The ranks are 0 to lpBuckets-1, each once (the keys differ by
	// index): every entry of all is written, without a branch.
	var all [lpBuckets]uint64
	for j, b := range beaten {
		all[bits.OnesCount32(b)&(lpBuckets-1)] = lpKey(bv[j], int(bi[j]))
	}
	copy(keys, all[:k])
	th := row[lpIndex(keys[k-1])]
	marks = marks[:(len(row)+63)/64]
	atLeastLPVec(row, th, &bi, marks)
	for w, m := range marks {
		for ; m != 0; m &= m - 1 {
			i := 64*w + bits.TrailingZeros64(m)
			if x := row[i]; x >= th {
				if key := lpKey(x, i); key > keys[k-1] {
					lpInsert(keys, key, k-1)
					th = row[lpIndex(keys[k-1])]
				}
			}
		}
	}
	return true
}

// runLogProbs: per row, the top k (topLP), the log-softmax against the
// first of them, the row's maximum, and the sum of its exponentials
// (sumExpLP): the sampled token's and the top k's.
//
//go:norace
func runLogProbs(c *rcall, lo, hi int, kc *kctx) {
	vals, ids, logits, toks := c.o[0].f32(), c.o[1].i32(), c.o[2].f32(), c.o[3].i32()
	v, k := c.o[2].cols, c.i[0]
	// The list is worker-local, so the outputs are only ever written whole;
	// allocated once per call, not per row.
	var ibuf [32]int32
	var kbuf [32]uint64
	best, keys := ibuf[:0], kbuf[:0]
	if k > len(ibuf) {
		best, keys = make([]int32, 0, k), make([]uint64, 0, k)
	}
	best, keys = best[:k], keys[:k]
	// The vector top k's marks: on the stack for vocabularies up to 1024,
	// else in the worker's scratch (a step allocates nothing); the scalar
	// path reads none.
	var mbuf [16]uint64
	marks := mbuf[:]
	if w := (v + 63) / 64; w > len(mbuf) && lpVecOn() {
		if kc == nil {
			kc = &kctx{}
		}
		if cap(kc.lpMarks) < w {
			kc.lpMarks = make([]uint64, w)
		}
		marks = kc.lpMarks[:w]
	}
	for r := lo; r < hi; r++ {
		row := logits[r*v : (r+1)*v]
		topLP(row, best, keys, marks)
		// The maximum is the first of the top k.
		m := row[best[0]]
		lse := float32(math.Log(sumExpLP(row, m)))
		lp := func(i int) float32 { return row[i] - m - lse }
		out, top := vals[r*(k+1):(r+1)*(k+1)], ids[r*k:(r+1)*k]
		if t := int(toks[r]); t >= 0 && t < v {
			out[0] = lp(t)
		} else {
			out[0] = float32(math.Inf(-1))
		}
		for j := 0; j < k; j++ {
			top[j] = best[j]
			out[1+j] = lp(int(best[j]))
		}
	}
}
