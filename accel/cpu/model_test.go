package cpu

import (
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/accel/acceltest"
	"github.com/reprise-ml/reprise/quant"
)

// A Llama-shaped decoder built directly on the launcher, for the tests that
// compare modes (eager, replay, threads, vector kernels on and off) and for
// the step benchmarks. The forward is model/llama's, with the shapes of
// stories260K and of the synthetic 25M model.

type modelShape struct {
	name                                       string
	dim, hidden, layers, heads, kvHeads, vocab int
}

var (
	shapeStories = modelShape{"stories260K", 64, 172, 5, 8, 4, 512}
	shape25M     = modelShape{"25M", 512, 1376, 8, 8, 8, 512}
	// shapeMixed has matrices on both sides of matRowSplitMax: with many
	// rows, some matmuls split by rows and others by panels.
	shapeMixed = modelShape{"mixed", 192, 688, 1, 3, 1, 512}
	// shapeQuant is the smallest shape whose quantized decoder has every
	// kind of matrix 25M's has (block-quantized projections, a Q6_K
	// classifier: widths that are multiples of 256) at a sixteenth of
	// its values, which the race detector makes slow to generate.
	shapeQuant = modelShape{"quant", 256, 768, 2, 4, 2, 512}
)

const testPage = 16

// randCache holds each shape's seeded values ([][]float32, in the order
// newDecoder asks for them).
var randCache sync.Map

type decLayer struct{ rmsA, wq, wk, wv, wo, rmsF, w1, w2, w3 accel.Tensor }

type decoder struct {
	e          *acceltest.Env
	sh         modelShape
	T, R       int // tokens and rows of the step
	emb, final accel.Tensor
	cls        accel.Tensor // the classifier: emb, or (quantized weights) a Q6_K matrix as in llama.cpp's files
	layers     []decLayer
	kc, vc     []accel.Tensor
	toks, rows accel.Tensor
	pos, slots accel.Tensor
	pages      accel.Tensor
	last, next accel.Tensor
	logits     accel.Tensor
	wbytes     int64
}

// bf16Bytes rounds to bfloat16 (nearest, ties to even).
func bf16Bytes(v []float32) []byte {
	b := make([]byte, 2*len(v))
	for i, x := range v {
		u := math.Float32bits(x)
		u += 0x7FFF + (u>>16)&1
		b[2*i], b[2*i+1] = byte(u>>16), byte(u>>24)
	}
	return b
}

