package acceltest

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/reprise-ml/reprise/accel"
)

// Expect is what a backend promises beyond the accel interfaces, for Run to
// check as well. The zero Expect checks nothing more.
type Expect struct {
	// ExecBytesPerNode is the device memory an executable holds per node
	// (Exec.Memory): exactly that where ExactExecBytes, else at least.
	ExecBytesPerNode int64
	ExactExecBytes   bool
}

// Run runs the whole suite against the named backend, with at most one
// Expect.
func Run(t *testing.T, backend string, expect ...Expect) {
	if err := accel.Probe(backend); err != nil {
		t.Skipf("backend %s not usable here: %v", backend, err)
	}
	var x Expect
	switch len(expect) {
	case 0:
	case 1:
		x = expect[0]
	default:
		t.Fatalf("Run takes at most one Expect, got %d", len(expect))
	}
	t.Run("Devices", func(t *testing.T) { testDevices(t, backend) })
	t.Run("Kernels", func(t *testing.T) { testKernels(t, backend) })
	t.Run("Penalties", func(t *testing.T) { testPenalties(t, backend) })
	t.Run("ArchKernels", func(t *testing.T) { testArchKernels(t, backend) })
	t.Run("ChainReplayEqualsEager", func(t *testing.T) { testChain(t, backend) })
	t.Run("FailedCaptureRecovery", func(t *testing.T) { testFailedCapture(t, backend) })
	t.Run("EventsAcrossStreams", func(t *testing.T) { testEvents(t, backend) })
	t.Run("InPlaceUpdate", func(t *testing.T) { testUpdate(t, backend) })
	t.Run("OutOfMemory", func(t *testing.T) { testOOM(t, backend) })
	t.Run("Staging", func(t *testing.T) { testStaging(t, backend) })
	t.Run("DecoderReplayEqualsEager", func(t *testing.T) { testDecoderReplay(t, backend, x, newDecoder) })
	t.Run("ArchDecoderReplayEqualsEager", func(t *testing.T) { testDecoderReplay(t, backend, x, newArchDecoder) })
	t.Run("DecoderUpdate", func(t *testing.T) { testDecoderUpdate(t, backend) })
	t.Run("NestedAndMultiStream", func(t *testing.T) { testNestedAndMultiStream(t, backend) })
	t.Run("CapturedUpload", func(t *testing.T) { testCapturedUpload(t, backend) })
	t.Run("DecoderMatchesCPU", func(t *testing.T) { testDecoderMatchesCPU(t, backend, newDecoder) })
	t.Run("ArchDecoderMatchesCPU", func(t *testing.T) { testDecoderMatchesCPU(t, backend, newArchDecoder) })
	t.Run("BF16", func(t *testing.T) { testBF16(t, backend) })
	t.Run("QuantMatMul", func(t *testing.T) { testQuantMatMul(t, backend) })
	t.Run("KVCacheF16", func(t *testing.T) { testKVCacheF16(t, backend) })
	t.Run("MisalignedOperand", func(t *testing.T) { testMisalignedOperand(t, backend) })
	t.Run("ForeignBuffer", func(t *testing.T) { testForeignBuffer(t, backend) })
}

// The backend lists its devices by ordinal, each named, and refuses to open
// one past the last.
func testDevices(t *testing.T, backend string) {
	b, err := accel.Lookup(backend)
	if err != nil {
		t.Fatal(err)
	}
	ds, err := b.Devices()
	if err != nil || len(ds) == 0 {
		t.Skipf("%s lists no device here: %v", backend, err)
	}
	for i, d := range ds {
		if d.Backend != backend || d.Ordinal != i || d.Name == "" {
			t.Errorf("device %d: %+v", i, d)
		}
		t.Logf("%v: %s", d, d.Detail)
	}
	if dev, err := b.Open(len(ds), accel.Options{}); err == nil {
		dev.Close()
		t.Errorf("Open(%d) of %d devices succeeded", len(ds), len(ds))
	}
}

// Env is an open device with a stream, closed when the test ends.
type Env struct {
	T   testing.TB
	Dev accel.Device
	S   accel.Stream
}

