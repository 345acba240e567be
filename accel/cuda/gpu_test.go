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

// Large float32 products (cuBLAS where it is loaded) agree with the CPU
// device within tolerance, for every batch size the bench uses.
func TestLargeMatMulMatchesCPU(t *testing.T) {
	e := open(t)
	c := acceltest.OpenCPU(t)
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
	c := acceltest.OpenCPU(t)
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
				TopP: env.F32(acceltest.Ones(R), 1, R), Seed: env.I32(seeds, R, 2), Offset: env.I32(offs, 1, R)}
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
