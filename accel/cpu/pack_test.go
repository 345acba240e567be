package cpu

import (
	"math/rand/v2"
	"testing"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/accel/acceltest"
	"github.com/reprise-ml/reprise/accel/acceltest/modeltest"
)

// withPacking runs the test with packed weights on: the vector kernels
// where built (on the plain-Go panel kernel where the set has no matmul
// kernels), else the plain-Go panel kernel.
func withPacking(t *testing.T) {
	t.Helper()
	old, oldPack := vec.Load(), packGo.Load()
	t.Cleanup(func() { vec.Store(old); packGo.Store(oldPack) })
	if vecBuilt != nil && !goamd64v3 {
		vec.Store(vecBuilt)
	}
	packGo.Store(!vec.Load().hasMM())
}

// scalarMatMul is y = x·Wᵀ by the row-major scalar kernel.
func scalarMatMul(x, w []float32, T, in, out int) []float32 {
	c := &rcall{op: accel.OpMatMul}
	c.o[0] = operand{b: make([]byte, 4*T*out), rows: T, cols: out, dt: accel.F32}
	c.o[1] = operand{b: accel.F32Bytes(x), rows: T, cols: in, dt: accel.F32}
	c.o[2] = operand{b: accel.F32Bytes(w), rows: out, cols: in, dt: accel.F32}
	runMatMulRows(c, 0, (out+matBlock-1)/matBlock, 0, T)
	return append([]float32(nil), c.o[0].f32()...)
}

