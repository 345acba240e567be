package cuda_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/accel/acceltest"
	"github.com/reprise-ml/reprise/accel/alloc"
)

// These tests need a CUDA device; without one they skip. They are the
// device check's second half, after the conformance suite.

// model is a small decoder: every Op, over a paged KV cache, with static
// inputs a replay reads anew each time. Its matrices are small, so every
// MatMul runs reprise's own kernel.
type model struct {
	e                          *acceltest.Env
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
	mTokens = 6
	mRows   = 3
	mPPR    = 4
)

func newModel(t *testing.T, e *acceltest.Env, r *rand.Rand) *model {
	m := &model{e: e, v: 50, d: 32, f: 48, h: 4, kvh: 2, hd: 8, page: 4}
	m.tab = uploadBF16(e, acceltest.Rand(r, m.v*m.d, 1), m.v, m.d)
	w := func(o, i int) accel.Tensor { return e.F32(acceltest.Rand(r, o*i, 0.2), o, i) }
	m.wq, m.wk, m.wv, m.wo = w(m.h*m.hd, m.d), w(m.kvh*m.hd, m.d), w(m.kvh*m.hd, m.d), w(m.d, m.h*m.hd)
	m.w1, m.w2, m.w3 = w(m.f, m.d), w(m.d, m.f), w(m.f, m.d)
	m.wout = uploadBF16(e, acceltest.Rand(r, m.v*m.d, 0.3), m.v, m.d)
	m.nw = e.F32(acceltest.Rand(r, m.d, 1), 1, m.d)
	slots := 8 * m.page
	m.kc = e.F32(acceltest.Rand(r, slots*m.kvh*m.hd, 1), slots, m.kvh*m.hd)
	m.vc = e.F32(acceltest.Rand(r, slots*m.kvh*m.hd, 1), slots, m.kvh*m.hd)
	m.ids, m.pos, m.rows, m.slots = e.Zeros(accel.I32, 1, mTokens), e.Zeros(accel.I32, 1, mTokens), e.Zeros(accel.I32, 1, mTokens), e.Zeros(accel.I32, 1, mTokens)
	m.pages, m.last = e.Zeros(accel.I32, mRows, mPPR), e.Zeros(accel.I32, 1, mRows)
	m.samp = accel.SampleParams{Temperature: e.F32([]float32{0, 0.8, 1.2}, 1, mRows), TopK: e.I32([]int32{0, 5, 0}, 1, mRows),
		TopP: e.F32([]float32{1, 0.9, 1}, 1, mRows), Seed: e.I32([]int32{1, 0, 2, 0, 3, 0}, mRows, 2), Offset: e.Zeros(accel.I32, 1, mRows)}
	m.logits, m.argmax, m.sampled = e.Zeros(accel.F32, mRows, m.v), e.Zeros(accel.I32, 1, mRows), e.Zeros(accel.I32, 1, mRows)
	m.hidden = e.Zeros(accel.F32, mTokens, m.d)
	return m
}

