package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/accel/acceltest"
)

// kernelMode is one way the device can compute: a vector kernel set or
// none, packed weights forced onto the plain-Go panel kernel, a thread
// count.
type kernelMode struct {
	name    string
	vec     *vecOps // an archsimd kernel set (only where built), nil: plain Go
	packGo  bool    // pack without vector matmul kernels (plain-Go panel kernel)
	threads int
}

// modes are the plain-Go kernels, packed or not, and every vector set this
// CPU runs (on an AVX-512 machine the AVX2 set too), at one to three
// threads, and where a set has no matmul kernels, on packed weights too
// (at two).
func modes() []kernelMode {
	var ms []kernelMode
	for _, th := range []int{1, 2, 3} {
		// The plain-Go kernels, unpacked at one thread (the reference) and
		// packed at two, and in a build without vector sets both at three
		// too: the schedules of 1, 2 and 3 workers are the vector sets'
		// where there are any, and in a vector build the plain-Go float32
		// matmul (fma32) is about 4x slower than before it fused (go/t3
		// took a quarter of this test's -race time there).
		novec := len(vecSets()) == 0
		if th == 1 || th == 3 && novec {
			ms = append(ms, kernelMode{fmt.Sprintf("go/t%d", th), nil, false, th})
		}
		if th == 2 || th == 3 && novec {
			ms = append(ms, kernelMode{fmt.Sprintf("gopacked/t%d", th), nil, true, th})
		}
		for _, vk := range vecSets() {
			ms = append(ms, kernelMode{fmt.Sprintf("%s/t%d", vk.name, th), vk, false, th})
			if !vk.hasMM() && th == 2 {
				ms = append(ms, kernelMode{fmt.Sprintf("%s+gopacked/t%d", vk.name, th), vk, true, th})
			}
		}
	}
	return ms
}

// vecSets are the vector kernel sets this build and CPU run (none in a
// GOAMD64=v3 build, where they stay off).
func vecSets() []*vecOps {
	if goamd64v3 {
		return nil
	}
	return vecRunnable
}

// withMode sets the package's kernel selection for the rest of the test.
func withMode(tb testing.TB, m kernelMode) {
	old, oldPack := vec.Load(), packGo.Load()
	tb.Cleanup(func() { vec.Store(old); packGo.Store(oldPack) })
	vec.Store(m.vec)
	packGo.Store(m.packGo)
}

func bitsEqual(a, b []float32) (int, bool) {
	if len(a) != len(b) {
		return -1, false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i, false
		}
	}
	return 0, true
}

// TestModesAgree: every kernel set (plain Go, plain Go on packed weights,
// each archsimd set), every thread count, eager launches and replays of the captured
// step (several times: packing happens on the first) give the same logits,
// bit for bit, for decode and prefill steps, float32 and bf16 weights.
func TestModesAgree(t *testing.T) {
	type stepCase struct {
		name     string
		sh       modelShape
		T, R, cx int
	}
	cases := []stepCase{{"decode1", shapeStories, 1, 1, 40}, {"decode5", shapeStories, 5, 5, 23},
		{"decode20", shapeStories, 20, 20, 19}, {"prefill37", shapeStories, 37, 1, 37},
		{"mixed/decode3", shapeMixed, 3, 3, 30}, {"mixed/decode24", shapeMixed, 24, 24, 17}}
	for _, wdt := range []accel.DType{accel.F32, accel.BF16} {
		for _, sc := range cases {
			t.Run(fmt.Sprintf("%s/%s", wdt, sc.name), func(t *testing.T) {
				var want []float32
				for _, m := range modes() {
					withMode(t, m)
					e := acceltest.Open(t, "cpu", accel.Options{Threads: m.threads})
					d := newDecoder(t, e, sc.sh, wdt, sc.T, sc.R, sc.cx)
					d.eager(t)
					got := e.ReadF32(d.logits)
					if want == nil {
						want = got
					} else if i, ok := bitsEqual(got, want); !ok {
						t.Fatalf("%s eager: logit %d = %v, want %v", m.name, i, got[i], want[i])
					}
					ex := d.capture(t)
					for rep := 0; rep < 3; rep++ {
						e.Zero(d.logits)
						d.replay(t, ex)
						got := e.ReadF32(d.logits)
						if i, ok := bitsEqual(got, want); !ok {
							t.Fatalf("%s replay %d: logit %d = %v, want %v", m.name, rep, i, got[i], want[i])
						}
					}
					if m.packGo || m.vec.hasMM() {
						if dev := e.Dev.(*Device); dev.PackedBytes() == 0 {
							t.Fatalf("%s: no packed weights", m.name)
						}
					}
				}
			})
		}
	}
}

