package acceltest

import (
	"errors"
	"math/rand/v2"
	"slices"

	"github.com/reprise-ml/reprise/accel"
)

// decoder is a small decoder step: every Op, over a paged KV cache, with
// static inputs (ids, positions, rows, slots, pages, sampling parameters) a
// replay reads anew each time. Its matrices are small (on the CUDA device
// every MatMul runs reprise's own kernel, not cuBLAS). The arch variant
// (newArchDecoder) has the attention of the newer checkpoints: heads wider
// than d/h, biases on q, k and v (OpAddRow), RMSNorm of each q and k head
// (OpRMSNorm over a [T·H, hd] view) and a frequency table rotating halves
// (OpRoPETable).
type decoder struct {
	e                          *Env
	arch                       bool
	bq, bk, bv, qn, kn, freqs  accel.Tensor // arch only
	v, d, f, h, kvh, hd, page  int
	tab                        accel.Tensor // bf16 embedding table
	wq, wk, wv, wo, w1, w2, w3 accel.Tensor
	wout                       accel.Tensor // bf16
	nw                         accel.Tensor
	kc, vc                     accel.Tensor
	ids, pos, rows, slots      accel.Tensor
	pages, last                accel.Tensor
	samp                       accel.SampleParams
	logits, argmax, sampled    accel.Tensor
	hidden                     accel.Tensor
}

const (
	decTokens = 6
	decRows   = 3
	decPPR    = 4 // pages per row
)

func newDecoder(e *Env, r *rand.Rand) *decoder {
	m := &decoder{e: e, v: 50, d: 32, f: 48, h: 4, kvh: 2, hd: 8, page: 4}
	m.build(r)
	return m
}

// build makes the weights, caches and inputs of m's shape.
func (m *decoder) build(r *rand.Rand) {
	e := m.e
	m.tab = e.BF16(Rand(r, m.v*m.d, 1), m.v, m.d)
	w := func(o, i int) accel.Tensor { return e.F32(Rand(r, o*i, 0.2), o, i) }
	m.wq, m.wk, m.wv, m.wo = w(m.h*m.hd, m.d), w(m.kvh*m.hd, m.d), w(m.kvh*m.hd, m.d), w(m.d, m.h*m.hd)
	m.w1, m.w2, m.w3 = w(m.f, m.d), w(m.d, m.f), w(m.f, m.d)
	m.wout = e.BF16(Rand(r, m.v*m.d, 0.3), m.v, m.d)
	m.nw = e.F32(Rand(r, m.d, 1), 1, m.d)
	slots := 8 * m.page
	m.kc = e.F32(Rand(r, slots*m.kvh*m.hd, 1), slots, m.kvh*m.hd)
	m.vc = e.F32(Rand(r, slots*m.kvh*m.hd, 1), slots, m.kvh*m.hd)
	m.ids, m.pos, m.rows, m.slots = e.Zeros(accel.I32, 1, decTokens), e.Zeros(accel.I32, 1, decTokens), e.Zeros(accel.I32, 1, decTokens), e.Zeros(accel.I32, 1, decTokens)
	m.pages, m.last = e.Zeros(accel.I32, decRows, decPPR), e.Zeros(accel.I32, 1, decRows)
	m.samp = accel.SampleParams{Temperature: e.F32([]float32{0, 0.8, 1.2}, 1, decRows), TopK: e.I32([]int32{0, 5, 0}, 1, decRows),
		TopP: e.F32([]float32{1, 0.9, 1}, 1, decRows), Seed: e.I32([]int32{1, 0, 2, 0, 3, 0}, decRows, 2), Offset: e.Zeros(accel.I32, 1, decRows)}
	m.logits, m.argmax, m.sampled = e.Zeros(accel.F32, decRows, m.v), e.Zeros(accel.I32, 1, decRows), e.Zeros(accel.I32, 1, decRows)
	m.hidden = e.Zeros(accel.F32, decTokens, m.d)
}

// newArchDecoder is the arch variant: 16-wide heads (h·hd = 64 > d = 32),
// biases, per-head norms and a rotate-half frequency table that is not
// RoPEFreqs' (its lower half of frequencies scaled down, as Llama
// 3's long wavelengths are).
func newArchDecoder(e *Env, r *rand.Rand) *decoder {
	m := &decoder{e: e, arch: true, v: 50, d: 32, f: 48, h: 4, kvh: 2, hd: 16, page: 4}
	m.build(r)
	m.bq, m.bk, m.bv = e.F32(Rand(r, m.h*m.hd, 0.5), 1, m.h*m.hd), e.F32(Rand(r, m.kvh*m.hd, 0.5), 1, m.kvh*m.hd), e.F32(Rand(r, m.kvh*m.hd, 0.5), 1, m.kvh*m.hd)
	m.qn, m.kn = e.F32(Rand(r, m.hd, 1), 1, m.hd), e.F32(Rand(r, m.hd, 1), 1, m.hd)
	f := accel.RoPEFreqs(m.hd, 500000)
	for i := len(f) / 2; i < len(f); i++ {
		f[i] /= 8
	}
	m.freqs = e.F32(f, 1, m.hd/2)
	return m
}

