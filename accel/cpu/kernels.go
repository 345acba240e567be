package cpu

import (
	"math"
	"runtime"
	"slices"
	"unsafe"

	"github.com/reprise-ml/reprise/accel"
)

// rcall is a Call with its operands resolved to memory.
type rcall struct {
	op accel.Op
	o  [accel.MaxOperands]operand
	i  [4]int
	f  [2]float32
	// pk caches the packed copy of a MatMul's weights (*packEntry), checked
	// for liveness at each use; accessed atomically because replays of one
	// executable may run on two streams.
	pk unsafe.Pointer
}

func resolveCall(c *accel.Call) rcall {
	r := rcall{op: c.Op, i: c.I, f: c.F}
	for k := 0; k < c.Operands(); k++ {
		r.o[k] = resolve(c.T[k])
	}
	return r
}

// Kernel bodies are marked //go:norace: they touch only device memory, whose
// ordering is the streams' and events' job (each synchronises through the
// primitives the race detector does see), and instrumenting every float of
// every matmul makes the instrumented test suite tens of times slower.

// kernel is one Op on the CPU: units splits its work into independent pieces
// (each writing its own outputs, in its own fixed order) and an estimate of
// each piece's cost in multiply-adds; run does pieces [lo, hi) with a
// worker's scratch; foot describes the memory pieces [lo, hi) read and write
// (conservatively), for the static schedules of replays.
type kernel struct {
	units func(c *rcall) (n, cost int)
	run   func(c *rcall, lo, hi int, k *kctx)
	foot  func(c *rcall, lo, hi int, f *footprint)
}

var kernels [accel.NumOps]kernel

// opWrites lists the operands each op writes.
var opWrites [accel.NumOps][]int

func init() {
	kernels[accel.OpFill] = kernel{unitsRows(1), runFill, footFill}
	kernels[accel.OpEmbed] = kernel{unitsRows(1), runEmbed, footEmbed}
	kernels[accel.OpRMSNorm] = kernel{unitsRows(2), runRMSNorm, footRMSNorm}
	kernels[accel.OpMatMul] = kernel{unitsMatMul, runMatMul, footMatMul}
	kernels[accel.OpRoPE] = kernel{unitsRoPE, runRoPE, footRoPE}
	kernels[accel.OpKVWrite] = kernel{unitsKV, runKVWrite, footKV}
	kernels[accel.OpAttention] = kernel{unitsAttention, runAttention, footAttention}
	kernels[accel.OpSiLUMul] = kernel{unitsElem(8), runSiLUMul, footElem}
	kernels[accel.OpAdd] = kernel{unitsElem(1), runAdd, footElem}
	kernels[accel.OpGatherRows] = kernel{unitsRows(1), runGatherRows, footGather}
	kernels[accel.OpArgmax] = kernel{unitsInRows(1), runArgmax, footArgmax}
	kernels[accel.OpSample] = kernel{unitsInRows(16), runSample, footSample}
	kernels[accel.OpRoPETable] = kernel{unitsRoPE, runRoPE, footRoPE}
	kernels[accel.OpAddRow] = kernel{unitsElem(1), runAddRow, footElem}
	kernels[accel.OpLogProbs] = kernel{func(c *rcall) (int, int) { return c.o[2].rows, c.o[2].cols * 8 }, runLogProbs, footLogProbs}
	for op := accel.Op(1); int(op) < accel.NumOps; op++ {
		c := accel.Call{Op: op}
		opWrites[op] = c.Writes()
	}
}

// kctx is what a kernel piece runs with: the device and the scratch of the
// goroutine running it (each pool worker and each stream has its own, so
// kernels never allocate in steady state).
type kctx struct {
	d        *Device
	att      []float32 // attention scores
	offs     []int     // attention: each position's row offset in the cache
	qb       []float32 // attention: the query broadcast for the vector kernel
	kt       []float32 // attention: a sequence's keys transposed (attn_runs.go)
	vb       []float32 // attention: a sequence's values in rows (attn_runs.go)
	ns       []int     // attention: a run's context lengths (attn_runs.go)
	kw, vw   []float32 // attention over F16 caches: rows widened (half.go)
	offsNext []int     // attention over F16 caches: the next token's offs
	rowv     []float32 // attention: each row's sum
	rows4    [4][]float32
	sums4    [4]float32
	smp      sampleScratch
	rope     []float32 // RoPE frequencies
	ropeCS   ropeAngles
	tail     [12 * panelWidth]float32 // a partial last panel's outputs: up to 12 rows (the VNNI kernels' most)
	qa       qacts                    // quantized matmul: this piece's rows of x, quantized
	qw       []byte                   // quantized matmul: a panel widened for many rows (quant_rows_amd64.go)
	lpMarks  []uint64                 // log probabilities: the vector top k's marks (logprobs.go)
	zeros    []float32                // penalties: an all-zero bias row, never written (penalties.go)

	// reuseActs: the schedule item running says that the item before it
	// on this goroutine was a quantized matmul reading the same rows of
	// the same x, which nothing has written since: qa's quantization of
	// them still holds (schedule.go's reusesActs).
	reuseActs bool
}

// splitMin is the work (in multiply-adds) below which an eager kernel runs on
// one thread: splitting costs a few microseconds of hand-off.
const splitMin = 1 << 15

// noteWrites tells the packed-weight cache that c is about to write its
// outputs.
func (d *Device) noteWrites(c *rcall) {
	for _, i := range opWrites[c.op] {
		o := &c.o[i]
		if o.m != nil && o.m.packs.Load() != nil {
			d.packs.written(o.m, o.off, int64(len(o.b)))
		}
	}
}

// exec runs one resolved call eagerly, splitting it across the workers when
// it is large enough (fork/join per kernel).
func (d *Device) exec(c *rcall, k *kctx) {
	kn := &kernels[c.op]
	n, cost := kn.units(c)
	if n <= 0 {
		return
	}
	d.noteWrites(c)
	if d.threads <= 1 || n == 1 || n*cost < splitMin {
		kn.run(c, 0, n, k)
		return
	}
	chunks := min(n, d.threads*4)
	switch {
	case c.op == accel.OpMatMul && matRowSplit(c):
		chunks = min(n, d.threads) // each chunk reads every weight
	case c.op == accel.OpAttention:
		// Heads cost alike, and a chunk of whole KV groups (not one head)
		// lets the vector path lay its lanes across the group's heads, as
		// the replay schedule's halves do.
		chunks = min(n, d.threads)
	}
	d.work.run(c, kn.run, n, chunks, k)
}