// Open opens device 0 of backend with opts and a stream on it.
func Open(t testing.TB, backend string, opts accel.Options) *Env {
	t.Helper()
	dev, err := accel.Open(backend, 0, opts)
	if err != nil {
		// A backend whose library is missing, or that lists no device,
		// skips; one that lists a device it cannot open is broken.
		b, lerr := accel.Lookup(backend)
		if lerr != nil || b.Probe() != nil {
			t.Skipf("open %s: %v", backend, err)
		}
		if infos, derr := b.Devices(); derr != nil || len(infos) == 0 {
			t.Skipf("open %s: no device: %v", backend, err)
		}
		t.Fatalf("open %s: it lists a device but cannot open it: %v", backend, err)
	}
	s, err := dev.NewStream()
	if err != nil {
		dev.Close()
		t.Fatalf("new stream: %v", err)
	}
	t.Cleanup(func() {
		s.Close()
		dev.Close()
	})
	return &Env{T: t, Dev: dev, S: s}
}

// F32 uploads v as a rows x cols tensor.
func (e *Env) F32(v []float32, rows, cols int) accel.Tensor {
	e.T.Helper()
	t, err := accel.UploadF32(e.S, v, rows, cols)
	if err != nil {
		e.T.Fatalf("upload: %v", err)
	}
	return t
}

// I32 uploads v as a rows x cols tensor.
func (e *Env) I32(v []int32, rows, cols int) accel.Tensor {
	e.T.Helper()
	t, err := accel.UploadI32(e.S, v, rows, cols)
	if err != nil {
		e.T.Fatalf("upload: %v", err)
	}
	return t
}

// Zeros allocates a zeroed tensor.
func (e *Env) Zeros(dt accel.DType, rows, cols int) accel.Tensor {
	e.T.Helper()
	switch dt {
	case accel.I32:
		return e.I32(make([]int32, rows*cols), rows, cols)
	case accel.F16:
		return e.F16(make([]float32, rows*cols), rows, cols)
	case accel.F32:
		return e.F32(make([]float32, rows*cols), rows, cols)
	}
	e.T.Fatalf("Zeros of %s", dt)
	return accel.Tensor{}
}

// ReadF32 downloads a F32 tensor.
func (e *Env) ReadF32(t accel.Tensor) []float32 {
	e.T.Helper()
	v, err := accel.DownloadF32(e.S, t)
	if err != nil {
		e.T.Fatalf("download: %v", err)
	}
	return v
}

// ReadI32 downloads an I32 tensor.
func (e *Env) ReadI32(t accel.Tensor) []int32 {
	e.T.Helper()
	v, err := accel.DownloadI32(e.S, t)
	if err != nil {
		e.T.Fatalf("download: %v", err)
	}
	return v
}

// WriteF32 overwrites a F32 tensor's contents.
func (e *Env) WriteF32(t accel.Tensor, v []float32) {
	e.T.Helper()
	if err := accel.Upload(e.S, t.Buf.Slice(0, t.Bytes()), accel.F32Bytes(v)); err != nil {
		e.T.Fatalf("upload: %v", err)
	}
}

// Rand returns n normal floats scaled by sd.
func Rand(r *rand.Rand, n int, sd float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64() * sd)
	}
	return v
}

// Close reports whether got is within tol of want (relative to the larger
// magnitude, absolute near zero), returning the first mismatch.
func Close(got, want []float32, tol float64) error {
	if len(got) != len(want) {
		return fmt.Errorf("length %d, want %d", len(got), len(want))
	}
	for i := range got {
		g, w := float64(got[i]), float64(want[i])
		if math.IsNaN(g) != math.IsNaN(w) || math.Abs(g-w) > tol*math.Max(1, math.Max(math.Abs(g), math.Abs(w))) {
			return fmt.Errorf("element %d: got %v, want %v (tol %g)", i, got[i], want[i], tol)
		}
	}
	return nil
}

// Same compares results that must be bit-identical on a deterministic device
// and within tol elsewhere.
func Same(dev accel.Device, got, want []float32, tol float64) error {
	if dev.Capability().Deterministic {
		return SameBits(got, want)
	}
	return Close(got, want, tol)
}

// SameBits reports whether got equals want bit for bit, returning the first
// mismatch.
func SameBits(got, want []float32) error {
	if len(got) != len(want) {
		return fmt.Errorf("length %d, want %d", len(got), len(want))
	}
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			return fmt.Errorf("element %d: got %v, want %v bit for bit", i, got[i], want[i])
		}
	}
	return nil
}

