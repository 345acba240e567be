package cpu

import (
	"encoding/binary"
	"math"
	"runtime"
	"sync/atomic"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/quant"
)

// Quantized matmul.
//
// A MatMul whose W is Q8_0, Q4_0, Q4_K or Q6_K runs the way ggml's CPU code
// does: each row of x is first quantized to 8 bits per block (Q8_0's
// numerics for Q8_0 and Q4_0 weights, Q8_K's for the K-quants), then each
// block's product is an exact integer dot product, scaled and added into one
// float32 sum per output in block order:
//
//	Q8_0, Q4_0: acc += (dw·dx) · Σ w·qx                  per block of 32
//	Q4_K:       acc += (d·dx)·Σ_s sc_s·Σ q·qx - (dmin·dx)·Σ_s m_s·Σ qx
//	Q6_K:       acc += (d·dx) · Σ_s sc_s·Σ (q-32)·qx     per super-block
//
// every product and sum rounded to float32 in that order. The integer sums
// are exact whatever order a kernel adds them in, and the float operations
// per output are the same sequence for the plain-Go kernels below (which
// read ggml's blocks as they are) and the vector kernels (which read packed
// panels, quant_amd64.go): the same bits either way, and a row's result
// depends only on that row. Quantizing x costs a pass over it per kernel
// piece (in a replay, per run of pieces on one x: q, k and v share one, as
// do w1 and w3), small beside the product; it is why this is faster than
// widening the weights to float32 (docs/BENCH.md has the figures).

// qacts is one piece's quantized rows of x: qx the 8-bit values (row-major,
// in per row), dx each block's scale, sx the integer sum of each block's
// values (blocks of 32 for Q8_0 numerics; for Q8_K, scales per 256 and sums
// per 16).
type qacts struct {
	qx []int8
	dx []float32
	sx []int32
	// The vector quantization's scratch: each block's extremes and the
	// inverse of its scale (quant_acts_amd64.go).
	ext  []int32
	inv  []float32
	slow []int32 // blocks left to the scalar functions
	// am is Q8_0's largest magnitude per block, okb the blocks whose
	// scales the vector code made (quant_acts_amd64.go's qScales).
	am  []int32
	okb []uint8
	// inv32 is Q8_K's inverse per group of 32, s16 Q8_0's sums per 16.
	inv32 []float32
	s16   []int32
	// xs is each row's values split into nibbles and spread, as the
	// one-row Q8_0 kernel reads them (qSplit, quant_amd64.go).
	xs []int8
	// cp is each row's -31·Σx per 16 in two int16 halves, as the one-row
	// Q6_K kernel reads them (quant_amd64.go's q6Pairs).
	cp []int32
	// held is what qx, dx and sx hold (ok false: nothing known), and
	// xsFor the type xs is spread for (0: none), for a schedule's matmul
	// marked to reuse them (kctx.reuseActs).
	held  actsKey
	xsFor accel.DType
	// xsVNNI: xs is interleaved for the VNNI kernels
	// (quant_vnni_amd64.go), not spread for the AVX2 ones.
	xsVNNI bool
}

// actsKey names a quantization of x: its rows [t0, t1) of in columns at
// x, in Q8_K numerics or not.
type actsKey struct {
	x          *byte
	in, t0, t1 int
	k, ok      bool
}

// forget says a holds nothing known.
func (a *qacts) forget() { a.held.ok, a.xsFor = false, 0 }

// quantRowSplitMin is the number of rows from which a Q8_0 or Q4_0 MatMul
// is split by rows whatever the size of W. Every piece quantizes its own
// rows of x: split by panels, each of the pieces (eight in an eager launch,
// one per worker in a replay) quantized all of them, and x's Q8_0 numerics
// (an f16 scale per 32 values) quantize several times slower than the
// K-quants' Q8_K (BenchmarkQuantizeActs). With this many rows the product
// is compute-bound, so that each worker reading all of W (from the shared
// cache, mostly) costs little. The K-quants keep the panel split: their
// quantization is cheap, and the eight eager pieces balance the two workers
// better on a loaded machine (Q4_K_M's 512-token prefill was slower split
// by rows in two runs of docs/BENCH.md's comparison).
const quantRowSplitMin = 32

// kRowSplitMax is the most rows of x for which a K-quant MatMul (from
// quantRowSplitMin rows) splits by rows too: a decode step of many
// sequences. Split by panels, its nine phases per layer (a barrier after
// each matmul and each elementwise kernel between) left the workers
// uneven by 22 ms of CPU time in a 151 ms 110M Q4_K_M step at 64 rows
// (REPRISE_CPU_SCHEDULE_TRACE's crit cpu against each worker's), more than
// each worker widening every panel for its 32 rows costs (split by rows:
// two phases per layer, crit cpu 9% less in three alternating pairs); a
// prefill's many rows keep the panel split.
const kRowSplitMax = 64