// units over the rows of operand 0, each costing perElem × its columns.
func unitsRows(perElem int) func(c *rcall) (int, int) {
	return func(c *rcall) (int, int) { return c.o[0].rows, c.o[0].cols * perElem }
}

// units over the rows of operand 1 (reductions whose output is one per row).
func unitsInRows(perElem int) func(c *rcall) (int, int) {
	return func(c *rcall) (int, int) { return c.o[1].rows, c.o[1].cols * perElem }
}

const flatChunk = 4096

// rowSplitMin is the number of tokens from which kernels split their work by
// token (rows) rather than across outputs: with many rows every worker's
// share of a matmul is compute-bound, a worker then reads every weight (from
// cache, or twice from memory, which costs less than the compute), and a
// whole layer's kernels up to the attention keep their data with the worker
// that made it, without barriers and without two workers writing the two
// halves of one row (false sharing of the cache line in the middle). Below
// it, a step is bound by reading the weights, which are split instead.
const rowSplitMin = 16

func rowSplit(T int) bool { return T >= rowSplitMin }

// span walks the (token, head range) pairs units [lo, hi) cover, units being
// (token, head) pairs of T tokens and H heads: token-major (u = t*H + h)
// when tm, else head-major (u = h*T + t).
type span struct {
	lo, hi, T, H int
	tm           bool
	t            int
}

func (s *span) next() (t, h0, h1 int, ok bool) {
	for ; s.t < s.T; s.t++ {
		t = s.t
		if s.tm {
			h0, h1 = max(s.lo-t*s.H, 0), min(s.hi-t*s.H, s.H)
		} else {
			h0, h1 = headRange(s.lo, s.hi, t, s.T)
		}
		if h0 < h1 {
			s.t++
			return t, h0, h1, true
		}
		if s.tm && t*s.H >= s.hi {
			break
		}
	}
	return 0, 0, 0, false
}

// elemShape is how an elementwise call splits: when its operands share one
// shape, by bands of 16 columns over every row (few rows: they line up with
// the matmul panels that produce and consume them) or by rows (many rows,
// as the matmuls then split); otherwise by flat chunks.
func elemShape(c *rcall) (bands, rows bool) {
	a := c.o[0]
	for i, o := range c.o[1:3] {
		if c.op == accel.OpAddRow && i == 1 {
			continue // the row added to every row: any split suits it
		}
		if o.rows != a.rows || o.cols != a.cols {
			return false, false
		}
	}
	if rowSplit(a.rows) {
		return false, true
	}
	return true, false
}

func elemBands(c *rcall) bool { b, _ := elemShape(c); return b }

func unitsElem(perElem int) func(c *rcall) (int, int) {
	return func(c *rcall) (int, int) {
		a := c.o[0]
		bands, rows := elemShape(c)
		switch {
		case bands:
			return (a.cols + panelWidth - 1) / panelWidth, panelWidth * a.rows * perElem
		case rows:
			return a.rows, a.cols * perElem
		}
		n := a.rows * a.cols
		return (n + flatChunk - 1) / flatChunk, flatChunk * perElem
	}
}

// elemSpans describes the elements pieces [lo, hi) cover: n runs, run r
// being elements [r*stride+i0, r*stride+i1).
func elemSpans(c *rcall, lo, hi int) (n, stride, i0, i1 int) {
	a := c.o[0]
	bands, rows := elemShape(c)
	switch {
	case bands:
		return a.rows, a.cols, lo * panelWidth, min(hi*panelWidth, a.cols)
	case rows:
		return 1, 0, lo * a.cols, hi * a.cols
	}
	return 1, 0, lo * flatChunk, min(hi*flatChunk, a.rows*a.cols)
}

//go:norace
func runFill(c *rcall, lo, hi int, _ *kctx) {
	cols := c.o[0].cols
	if c.o[0].dt == accel.I32 {
		v := int32(c.i[0])
		out := c.o[0].i32()[lo*cols : hi*cols]
		for i := range out {
			out[i] = v
		}
		return
	}
	v := c.f[0]
	out := c.o[0].f32()[lo*cols : hi*cols]
	for i := range out {
		out[i] = v
	}
}

// bf16 widens a bfloat16 to float32 exactly.
func bf16(u uint16) float32 { return math.Float32frombits(uint32(u) << 16) }

//go:norace
func runEmbed(c *rcall, lo, hi int, _ *kctx) {
	out, ids := c.o[0].f32(), c.o[2].i32()
	d, vocab := c.o[0].cols, c.o[1].rows
	for t := lo; t < hi; t++ {
		dst := out[t*d : (t+1)*d]
		id := int(ids[t])
		if id < 0 || id >= vocab {
			clearF32(dst)
			continue
		}
		if c.o[1].dt == accel.BF16 {
			src := c.o[1].u16()[id*d : (id+1)*d]
			for j := range dst {
				dst[j] = bf16(src[j])
			}
			continue
		}
		copyF32(dst, c.o[1].f32()[id*d:(id+1)*d])
	}
}

// copyF32 and clearF32 are copy and clear in plain loops: the schedule may
// run a small kernel on every worker at once (each writing the same bits),
// and the race detector, which does not look inside //go:norace kernels,
// still sees the copy and clear builtins.
//
//go:norace
func copyF32(dst, src []float32) {
	src = src[:len(dst)]
	for i := range dst {
		dst[i] = src[i]
	}
}

//go:norace
func clearF32(dst []float32) {
	for i := range dst {
		dst[i] = 0
	}
}

//go:norace
func copyBytes(dst, src []byte) {
	src = src[:len(dst)]
	for i := range dst {
		dst[i] = src[i]
	}
}

// sqrt32 is a correctly rounded float32 square root, as C's sqrtf.
func sqrt32(x float32) float32 { return float32(math.Sqrt(float64(x))) }

// exp32 is expf: the float64 exponential rounded once to float32.
func exp32(x float32) float32 { return float32(math.Exp(float64(x))) }