// TestScheduleBarriers: the stories260K decode step's schedule over two
// workers needs a few barriers per layer, not one per kernel: with one row,
// four (the projections, rotations, cache writes and attention of a head
// stay with one worker, the attention writing a buffer of its own; the
// one-row RMSNorms are replicated; the output projection, the FFN's input
// and its output each read what both workers wrote); with 64 rows, two
// (everything but the attention splits by rows).
func TestScheduleBarriers(t *testing.T) {
	e := acceltest.Open(t, "cpu", accel.Options{Threads: 2})
	for _, c := range []struct{ T, perLayer, replicated int }{{1, 4, 2}, {64, 2, 0}} {
		d := newDecoder(t, e, shapeStories, accel.F32, c.T, c.T, 20)
		ex := d.capture(t)
		st := ex.(*exec).Schedule()
		t.Logf("%d rows: %+v\n%s", c.T, st, ex.(*exec).cur.Load().sched)
		L := d.sh.layers
		// One more: the classifier (after the gather and norm of the
		// sampled rows, replicated at one row) before the argmax.
		if st.Workers != 2 || st.Barriers > c.perLayer*L+1 || st.Replicated < c.replicated*L {
			t.Fatalf("%d rows: schedule %+v: want 2 workers, at most %d barriers, at least %d replicated kernels",
				c.T, st, c.perLayer*L+1, c.replicated*L)
		}
	}
}

// TestScheduleSteal: a replay whose second worker never comes (one
// goroutine runs the whole schedule, claiming the other's slots itself)
// gives the eager launch's bits, as do the two workers after it.
func TestScheduleSteal(t *testing.T) {
	for _, sc := range []struct {
		sh   modelShape
		wdt  accel.DType
		T, R int
	}{{shapeStories, accel.F32, 1, 1}, {shapeMixed, accel.F32, 3, 3}, {shapeQuant, accel.Q4_0, 1, 1}} {
		e := acceltest.Open(t, "cpu", accel.Options{Threads: 2})
		d := newDecoder(t, e, sc.sh, sc.wdt, sc.T, sc.R, 20)
		d.eager(t)
		want := e.ReadF32(d.logits)
		ex := d.capture(t)
		d.replay(t, ex) // the first launch prepares the executable
		s := ex.(*exec).cur.Load().sched
		if s == nil {
			t.Fatalf("%s: no schedule on two threads", sc.sh.name)
		}
		for rep := 0; rep < 2; rep++ {
			if i, ok := bitsEqual(aloneLogits(t, e, d, s), want); !ok {
				t.Fatalf("%s, one goroutine, run %d: logit %d differs", sc.sh.name, rep, i)
			}
			e.Zero(d.logits)
			d.replay(t, ex)
			if i, ok := bitsEqual(e.ReadF32(d.logits), want); !ok {
				t.Fatalf("%s, replay after it %d: logit %d differs", sc.sh.name, rep, i)
			}
		}
	}
}

// aloneLogits is d's logits after schedule s runs once on the calling
// goroutine alone (runAlone).
func aloneLogits(t *testing.T, e *acceltest.Env, d *decoder, s *schedule) []float32 {
	t.Helper()
	dev := e.Dev.(*Device)
	e.Zero(d.logits)
	if err := e.S.Synchronize(); err != nil {
		t.Fatal(err)
	}
	runAlone(dev, s, &kctx{d: dev})
	if f := s.job.fault.Load(); f != nil {
		t.Fatal(f.v)
	}
	return e.ReadF32(d.logits)
}