// quantRowSplit reports whether c is a quantized MatMul split by rows
// whatever the size of W.
func quantRowSplit(c *rcall) bool {
	dt, T := c.o[2].dt, c.o[1].rows
	if kBlocks(dt) {
		return T >= quantRowSplitMin && T <= kRowSplitMax
	}
	return (dt == accel.Q8_0 || dt == accel.Q4_0) && T >= quantRowSplitMin
}

// quantVec: the quantized matmul's vector kernels are on (quant_amd64.go
// sets it where the build and CPU have them; tests turn it off).
var quantVec atomic.Bool

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// kBlocks reports whether dt quantizes x with Q8_K numerics (K-quants).
func kBlocks(dt accel.DType) bool { return dt == accel.Q4_K || dt == accel.Q6_K }

// quantizeActs fills a with rows [t0, t1) of x (in columns): on the vector
// kernels where they run (the same bits), else block by block.
//
//go:norace
func quantizeActs(a *qacts, x []float32, in, t0, t1 int, k bool) {
	a.forget()
	n := t1 - t0
	bl := quant.QK
	if k {
		bl = quant.QKK
	}
	a.qx = grow(a.qx, n*in)
	a.dx = grow(a.dx, n*in/bl)
	if k {
		a.sx = grow(a.sx, n*in/16)
	} else {
		a.sx = grow(a.sx, n*in/quant.QK)
	}
	// Rows are whole blocks: the rows are one run of blocks.
	xs := x[t0*in : t1*in]
	if quantVec.Load() && quantActsVec(a, xs, k) {
		return
	}
	for b := 0; b < len(xs)/bl; b++ {
		xb, qb := xs[b*bl:(b+1)*bl], a.qx[b*bl:(b+1)*bl]
		if k {
			a.dx[b] = quantRowQ8K(xb, qb, a.sx[16*b:16*b+16])
		} else {
			a.dx[b], a.sx[b] = quantRowQ8_0(xb, qb)
		}
	}
}

func abs32(x float32) float32 { return math.Float32frombits(math.Float32bits(x) &^ (1 << 31)) }

// quantRowQ8_0 is one block of ggml's quantize_row_q8_0 as its x86 vector
// code computes it: d = amax/127 stored as f16, values round-to-even of
// x·(127/amax). It returns the f16 scale widened and the values' sum.
func quantRowQ8_0(x []float32, q []int8) (float32, int32) {
	var amax float32
	for _, v := range x {
		amax = max(amax, abs32(v))
	}
	d := quant.HalfToFloat(quant.FloatToHalf(amax / 127))
	var id float32
	if amax != 0 {
		id = 127 / amax
	}
	var s int32
	for j, v := range x {
		// |v·id| <= 127.5: NearestInt rounds to even as VROUNDPS does.
		r := int8(quant.NearestInt(v * id))
		q[j] = r
		s += int32(r)
	}
	return d, s
}

// quantRowQ8K is ggml's quantize_row_q8_K_ref for one super-block: the
// float32 scale and the sums of each 16 values.
func quantRowQ8K(x []float32, q []int8, sums []int32) float32 {
	var amax, mx float32
	for _, v := range x {
		if a := abs32(v); a > amax {
			amax, mx = a, v
		}
	}
	if amax == 0 {
		clear(q)
		clear(sums)
		return 0
	}
	iscale := -127 / mx
	for j, v := range x {
		q[j] = int8(min(127, quant.NearestInt(iscale*v)))
	}
	for j := range sums {
		var s int32
		for _, v := range q[16*j : 16*j+16] {
			s += int32(v)
		}
		sums[j] = s
	}
	return 1 / iscale
}

func f16at(b []byte) float32 { return quant.HalfToFloat(binary.LittleEndian.Uint16(b)) }