// chain enqueues a chain of kernels on l: n rounds of matmul, rmsnorm,
// silu-mul and residual add over x[rows, d], ending in out. Every
// intermediate is allocated and freed in stream order, so during capture the
// chain's scratch comes from the pool.
func chain(l *accel.Launcher, x, w, nw, out accel.Tensor, n int) {
	rows, d := x.Rows, x.Cols
	h := l.Alloc(accel.F32, rows, d)
	l.Copy(h, x)
	for i := 0; i < n; i++ {
		a := l.Alloc(accel.F32, rows, d)
		b := l.Alloc(accel.F32, rows, d)
		l.RMSNorm(a, h, nw, 1e-5)
		l.MatMul(b, a, w)
		l.SiLUMul(a, b, a)
		l.Add(h, h, a)
		l.Free(a, b)
	}
	l.Copy(out, h)
	l.Free(h)
}

func testChain(t *testing.T, backend string) {
	e, pool := openCapture(t, backend)
	r := rand.New(rand.NewPCG(1, 2))
	const rows, d, rounds = 4, 32, 25 // 100 kernels and 2 copies
	x := e.F32(Rand(r, rows*d, 1), rows, d)
	w := e.F32(Rand(r, d*d, 0.2), d, d)
	nw := e.F32(Rand(r, d, 1), 1, d)
	eagerOut := e.Zeros(accel.F32, rows, d)
	l := accel.On(e.S)
	chain(l, x, w, nw, eagerOut, rounds)
	if l.Err() != nil {
		t.Fatal(l.Err())
	}
	want := e.ReadF32(eagerOut)

	out := e.Zeros(accel.F32, rows, d)
	g := capture(t, e, pool, func(l *accel.Launcher) { chain(l, x, w, nw, out, rounds) })
	defer g.Destroy()
	if g.Nodes() != 4*rounds+2 {
		t.Errorf("graph has %d nodes, want %d", g.Nodes(), 4*rounds+2)
	}
	if got := e.ReadF32(out); !AllZero(got) {
		t.Fatalf("capture ran the work: output %v...", got[:4])
	}
	ex, err := g.Instantiate()
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Destroy()
	if err := ex.Launch(e.S); err != nil {
		t.Fatal(err)
	}
	if err := Same(e.Dev, e.ReadF32(out), want, 1e-4); err != nil {
		t.Fatalf("replay differs from eager: %v", err)
	}

	// A replay reads the current contents of its static inputs.
	x2 := Rand(r, rows*d, 1)
	e.WriteF32(x, x2)
	eager2 := e.Zeros(accel.F32, rows, d)
	l = accel.On(e.S)
	chain(l, x, w, nw, eager2, rounds)
	want2 := e.ReadF32(eager2)
	if err := ex.Launch(e.S); err != nil {
		t.Fatal(err)
	}
	if err := Same(e.Dev, e.ReadF32(out), want2, 1e-4); err != nil {
		t.Fatalf("replay after changing the input: %v", err)
	}

	// Many replays stay correct.
	for i := 0; i < 1000; i++ {
		if err := ex.Launch(e.S); err != nil {
			t.Fatal(err)
		}
	}
	if err := Same(e.Dev, e.ReadF32(out), want2, 1e-4); err != nil {
		t.Fatalf("after 1,000 replays: %v", err)
	}
}

// AllZero reports whether every element of v is zero.
func AllZero(v []float32) bool {
	for _, x := range v {
		if x != 0 {
			return false
		}
	}
	return true
}