// setInputs writes a step: row 0 prefills 3 tokens, row 1 decodes one, row 2
// is padding (an out-of-range row and slot).
func (m *model) setInputs(r *rand.Rand, step int) {
	ids := make([]int32, mTokens)
	for i := range ids {
		ids[i] = int32(r.IntN(m.v))
	}
	ids[5] = -1
	base := int32(step * 3)
	pos := []int32{base, base + 1, base + 2, 9 + int32(step), int32(step), 0}
	rows := []int32{0, 0, 0, 1, 2, 7}
	pages := []int32{3, 1, 5, 6, 2, 4, 7, 0, 0, 0, 0, 0}
	slots := make([]int32, mTokens)
	for t := range slots {
		if rows[t] >= mRows {
			slots[t] = -1
			continue
		}
		slots[t] = pages[int(rows[t])*mPPR+int(pos[t])/m.page]*int32(m.page) + pos[t]%int32(m.page)
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
func (m *model) forward(l *accel.Launcher) {
	x := l.Alloc(accel.F32, mTokens, m.d)
	hn := l.Alloc(accel.F32, mTokens, m.d)
	q := l.Alloc(accel.F32, mTokens, m.h*m.hd)
	k := l.Alloc(accel.F32, mTokens, m.kvh*m.hd)
	v := l.Alloc(accel.F32, mTokens, m.kvh*m.hd)
	att := l.Alloc(accel.F32, mTokens, m.h*m.hd)
	o := l.Alloc(accel.F32, mTokens, m.d)
	a := l.Alloc(accel.F32, mTokens, m.f)
	b := l.Alloc(accel.F32, mTokens, m.f)
	g := l.Alloc(accel.F32, mRows, m.d)
	l.Embed(x, m.tab, m.ids)
	for layer := 0; layer < 2; layer++ {
		l.RMSNorm(hn, x, m.nw, 1e-5)
		l.MatMul(q, hn, m.wq)
		l.MatMul(k, hn, m.wk)
		l.MatMul(v, hn, m.wv)
		l.RoPE(q, k, m.pos, m.hd, 10000)
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

type outputs struct {
	hidden, logits, kc, vc []float32
	argmax, sampled        []int32
}

func (m *model) read() outputs {
	return outputs{m.e.ReadF32(m.hidden), m.e.ReadF32(m.logits), m.e.ReadF32(m.kc), m.e.ReadF32(m.vc),
		m.e.ReadI32(m.argmax), m.e.ReadI32(m.sampled)}
}

func (a outputs) same(b outputs) error {
	for _, c := range []struct {
		name string
		x, y []float32
	}{{"hidden", a.hidden, b.hidden}, {"logits", a.logits, b.logits}, {"kcache", a.kc, b.kc}, {"vcache", a.vc, b.vc}} {
		if err := sameBits(c.x, c.y); err != nil {
			return errors.New(c.name + ": " + err.Error())
		}
	}
	if !equalI32(a.argmax, b.argmax) || !equalI32(a.sampled, b.sampled) {
		return errors.New("tokens differ")
	}
	return nil
}

// A replay of a whole decoder step equals eager execution bit for bit (the
// kernels have no atomics and a fixed reduction order), step after step,
// with the static inputs and the KV cache changing in between.
func TestDecoderReplayEqualsEager(t *testing.T) {
	e := open(t)
	r := rand.New(rand.NewPCG(51, 52))
	m := newModel(t, e, r)
	kc0, vc0 := e.ReadF32(m.kc), e.ReadF32(m.vc)
	reset := func(kc, vc []float32) {
		e.WriteF32(m.kc, kc)
		e.WriteF32(m.vc, vc)
	}
	pool, err := e.Dev.NewPool()
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Release()
	g, err := accel.Capture(e.S, pool, func() error {
		l := accel.On(e.S)
		m.forward(l)
		return l.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Destroy()
	ex, err := g.Instantiate()
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Destroy()
	if ex.Memory() < int64(g.Nodes())*1024 {
		t.Errorf("executable charged %d bytes for %d nodes", ex.Memory(), g.Nodes())
	}
	t.Logf("%d nodes, executable charged %d bytes, graph memory %+v", g.Nodes(), ex.Memory(), g.Memory())
	kc, vc := kc0, vc0
	ri := rand.New(rand.NewPCG(1, 1))
	for step := 0; step < 4; step++ {
		m.setInputs(ri, step)
		reset(kc, vc)
		l := accel.On(e.S)
		m.forward(l)
		if l.Err() != nil {
			t.Fatal(l.Err())
		}
		want := m.read()
		reset(kc, vc)
		if err := ex.Launch(e.S); err != nil {
			t.Fatal(err)
		}
		got := m.read()
		if err := got.same(want); err != nil {
			t.Fatalf("step %d: replay differs from eager: %v", step, err)
		}
		kc, vc = got.kc, got.vc
	}
	if err := e.Dev.(interface{ Caching() *alloc.Caching }).Caching().Check(); err != nil {
		t.Fatal(err)
	}
}

// The decoder step agrees with the CPU device within float tolerance, and
// picks the same argmax tokens.
func TestDecoderMatchesCPU(t *testing.T) {
	e := open(t)
	c := acceltest.Open(t, "cpu", accel.Options{})
	mo := newModel(t, e, rand.New(rand.NewPCG(81, 82)))
	mc := newModel(t, c, rand.New(rand.NewPCG(81, 82)))
	for step := 0; step < 3; step++ {
		mo.setInputs(rand.New(rand.NewPCG(3, uint64(step))), step)
		mc.setInputs(rand.New(rand.NewPCG(3, uint64(step))), step)
		for _, m := range []*model{mo, mc} {
			l := accel.On(m.e.S)
			m.forward(l)
			if l.Err() != nil {
				t.Fatal(l.Err())
			}
		}
		o, w := mo.read(), mc.read()
		for _, x := range []struct {
			name      string
			got, want []float32
		}{{"hidden", o.hidden, w.hidden}, {"logits", o.logits, w.logits}, {"kcache", o.kc, w.kc}, {"vcache", o.vc, w.vc}} {
			if err := acceltest.Close(x.got, x.want, 1e-4); err != nil {
				t.Errorf("step %d: %s: %v", step, x.name, err)
			}
		}
		if !equalI32(o.argmax, w.argmax) {
			t.Errorf("step %d: argmax %v, CPU %v", step, o.argmax, w.argmax)
		}
	}
}

// Update takes a recaptured graph over other buffers; a graph with another
// topology is refused and leaves the executable as it was.
func TestDecoderUpdate(t *testing.T) {
	e := open(t)
	r := rand.New(rand.NewPCG(61, 62))
	m := newModel(t, e, r)
	m.setInputs(rand.New(rand.NewPCG(2, 2)), 0)
	kc0, vc0 := e.ReadF32(m.kc), e.ReadF32(m.vc)
	pool, err := e.Dev.NewPool()
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Release()
	capture := func(fn func(l *accel.Launcher)) accel.Graph {
		g, err := accel.Capture(e.S, pool, func() error {
			l := accel.On(e.S)
			fn(l)
			return l.Err()
		})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	g1 := capture(m.forward)
	defer g1.Destroy()
	ex, err := g1.Instantiate()
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Destroy()
	run := func(fn func() error) outputs {
		e.WriteF32(m.kc, kc0)
		e.WriteF32(m.vc, vc0)
		if err := fn(); err != nil {
			t.Fatal(err)
		}
		return m.read()
	}
	eager := func() error { l := accel.On(e.S); m.forward(l); return l.Err() }
	replay := func() error { return ex.Launch(e.S) }
	before := run(eager)
	wq1 := m.wq
	m.wq = e.F32(acceltest.Rand(r, m.h*m.hd*m.d, 0.2), m.h*m.hd, m.d)
	g2 := capture(m.forward)
	defer g2.Destroy()
	want := run(eager)
	m.wq = wq1
	if err := ex.Update(g2); err != nil {
		t.Fatalf("update with other buffers: %v", err)
	}
	if err := run(replay).same(want); err != nil {
		t.Fatalf("replay after update: %v", err)
	}
	if err := run(replay).same(before); err == nil {
		t.Fatal("the update changed nothing")
	}
	g3 := capture(func(l *accel.Launcher) { m.forward(l); l.Add(m.hidden, m.hidden, m.hidden) })
	defer g3.Destroy()
	if err := ex.Update(g3); !errors.Is(err, accel.ErrTopologyChanged) {
		t.Fatalf("update with an extra node: %v, want ErrTopologyChanged", err)
	}
	if err := run(replay).same(want); err != nil {
		t.Fatalf("a refused update changed the executable: %v", err)
	}
}

// An executable launched during a capture is inlined into the new graph, and
// a graph replays on a stream other than the one it was captured on.
func TestNestedAndMultiStream(t *testing.T) {
	e := open(t)
	r := rand.New(rand.NewPCG(71, 72))
	const n = 300
	x := e.F32(acceltest.Rand(r, n, 1), 1, n)
	y := e.Zeros(accel.F32, 1, n)
	w := e.Zeros(accel.F32, 1, n)
	z := e.Zeros(accel.F32, 1, n)
	pool, err := e.Dev.NewPool()
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Release()
	inner, err := accel.Capture(e.S, pool, func() error {
		l := accel.On(e.S)
		l.Add(y, x, x)
		l.SiLUMul(w, y, x)
		return l.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer inner.Destroy()
	ix, err := inner.Instantiate()
	if err != nil {
		t.Fatal(err)
	}
	defer ix.Destroy()
	outer, err := accel.Capture(e.S, pool, func() error {
		l := accel.On(e.S)
		if err := ix.Launch(e.S); err != nil {
			return err
		}
		l.Add(z, w, x)
		return l.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer outer.Destroy()
	if outer.Nodes() != 2 {
		t.Errorf("outer graph has %d nodes, want 2", outer.Nodes())
	}
	ox, err := outer.Instantiate()
	if err != nil {
		t.Fatal(err)
	}
	defer ox.Destroy()
	l := accel.On(e.S)
	l.Add(y, x, x)
	l.SiLUMul(w, y, x)
	l.Add(z, w, x)
	want := e.ReadF32(z)
	e.Zero(y)
	e.Zero(w)
	e.Zero(z)
	s2, err := e.Dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	ev, _ := e.Dev.NewEvent()
	if err := e.S.Record(ev); err != nil {
		t.Fatal(err)
	}
	if err := s2.Wait(ev); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 50; i++ {
		if err := ox.Launch(s2); err != nil {
			t.Fatal(err)
		}
		if err := ox.Launch(e.S); err != nil {
			t.Fatal(err)
		}
	}
	if err := s2.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if err := sameBits(e.ReadF32(z), want); err != nil {
		t.Fatalf("nested replay on two streams: %v", err)
	}
	ix.Destroy()
	e.Zero(z)
	if err := ox.Launch(e.S); err != nil {
		t.Fatal(err)
	}
	if err := sameBits(e.ReadF32(z), want); err != nil {
		t.Fatalf("outer replay after the inner executable was destroyed: %v", err)
	}
}

// A captured upload reads the pinned host bytes when it replays.
func TestCapturedUpload(t *testing.T) {
	e := open(t)
	h, err := e.Dev.AllocHost(4 * 10)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Dev.FreeHost(h)
	dst := e.Zeros(accel.F32, 1, 10)
	out := e.Zeros(accel.F32, 1, 10)
	pool, err := e.Dev.NewPool()
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Release()
	g, err := accel.Capture(e.S, pool, func() error {
		if err := e.S.CopyHtoD(dst.Buf.Slice(4, 36), h.Slice(4, 36)); err != nil {
			return err
		}
		l := accel.On(e.S)
		l.Add(out, dst, dst)
		return l.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Destroy()
	ex, err := g.Instantiate()
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Destroy()
	for round := 1; round <= 3; round++ {
		v := make([]float32, 10)
		for i := range v {
			v[i] = float32(round*100 + i)
		}
		copy(h.Bytes(), accel.F32Bytes(v))
		if err := ex.Launch(e.S); err != nil {
			t.Fatal(err)
		}
		got := e.ReadF32(out)
		for i := range got {
			want := 2 * v[i]
			if i == 0 {
				want = 0
			}
			if got[i] != want {
				t.Fatalf("round %d: element %d is %v, want %v", round, i, got[i], want)
			}
		}
	}
}

// BF16 weights widen exactly: the embedding equals the float32 table of the
// widened values bit for bit, and the product agrees within tolerance.
func TestBF16(t *testing.T) {
	e := open(t)
	r := rand.New(rand.NewPCG(11, 12))
	const v, d, rows = 9, 24, 5
	tab := acceltest.Rand(r, v*d, 1)
	_, tabW := bf16Bits(tab)
	tb := uploadBF16(e, tab, v, d)
	tf := e.F32(tabW, v, d)
	ids := e.I32([]int32{3, 8, -1, 9, 0}, 1, rows)
	ob, of := e.Zeros(accel.F32, rows, d), e.Zeros(accel.F32, rows, d)
	l := accel.On(e.S)
	l.Embed(ob, tb, ids)
	l.Embed(of, tf, ids)
	if l.Err() != nil {
		t.Fatal(l.Err())
	}
	gb, gf := e.ReadF32(ob), e.ReadF32(of)
	if err := sameBits(gb, gf); err != nil {
		t.Errorf("embed bf16 against f32: %v", err)
	}
	if !allZero(gb[2*d:3*d]) || !allZero(gb[3*d:4*d]) {
		t.Errorf("embed of ids -1 and 9 (vocab 9) gave %v, %v", gb[2*d:3*d], gb[3*d:4*d])
	}
	// Odd sizes, and a bf16 matrix that starts 2 bytes into its buffer; a
	// large one too (many rows, several K slices).
	for _, sh := range [][3]int{{5, 37, 13}, {70, 600, 130}} {
		rows, in, out := sh[0], sh[1], sh[2]
		wv := acceltest.Rand(r, out*in, 0.2)
		bits, wW := bf16Bits(wv)
		buf, err := e.Dev.Alloc(int64(len(bits)) + 2)
		if err != nil {
			t.Fatal(err)
		}
		if err := accel.Upload(e.S, buf.Slice(2, int64(len(bits))), bits); err != nil {
			t.Fatal(err)
		}
		wb := accel.Tensor{Buf: buf.Slice(2, int64(len(bits))), DType: accel.BF16, Rows: out, Cols: in}
		wf := e.F32(wW, out, in)
		xv := acceltest.Rand(r, rows*in, 1)
		x := e.F32(xv, rows, in)
		yb, yf := e.Zeros(accel.F32, rows, out), e.Zeros(accel.F32, rows, out)
		l.MatMul(yb, x, wb)
		l.MatMul(yf, x, wf)
		if l.Err() != nil {
			t.Fatal(l.Err())
		}
		got := e.ReadF32(yb)
		ref := make([]float32, rows*out)
		for tt := 0; tt < rows; tt++ {
			for o := 0; o < out; o++ {
				var s float64
				for i := 0; i < in; i++ {
					s += float64(xv[tt*in+i]) * float64(wW[o*in+i])
				}
				ref[tt*out+o] = float32(s)
			}
		}
		if err := acceltest.Close(got, ref, 2e-4); err != nil {
			t.Errorf("%v: matmul bf16: %v", sh, err)
		}
		if err := acceltest.Close(e.ReadF32(yf), ref, 2e-4); err != nil {
			t.Errorf("%v: matmul f32 of the widened weights: %v", sh, err)
		}
		// A row alone gives the bf16 kernel's same bits.
		y1 := e.Zeros(accel.F32, 1, out)
		l.MatMul(y1, x.RowSlice(rows-1, rows), wb)
		if err := sameBits(e.ReadF32(y1), got[(rows-1)*out:]); err != nil {
			t.Errorf("%v: last row alone: %v", sh, err)
		}
	}
}

// Large float32 products (cuBLAS where it is loaded) agree with the CPU
// device within tolerance, for every batch size the bench uses.
func TestLargeMatMulMatchesCPU(t *testing.T) {
	e := open(t)
	c := acceltest.Open(t, "cpu", accel.Options{})
	r := rand.New(rand.NewPCG(13, 14))
	const in, out = 512, 1024
	wv := acceltest.Rand(r, out*in, 1/math.Sqrt(in))
	we, wc := e.F32(wv, out, in), c.F32(wv, out, in)
	for _, rows := range []int{1, 2, 4, 8, 16, 32, 64} {
		xv := acceltest.Rand(r, rows*in, 1)
		ye, yc := e.Zeros(accel.F32, rows, out), c.Zeros(accel.F32, rows, out)
		accel.On(e.S).MatMul(ye, e.F32(xv, rows, in), we)
		accel.On(c.S).MatMul(yc, c.F32(xv, rows, in), wc)
		if err := acceltest.Close(e.ReadF32(ye), c.ReadF32(yc), 1e-4); err != nil {
			t.Errorf("%d rows: %v", rows, err)
		}
	}
}

// Without top-k and top-p, a draw walks the distribution in index order on
// both devices: the same (logits, seed, offset) picks the same token but
// where exp moves a boundary.
func TestSampleMatchesCPU(t *testing.T) {
	e := open(t)
	c := acceltest.Open(t, "cpu", accel.Options{})
	r := rand.New(rand.NewPCG(31, 32))
	const R, V, draws = 8, 1000, 50
	lv := acceltest.Rand(r, R*V, 2)
	temps := []float32{1, 0.5, 1.5, 0.8, 1, 2, 0.3, 1}
	seeds := make([]int32, 2*R)
	for i := 0; i < R; i++ {
		seeds[2*i], seeds[2*i+1] = accel.SplitSeed(r.Uint64())
	}
	same, total := 0, 0
	for i := 0; i < draws; i++ {
		offs := make([]int32, R)
		for j := range offs {
			offs[j] = int32(i*R + j)
		}
		var got [2][]int32
		for k, env := range []*acceltest.Env{e, c} {
			p := accel.SampleParams{Temperature: env.F32(temps, 1, R), TopK: env.I32(make([]int32, R), 1, R),
				TopP: env.F32(ones(R), 1, R), Seed: env.I32(seeds, R, 2), Offset: env.I32(offs, 1, R)}
			out := env.Zeros(accel.I32, 1, R)
			l := accel.On(env.S)
			l.Sample(out, env.F32(lv, R, V), p)
			if l.Err() != nil {
				t.Fatal(l.Err())
			}
			got[k] = env.ReadI32(out)
		}
		for j := range got[0] {
			total++
			if got[0][j] == got[1][j] {
				same++
			}
		}
	}
	if same < total*95/100 {
		t.Errorf("%d of %d draws agree with the CPU device", same, total)
	}
	t.Logf("%d of %d draws agree with the CPU device", same, total)
}

func ones(n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = 1
	}
	return v
}

// A capture on one goroutine (its thread locked) while another goroutine
// allocates new segments, launches, synchronises its own stream and empties
// the allocator's cache (segment frees, which the device puts off while a
// capture runs): thread-local capture mode keeps the two apart.
func TestCaptureBesideEagerWork(t *testing.T) {
	e := open(t)
	s2, err := e.Dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	x := e.F32(acceltest.Rand(rand.New(rand.NewPCG(1, 9)), 4096, 1), 1, 4096)
	pool, err := e.Dev.NewPool()
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Release()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var werr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		var held []accel.Buffer
		defer func() {
			for _, b := range held {
				_ = s2.Free(b)
			}
		}()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			b, err := s2.Alloc(8 << 20)
			if err != nil {
				werr = err
				return
			}
			held = append(held, b)
			y := accel.Tensor{Buf: b, DType: accel.F32, Rows: 1, Cols: 4096}
			l := accel.On(s2)
			l.Add(y, x, x)
			if err := l.Err(); err != nil {
				werr = err
				return
			}
			if err := s2.Synchronize(); err != nil {
				werr = err
				return
			}
			if len(held) > 8 {
				for _, b := range held {
					_ = s2.Free(b)
				}
				held = held[:0]
				e.Dev.Allocator().EmptyCache()
			}
			runtime.Gosched()
		}
	}()
	for i := 0; i < 20; i++ {
		out := e.Zeros(accel.F32, 1, 4096)
		g, err := accel.Capture(e.S, pool, func() error {
			l := accel.On(e.S)
			tmp := l.Alloc(accel.F32, 1, 4096)
			l.Add(tmp, x, x)
			l.Add(out, tmp, x)
			l.Free(tmp)
			return l.Err()
		})
		if err != nil {
			close(stop)
			wg.Wait()
			t.Fatalf("capture %d beside eager work: %v", i, err)
		}
		ex, err := g.Instantiate()
		if err != nil {
			t.Fatal(err)
		}
		if err := ex.Launch(e.S); err != nil {
			t.Fatal(err)
		}
		got, want := e.ReadF32(out), e.ReadF32(x)
		for j := range want {
			if got[j] != 3*want[j] {
				t.Fatalf("capture %d: element %d is %v, want %v", i, j, got[j], 3*want[j])
			}
		}
		ex.Destroy()
		g.Destroy()
	}
	close(stop)
	wg.Wait()
	if werr != nil {
		t.Fatalf("the eager goroutine: %v", werr)
	}
	if err := e.Dev.(interface{ Caching() *alloc.Caching }).Caching().Check(); err != nil {
		t.Fatal(err)
	}
}

// Out of memory inside a capture leaves the allocator consistent, and the
// capacity is all free again once everything is released.
func TestOOMAccounting(t *testing.T) {
	open(t) // skips without a device
	e := acceltest.Open(t, "cuda", accel.Options{MemoryLimit: 64 << 20})
	ca := e.Dev.(interface{ Caching() *alloc.Caching }).Caching()
	pool, err := e.Dev.NewPool()
	if err != nil {
		t.Fatal(err)
	}
	_, err = accel.Capture(e.S, pool, func() error {
		l := accel.On(e.S)
		a := l.Alloc(accel.F32, 1<<20, 4) // 16 MiB
		b := l.Alloc(accel.F32, 1<<20, 16)
		l.Free(a, b)
		return l.Err()
	})
	if !errors.Is(err, accel.ErrOutOfMemory) {
		t.Fatalf("capture past the limit: %v", err)
	}
	if err := ca.Check(); err != nil {
		t.Fatal(err)
	}
	pool.Release()
	e.Dev.Allocator().EmptyCache()
	if mi := e.Dev.MemInfo(); mi.Free != mi.Total {
		t.Fatalf("after releasing everything: free %d of %d", mi.Free, mi.Total)
	}
}