// setInputs writes a step: row 0 prefills 3 tokens, row 1 decodes one, row 2
// is padding (an out-of-range row and slot).
func (m *decoder) setInputs(r *rand.Rand, step int) {
	ids := make([]int32, decTokens)
	for i := range ids {
		ids[i] = int32(r.IntN(m.v))
	}
	ids[5] = -1
	base := int32(step * 3)
	pos := []int32{base, base + 1, base + 2, 9 + int32(step), int32(step), 0}
	rows := []int32{0, 0, 0, 1, 2, 7}
	pages := []int32{3, 1, 5, 6, 2, 4, 7, 0, 0, 0, 0, 0}
	slots := make([]int32, decTokens)
	for t := range slots {
		if rows[t] >= decRows {
			slots[t] = -1
			continue
		}
		slots[t] = pages[int(rows[t])*decPPR+int(pos[t])/m.page]*int32(m.page) + pos[t]%int32(m.page)
	}
	m.e.WriteI32(m.ids, ids)
	m.e.WriteI32(m.pos, pos)
	m.e.WriteI32(m.rows, rows)
	m.e.WriteI32(m.slots, slots)
	m.e.WriteI32(m.pages, pages)
	m.e.WriteI32(m.last, []int32{2, 3, 4})
	m.e.WriteI32(m.samp.Offset, []int32{int32(step), int32(step), int32(step)})
}

// forward enqueues one step; every intermediate is allocated and freed in
// stream order (from the pool while capturing).
func (m *decoder) forward(l *accel.Launcher) {
	x := l.Alloc(accel.F32, decTokens, m.d)
	hn := l.Alloc(accel.F32, decTokens, m.d)
	q := l.Alloc(accel.F32, decTokens, m.h*m.hd)
	k := l.Alloc(accel.F32, decTokens, m.kvh*m.hd)
	v := l.Alloc(accel.F32, decTokens, m.kvh*m.hd)
	att := l.Alloc(accel.F32, decTokens, m.h*m.hd)
	o := l.Alloc(accel.F32, decTokens, m.d)
	a := l.Alloc(accel.F32, decTokens, m.f)
	b := l.Alloc(accel.F32, decTokens, m.f)
	g := l.Alloc(accel.F32, decRows, m.d)
	l.Embed(x, m.tab, m.ids)
	for layer := 0; layer < 2; layer++ {
		l.RMSNorm(hn, x, m.nw, 1e-5)
		l.MatMul(q, hn, m.wq)
		l.MatMul(k, hn, m.wk)
		l.MatMul(v, hn, m.wv)
		if m.arch {
			l.AddRow(q, q, m.bq)
			l.AddRow(k, k, m.bk)
			l.AddRow(v, v, m.bv)
			qh, kh := q.Reshape(decTokens*m.h, m.hd), k.Reshape(decTokens*m.kvh, m.hd)
			l.RMSNorm(qh, qh, m.qn, 1e-6)
			l.RMSNorm(kh, kh, m.kn, 1e-6)
			l.RoPETable(q, k, m.pos, m.freqs, m.hd, accel.RoPEHalves)
		} else {
			l.RoPE(q, k, m.pos, m.hd, 10000)
		}
		l.KVWrite(m.kc, m.vc, k, v, m.slots)
		l.Attention(att, q, m.kc, m.vc, m.rows, m.pos, m.pages,
			accel.AttentionShape{Heads: m.h, KVHeads: m.kvh, HeadSize: m.hd, PageSize: m.page})
		l.MatMul(o, att, m.wo)
		l.Add(x, x, o)
		l.RMSNorm(hn, x, m.nw, 1e-5)
		l.MatMul(a, hn, m.w1)
		l.MatMul(b, hn, m.w3)
		l.SiLUMul(a, a, b)
		l.MatMul(o, a, m.w2)
		l.Add(x, x, o)
	}
	l.RMSNorm(x, x, m.nw, 1e-5)
	l.Copy(m.hidden, x)
	l.GatherRows(g, x, m.last)
	l.MatMul(m.logits, g, m.wout)
	l.Argmax(m.argmax, m.logits)
	l.Sample(m.sampled, m.logits, m.samp)
	l.Free(x, hn, q, k, v, att, o, a, b, g)
}

// decoderOutputs is what a step wrote.
type decoderOutputs struct {
	hidden, logits, kc, vc []float32
	argmax, sampled        []int32
}

func (m *decoder) read() decoderOutputs {
	return decoderOutputs{m.e.ReadF32(m.hidden), m.e.ReadF32(m.logits), m.e.ReadF32(m.kc), m.e.ReadF32(m.vc),
		m.e.ReadI32(m.argmax), m.e.ReadI32(m.sampled)}
}

// floats names the float outputs of a and b side by side.
func (a decoderOutputs) floats(b decoderOutputs) []struct {
	name      string
	got, want []float32
} {
	return []struct {
		name      string
		got, want []float32
	}{{"hidden", a.hidden, b.hidden}, {"logits", a.logits, b.logits}, {"kcache", a.kc, b.kc}, {"vcache", a.vc, b.vc}}
}

// same reports whether a equals b bit for bit, tokens included.
func (a decoderOutputs) same(b decoderOutputs) error {
	for _, c := range a.floats(b) {
		if err := SameBits(c.got, c.want); err != nil {
			return errors.New(c.name + ": " + err.Error())
		}
	}
	if !slices.Equal(a.argmax, b.argmax) || !slices.Equal(a.sampled, b.sampled) {
		return errors.New("tokens differ")
	}
	return nil
}
