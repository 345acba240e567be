package opencl_test

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/accel/acceltest"
	"github.com/reprise-ml/reprise/accel/alloc"
)

// model is a small decoder: every Op, over a paged KV cache, with static
// inputs (ids, positions, rows, slots, pages, sampling parameters) a replay
// reads anew each time.
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

// A replay of a whole decoder step equals eager execution bit for bit, step
// after step, with the static inputs and the KV cache changing in between.
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
	if ex.Memory() != int64(g.Nodes())*1024 {
		t.Errorf("executable holds %d bytes for %d nodes", ex.Memory(), g.Nodes())
	}
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

// Update takes a recaptured graph over other buffers and arguments; a graph
// with another topology is refused and leaves the executable as it was.
func TestDecoderUpdate(t *testing.T) {
	e := open(t)
	r := rand.New(rand.NewPCG(61, 62))
	m := newModel(t, e, r)
	ri := rand.New(rand.NewPCG(2, 2))
	m.setInputs(ri, 0)
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

	// Other weights and another epsilon-free argument: theta of RoPE.
	wq2 := e.F32(acceltest.Rand(r, m.h*m.hd*m.d, 0.2), m.h*m.hd, m.d)
	wq1 := m.wq
	m.wq = wq2
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
// a graph replays on a stream other than the one it was captured on, from two
// streams at once.
func TestNestedAndMultiStream(t *testing.T) {
	e := open(t)
	r := rand.New(rand.NewPCG(71, 72))
	const n = 300
	x := e.F32(acceltest.Rand(r, n, 1), 1, n)
	// Every kernel's output is a function of x alone, so replays running
	// concurrently on two streams give the same result however they
	// interleave.
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
	// The inner executable destroyed, the outer one keeps what it inlined.
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

// The decoder step on the OpenCL device agrees with the CPU device within
// float tolerance (exp, sin and cos are each device's own).
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