// runRMSNorm: the sum of squares is one sequential float32 chain per row (the
// reference's order); four rows are summed side by side to hide the add
// latency. The scaling out[j] = w[j] * (s * x[j]) is independent per element
// and runs on the vector kernel where there is one.
//
//go:norace
func runRMSNorm(c *rcall, lo, hi int, _ *kctx) {
	out, x, w := c.o[0].f32(), c.o[1].f32(), c.o[2].f32()
	d := c.o[1].cols
	eps := c.f[0]
	w = w[:d]
	t := lo
	for ; t+4 <= hi; t += 4 {
		s0, s1, s2, s3 := sumSquares4(x[t*d:(t+4)*d], d)
		rmsScale(out[t*d:(t+1)*d], x[t*d:(t+1)*d], w, rmsInv(s0, d, eps))
		rmsScale(out[(t+1)*d:(t+2)*d], x[(t+1)*d:(t+2)*d], w, rmsInv(s1, d, eps))
		rmsScale(out[(t+2)*d:(t+3)*d], x[(t+2)*d:(t+3)*d], w, rmsInv(s2, d, eps))
		rmsScale(out[(t+3)*d:(t+4)*d], x[(t+3)*d:(t+4)*d], w, rmsInv(s3, d, eps))
	}
	for ; t < hi; t++ {
		xr := x[t*d : (t+1)*d]
		var ss float32
		for _, v := range xr {
			ss += float32(v * v)
		}
		rmsScale(out[t*d:(t+1)*d], xr, w, rmsInv(ss, d, eps))
	}
}

func rmsInv(ss float32, d int, eps float32) float32 {
	ss /= float32(d)
	ss += eps
	return 1 / sqrt32(ss)
}

// sumSquares4 is four rows' sequential sums of squares.
//
//go:norace
func sumSquares4(x []float32, d int) (s0, s1, s2, s3 float32) {
	x0, x1, x2, x3 := x[:d], x[d:2*d], x[2*d:3*d], x[3*d:4*d]
	for i, v := range x0 {
		s0 += float32(v * v)
		a := x1[i]
		s1 += float32(a * a)
		b := x2[i]
		s2 += float32(b * b)
		e := x3[i]
		s3 += float32(e * e)
	}
	return
}

// rmsScale sets out[j] = w[j] * (s * x[j]); out may be x.
func rmsScale(out, x, w []float32, s float32) {
	if vk := simdOps(); vk != nil && len(x) >= 16 {
		vk.scale(out, x, w, s)
		return
	}
	rmsScaleGo(out, x, w, s)
}

//go:norace
func rmsScaleGo(out, x, w []float32, s float32) {
	out = out[:len(x)]
	w = w[:len(x)]
	for j, v := range x {
		out[j] = w[j] * float32(s*v)
	}
}

// matBlock is the number of output columns one unit of a matmul computes, for
// every row of x: one packed panel.
const matBlock = panelWidth

// MatMul units are output panels of 16 for every row, or (many rows, and
// weights small enough that every worker reading all of them costs nothing:
// they stay in its cache) rows of every output.
func unitsMatMul(c *rcall) (int, int) {
	o, T := c.o[0].cols, c.o[1].rows
	if matRowSplit(c) {
		return T, o * c.o[1].cols
	}
	return (o + matBlock - 1) / matBlock, matBlock * c.o[1].cols * T
}

// matRowSplitMax is the most weight bytes a MatMul splits by rows.
const matRowSplitMax = 256 << 10

func matRowSplit(c *rcall) bool {
	return rowSplit(c.o[1].rows) && (len(c.o[2].b) <= matRowSplitMax || quantRowSplit(c))
}

// matUnits is the panels and rows units [lo, hi) of a MatMul cover.
func matUnits(c *rcall, lo, hi int) (p0, p1, t0, t1 int) {
	o, T := c.o[0].cols, c.o[1].rows
	if matRowSplit(c) {
		return 0, (o + matBlock - 1) / matBlock, lo, hi
	}
	return lo, hi, 0, T
}

// runMatMul computes y = x·Wᵀ for output panels [lo, hi). Each output is a
// sequential float32 sum over the input dimension, each term in this
// build's rounding (fused where fusedMatMul: fma32, the vector kernels'
// VFMADD; else the product rounded first), whatever the batch: on the packed vector kernels (one lane per
// output) where W has a packed copy, else on the row-major scalar kernels.
//
//go:norace
func runMatMul(c *rcall, lo, hi int, k *kctx) {
	p0, p1, t0, t1 := matUnits(c, lo, hi)
	if c.o[2].dt.BlockSize() > 1 {
		runMatMulQuant(c, p0, p1, t0, t1, k)
		return
	}
	if k != nil && k.d != nil {
		if p := k.d.packFor(c); p != nil {
			runMatMulPacked(c, p, p0, p1, t0, t1, k)
			runtime.KeepAlive(p) // its panels may lie outside the Go heap (hugepages.go)
			return
		}
	}
	runMatMulRows(c, p0, p1, t0, t1)
}

// runMatMulRows is the scalar kernel over row-major W, for output panels
// [lo, hi) of rows [t0, t1): four outputs summed side by side, four
// independent chains each in the reference order.
//
//go:norace
func runMatMulRows(c *rcall, lo, hi, t0, t1 int) {
	y, x := c.o[0].f32(), c.o[1].f32()
	in, out := c.o[1].cols, c.o[0].cols
	o0, o1 := lo*matBlock, min(hi*matBlock, out)
	if c.o[2].dt == accel.BF16 {
		w := c.o[2].u16()
		for t := t0; t < t1; t++ {
			xr := x[t*in : (t+1)*in]
			yr := y[t*out : (t+1)*out]
			o := o0
			for ; o+4 <= o1; o += 4 {
				yr[o], yr[o+1], yr[o+2], yr[o+3] = dot4BF16(xr, w[o*in:(o+4)*in])
			}
			for ; o < o1; o++ {
				yr[o] = dotBF16(xr, w[o*in:(o+1)*in])
			}
		}
		return
	}
	w := c.o[2].f32()
	for t := t0; t < t1; t++ {
		xr := x[t*in : (t+1)*in]
		yr := y[t*out : (t+1)*out]
		o := o0
		for ; o+4 <= o1; o += 4 {
			yr[o], yr[o+1], yr[o+2], yr[o+3] = dot4(xr, w[o*in:(o+4)*in])
		}
		for ; o < o1; o++ {
			yr[o] = dot(xr, w[o*in:(o+1)*in])
		}
	}
}

