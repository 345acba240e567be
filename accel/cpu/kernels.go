package cpu

import (
	"math"
	"slices"
	"sync"

	"github.com/reprise-ml/reprise/accel"
)

// rcall is a Call with its operands resolved to memory.
type rcall struct {
	op accel.Op
	o  [accel.MaxOperands]operand
	i  [4]int
	f  [2]float32
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
// each piece's cost in multiply-adds; run does pieces [lo, hi).
type kernel struct {
	units func(c *rcall) (n, cost int)
	run   func(c *rcall, lo, hi int)
}

var kernels [accel.NumOps]kernel

func init() {
	kernels[accel.OpFill] = kernel{unitsRows(1), runFill}
	kernels[accel.OpEmbed] = kernel{unitsRows(1), runEmbed}
	kernels[accel.OpRMSNorm] = kernel{unitsRows(2), runRMSNorm}
	kernels[accel.OpMatMul] = kernel{unitsMatMul, runMatMul}
	kernels[accel.OpRoPE] = kernel{unitsRoPE, runRoPE}
	kernels[accel.OpKVWrite] = kernel{unitsKV, runKVWrite}
	kernels[accel.OpAttention] = kernel{unitsAttention, runAttention}
	kernels[accel.OpSiLUMul] = kernel{unitsFlat(8), runSiLUMul}
	kernels[accel.OpAdd] = kernel{unitsFlat(1), runAdd}
	kernels[accel.OpGatherRows] = kernel{unitsRows(1), runGatherRows}
	kernels[accel.OpArgmax] = kernel{unitsInRows(1), runArgmax}
	kernels[accel.OpSample] = kernel{unitsInRows(16), runSample}
}

// splitMin is the work (in multiply-adds) below which a kernel runs on one
// thread: splitting costs a few microseconds of hand-off.
const splitMin = 1 << 15

// exec runs one resolved call, splitting it across the workers when it is
// large enough.
func (d *Device) exec(c *rcall) {
	k := &kernels[c.op]
	n, cost := k.units(c)
	if n <= 0 {
		return
	}
	if d.threads <= 1 || n == 1 || n*cost < splitMin {
		k.run(c, 0, n)
		return
	}
	chunks := min(n, d.threads*4)
	d.work.run(chunks, func(ch int) {
		k.run(c, n*ch/chunks, n*(ch+1)/chunks)
	})
}

// runNode executes one node of a replay.
func (d *Device) runNode(t *task) {
	switch t.kind {
	case taskKernel:
		d.exec(&t.call)
	case taskCopy:
		copy(t.dst, t.src)
	case taskReplay:
		for i := range t.exec.n {
			d.runNode(&t.exec.n[i])
		}
	}
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

// units over flat chunks of operand 0's elements.
func unitsFlat(perElem int) func(c *rcall) (int, int) {
	return func(c *rcall) (int, int) {
		n := c.o[0].rows * c.o[0].cols
		return (n + flatChunk - 1) / flatChunk, flatChunk * perElem
	}
}

func flatRange(c *rcall, lo, hi int) (int, int) {
	n := c.o[0].rows * c.o[0].cols
	return lo * flatChunk, min(hi*flatChunk, n)
}

//go:norace
func runFill(c *rcall, lo, hi int) {
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
func runEmbed(c *rcall, lo, hi int) {
	out, ids := c.o[0].f32(), c.o[2].i32()
	d, vocab := c.o[0].cols, c.o[1].rows
	for t := lo; t < hi; t++ {
		dst := out[t*d : (t+1)*d]
		id := int(ids[t])
		if id < 0 || id >= vocab {
			clear(dst)
			continue
		}
		if c.o[1].dt == accel.BF16 {
			src := c.o[1].u16()[id*d : (id+1)*d]
			for j := range dst {
				dst[j] = bf16(src[j])
			}
			continue
		}
		copy(dst, c.o[1].f32()[id*d:(id+1)*d])
	}
}

// sqrt32 is a correctly rounded float32 square root, as C's sqrtf.
func sqrt32(x float32) float32 { return float32(math.Sqrt(float64(x))) }

// exp32 is expf: the float64 exponential rounded once to float32.
func exp32(x float32) float32 { return float32(math.Exp(float64(x))) }

//go:norace
func runRMSNorm(c *rcall, lo, hi int) {
	out, x, w := c.o[0].f32(), c.o[1].f32(), c.o[2].f32()
	d := c.o[1].cols
	eps := c.f[0]
	for t := lo; t < hi; t++ {
		xr, or := x[t*d:(t+1)*d], out[t*d:(t+1)*d]
		var ss float32
		for _, v := range xr {
			ss += float32(v * v)
		}
		ss /= float32(d)
		ss += eps
		ss = 1 / sqrt32(ss)
		for j := range or {
			or[j] = w[j] * float32(ss*xr[j])
		}
	}
}

// matBlock is the number of output columns one unit of a matmul computes, for
// every row of x: the block of W stays in cache while the rows stream past.
const matBlock = 16

func unitsMatMul(c *rcall) (int, int) {
	o := c.o[0].cols
	return (o + matBlock - 1) / matBlock, matBlock * c.o[1].cols * c.o[1].rows
}

// runMatMul computes y = x·Wᵀ. Each output is a sequential float32 sum over the
// input dimension, exactly as the reference does, whatever the batch. A
// single running sum is bound by the latency of its adds, so four outputs are
// summed side by side: four independent chains, each in the reference order.
//
//go:norace
func runMatMul(c *rcall, lo, hi int) {
	y, x := c.o[0].f32(), c.o[1].f32()
	rows, in, out := c.o[1].rows, c.o[1].cols, c.o[0].cols
	o0, o1 := lo*matBlock, min(hi*matBlock, out)
	if c.o[2].dt == accel.BF16 {
		w := c.o[2].u16()
		for t := 0; t < rows; t++ {
			xr := x[t*in : (t+1)*in]
			yr := y[t*out : (t+1)*out]
			o := o0
			for ; o+4 <= o1; o += 4 {
				yr[o], yr[o+1], yr[o+2], yr[o+3] = dot4BF16(xr, w[o*in:(o+4)*in])
			}
			for ; o < o1; o++ {
				wr := w[o*in : (o+1)*in]
				var s float32
				for i, v := range xr {
					s += float32(v * bf16(wr[i]))
				}
				yr[o] = s
			}
		}
		return
	}
	w := c.o[2].f32()
	for t := 0; t < rows; t++ {
		xr := x[t*in : (t+1)*in]
		yr := y[t*out : (t+1)*out]
		o := o0
		for ; o+4 <= o1; o += 4 {
			yr[o], yr[o+1], yr[o+2], yr[o+3] = dot4(xr, w[o*in:(o+4)*in])
		}
		for ; o < o1; o++ {
			wr := w[o*in : (o+1)*in]
			wr = wr[:len(xr)]
			var s float32
			for i, v := range xr {
				s += float32(v * wr[i])
			}
			yr[o] = s
		}
	}
}

// dot4 is four sequential float32 dot products of x with the four rows of w.
//
//go:norace
func dot4(x, w []float32) (s0, s1, s2, s3 float32) {
	n := len(x)
	w0, w1, w2, w3 := w[:n], w[n:2*n], w[2*n:3*n], w[3*n:4*n]
	for i, v := range x {
		s0 += float32(v * w0[i])
		s1 += float32(v * w1[i])
		s2 += float32(v * w2[i])
		s3 += float32(v * w3[i])
	}
	return
}

//go:norace
func dot4BF16(x []float32, w []uint16) (s0, s1, s2, s3 float32) {
	n := len(x)
	w0, w1, w2, w3 := w[:n], w[n:2*n], w[2*n:3*n], w[3*n:4*n]
	for i, v := range x {
		s0 += float32(v * bf16(w0[i]))
		s1 += float32(v * bf16(w1[i]))
		s2 += float32(v * bf16(w2[i]))
		s3 += float32(v * bf16(w3[i]))
	}
	return
}

func unitsRoPE(c *rcall) (int, int) { return c.o[0].rows, (c.o[0].cols + c.o[1].cols) * 8 }

// runRoPE rotates the pairs of every head, q and k alike, by the angle of the
// token's position, in float32 the way the reference does.
//
//go:norace
func runRoPE(c *rcall, lo, hi int) {
	q, k, pos := c.o[0].f32(), c.o[1].f32(), c.o[2].i32()
	hd, theta := c.i[0], c.f[0]
	qc, kc := c.o[0].cols, c.o[1].cols
	var freqBuf [256]float32
	freq := freqBuf[:0]
	if hd/2 > len(freqBuf) {
		freq = make([]float32, 0, hd/2)
	}
	for i := 0; i < hd; i += 2 {
		freq = append(freq, accel.RoPEFreq(i, hd, theta))
	}
	for t := lo; t < hi; t++ {
		p := float32(pos[t])
		for i := 0; i < hd; i += 2 {
			val := p * freq[i/2]
			fcr := float32(math.Cos(float64(val)))
			fci := float32(math.Sin(float64(val)))
			rotate(q[t*qc:(t+1)*qc], i, hd, fcr, fci)
			rotate(k[t*kc:(t+1)*kc], i, hd, fcr, fci)
		}
	}
}

//go:norace
func rotate(v []float32, i, hd int, fcr, fci float32) {
	for h := 0; h+hd <= len(v); h += hd {
		v0, v1 := v[h+i], v[h+i+1]
		v[h+i] = float32(v0*fcr) - float32(v1*fci)
		v[h+i+1] = float32(v0*fci) + float32(v1*fcr)
	}
}

func unitsKV(c *rcall) (int, int) { return c.o[2].rows, c.o[2].cols * 2 }

//go:norace
func runKVWrite(c *rcall, lo, hi int) {
	kc, vc, k, v, slots := c.o[0].f32(), c.o[1].f32(), c.o[2].f32(), c.o[3].f32(), c.o[4].i32()
	kd, vd, nslots := c.o[0].cols, c.o[1].cols, c.o[0].rows
	for t := lo; t < hi; t++ {
		s := int(slots[t])
		if s < 0 || s >= nslots {
			continue
		}
		copy(kc[s*kd:(s+1)*kd], k[t*kd:(t+1)*kd])
		copy(vc[s*vd:(s+1)*vd], v[t*vd:(t+1)*vd])
	}
}

func unitsAttention(c *rcall) (int, int) {
	// One unit per (token, head); the cost guess assumes a few hundred
	// positions of context.
	return c.o[1].rows * c.i[0], c.i[2] * 256
}

var scorePool = sync.Pool{New: func() any { s := make([]float32, 0, 1024); return &s }}

// runAttention: units are (token, head) pairs. The scores, the softmax and the
// weighted sum follow the reference's float32 order exactly.
//
//go:norace
func runAttention(c *rcall, lo, hi int) {
	out, q, kc, vc := c.o[0].f32(), c.o[1].f32(), c.o[2].f32(), c.o[3].f32()
	rows, pos, pages := c.o[4].i32(), c.o[5].i32(), c.o[6].i32()
	nh, nkv, hd, page := c.i[0], c.i[1], c.i[2], c.i[3]
	nrows, ppr := c.o[6].rows, c.o[6].cols
	nslots := c.o[2].rows
	npages := nslots / page
	kvd := nkv * hd
	group := nh / nkv
	scale := sqrt32(float32(hd))
	sp := scorePool.Get().(*[]float32)
	defer scorePool.Put(sp)
	for u := lo; u < hi; u++ {
		t, h := u/nh, u%nh
		dst := out[t*nh*hd+h*hd : t*nh*hd+(h+1)*hd]
		clear(dst)
		r, n := int(rows[t]), int(pos[t])+1
		if r < 0 || r >= nrows || n <= 0 || n > ppr*page {
			continue
		}
		pt := pages[r*ppr : (r+1)*ppr]
		ok := true
		for p := 0; p < (n+page-1)/page; p++ {
			if pt[p] < 0 || int(pt[p]) >= npages {
				ok = false
				break
			}
		}
		if !ok {
			continue
		}
		if cap(*sp) < n {
			*sp = make([]float32, 0, n)
		}
		att := (*sp)[:n]
		qh := q[t*nh*hd+h*hd : t*nh*hd+(h+1)*hd]
		koff := (h / group) * hd
		for p := 0; p < n; p++ {
			slot := int(pt[p/page])*page + p%page
			kv := kc[slot*kvd+koff : slot*kvd+koff+hd]
			var s float32
			for i, a := range qh {
				s += float32(a * kv[i])
			}
			att[p] = s / scale
		}
		softmax32(att)
		for p := 0; p < n; p++ {
			slot := int(pt[p/page])*page + p%page
			vv := vc[slot*kvd+koff : slot*kvd+koff+hd]
			a := att[p]
			for i := range dst {
				dst[i] += float32(a * vv[i])
			}
		}
	}
}

// softmax32 is the reference's float32 softmax, in place.
//
//go:norace
func softmax32(x []float32) {
	m := x[0]
	for _, v := range x[1:] {
		if v > m {
			m = v
		}
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
func runSiLUMul(c *rcall, lo, hi int) {
	out, a, b := c.o[0].f32(), c.o[1].f32(), c.o[2].f32()
	i0, i1 := flatRange(c, lo, hi)
	for i := i0; i < i1; i++ {
		v := a[i]
		v = v * (1 / (1 + exp32(-v)))
		out[i] = v * b[i]
	}
}

//go:norace
func runAdd(c *rcall, lo, hi int) {
	out, a, b := c.o[0].f32(), c.o[1].f32(), c.o[2].f32()
	i0, i1 := flatRange(c, lo, hi)
	for i := i0; i < i1; i++ {
		out[i] = a[i] + b[i]
	}
}

//go:norace
func runGatherRows(c *rcall, lo, hi int) {
	out, x, idx := c.o[0].f32(), c.o[1].f32(), c.o[2].i32()
	d, n := c.o[0].cols, c.o[1].rows
	for r := lo; r < hi; r++ {
		dst := out[r*d : (r+1)*d]
		i := int(idx[r])
		if i < 0 || i >= n {
			clear(dst)
			continue
		}
		copy(dst, x[i*d:(i+1)*d])
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
func runArgmax(c *rcall, lo, hi int) {
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

var samplePool = sync.Pool{New: func() any { return &sampleScratch{} }}

// runSample: per row, temperature-scaled softmax in float32, then top-k and
// top-p over the candidates sorted by probability (ties by index), then one
// draw from SampleUniform(seed, offset) against the cumulative distribution.
//
//go:norace
func runSample(c *rcall, lo, hi int) {
	out, logits := c.o[0].i32(), c.o[1].f32()
	temp, topk, topp, seed, off := c.o[2].f32(), c.o[3].i32(), c.o[4].f32(), c.o[5].i32(), c.o[6].i32()
	v := c.o[1].cols
	sc := samplePool.Get().(*sampleScratch)
	defer samplePool.Put(sc)
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