// runMatMulQuant is a MatMul with quantized W for output panels [lo, hi) of
// rows [t0, t1).
//
//go:norace
func runMatMulQuant(c *rcall, lo, hi, t0, t1 int, k *kctx) {
	y, x, w := c.o[0], c.o[1], c.o[2]
	in, out := x.cols, y.cols
	o0, o1 := lo*matBlock, min(hi*matBlock, out)
	if t1 <= t0 || o1 <= o0 {
		return
	}
	if in == 0 {
		for t := t0; t < t1; t++ {
			clearF32(y.f32()[t*out+o0 : t*out+o1])
		}
		return
	}
	var local qacts
	a := &local
	if k != nil {
		a = &k.qa
	}
	// A replay's matmul right after another on the same x (q, k and v;
	// w1 and w3) reuses its quantization (schedule.go's reuseActs): the
	// same function of the same values, so the same bits.
	key := actsKey{x: &x.b[0], in: in, t0: t0, t1: t1, k: kBlocks(w.dt), ok: true}
	if k == nil || !k.reuseActs || a.held != key {
		quantizeActs(a, x.f32(), in, t0, t1, key.k)
		// Any spread copy (xs) was made from the quantization replaced.
		a.held, a.xsFor = key, 0
	}
	if quantVec.Load() && quantPacks(w.dt) && k != nil && k.d != nil {
		if p := k.d.packFor(c); p != nil {
			ok := runMatMulQuantVec(c, a, p, lo, hi, t0, t1, k)
			runtime.KeepAlive(p) // its panels may lie outside the Go heap (hugepages.go)
			if ok {
				return
			}
		}
	}
	rb := int(w.dt.RowBytes(in))
	yf := y.f32()
	for t := t0; t < t1; t++ {
		r := t - t0
		qx := a.qx[r*in : (r+1)*in]
		for o := o0; o < o1; o++ {
			wr := w.b[o*rb : (o+1)*rb]
			var s float32
			switch w.dt {
			case accel.Q8_0:
				s = dotQ8_0(wr, qx, a.dx[r*in/32:])
			case accel.Q4_0:
				s = dotQ4_0(wr, qx, a.dx[r*in/32:])
			case accel.Q4_K:
				s = dotQ4_K(wr, qx, a.dx[r*in/256:], a.sx[r*in/16:])
			case accel.Q6_K:
				s = dotQ6_K(wr, qx, a.dx[r*in/256:])
			}
			yf[t*out+o] = s
		}
	}
}

// The plain-Go block dot products over ggml's own layout (quant's
// dequantize_row_* says where each value lives).

func dotQ8_0(w []byte, qx []int8, dx []float32) float32 {
	var acc float32
	for b := 0; b < len(qx)/32; b++ {
		blk := w[b*34 : b*34+34]
		var s int32
		for j := 0; j < 32; j++ {
			s += int32(int8(blk[2+j])) * int32(qx[b*32+j])
		}
		acc += float32(f16at(blk)*dx[b]) * float32(s)
	}
	return acc
}

func dotQ4_0(w []byte, qx []int8, dx []float32) float32 {
	var acc float32
	for b := 0; b < len(qx)/32; b++ {
		blk := w[b*18 : b*18+18]
		xb := qx[b*32 : b*32+32]
		var s int32
		for j := 0; j < 16; j++ {
			s += (int32(blk[2+j]&0xf) - 8) * int32(xb[j])
			s += (int32(blk[2+j]>>4) - 8) * int32(xb[j+16])
		}
		acc += float32(f16at(blk)*dx[b]) * float32(s)
	}
	return acc
}

func dotQ4_K(w []byte, qx []int8, dx []float32, sums []int32) float32 {
	var acc float32
	for b := 0; b < len(qx)/256; b++ {
		blk := w[b*144 : b*144+144]
		xb := qx[b*256 : b*256+256]
		d, dmin := f16at(blk), f16at(blk[2:])
		var A, B int32
		for s := 0; s < 8; s++ {
			sc, m := quant.ScaleMinK4(s, blk[4:16])
			q := blk[16+32*(s/2) : 16+32*(s/2)+32]
			sh := 4 * uint(s&1)
			var is int32
			for l := 0; l < 32; l++ {
				is += int32((q[l]>>sh)&0xf) * int32(xb[32*s+l])
			}
			A += int32(sc) * is
			B += int32(m) * (sums[b*16+2*s] + sums[b*16+2*s+1])
		}
		acc += float32(float32(d*dx[b])*float32(A)) - float32(float32(dmin*dx[b])*float32(B))
	}
	return acc
}

func dotQ6_K(w []byte, qx []int8, dx []float32) float32 {
	var acc float32
	for b := 0; b < len(qx)/256; b++ {
		blk := w[b*210 : b*210+210]
		xb := qx[b*256 : b*256+256]
		ql, qh, sc := blk[0:128], blk[128:192], blk[192:208]
		var sub [16]int32
		for n := 0; n < 2; n++ {
			for l := 0; l < 32; l++ {
				h := qh[32*n+l]
				e := 128 * n
				q1 := int32(ql[64*n+l]&0xf|(h&3)<<4) - 32
				q2 := int32(ql[64*n+32+l]&0xf|((h>>2)&3)<<4) - 32
				q3 := int32(ql[64*n+l]>>4|((h>>4)&3)<<4) - 32
				q4 := int32(ql[64*n+32+l]>>4|((h>>6)&3)<<4) - 32
				sub[(e+l)/16] += q1 * int32(xb[e+l])
				sub[(e+32+l)/16] += q2 * int32(xb[e+32+l])
				sub[(e+64+l)/16] += q3 * int32(xb[e+64+l])
				sub[(e+96+l)/16] += q4 * int32(xb[e+96+l])
			}
		}
		var A int32
		for s, v := range sub {
			A += int32(int8(sc[s])) * v
		}
		acc += float32(f16at(blk[208:])*dx[b]) * float32(A)
	}
	return acc
}