// runAlone runs schedule s once on the calling goroutine alone: with no job
// published, the pool's workers never join, and it claims every slot.
func runAlone(dev *Device, s *schedule, k *kctx) {
	dev.work.busy.Lock()
	s.job.epoch.Store(s.runs)
	s.runAll(&s.job, 0, k)
	s.runs++
	dev.work.busy.Unlock()
}

// TestScheduleQuantOnePanel: a quantized matmul of one panel is not
// replicated (its many-row kernels add into their outputs block by block,
// so two workers on one panel would mix their sums), and its replays give
// the eager bits.
func TestScheduleQuantOnePanel(t *testing.T) {
	e := acceltest.Open(t, "cpu", accel.Options{Threads: 2})
	r := rand.New(rand.NewPCG(3, 4))
	for _, dt := range quantDTypes {
		const T, out, in = 4, 16, 256
		c, xv, _ := quantCall(t, r, dt, T, out, in)
		wb, err := e.Dev.Alloc(int64(len(c.o[2].b)))
		if err != nil {
			t.Fatal(err)
		}
		if err := accel.Upload(e.S, wb, c.o[2].b); err != nil {
			t.Fatal(err)
		}
		w := accel.Tensor{Buf: wb, DType: dt, Rows: out, Cols: in}
		x, y := e.F32(xv, T, in), e.Zeros(accel.F32, T, out)
		fwd := func(l *accel.Launcher) error { l.MatMul(y, x, w); return l.Err() }
		if err := fwd(accel.On(e.S)); err != nil {
			t.Fatal(err)
		}
		want := e.ReadF32(y)
		pool, err := e.Dev.NewPool()
		if err != nil {
			t.Fatal(err)
		}
		g, err := accel.Capture(e.S, pool, func() error { return fwd(accel.On(e.S)) })
		if err != nil {
			t.Fatal(err)
		}
		ex, err := g.Instantiate()
		if err != nil {
			t.Fatal(err)
		}
		if st := ex.(*exec).Schedule(); st.Replicated != 0 {
			t.Errorf("%s: schedule %+v: a quantized matmul replicated", dt, st)
		}
		for rep := 0; rep < 20; rep++ {
			e.Zero(y)
			if err := ex.Launch(e.S); err != nil {
				t.Fatal(err)
			}
			if i, ok := bitsEqual(e.ReadF32(y), want); !ok {
				t.Fatalf("%s replay %d: element %d differs", dt, rep, i)
			}
		}
		ex.Destroy()
		g.Destroy()
		pool.Release()
	}
}

// TestScheduleSmallAfterOne: a small kernel or copy reading what one worker
// alone wrote in the phase (the copy of the token a one-unit sampler picked)
// runs on that worker, with no barrier, rather than on every worker after
// one; and the replay gives the eager bits.
func TestScheduleSmallAfterOne(t *testing.T) {
	e := acceltest.Open(t, "cpu", accel.Options{Threads: 2})
	r := rand.New(rand.NewPCG(5, 6))
	const vocab = 2 * replicateMax // an argmax of one row too big to replicate
	logits := e.F32(acceltest.Rand(r, vocab, 1), 1, vocab)
	next, out := e.Zeros(accel.I32, 1, 1), e.Zeros(accel.I32, 1, 1)
	fwd := func(l *accel.Launcher) error {
		l.Argmax(next, logits)
		l.Copy(out, next)
		return l.Err()
	}
	if err := fwd(accel.On(e.S)); err != nil {
		t.Fatal(err)
	}
	want := e.ReadI32(out)
	ex := captureExec(t, e, fwd)
	if st := ex.(*exec).Schedule(); st.Workers != 2 || st.Barriers != 0 {
		t.Errorf("schedule %+v: want 2 workers and no barrier", st)
	}
	for rep := 0; rep < 3; rep++ {
		e.Zero(out)
		if err := ex.Launch(e.S); err != nil {
			t.Fatal(err)
		}
		if got := e.ReadI32(out); got[0] != want[0] {
			t.Fatalf("replay %d: %d, want %d", rep, got[0], want[0])
		}
	}
}