// dot4 is four sequential float32 dot products of x with the four rows of
// w in this build's rounding (madd): unfused, dot4Rows; fused, fma32's
// float64 sums inline in a loop
// without calls, tested together (rareSums4), which leaves it at a rare
// step for fma32 on all four chains and then goes on (a call inside the
// loop would spill its values on every step).
//
//go:norace
func dot4(x, w []float32) (s0, s1, s2, s3 float32) {
	n := len(x)
	if !fusedMatMul {
		return dot4Rows(x, w[:n], w[n:2*n], w[2*n:3*n], w[3*n:4*n])
	}
	x, w0, w1, w2, w3 := x[:n], w[:n], w[n:2*n], w[2*n:3*n], w[3*n:4*n]
	for i := 0; i < n; i++ {
		for ; i < n; i++ {
			v := x[i]
			a0, a1, a2, a3 := fmaSum(v, w0[i], s0), fmaSum(v, w1[i], s1), fmaSum(v, w2[i], s2), fmaSum(v, w3[i], s3)
			if rareSums4(math.Float64bits(a0), math.Float64bits(a1), math.Float64bits(a2), math.Float64bits(a3)) {
				break
			}
			s0, s1, s2, s3 = float32(a0), float32(a1), float32(a2), float32(a3)
		}
		if i < n {
			v := x[i]
			s0, s1, s2, s3 = fma32(v, w0[i], s0), fma32(v, w1[i], s1), fma32(v, w2[i], s2), fma32(v, w3[i], s3)
		}
	}
	return
}

// dot4BF16 is dot4 with bf16 rows.
//
//go:norace
func dot4BF16(x []float32, w []uint16) (s0, s1, s2, s3 float32) {
	n := len(x)
	if !fusedMatMul {
		w0, w1, w2, w3 := w[:n], w[n:2*n], w[2*n:3*n], w[3*n:4*n]
		for i, v := range x {
			s0 += float32(v * bf16(w0[i]))
			s1 += float32(v * bf16(w1[i]))
			s2 += float32(v * bf16(w2[i]))
			s3 += float32(v * bf16(w3[i]))
		}
		return
	}
	x, w0, w1, w2, w3 := x[:n], w[:n], w[n:2*n], w[2*n:3*n], w[3*n:4*n]
	for i := 0; i < n; i++ {
		for ; i < n; i++ {
			v := x[i]
			a0, a1, a2, a3 := fmaSum(v, bf16(w0[i]), s0), fmaSum(v, bf16(w1[i]), s1), fmaSum(v, bf16(w2[i]), s2), fmaSum(v, bf16(w3[i]), s3)
			if rareSums4(math.Float64bits(a0), math.Float64bits(a1), math.Float64bits(a2), math.Float64bits(a3)) {
				break
			}
			s0, s1, s2, s3 = float32(a0), float32(a1), float32(a2), float32(a3)
		}
		if i < n {
			v := x[i]
			s0, s1, s2, s3 = fma32(v, bf16(w0[i]), s0), fma32(v, bf16(w1[i]), s1), fma32(v, bf16(w2[i]), s2), fma32(v, bf16(w3[i]), s3)
		}
	}
	return
}

// dot and dotBF16 are one sequential dot product of x with a row of w
// (len(x) long), each term in this build's rounding (madd).
//
//go:norace
func dot(x, w []float32) float32 {
	w = w[:len(x)]
	var s float32
	for i, v := range x {
		s = madd(v, w[i], s)
	}
	return s
}

//go:norace
func dotBF16(x []float32, w []uint16) float32 {
	w = w[:len(x)]
	var s float32
	for i, v := range x {
		s = madd(v, bf16(w[i]), s)
	}
	return s
}

// ropeHeads is a RoPE call's head layout: nq query heads, nk key heads of hd,
// and the query head whose unit also rotates key head g (g*group), so that a
// worker owning whole query heads owns their key heads too.
func ropeHeads(c *rcall) (hd, nq, nk, group int) {
	hd = c.i[0]
	nq, nk = c.o[0].cols/hd, c.o[1].cols/hd
	group = 1
	if nk > 0 && nq >= nk && nq%nk == 0 {
		group = nq / nk
	}
	return
}

// RoPE units are (query head, token) pairs, each with the key head that
// query head owns: head-major (unit u is head u/T of token u%T) so that they
// split into whole heads the way the q and k projections' panels do, or
// token-major (u = t*heads + h) when those split by rows.
func unitsRoPE(c *rcall) (int, int) {
	hd, _, _, _ := ropeHeads(c)
	return ropeUnitHeads(c) * c.o[0].rows, hd * 8
}

func ropeUnitHeads(c *rcall) int {
	_, nq, nk, group := ropeHeads(c)
	if group == 1 {
		return max(nq, nk)
	}
	return nq
}

// headRange is the heads h with unit h*T+t in [lo, hi).
func headRange(lo, hi, t, T int) (int, int) {
	h0 := (lo - t + T - 1) / T
	if lo-t <= 0 {
		h0 = 0
	}
	h1 := (hi - 1 - t) / T
	if hi-1-t < 0 {
		return 0, 0
	}
	return h0, h1 + 1
}