// newDecoder makes a decoder whose step is T tokens over R rows: decode
// (T == R, one token per row at position ctx-1) or prefill (R == 1,
// positions 0..T-1). Weights are seeded normals.
func newDecoder(tb testing.TB, e *acceltest.Env, sh modelShape, wdt accel.DType, T, R, ctx int) *decoder {
	tb.Helper()
	r := rand.New(rand.NewPCG(1, uint64(sh.dim)))
	m := &decoder{e: e, sh: sh, T: T, R: R}
	hd := sh.dim / sh.heads
	kvd := sh.kvHeads * hd
	// The seeded values are the same for every decoder of a shape: made
	// once (the tests build many decoders, and the race detector makes
	// generating them slow).
	var vecs [][]float32
	if v, ok := randCache.Load(sh.name); ok {
		vecs = v.([][]float32)
	}
	nv := 0
	rnd := func(n int, sd float64) []float32 {
		defer func() { nv++ }()
		if nv < len(vecs) && len(vecs[nv]) == n {
			return vecs[nv]
		}
		v := acceltest.Rand(r, n, sd)
		vecs = append(vecs[:nv], v)
		return v
	}
	defer func() { randCache.Store(sh.name, vecs) }()
	up := func(rows, cols int, sd float64, dt accel.DType) accel.Tensor {
		v := rnd(rows*cols, sd)
		if dt == accel.F32 {
			m.wbytes += int64(4 * len(v))
			return e.F32(v, rows, cols)
		}
		if dt.BlockSize() > 1 && cols%dt.BlockSize() != 0 {
			dt = accel.Q4_0 // as the model stores a K-quant's misfit rows
		}
		var data []byte
		if qt, ok := dt.Quant(); ok {
			data = make([]byte, int64(rows)*dt.RowBytes(cols))
			if err := quant.Quantize(qt, v, data); err != nil {
				tb.Fatal(err)
			}
		} else {
			data = bf16Bytes(v)
		}
		b, err := e.Dev.Alloc(int64(len(data)))
		if err != nil {
			tb.Fatal(err)
		}
		if err := accel.Upload(e.S, b, data); err != nil {
			tb.Fatal(err)
		}
		m.wbytes += int64(len(data))
		return accel.Tensor{Buf: b, DType: dt, Rows: rows, Cols: cols}
	}
	ones := func(n int) accel.Tensor {
		v := append([]float32(nil), rnd(n, 0.1)...)
		for i := range v {
			v[i]++
		}
		return e.F32(v, 1, n)
	}
	m.emb = up(sh.vocab, sh.dim, 1, accel.F32)
	for i := 0; i < sh.layers; i++ {
		sd := 1 / math.Sqrt(float64(sh.dim))
		m.layers = append(m.layers, decLayer{
			rmsA: ones(sh.dim), wq: up(sh.dim, sh.dim, sd, wdt), wk: up(kvd, sh.dim, sd, wdt),
			wv: up(kvd, sh.dim, sd, wdt), wo: up(sh.dim, sh.dim, sd, wdt), rmsF: ones(sh.dim),
			w1: up(sh.hidden, sh.dim, sd, wdt), w2: up(sh.dim, sh.hidden, 1/math.Sqrt(float64(sh.hidden)), wdt),
			w3: up(sh.hidden, sh.dim, sd, wdt),
		})
	}
	m.final = ones(sh.dim)
	m.cls = m.emb
	ppr := (ctx + testPage - 1) / testPage
	slots := R * ppr * testPage
	for i := 0; i < sh.layers; i++ {
		// Earlier positions hold seeded values, as if prefilled.
		m.kc = append(m.kc, e.F32(rnd(slots*kvd, 1), slots, kvd))
		m.vc = append(m.vc, e.F32(rnd(slots*kvd, 1), slots, kvd))
	}
	toks, rows, pos, sl := make([]int32, T), make([]int32, T), make([]int32, T), make([]int32, T)
	pages := make([]int32, R*ppr)
	for i := range pages {
		pages[i] = int32(i)
	}
	last := make([]int32, R)
	rt := rand.New(rand.NewPCG(2, uint64(T)))
	for t := 0; t < T; t++ {
		toks[t] = int32(rt.IntN(sh.vocab))
		if R == T {
			rows[t], pos[t] = int32(t), int32(ctx-1)
		} else {
			rows[t], pos[t] = 0, int32(t)
		}
		p := int(pos[t])
		sl[t] = pages[int(rows[t])*ppr+p/testPage]*testPage + int32(p%testPage)
		last[rows[t]] = int32(t)
	}
	m.toks, m.rows, m.pos, m.slots = e.I32(toks, 1, T), e.I32(rows, 1, T), e.I32(pos, 1, T), e.I32(sl, 1, T)
	m.pages, m.last = e.I32(pages, R, ppr), e.I32(last, 1, R)
	if wdt.BlockSize() > 1 && sh.dim%accel.Q6_K.BlockSize() == 0 {
		m.cls = up(sh.vocab, sh.dim, 1/math.Sqrt(float64(sh.dim)), accel.Q6_K)
	}
	m.next = e.Zeros(accel.I32, 1, R)
	m.logits = e.Zeros(accel.F32, R, sh.vocab)
	return m
}