func testFailedCapture(t *testing.T, backend string) {
	e, pool := openCapture(t, backend)
	x := e.F32([]float32{1, 2, 3, 4}, 1, 4)
	y := e.Zeros(accel.F32, 1, 4)
	wrong := e.Zeros(accel.F32, 1, 3)
	boom := errors.New("boom")
	failures := []struct {
		name string
		fn   func() error
		want error
	}{
		{"error", func() error {
			l := accel.On(e.S)
			l.Alloc(accel.F32, 64, 64)
			l.Add(y, x, x)
			return boom
		}, boom},
		{"panic", func() error {
			l := accel.On(e.S)
			l.Alloc(accel.F32, 64, 64)
			l.Add(y, x, x)
			panic("kernel author error")
		}, accel.ErrCaptureFailed},
		{"synchronize", func() error {
			accel.On(e.S).Add(y, x, x)
			_ = e.S.Synchronize()
			return nil
		}, accel.ErrCaptureInvalidated},
		{"read back", func() error {
			h, err := e.Dev.AllocHost(16)
			if err != nil {
				return err
			}
			_ = e.S.CopyDtoH(h, y.Buf.Slice(0, 16))
			return nil
		}, accel.ErrCaptureInvalidated},
		{"invalid launch", func() error {
			l := accel.On(e.S)
			l.Add(y, x, wrong)
			return l.Err()
		}, accel.ErrInvalidArgument},
	}
	for _, f := range failures {
		before := pool.Stats()
		g, err := accel.Capture(e.S, pool, f.fn)
		if err == nil {
			g.Destroy()
			t.Fatalf("%s: capture succeeded", f.name)
		}
		if !errors.Is(err, f.want) {
			t.Errorf("%s: error %v, want %v", f.name, err, f.want)
		}
		if e.S.Capturing() {
			t.Fatalf("%s: stream still capturing", f.name)
		}
		if after := pool.Stats(); after.Allocated != before.Allocated {
			t.Errorf("%s: pool holds %d allocated bytes after the failure, %d before", f.name, after.Allocated, before.Allocated)
		}
		// The pool and the stream take the next capture.
		g, err = accel.Capture(e.S, pool, func() error {
			l := accel.On(e.S)
			tmp := l.Alloc(accel.F32, 1, 4)
			l.Add(tmp, x, x)
			l.Add(y, tmp, x)
			l.Free(tmp)
			return l.Err()
		})
		if err != nil {
			t.Fatalf("%s: capture after the failure: %v", f.name, err)
		}
		ex, err := g.Instantiate()
		if err != nil {
			t.Fatal(err)
		}
		e.Zero(y)
		if err := ex.Launch(e.S); err != nil {
			t.Fatal(err)
		}
		if got := e.ReadF32(y); got[3] != 12 {
			t.Fatalf("%s: replay after recovery gave %v", f.name, got)
		}
		ex.Destroy()
		g.Destroy()
	}
	// Eager work still runs on the stream.
	accel.On(e.S).Add(y, x, x)
	if got := e.ReadF32(y); got[0] != 2 {
		t.Fatalf("eager after failures gave %v", got)
	}
}

// Zero clears a tensor.
func (e *Env) Zero(t accel.Tensor) {
	e.T.Helper()
	l := accel.On(e.S)
	if t.DType == accel.I32 {
		l.FillI32(t, 0)
	} else {
		l.FillF32(t, 0)
	}
	if err := l.Err(); err != nil {
		e.T.Fatal(err)
	}
}

func testEvents(t *testing.T, backend string) {
	e := Open(t, backend, accel.Options{})
	s2, err := e.Dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	ev, err := e.Dev.NewEvent()
	if err != nil {
		t.Fatal(err)
	}
	if !ev.Query() {
		t.Error("an event never recorded should be complete")
	}
	r := rand.New(rand.NewPCG(3, 4))
	const d = 256
	w := e.F32(Rand(r, d*d, 0.05), d, d)
	for trial := 0; trial < 20; trial++ {
		x := e.F32(Rand(r, 8*d, 1), 8, d)
		a := e.Zeros(accel.F32, 8, d)
		b := e.Zeros(accel.F32, 8, d)
		// Stream 1: slow work ending in a; stream 2 copies a once it is done.
		l := accel.On(e.S)
		for i := 0; i < 10; i++ {
			l.MatMul(a, x, w)
			l.Add(x, x, a)
		}
		if err := e.S.Record(ev); err != nil {
			t.Fatal(err)
		}
		if err := s2.Wait(ev); err != nil {
			t.Fatal(err)
		}
		if err := s2.Copy(b.Buf.Slice(0, b.Bytes()), x.Buf.Slice(0, x.Bytes())); err != nil {
			t.Fatal(err)
		}
		if err := s2.Synchronize(); err != nil {
			t.Fatal(err)
		}
		if !ev.Query() {
			t.Fatal("event incomplete after the waiting stream finished")
		}
		if err := Same(e.Dev, e.ReadF32(b), e.ReadF32(x), 0); err != nil {
			t.Fatalf("trial %d: stream 2 read before stream 1 finished: %v", trial, err)
		}
	}
}

