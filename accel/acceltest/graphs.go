package acceltest

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/accel/alloc"
)

// The decoder-step, nesting, upload, bf16 and operand-checking half of the
// suite.

// openCapture opens device 0 of backend, with a stream, and a graph pool
// released when the test ends. It skips on a device that cannot capture
// graphs.
func openCapture(t *testing.T, backend string) (*Env, accel.Pool) {
	t.Helper()
	e := Open(t, backend, accel.Options{})
	if !e.Dev.Capability().GraphCapture {
		t.Skip("device cannot capture graphs")
	}
	pool, err := e.Dev.NewPool()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Release)
	return e, pool
}

// capture records fn's launches on e.S into a graph from pool.
func capture(t *testing.T, e *Env, pool accel.Pool, fn func(l *accel.Launcher)) accel.Graph {
	t.Helper()
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

// checkAllocator checks the invariants of a device's caching allocator,
// where the device exposes it (every backend in this tree does).
func checkAllocator(t *testing.T, dev accel.Device) {
	t.Helper()
	if c, ok := dev.(interface{ Caching() *alloc.Caching }); ok {
		if err := c.Caching().Check(); err != nil {
			t.Fatal(err)
		}
	}
}

// A replay of a whole decoder step equals eager execution bit for bit, step
// after step, with the static inputs and the KV cache changing in between.
// (Bit for bit on every device: a replay runs the very kernels eager runs,
// in the same order, and none of them uses atomics.)
func testDecoderReplay(t *testing.T, backend string, x Expect, mk func(*Env, *rand.Rand) *decoder) {
	e, pool := openCapture(t, backend)
	r := rand.New(rand.NewPCG(51, 52))
	m := mk(e, r)
	kc0, vc0 := e.ReadF32(m.kc), e.ReadF32(m.vc)
	reset := func(kc, vc []float32) {
		e.WriteF32(m.kc, kc)
		e.WriteF32(m.vc, vc)
	}
	g := capture(t, e, pool, m.forward)
	defer g.Destroy()
	ex, err := g.Instantiate()
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Destroy()
	if x.ExecBytesPerNode > 0 {
		want := int64(g.Nodes()) * x.ExecBytesPerNode
		switch {
		case x.ExactExecBytes && ex.Memory() != want:
			t.Errorf("executable holds %d bytes for %d nodes, want %d", ex.Memory(), g.Nodes(), want)
		case ex.Memory() < want:
			t.Errorf("executable charged %d bytes for %d nodes, want at least %d", ex.Memory(), g.Nodes(), want)
		}
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
	checkAllocator(t, e.Dev)
}

// Update takes a recaptured graph over other buffers; a graph with another
// topology is refused and leaves the executable as it was.
func testDecoderUpdate(t *testing.T, backend string) {
	e, pool := openCapture(t, backend)
	r := rand.New(rand.NewPCG(61, 62))
	m := newDecoder(e, r)
	m.setInputs(rand.New(rand.NewPCG(2, 2)), 0)
	kc0, vc0 := e.ReadF32(m.kc), e.ReadF32(m.vc)
	g1 := capture(t, e, pool, m.forward)
	defer g1.Destroy()
	ex, err := g1.Instantiate()
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Destroy()
	run := func(fn func() error) decoderOutputs {
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
	// Other weights: the same topology over another buffer.
	wq1 := m.wq
	m.wq = e.F32(Rand(r, m.h*m.hd*m.d, 0.2), m.h*m.hd, m.d)
	g2 := capture(t, e, pool, m.forward)
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
	g3 := capture(t, e, pool, func(l *accel.Launcher) { m.forward(l); l.Add(m.hidden, m.hidden, m.hidden) })
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
func testNestedAndMultiStream(t *testing.T, backend string) {
	e, pool := openCapture(t, backend)
	r := rand.New(rand.NewPCG(71, 72))
	const n = 300
	x := e.F32(Rand(r, n, 1), 1, n)
	// Every kernel's output is a function of x alone, so replays running
	// concurrently on two streams give the same result however they
	// interleave.
	y := e.Zeros(accel.F32, 1, n)
	w := e.Zeros(accel.F32, 1, n)
	z := e.Zeros(accel.F32, 1, n)
	inner := capture(t, e, pool, func(l *accel.Launcher) {
		l.Add(y, x, x)
		l.SiLUMul(w, y, x)
	})
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
	ev, err := e.Dev.NewEvent()
	if err != nil {
		t.Fatal(err)
	}
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
	if err := SameBits(e.ReadF32(z), want); err != nil {
		t.Fatalf("nested replay on two streams: %v", err)
	}
	// The inner executable destroyed, the outer one keeps what it inlined.
	ix.Destroy()
	e.Zero(z)
	if err := ox.Launch(e.S); err != nil {
		t.Fatal(err)
	}
	if err := SameBits(e.ReadF32(z), want); err != nil {
		t.Fatalf("outer replay after the inner executable was destroyed: %v", err)
	}
}

// A captured upload reads the pinned host bytes when it replays.
func testCapturedUpload(t *testing.T, backend string) {
	e, pool := openCapture(t, backend)
	h, err := e.Dev.AllocHost(4 * 10)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Dev.FreeHost(h)
	dst := e.Zeros(accel.F32, 1, 10)
	out := e.Zeros(accel.F32, 1, 10)
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

// The decoder step agrees with the CPU device within float tolerance (exp,
// sin and cos are each device's own), and picks the same argmax tokens. On
// the CPU device it compares two CPU devices.
func testDecoderMatchesCPU(t *testing.T, backend string, mk func(*Env, *rand.Rand) *decoder) {
	e := Open(t, backend, accel.Options{})
	c := OpenCPU(t)
	mo := mk(e, rand.New(rand.NewPCG(81, 82)))
	mc := mk(c, rand.New(rand.NewPCG(81, 82)))
	for step := 0; step < 3; step++ {
		mo.setInputs(rand.New(rand.NewPCG(3, uint64(step))), step)
		mc.setInputs(rand.New(rand.NewPCG(3, uint64(step))), step)
		for _, m := range []*decoder{mo, mc} {
			l := accel.On(m.e.S)
			m.forward(l)
			if l.Err() != nil {
				t.Fatal(l.Err())
			}
		}
		o, w := mo.read(), mc.read()
		for _, x := range o.floats(w) {
			if err := Close(x.got, x.want, 1e-4); err != nil {
				t.Errorf("step %d: %s: %v", step, x.name, err)
			}
		}
		if !slices.Equal(o.argmax, w.argmax) {
			t.Errorf("step %d: argmax %v, CPU %v", step, o.argmax, w.argmax)
		}
	}
}

// BF16 weights widen exactly: the embedding equals the float32 table of the
// widened values bit for bit, and the product equals the float32 product of
// the widened weights (bit for bit on a deterministic device) and the
// float64 reference within tolerance.
func testBF16(t *testing.T, backend string) {
	e := Open(t, backend, accel.Options{})
	r := rand.New(rand.NewPCG(11, 12))
	const v, d, rows = 9, 24, 5
	tab := Rand(r, v*d, 1)
	_, tabW := BF16Bits(tab)
	tb := e.BF16(tab, v, d)
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
	if err := SameBits(gb, gf); err != nil {
		t.Errorf("embed bf16 against f32: %v", err)
	}
	if !AllZero(gb[2*d:3*d]) || !AllZero(gb[3*d:4*d]) {
		t.Errorf("embed of ids -1 and 9 (vocab 9) gave %v, %v", gb[2*d:3*d], gb[3*d:4*d])
	}
	if err := SameBits(gb[:d], tabW[3*d:4*d]); err != nil {
		t.Errorf("embed row 3: %v", err)
	}
	// Odd sizes, and a bf16 matrix that starts 2 bytes into its buffer; a
	// large one too (many rows, several K slices; cuBLAS takes its float32
	// twin on the CUDA device).
	for _, sh := range [][3]int{{5, 37, 13}, {70, 600, 130}} {
		rows, in, out := sh[0], sh[1], sh[2]
		bits, wW := BF16Bits(Rand(r, out*in, 0.2))
		buf, err := e.Dev.Alloc(int64(len(bits)) + 2)
		if err != nil {
			t.Fatal(err)
		}
		if err := accel.Upload(e.S, buf.Slice(2, int64(len(bits))), bits); err != nil {
			t.Fatal(err)
		}
		wb := accel.Tensor{Buf: buf.Slice(2, int64(len(bits))), DType: accel.BF16, Rows: out, Cols: in}
		wf := e.F32(wW, out, in)
		xv := Rand(r, rows*in, 1)
		x := e.F32(xv, rows, in)
		yb, yf := e.Zeros(accel.F32, rows, out), e.Zeros(accel.F32, rows, out)
		l.MatMul(yb, x, wb)
		l.MatMul(yf, x, wf)
		if l.Err() != nil {
			t.Fatal(l.Err())
		}
		got, gotF := e.ReadF32(yb), e.ReadF32(yf)
		ref := refMatMul(xv, wW, rows, in, out)
		if err := Close(got, ref, 2e-4); err != nil {
			t.Errorf("%v: matmul bf16: %v", sh, err)
		}
		if err := Close(gotF, ref, 2e-4); err != nil {
			t.Errorf("%v: matmul f32 of the widened weights: %v", sh, err)
		}
		if err := Same(e.Dev, got, gotF, 2e-4); err != nil {
			t.Errorf("%v: matmul bf16 against f32: %v", sh, err)
		}
		// A row alone gives the bf16 kernel's same bits.
		y1 := e.Zeros(accel.F32, 1, out)
		l.MatMul(y1, x.RowSlice(rows-1, rows), wb)
		if err := SameBits(e.ReadF32(y1), got[(rows-1)*out:]); err != nil {
			t.Errorf("%v: last row alone: %v", sh, err)
		}
	}
}

// A tensor that does not start on an element boundary cannot be addressed
// by the kernels: an invalid argument, and nothing is launched.
func testMisalignedOperand(t *testing.T, backend string) {
	e := Open(t, backend, accel.Options{})
	buf, err := e.Dev.Alloc(64)
	if err != nil {
		t.Fatal(err)
	}
	x := accel.Tensor{Buf: buf.Slice(2, 32), DType: accel.F32, Rows: 1, Cols: 8}
	y := e.Zeros(accel.F32, 1, 8)
	l := accel.On(e.S)
	l.Add(y, x, y)
	if !errors.Is(l.Err(), accel.ErrInvalidArgument) {
		t.Fatalf("add over a misaligned operand: %v, want ErrInvalidArgument", l.Err())
	}
}

// foreignMem is memory of no device.
type foreignMem struct{ n int64 }

func (m *foreignMem) Size() int64 { return m.n }

// Buffers of another backend are refused, by launches and copies.
func testForeignBuffer(t *testing.T, backend string) {
	e := Open(t, backend, accel.Options{})
	foreign := []struct {
		what string
		buf  accel.Buffer
	}{{"a buffer of no device", accel.NewBuffer(&foreignMem{64}, 0, 64)}}
	if backend != "cpu" {
		c := OpenCPU(t)
		foreign = append(foreign, struct {
			what string
			buf  accel.Buffer
		}{"a CPU buffer", c.F32([]float32{1, 2}, 1, 2).Buf})
	}
	y := e.Zeros(accel.F32, 1, 2)
	for _, f := range foreign {
		x := accel.Tensor{Buf: f.buf, DType: accel.F32, Rows: 1, Cols: 2}
		l := accel.On(e.S)
		l.Add(y, x, y)
		if !errors.Is(l.Err(), accel.ErrInvalidArgument) {
			t.Fatalf("launch with %s: %v, want ErrInvalidArgument", f.what, l.Err())
		}
		if err := e.S.Copy(y.Buf.Slice(0, 8), f.buf.Slice(0, 8)); !errors.Is(err, accel.ErrInvalidArgument) {
			t.Fatalf("copy from %s: %v, want ErrInvalidArgument", f.what, err)
		}
		if err := e.S.Copy(f.buf.Slice(0, 8), y.Buf.Slice(0, 8)); !errors.Is(err, accel.ErrInvalidArgument) {
			t.Fatalf("copy into %s: %v, want ErrInvalidArgument", f.what, err)
		}
	}
}