// runRoPE rotates the pairs of every head, q and k alike, by the angle of the
// token's position, in float32 the way the reference does: OpRoPE with the
// frequencies of accel.RoPEFreq, OpRoPETable with its operand's and its
// pair layout. The angles of a token are computed once per piece and shared
// by its heads.
//
//go:norace
func runRoPE(c *rcall, lo, hi int, k *kctx) {
	q, kk, pos := c.o[0].f32(), c.o[1].f32(), c.o[2].i32()
	hd, nq, nk, group := ropeHeads(c)
	T := c.o[0].rows
	qc, kc := c.o[0].cols, c.o[1].cols
	pairs := hd / 2
	if k == nil {
		k = &kctx{}
	}
	if cap(k.rope) < pairs {
		k.rope = make([]float32, pairs)
	}
	freq := k.rope[:pairs]
	halves := false
	if c.op == accel.OpRoPETable {
		copyF32(freq, c.o[3].f32()[:pairs])
		halves = accel.RoPELayout(c.i[1]) == accel.RoPEHalves
	} else {
		theta := c.f[0]
		for i := 0; i < pairs; i++ {
			freq[i] = accel.RoPEFreq(2*i, hd, theta)
		}
	}
	// The vector rotations take runs of whole heads of an even size.
	vk := simdOps()
	vecOK := vk != nil && 2*pairs == hd
	ac := &k.ropeCS
	ac.use(freq, T)
	sp := span{lo: lo, hi: hi, T: T, H: ropeUnitHeads(c), tm: rowSplit(T)}
	for {
		t, h0, h1, ok := sp.next()
		if !ok {
			break
		}
		e := ac.angles(t, pos[t], freq)
		qr, kr := q[t*qc:(t+1)*qc], kk[t*kc:(t+1)*kc]
		// The query heads [h0, h1) and the key heads they own (g with
		// g*group in [h0, h1)), each a run of whole heads.
		q0, q1 := min(h0, nq), min(h1, nq)
		g0, g1 := min((h0+group-1)/group, nk), min((h1+group-1)/group, nk)
		for _, run := range [2][]float32{qr[q0*hd : q1*hd], kr[g0*hd : g1*hd]} {
			switch {
			case len(run) == 0:
			case vecOK && halves && vk.ropeHalves != nil:
				vk.ropeHalves(run, e.cos, e.sin)
			case vecOK && !halves && vk.ropePairs != nil:
				vk.ropePairs(run, e.cos2, e.sin2)
			default:
				for o := 0; o < len(run); o += hd {
					if halves {
						rotateHalves(run[o:o+hd], e.cos, e.sin)
					} else {
						rotateHead(run[o:o+hd], e.cos, e.sin)
					}
				}
			}
		}
	}
}

// ropeAngles keeps a worker's cos and sin of each token's angles, so that
// the layers of a step, which rotate the same positions by the same
// frequencies, compute them once: per token t of a call, the position they
// are for and its ropeEntry (cos, sin, cos2, sin2). An entry is only used
// for the same position and frequencies bit for bit, so the rotation reads
// the values it would compute.
type ropeAngles struct {
	freq []float32 // the frequencies the entries are for
	pos  []int64   // per token: the position of its entry (noAngles: none)
	cs   []float32 // per token: 6*len(freq) values (ropeEntry)
}

// ropeEntry is a token's angles: per pair i, cos[i] and sin[i], and the
// same laid out for the vector rotation of adjacent pairs (vecOps.ropePairs):
// cos2[2i] = cos2[2i+1] = cos[i], sin2[2i] = -sin[i], sin2[2i+1] = sin[i].
type ropeEntry struct{ cos, sin, cos2, sin2 []float32 }

const noAngles = math.MinInt64

// use readies a to hold entries for T tokens at frequencies freq, dropping
// them all where freq differs from the last call's.
func (a *ropeAngles) use(freq []float32, T int) {
	same := len(a.freq) == len(freq)
	for i := 0; same && i < len(freq); i++ {
		same = math.Float32bits(a.freq[i]) == math.Float32bits(freq[i])
	}
	if !same {
		a.freq = append(a.freq[:0], freq...)
	}
	for len(a.pos) < T {
		a.pos = append(a.pos, noAngles)
	}
	if need := len(a.pos) * 6 * len(freq); cap(a.cs) < need {
		a.cs, same = make([]float32, need), false
	} else {
		a.cs = a.cs[:need]
	}
	if !same {
		for i := range a.pos {
			a.pos[i] = noAngles
		}
	}
}

// angles is token t's entry at position p, computed where it is for
// another position.
func (a *ropeAngles) angles(t int, p int32, freq []float32) ropeEntry {
	n := len(freq)
	b := a.cs[t*6*n : (t+1)*6*n]
	e := ropeEntry{cos: b[:n], sin: b[n : 2*n], cos2: b[2*n : 4*n], sin2: b[4*n:]}
	if a.pos[t] == int64(p) {
		return e
	}
	pf := float32(p)
	for i := 0; i < n; i++ {
		val := pf * freq[i]
		cr, ci := float32(math.Cos(float64(val))), float32(math.Sin(float64(val)))
		e.cos[i], e.sin[i] = cr, ci
		e.cos2[2*i], e.cos2[2*i+1] = cr, cr
		e.sin2[2*i], e.sin2[2*i+1] = -ci, ci
	}
	a.pos[t] = int64(p)
	return e
}

//go:norace
func rotateHead(v, fcr, fci []float32) {
	for i := range fcr {
		v0, v1 := v[2*i], v[2*i+1]
		cr, ci := fcr[i], fci[i]
		v[2*i] = float32(v0*cr) - float32(v1*ci)
		v[2*i+1] = float32(v0*ci) + float32(v1*cr)
	}
}

// rotateHalves is rotateHead for pairs (i, i+hd/2).
//
//go:norace
func rotateHalves(v, fcr, fci []float32) {
	n := len(fcr)
	a, b := v[:n], v[n:2*n]
	for i := range fcr {
		v0, v1 := a[i], b[i]
		cr, ci := fcr[i], fci[i]
		a[i] = float32(v0*cr) - float32(v1*ci)
		b[i] = float32(v0*ci) + float32(v1*cr)
	}
}

// KVWrite units are bands of 16 columns of one token: band-major (unit u
// is band u/T of token u%T), so that they split by KV heads, or token-major
// when the projections split by rows.
func kvBands(c *rcall) int {
	return (max(c.o[0].cols, c.o[1].cols) + panelWidth - 1) / panelWidth
}

func unitsKV(c *rcall) (int, int) { return kvBands(c) * c.o[2].rows, 2 * panelWidth }

//go:norace
func runKVWrite(c *rcall, lo, hi int, _ *kctx) {
	k, v, slots := c.o[2].f32(), c.o[3].f32(), c.o[4].i32()
	kc, vc, kh, vh, half := caches(c.o[0], c.o[1])
	kd, vd, nslots := c.o[0].cols, c.o[1].cols, c.o[0].rows
	T, nb := c.o[2].rows, kvBands(c)
	tm := rowSplit(T)
	for u := lo; u < hi; u++ {
		b, t := u/T, u%T
		if tm {
			t, b = u/nb, u%nb
		}
		s := int(slots[t])
		if s < 0 || s >= nslots {
			continue
		}
		c0 := b * panelWidth
		if c0 < kd {
			c1 := min(c0+panelWidth, kd)
			if half {
				narrowHalf(kh[s*kd+c0:s*kd+c1], k[t*kd+c0:t*kd+c1])
			} else {
				copyF32(kc[s*kd+c0:s*kd+c1], k[t*kd+c0:t*kd+c1])
			}
		}
		if c0 < vd {
			c1 := min(c0+panelWidth, vd)
			if half {
				narrowHalf(vh[s*vd+c0:s*vd+c1], v[t*vd+c0:t*vd+c1])
			} else {
				copyF32(vc[s*vd+c0:s*vd+c1], v[t*vd+c0:t*vd+c1])
			}
		}
	}
}