// TestPackInvalidation: a packed copy never outlives the bytes it was made
// from. Re-uploading the weights, writing them with a kernel or copying
// over them all reach the next MatMul, eager or replayed, and the copies'
// memory is charged to the arena and given back.
func TestPackInvalidation(t *testing.T) {
	withPacking(t)
	r := rand.New(rand.NewPCG(1, 2))
	const T, in, out = 3, 40, 50
	e := acceltest.Open(t, "cpu", accel.Options{Threads: 2})
	dev := e.Dev.(*Device)
	free0 := dev.MemInfo().Free
	xv := acceltest.Rand(r, T*in, 1)
	x := e.F32(xv, T, in)
	wv := acceltest.Rand(r, out*in, 1)
	w := e.F32(wv, out, in)
	y := e.Zeros(accel.F32, T, out)
	check := func(what string, wv []float32, run func()) {
		t.Helper()
		run()
		if i, ok := bitsEqual(e.ReadF32(y), scalarMatMul(xv, wv, T, in, out)); !ok {
			t.Fatalf("%s: y[%d] differs from the scalar result over the current weights", what, i)
		}
	}
	eager := func() {
		l := accel.On(e.S)
		l.MatMul(y, x, w)
		if err := l.Err(); err != nil {
			t.Fatal(err)
		}
	}
	check("first use", wv, eager)
	if dev.PackedBytes() == 0 {
		t.Fatal("the weights were not packed")
	}
	before := dev.PackedBytes()
	if used := free0 - dev.MemInfo().Free; used < before {
		t.Fatalf("packed copy of %d bytes not charged (arena use grew by %d)", before, used)
	}

	// A re-upload drops the copy.
	wv2 := acceltest.Rand(r, out*in, 1)
	e.WriteF32(w, wv2)
	if dev.PackedBytes() != 0 {
		t.Fatalf("after a re-upload %d packed bytes remain", dev.PackedBytes())
	}
	check("after re-upload", wv2, eager)

	// A replay sees new weights too, whether written by an upload, a kernel
	// or a device copy.
	pool, _ := e.Dev.NewPool()
	g, err := accel.Capture(e.S, pool, func() error {
		l := accel.On(e.S)
		l.MatMul(y, x, w)
		return l.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	ex, err := g.Instantiate()
	if err != nil {
		t.Fatal(err)
	}
	replay := func() {
		if err := ex.Launch(e.S); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 2*volatileUses; i++ {
		check("replay", wv2, replay)
	}
	wv3 := acceltest.Rand(r, out*in, 1)
	e.WriteF32(w, wv3)
	check("replay after re-upload", wv3, replay)
	l := accel.On(e.S)
	l.FillF32(w, 0.25)
	wv4 := make([]float32, out*in)
	for i := range wv4 {
		wv4[i] = 0.25
	}
	check("replay after a kernel wrote the weights", wv4, replay)
	src := e.F32(wv3, out, in)
	l.Copy(w, src)
	check("replay after a device copy", wv3, replay)
	for i := 0; i < 2*volatileUses; i++ {
		check("replay, again", wv3, replay)
	}
	if dev.PackedBytes() == 0 {
		t.Fatal("weights unchanged for many uses are not packed again")
	}
	ex.Destroy()
	g.Destroy()
	pool.Release()

	// Freeing the weights gives their packed copy back at once.
	if err := e.Dev.Free(w.Buf); err != nil {
		t.Fatal(err)
	}
	if dev.PackedBytes() != 0 {
		t.Fatalf("%d packed bytes after the weights were freed", dev.PackedBytes())
	}
	for _, tn := range []accel.Tensor{x, y, src} {
		if err := e.Dev.Free(tn.Buf); err != nil {
			t.Fatal(err)
		}
	}
	e.Dev.Allocator().EmptyCache()
	if mi := e.Dev.MemInfo(); mi.Free != mi.Total {
		t.Fatalf("after freeing everything: free %d of %d", mi.Free, mi.Total)
	}
}

// TestPackVolatile: weights written before every use are not packed again
// each time.
func TestPackVolatile(t *testing.T) {
	withPacking(t)
	r := rand.New(rand.NewPCG(3, 4))
	const T, in, out = 2, 32, 32
	e := acceltest.Open(t, "cpu", accel.Options{Threads: 1})
	dev := e.Dev.(*Device)
	xv := acceltest.Rand(r, T*in, 1)
	x := e.F32(xv, T, in)
	w := e.Zeros(accel.F32, out, in)
	y := e.Zeros(accel.F32, T, out)
	made0 := dev.packs.made.Load()
	for i := 0; i < 20; i++ {
		wv := acceltest.Rand(r, out*in, 1)
		e.WriteF32(w, wv)
		l := accel.On(e.S)
		l.MatMul(y, x, w)
		if i, ok := bitsEqual(e.ReadF32(y), scalarMatMul(xv, wv, T, in, out)); !ok {
			t.Fatalf("y[%d] differs", i)
		}
	}
	if made := dev.packs.made.Load() - made0; made > 2 {
		t.Fatalf("weights rewritten before each of 20 uses were packed %d times", made)
	}
}

// TestPackWeights: packing ahead of time charges the arena at once, and the
// MatMul then uses the copy.
func TestPackWeights(t *testing.T) {
	withPacking(t)
	r := rand.New(rand.NewPCG(5, 6))
	e := acceltest.Open(t, "cpu", accel.Options{})
	dev := e.Dev.(*Device)
	w := e.F32(acceltest.Rand(r, 64*48, 1), 64, 48)
	free := dev.MemInfo().Free
	if err := dev.PackWeights(w); err != nil {
		t.Fatal(err)
	}
	if dev.PackedBytes() == 0 || dev.MemInfo().Free >= free {
		t.Fatalf("PackWeights: %d packed bytes, free %d -> %d", dev.PackedBytes(), free, dev.MemInfo().Free)
	}
	made := dev.packs.made.Load()
	x := e.F32(acceltest.Rand(r, 2*48, 1), 2, 48)
	y := e.Zeros(accel.F32, 2, 64)
	l := accel.On(e.S)
	l.MatMul(y, x, w)
	_ = e.ReadF32(y)
	if dev.packs.made.Load() != made {
		t.Fatal("the MatMul packed the weights again")
	}
	if err := dev.PackWeights(accel.Tensor{}); err == nil {
		t.Fatal("PackWeights of a nil tensor did not fail")
	}
}

// TestKernelFaultInSchedule: a kernel that panics on a pool worker during a
// replay becomes the stream's error, as on the stream's own goroutine, and
// the pool keeps working.
func TestKernelFaultInSchedule(t *testing.T) {
	e := acceltest.Open(t, "cpu", accel.Options{Threads: 2})
	dev := e.Dev.(*Device)
	ts := []task{{kind: taskKernel, call: rcall{op: accel.OpAdd}}}
	// An Add whose operands are too short for their shapes: the kernel
	// indexes out of range.
	for i := 0; i < 3; i++ {
		ts[0].call.o[i] = operand{b: make([]byte, 4*8), rows: 4, cols: 64, dt: accel.F32}
	}
	s := buildSchedule(dev, ts)
	if s == nil {
		t.Fatal("no schedule")
	}
	ns := &nodes{n: ts, sched: s}
	st := e.S.(*stream)
	func() {
		defer func() {
			if r := recover(); r == nil {
				t.Fatal("the fault did not reach the caller")
			}
		}()
		dev.replay(ns, st.k)
	}()
	// The pool still runs replays.
	d := newDecoder(t, e, shapeStories, accel.F32, 1, 1, 8)
	ex := d.capture(t)
	d.replay(t, ex)
}

// TestConformanceKernelSets runs the conformance suite on the kernel sets
// the default build does not: packed weights on the plain-Go panel kernel
// (where there are no vector kernels) and, where there are, the plain-Go
// kernels alone. A set that is the default here (the plain-Go kernels on a
// CPU without AVX-512 or in a build without GOEXPERIMENT=simd, the vector
// kernels where they run) skips: TestConformance has just run the same
// suite on it, and the two runs are a third of the package's time under
// -race.
func TestConformanceKernelSets(t *testing.T) {
	defVec, defPack := vec.Load(), packGo.Load()
	isDefault := func(t *testing.T) {
		t.Helper()
		if vec.Load() == defVec && packGo.Load() == defPack {
			t.Skipf("kernel set %s (packed weights %v) is the default here: TestConformance runs it", KernelSet(), packingOn())
		}
	}
	t.Run("packed", func(t *testing.T) {
		withPacking(t)
		isDefault(t)
		acceltest.Run(t, "cpu", acceltest.Expect{ExecBytesPerNode: ExecBytesPerNode, ExactExecBytes: true})
		t.Run("ModelReference", func(t *testing.T) { modeltest.Run(t, "cpu") })
	})
	t.Run("plain", func(t *testing.T) {
		withMode(t, kernelMode{threads: 2})
		isDefault(t)
		acceltest.Run(t, "cpu", acceltest.Expect{ExecBytesPerNode: ExecBytesPerNode, ExactExecBytes: true})
		t.Run("ModelReference", func(t *testing.T) { modeltest.Run(t, "cpu") })
	})
}