func testUpdate(t *testing.T, backend string) {
	e, pool := openCapture(t, backend)
	x := e.F32([]float32{1, 2, 3, 4}, 1, 4)
	y := e.Zeros(accel.F32, 1, 4)
	record := func(v float32, extra bool) accel.Graph {
		return capture(t, e, pool, func(l *accel.Launcher) {
			l.FillF32(y, v)
			l.Add(y, y, x)
			if extra {
				l.Add(y, y, x)
			}
		})
	}
	g1 := record(10, false)
	defer g1.Destroy()
	ex, err := g1.Instantiate()
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Destroy()
	if err := ex.Launch(e.S); err != nil {
		t.Fatal(err)
	}
	if got := e.ReadF32(y); got[0] != 11 {
		t.Fatalf("replay: %v", got)
	}
	g2 := record(20, false)
	defer g2.Destroy()
	if err := ex.Update(g2); err != nil {
		t.Fatalf("update with a changed argument: %v", err)
	}
	if err := ex.Launch(e.S); err != nil {
		t.Fatal(err)
	}
	if got := e.ReadF32(y); got[0] != 21 {
		t.Fatalf("after update the argument did not change: %v", got)
	}
	g3 := record(30, true)
	defer g3.Destroy()
	if err := ex.Update(g3); !errors.Is(err, accel.ErrTopologyChanged) {
		t.Fatalf("update with a changed topology: %v, want ErrTopologyChanged", err)
	}
	if err := ex.Launch(e.S); err != nil {
		t.Fatal(err)
	}
	if got := e.ReadF32(y); got[0] != 21 {
		t.Fatalf("a refused update changed the executable: %v", got)
	}
}

func testOOM(t *testing.T, backend string) {
	const limit = 64 << 20
	e := Open(t, backend, accel.Options{MemoryLimit: limit})
	if mi := e.Dev.MemInfo(); mi.Total != limit {
		t.Fatalf("MemInfo total %d with a %d-byte limit", mi.Total, limit)
	}
	var held []accel.Buffer
	var err error
	for i := 0; i < 1000; i++ {
		var b accel.Buffer
		b, err = e.Dev.Alloc(5 << 20)
		if err != nil {
			break
		}
		held = append(held, b)
	}
	if !errors.Is(err, accel.ErrOutOfMemory) {
		t.Fatalf("allocating past the limit: %v, want ErrOutOfMemory", err)
	}
	if len(held) == 0 {
		t.Fatal("nothing fit")
	}
	// The allocator is consistent: freeing one lets the same request in.
	if err := e.Dev.Free(held[0]); err != nil {
		t.Fatal(err)
	}
	b, err := e.Dev.Alloc(5 << 20)
	if err != nil {
		t.Fatalf("allocation after a free: %v", err)
	}
	held[0] = b
	// Capture running out of memory fails the capture, not the device.
	pool, err := e.Dev.NewPool()
	if err != nil {
		t.Fatal(err)
	}
	_, err = accel.Capture(e.S, pool, func() error {
		l := accel.On(e.S)
		l.Alloc(accel.F32, 1<<20, 8)
		return l.Err()
	})
	if !errors.Is(err, accel.ErrOutOfMemory) {
		t.Fatalf("capture past the limit: %v, want ErrOutOfMemory", err)
	}
	pool.Release()
	for _, b := range held {
		if err := e.Dev.Free(b); err != nil {
			t.Fatal(err)
		}
	}
	e.Dev.Allocator().EmptyCache()
	if mi := e.Dev.MemInfo(); mi.Free != mi.Total {
		t.Fatalf("after freeing everything: free %d of %d", mi.Free, mi.Total)
	}
}

func testStaging(t *testing.T, backend string) {
	e := Open(t, backend, accel.Options{})
	st, err := accel.NewStager(e.Dev, 2, 64)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	dst := e.Zeros(accel.F32, 8, 4)
	for i := 0; i < 8; i++ {
		row := dst.RowSlice(i, i+1)
		if err := st.Stage(e.S, row.Buf.Slice(0, row.Bytes()), accel.F32Bytes([]float32{float32(i), 1, 2, 3})); err != nil {
			t.Fatal(err)
		}
	}
	got := e.ReadF32(dst)
	for i := 0; i < 8; i++ {
		if got[4*i] != float32(i) || got[4*i+3] != 3 {
			t.Fatalf("row %d: %v", i, got[4*i:4*i+4])
		}
	}
	// After a synchronisation no buffer is in flight: staging never waits.
	before := st.Waits()
	for i := 0; i < 2; i++ {
		if err := st.Stage(e.S, dst.RowSlice(i, i+1).Buf.Slice(0, 16), make([]byte, 16)); err != nil {
			t.Fatal(err)
		}
	}
	if st.Waits() != before {
		t.Fatalf("staging waited on idle buffers")
	}
}