// caches views a KV cache pair as float32 (kc, vc) or, half, as binary16
// (kh, vh).
func caches(k, v operand) (kc, vc []float32, kh, vh []uint16, half bool) {
	if k.dt == accel.F16 {
		return nil, nil, k.u16(), v.u16(), true
	}
	return k.f32(), v.f32(), nil, nil, false
}

// Attention units are (head, token) pairs, head-major: unit u is head u/T of
// token u%T.
func unitsAttention(c *rcall) (int, int) {
	// The cost guess assumes a few hundred positions of context.
	return c.o[1].rows * c.i[0], c.i[2] * 256
}

// runAttention: the scores, the softmax and the weighted sum follow the
// reference's float32 order exactly: each score is a sequential dot product
// over the head (the vector kernel runs eight positions' chains side by
// side), the softmax sums in position order, and each output element sums
// its weighted values in position order (vectorised across the head's
// elements, which are independent chains). A token's cache rows are looked
// up once for all the heads of the piece. Eight-wide heads in pairs per KV
// head (stories260K) take the vector kernels' attn8 path instead, which lays
// its vectors across heads and positions (attn8_amd64.go) for the same bits.
// A prefill step (some token's row in a run, hasRun) on a set with scoresT
// takes runAttentionRuns (attn_runs.go): a sequence's keys transposed once
// per head, the same chains.
//
//go:norace
func runAttention(c *rcall, lo, hi int, k *kctx) {
	out, q := c.o[0].f32(), c.o[1].f32()
	kc, vc, kh, vh, half := caches(c.o[2], c.o[3])
	rows, pages := c.o[4].i32(), c.o[6].i32()
	nh, nkv, hd, page := c.i[0], c.i[1], c.i[2], c.i[3]
	ppr := c.o[6].cols
	kvd := nkv * hd
	group := nh / nkv
	T := c.o[1].rows
	scale := sqrt32(float32(hd))
	vk := simdOps()
	if k == nil {
		k = &kctx{}
	}
	if vk != nil && vk.scoresT != nil && hd%8 == 0 && hasRun(rows) {
		runAttentionRuns(c, lo, hi, k, vk)
		return
	}
	for t := 0; t < T; t++ {
		h0, h1 := headRange(lo, hi, t, T)
		if h0 >= h1 {
			continue
		}
		orow := out[t*nh*hd : (t+1)*nh*hd]
		clearF32(orow[h0*hd : h1*hd])
		n, ok := attnValid(c, t)
		if !ok {
			continue
		}
		nhp := h1 - h0
		r := int(rows[t])
		// hi is the largest offset, for the vector kernels' one bounds check.
		offs, hi := cacheOffs(k, pages[r*ppr:(r+1)*ppr], n, page, kvd)
		if half && vk != nil && vk.attnDecHalf != nil && vk.attnDecHalf(orow, q[t*nh*hd:(t+1)*nh*hd], kh, vh, offs, hi, n, h0, h1, group, hd, scale, k, vk) {
			continue
		}
		if half {
			// The KV heads of heads [h0, h1), widened; the next token's
			// rows asked for while this one's kernels run on the widened
			// copy.
			c0, c1 := (h0/group)*hd, ((h1-1)/group+1)*hd
			kc, vc, hi = widenRows(k, kh, vh, offs, kvd, c0, c1)
			if t+1 < T {
				if n1, ok := attnValid(c, t+1); ok {
					r1 := int(rows[t+1])
					o1, _ := cacheOffsIn(&k.offsNext, pages[r1*ppr:(r1+1)*ppr], n1, page, kvd)
					prefetchHalfRows(kh, vh, o1, c0, c1)
				}
			}
		}
		if vk != nil && vk.attnDec != nil && vk.attnDec(orow, q[t*nh*hd:(t+1)*nh*hd], kc, vc, offs, hi, n, h0, h1, group, hd, scale, k, vk) {
			continue
		}
		if vk != nil && vk.attn8 != nil && vk.attn8(orow, q[t*nh*hd:(t+1)*nh*hd], kc, vc, offs, hi, h0, h1, group, hd, scale, k) {
			continue
		}
		// On the vector kernels each head's row of scores is padded to
		// whole vectors, the pad scoring the last position again, so that
		// the scores, maximum, exponentials and divisions load and store
		// whole vectors (a masked load of a tail just stored cannot take
		// it from the store queue, and waits for it). The pad, copies of
		// the row's last score, leaves the maximum as it is, and the sums
		// and the weighted values stop at n: the bits are unchanged.
		ns := n
		if vk != nil && hd%8 == 0 {
			ns = (n + 7) &^ 7
			offs = padOffs(k, n, ns)
		}
		if cap(k.att) < nhp*ns {
			k.att = make([]float32, 0, max(nhp*ns, 1024))
		}
		S := k.att[:nhp*ns]
		for h := h0; h < h1; h++ {
			koff := (h / group) * hd
			scoresHead(S[(h-h0)*ns:(h-h0+1)*ns], q[t*nh*hd+h*hd:t*nh*hd+(h+1)*hd], kc[koff:], offs, hi, scale, vk, k)
		}
		softmaxRowsPad(S, nhp, n, ns, vk, k)
		for h := h0; h < h1; h++ {
			koff := (h / group) * hd
			avHead(orow[h*hd:(h+1)*hd], vc[koff:], offs[:n], hi, S[(h-h0)*ns:(h-h0)*ns+n], vk)
		}
	}
}

// padOffs extends the n offsets cacheOffs left in k.offs to ns (> 0
// rows), the pad repeating the last position, and returns them.
func padOffs(k *kctx, n, ns int) []int {
	if cap(k.offs) < ns {
		k.offs = append(k.offs[:n], make([]int, ns-n)...)
	}
	offs := k.offs[:ns]
	for p := n; p < ns; p++ {
		offs[p] = offs[n-1]
	}
	return offs
}