// TestReplayAllocs: a replay allocates nothing, on the host or on the
// device's goroutines (after the first, which packs the weights).
func TestReplayAllocs(t *testing.T) {
	for _, th := range []int{1, 2} {
		e := acceltest.Open(t, "cpu", accel.Options{Threads: th})
		for _, T := range []int{1, 20} {
			d := newDecoder(t, e, shapeStories, accel.F32, T, T, 24)
			ex := d.capture(t)
			for i := 0; i < 3; i++ {
				d.replay(t, ex)
			}
			if n := testing.AllocsPerRun(20, func() { d.replay(t, ex) }); n != 0 {
				t.Errorf("threads %d, %d tokens: %v allocations per replay", th, T, n)
			}
		}
	}
}

// TestScheduleCopiesAndNested: graphs holding device copies (small and
// large: replicated and split) and the replay of another executable replay
// like their eager launches, on one and on two threads.
func TestScheduleCopiesAndNested(t *testing.T) {
	for _, th := range []int{1, 2, 3} {
		e := acceltest.Open(t, "cpu", accel.Options{Threads: th})
		r := rand.New(rand.NewPCG(9, uint64(th)))
		const big = copyMin/4 + 100 // floats: a copy split across workers
		a := e.F32(acceltest.Rand(r, big, 1), 1, big)
		b := e.Zeros(accel.F32, 1, big)
		c := e.Zeros(accel.F32, 1, big)
		s := e.F32(acceltest.Rand(r, 40, 1), 1, 40)
		s2 := e.Zeros(accel.F32, 1, 40)
		pool, _ := e.Dev.NewPool()
		child, err := accel.Capture(e.S, pool, func() error {
			l := accel.On(e.S)
			l.Add(c, b, a)
			l.Copy(s2, s)
			l.Add(s2, s2, s)
			return l.Err()
		})
		if err != nil {
			t.Fatal(err)
		}
		cex, err := child.Instantiate()
		if err != nil {
			t.Fatal(err)
		}
		parent, err := accel.Capture(e.S, pool, func() error {
			l := accel.On(e.S)
			l.Copy(b, a)
			l.Add(b, b, a)
			if err := cex.Launch(e.S); err != nil {
				return err
			}
			l.Add(c, c, b)
			l.Add(s2, s2, s2)
			return l.Err()
		})
		if err != nil {
			t.Fatal(err)
		}
		pex, err := parent.Instantiate()
		if err != nil {
			t.Fatal(err)
		}
		av, sv := e.ReadF32(a), e.ReadF32(s)
		for rep := 0; rep < 3; rep++ {
			e.Zero(b)
			e.Zero(c)
			e.Zero(s2)
			if err := pex.Launch(e.S); err != nil {
				t.Fatal(err)
			}
			gb, gc, gs := e.ReadF32(b), e.ReadF32(c), e.ReadF32(s2)
			for i, x := range av {
				wb := x + x
				wc := (wb + x) + wb
				if gb[i] != wb || gc[i] != wc {
					t.Fatalf("threads %d: b[%d] = %v, c[%d] = %v; want %v, %v", th, i, gb[i], i, gc[i], wb, wc)
				}
			}
			for i, x := range sv {
				if w := (x + x) + (x + x); gs[i] != w {
					t.Fatalf("threads %d: s2[%d] = %v, want %v", th, i, gs[i], w)
				}
			}
		}
		pex.Destroy()
		parent.Destroy()
		cex.Destroy()
		child.Destroy()
		pool.Release()
	}
}

// tableBlocks are the register blocks of v's kernel table for dt's weights,
// every (R, P) that has a kernel, R rows first: the tests run each as the
// set's block, so that every kernel of the table runs.
func tableBlocks(v *vecOps, dt accel.DType) [][2]int {
	ks := &v.f32
	if dt == accel.BF16 {
		ks = &v.bf16
	}
	var blks [][2]int
	for r := range ks {
		for q := range ks[r] {
			if ks[r][q] != nil {
				blks = append(blks, [2]int{r + 1, q + 1})
			}
		}
	}
	return blks
}