// forward launches one step: logits of each row's last token, and their
// argmax.
func (m *decoder) forward(l *accel.Launcher) error {
	sh := m.sh
	T, R := m.T, m.R
	hd := sh.dim / sh.heads
	kvd := sh.kvHeads * hd
	as := accel.AttentionShape{Heads: sh.heads, KVHeads: sh.kvHeads, HeadSize: hd, PageSize: testPage}
	x := l.Alloc(accel.F32, T, sh.dim)
	xb := l.Alloc(accel.F32, T, sh.dim)
	xb2 := l.Alloc(accel.F32, T, sh.dim)
	q := l.Alloc(accel.F32, T, sh.dim)
	att := l.Alloc(accel.F32, T, sh.dim) // not xb: as model/llama, no barrier before attention
	k := l.Alloc(accel.F32, T, kvd)
	v := l.Alloc(accel.F32, T, kvd)
	hb := l.Alloc(accel.F32, T, sh.hidden)
	hb2 := l.Alloc(accel.F32, T, sh.hidden)
	l.Embed(x, m.emb, m.toks)
	for i, ly := range m.layers {
		l.RMSNorm(xb, x, ly.rmsA, 1e-5)
		l.MatMul(q, xb, ly.wq)
		l.MatMul(k, xb, ly.wk)
		l.MatMul(v, xb, ly.wv)
		l.RoPE(q, k, m.pos, hd, 10000)
		l.KVWrite(m.kc[i], m.vc[i], k, v, m.slots)
		l.Attention(att, q, m.kc[i], m.vc[i], m.rows, m.pos, m.pages, as)
		l.MatMul(xb2, att, ly.wo)
		l.Add(x, x, xb2)
		l.RMSNorm(xb, x, ly.rmsF, 1e-5)
		l.MatMul(hb, xb, ly.w1)
		l.MatMul(hb2, xb, ly.w3)
		l.SiLUMul(hb, hb, hb2)
		l.MatMul(xb, hb, ly.w2)
		l.Add(x, x, xb)
	}
	l.Free(xb, xb2, q, att, k, v, hb, hb2)
	// The sampled rows, then their norm (as model/llama).
	lh := l.Alloc(accel.F32, R, sh.dim)
	l.GatherRows(lh, x, m.last)
	lx := l.Alloc(accel.F32, R, sh.dim)
	l.RMSNorm(lx, lh, m.final, 1e-5)
	l.MatMul(m.logits, lx, m.cls)
	l.Argmax(m.next, m.logits)
	l.Free(x, lh, lx)
	return l.Err()
}

// eager runs one step launch by launch and waits for it.
func (m *decoder) eager(tb testing.TB) {
	if err := m.forward(accel.On(m.e.S)); err != nil {
		tb.Fatal(err)
	}
	if err := m.e.S.Synchronize(); err != nil {
		tb.Fatal(err)
	}
}

// capture records one step as an executable.
func (m *decoder) capture(tb testing.TB) accel.Exec { return captureExec(tb, m.e, m.forward) }

// captureExec records fwd's launches on e's stream as an executable,
// destroyed when the test ends.
func captureExec(tb testing.TB, e *acceltest.Env, fwd func(l *accel.Launcher) error) accel.Exec {
	tb.Helper()
	pool, err := e.Dev.NewPool()
	if err != nil {
		tb.Fatal(err)
	}
	g, err := accel.Capture(e.S, pool, func() error { return fwd(accel.On(e.S)) })
	if err != nil {
		tb.Fatal(err)
	}
	ex, err := g.Instantiate()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ex.Destroy(); g.Destroy(); pool.Release() })
	return ex
}

func (m *decoder) replay(tb testing.TB, ex accel.Exec) {
	if err := ex.Launch(m.e.S); err != nil {
		tb.Fatal(err)
	}
	if err := m.e.S.Synchronize(); err != nil {
		tb.Fatal(err)
	}
}

// flops is the multiply-adds of the step's matmuls, times two.
func (m *decoder) flops() float64 {
	sh := m.sh
	kvd := sh.kvHeads * (sh.dim / sh.heads)
	perTok := sh.layers * (2*sh.dim*sh.dim + 2*kvd*sh.dim + 3*sh.dim*sh.hidden)
	return 2 * (float64(m.T)*float64(perTok) + float64(m.R)*float64(sh.vocab*sh.dim))
}