// cacheOffs are the rows in the cache (times kvd, the floats of a position)
// of a sequence's first n positions, through its page table pt, in k.offs,
// and the largest of them: the vector kernels check it once against the
// cache's length instead of every position.
//
//go:norace
func cacheOffs(k *kctx, pt []int32, n, page, kvd int) (offs []int, maxOff int) {
	return cacheOffsIn(&k.offs, pt, n, page, kvd)
}

// cacheOffsIn is cacheOffs into *buf.
//
//go:norace
func cacheOffsIn(buf *[]int, pt []int32, n, page, kvd int) (offs []int, maxOff int) {
	if cap(*buf) < n {
		*buf = make([]int, 0, max(n, 1024))
	}
	offs = (*buf)[:n]
	for p, pg := 0, 0; p < n; pg++ {
		base := int(pt[pg]) * page
		for j := 0; j < page && p < n; j, p = j+1, p+1 {
			offs[p] = (base + j) * kvd
		}
		maxOff = max(maxOff, offs[p-1])
	}
	return offs, maxOff
}

// rowMax is the largest of row (not empty) as the scalar loop from row[0]
// with `v > m` finds it, NaNs included: the vector kernel of vk where it
// answers (it declines rows it cannot decide the same way), else that loop.
//
//go:norace
func rowMax(row []float32, vk *vecOps) float32 {
	if vk != nil {
		if m, ok := vk.max(row); ok {
			return m
		}
	}
	m := row[0]
	for _, v := range row[1:] {
		if v > m {
			m = v
		}
	}
	return m
}

// scoresHead sets att[p] = (q · k_p) / scale for one head: offs are the
// positions' rows in kc (already offset to the head's KV head), maxOff the
// largest.
//
//go:norace
func scoresHead(att, qh, kc []float32, offs []int, maxOff int, scale float32, vk *vecOps, k *kctx) {
	hd, n := len(qh), len(offs)
	p := 0
	if vk != nil && hd%8 == 0 {
		if cap(k.qb) < 8*hd {
			k.qb = make([]float32, 8*hd)
		}
		vk.scores(att, kc, offs, maxOff, qh, k.qb[:8*hd], scale)
		return
	}
	for ; p+4 <= n; p += 4 {
		s0, s1, s2, s3 := dot4Rows(qh, kc[offs[p]:offs[p]+hd], kc[offs[p+1]:offs[p+1]+hd],
			kc[offs[p+2]:offs[p+2]+hd], kc[offs[p+3]:offs[p+3]+hd])
		att[p], att[p+1], att[p+2], att[p+3] = s0/scale, s1/scale, s2/scale, s3/scale
	}
	for ; p < n; p++ {
		kv := kc[offs[p] : offs[p]+hd]
		var s float32
		for i, a := range qh {
			s += float32(a * kv[i])
		}
		att[p] = s / scale
	}
}

// avHead adds att[p] * v_p to dst for every position p in order.
//
//go:norace
func avHead(dst, vc []float32, offs []int, maxOff int, att []float32, vk *vecOps) {
	hd := len(dst)
	if vk != nil && hd%8 == 0 {
		vk.av(dst, vc, offs, maxOff, att)
		return
	}
	for p := range offs {
		vv := vc[offs[p] : offs[p]+hd]
		vv = vv[:len(dst)]
		a := att[p]
		for i := range dst {
			dst[i] += float32(a * vv[i])
		}
	}
}

// softmaxRows is softmax32 of each of rows rows of n in S, with the same
// bits: on the vector kernels, the maximum of a row (order-free without
// NaNs), its exponentials, the sums of four rows at once (one row per lane,
// each in element order) and the divisions.
//
//go:norace
func softmaxRows(S []float32, rows, n int, vk *vecOps, k *kctx) {
	softmaxRowsPad(S, rows, n, n, vk, k)
}

// softmaxRowsPad is softmaxRows of rows of n at a stride of ns >= n in S,
// the ns-n elements after each row (where ns > n) copies of some element of
// it: those go through the maximum, the exponentials and the divisions with
// the row (so the vector kernels take whole vectors), but not into its sum.
// Without vector kernels ns must be n.
//
//go:norace
func softmaxRowsPad(S []float32, rows, n, ns int, vk *vecOps, k *kctx) {
	if vk == nil || n < 8 && ns == n {
		for r := 0; r < rows; r++ {
			softmax32(S[r*ns : r*ns+n])
		}
		return
	}
	if cap(k.rowv) < 2*rows {
		k.rowv = make([]float32, 2*rows)
	}
	sums := k.rowv[rows : 2*rows]
	for r := 0; r < rows; r++ {
		row := S[r*ns : (r+1)*ns]
		vk.expShift(row, rowMax(row, vk))
	}
	r := 0
	for ; r+4 <= rows; r += 4 {
		// k's arrays: arguments of a call through a function value escape.
		rs, s4 := &k.rows4, &k.sums4
		*rs = [4][]float32{S[r*ns : r*ns+n], S[(r+1)*ns : (r+1)*ns+n], S[(r+2)*ns : (r+2)*ns+n], S[(r+3)*ns : (r+3)*ns+n]}
		vk.rowSums4(rs, n, s4)
		sums[r], sums[r+1], sums[r+2], sums[r+3] = s4[0], s4[1], s4[2], s4[3]
	}
	for ; r < rows; r++ {
		var s float32
		for _, e := range S[r*ns : r*ns+n] {
			s += e
		}
		sums[r] = s
	}
	for r := 0; r < rows; r++ {
		vk.div(S[r*ns:(r+1)*ns], sums[r])
	}
}

// dot4Rows is four sequential dot products of q with four rows.
//
//go:norace
func dot4Rows(q, k0, k1, k2, k3 []float32) (s0, s1, s2, s3 float32) {
	k0, k1, k2, k3 = k0[:len(q)], k1[:len(q)], k2[:len(q)], k3[:len(q)]
	for i, a := range q {
		s0 += float32(a * k0[i])
		s1 += float32(a * k1[i])
		s2 += float32(a * k2[i])
		s3 += float32(a * k3[i])
	}
	return
}

// softmax32 is the reference's float32 softmax, in place: the maximum, the
// exponentials (on the vector kernel where there is one: the same bits), the
// sequential sum in position order, and the divisions.
//
//go:norace
func softmax32(x []float32) {
	m := x[0]
	for _, v := range x[1:] {
		if v > m {
			m = v
		}
	}
	if vk := simdOps(); vk != nil && len(x) >= 8 {
		vk.expShift(x, m)
		var sum float32
		for _, e := range x {
			sum += e
		}
		vk.div(x, sum)
		return
	}
	var sum float32
	for i, v := range x {
		e := exp32(v - m)
		x[i] = e
		sum += e
	}
	for i := range x {
		x[i] /= sum
	}
}

//go:norace
func runSiLUMul(c *rcall, lo, hi int, _ *kctx) {
	out, a, b := c.o[0].f32(), c.o[1].f32(), c.o[2].f32()
	vk := simdOps()
	n, stride, i0, i1 := elemSpans(c, lo, hi)
	for r := 0; r < n; r++ {
		j0, j1 := r*stride+i0, r*stride+i1
		if vk != nil {
			vk.silu(out[j0:j1], a[j0:j1], b[j0:j1])
		} else {
			siluMulGo(out[j0:j1], a[j0:j1], b[j0:j1])
		}
	}
}

//go:norace
func siluMulGo(out, a, b []float32) {
	a, b = a[:len(out)], b[:len(out)]
	for i := range out {
		v := a[i]
		v = v * (1 / (1 + exp32(-v)))
		out[i] = v * b[i]
	}
}

//go:norace
func runAdd(c *rcall, lo, hi int, _ *kctx) {
	out, a, b := c.o[0].f32(), c.o[1].f32(), c.o[2].f32()
	n, stride, i0, i1 := elemSpans(c, lo, hi)
	for r := 0; r < n; r++ {
		j0, j1 := r*stride+i0, r*stride+i1
		addF32(out[j0:j1], a[j0:j1], b[j0:j1])
	}
}

//go:norace
func addF32(o, x, y []float32) {
	x, y = x[:len(o)], y[:len(o)]
	for i := range o {
		o[i] = x[i] + y[i]
	}
}

// runAddRow adds the row b to every row of x, each element one float32 add
// as OpAdd's.
//
//go:norace
func runAddRow(c *rcall, lo, hi int, _ *kctx) {
	out, x, b := c.o[0].f32(), c.o[1].f32(), c.o[2].f32()
	cols := c.o[0].cols
	n, stride, i0, i1 := elemSpans(c, lo, hi)
	for r := 0; r < n; r++ {
		j0, j1 := r*stride+i0, r*stride+i1
		// A run covers whole rows (split by rows) or one band of a row.
		for j := j0; j < j1; {
			e := min(j1, (j/cols+1)*cols)
			c0 := j % cols
			addF32(out[j:e], x[j:e], b[c0:c0+e-j])
			j = e
		}
	}
}

//go:norace
func runGatherRows(c *rcall, lo, hi int, _ *kctx) {
	out, x, idx := c.o[0].f32(), c.o[1].f32(), c.o[2].i32()
	d, n := c.o[0].cols, c.o[1].rows
	for r := lo; r < hi; r++ {
		dst := out[r*d : (r+1)*d]
		i := int(idx[r])
		if i < 0 || i >= n {
			clearF32(dst)
			continue
		}
		copyF32(dst, x[i*d:(i+1)*d])
	}
}

//go:norace
func argmax(row []float32) int {
	best, bv := 0, row[0]
	for i, v := range row {
		if v > bv {
			best, bv = i, v
		}
	}
	return best
}

//go:norace
func runArgmax(c *rcall, lo, hi int, _ *kctx) {
	out, x := c.o[0].i32(), c.o[1].f32()
	v := c.o[1].cols
	for r := lo; r < hi; r++ {
		out[r] = int32(argmax(x[r*v : (r+1)*v]))
	}
}

type sampleScratch struct {
	p   []float32
	idx []int32
}

// runSample: per row, temperature-scaled softmax in float32, then top-k and
// top-p over the candidates sorted by probability (ties by index), then one
// draw from SampleUniform(seed, offset) against the cumulative distribution.
//
//go:norace
func runSample(c *rcall, lo, hi int, k *kctx) {
	out, logits := c.o[0].i32(), c.o[1].f32()
	temp, topk, topp, seed, off := c.o[2].f32(), c.o[3].i32(), c.o[4].f32(), c.o[5].i32(), c.o[6].i32()
	v := c.o[1].cols
	sc := &sampleScratch{}
	if k != nil {
		sc = &k.smp
	}
	for r := lo; r < hi; r++ {
		row := logits[r*v : (r+1)*v]
		t := temp[r]
		if !(t > 0) {
			out[r] = int32(argmax(row))
			continue
		}
		u := accel.SampleUniform(accel.JoinSeed(seed[2*r], seed[2*r+1]), uint32(off[r]))
		out[r] = int32(sampleRow(sc, row, t, int(topk[r]), topp[r], u))
	}
}

//go:norace
func sampleRow(sc *sampleScratch, row []float32, t float32, k int, topP float32, u float64) int {
	v := len(row)
	if cap(sc.p) < v {
		sc.p, sc.idx = make([]float32, v), make([]int32, v)
	}
	p := sc.p[:v]
	for i, x := range row {
		p[i] = x / t
	}
	softmax32(p)
	if (k <= 0 || k >= v) && !(topP > 0 && topP < 1) {
		var cdf float32
		r := float32(u)
		for i, x := range p {
			cdf += x
			if r < cdf {
				return i
			}
		}
		return v - 1
	}
	idx := sc.idx[:v]
	for i := range idx {
		idx[i] = int32(i)
	}
	slices.SortFunc(idx, func(a, b int32) int {
		pa, pb := p[a], p[b]
		switch {
		case pa > pb:
			return -1
		case pa < pb:
			return 1
		}
		return int(a - b)
	})
	n := v
	if k > 0 && k < n {
		n = k
	}
	if topP > 0 && topP < 1 {
		var cum float32
		for i := 0; i < n; i++ {
			cum += p[idx[i]]
			if cum >= topP {
				n = i + 1
				break
			}
		}
	}
	var total float32
	for i := 0; i < n; i++ {
		total += p[idx[i]]
	}
	r := float32(u) * total
	var cdf float32
	for i := 0; i < n; i++ {
		cdf += p[idx[i]]
		if r < cdf {
			return int(idx[i])
		}
	}
	return int(idx[n-1])
}
