//go:build linux && (amd64 || arm64)

package cuda

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/accel/acceltest"
)

// openTest opens device 0 with a stream, skipping where there is no CUDA
// driver or device.
func openTest(t testing.TB) (*Device, *stream) {
	t.Helper()
	if err := probeDriver(); err != nil {
		t.Skipf("no CUDA driver: %v", err)
	}
	drv, err := loadDriver()
	if err != nil {
		t.Skipf("no CUDA driver: %v", err)
	}
	if _, err := drv.count(); err != nil {
		t.Skipf("no CUDA device: %v", err)
	}
	d, err := Open(0, accel.Options{})
	if err != nil {
		t.Fatalf("a device is listed, yet Open fails: %v", err)
	}
	s, err := d.NewStream()
	if err != nil {
		d.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Close()
		d.Close()
	})
	return d, s.(*stream)
}

// The CUDA generator draws what accel.SampleUniform draws, bit for bit.
func TestSampleUniformParity(t *testing.T) {
	d, s := openTest(t)
	const n = 4096
	cases := acceltest.NewUniformCases(n)
	st, err := accel.UploadI32(s, cases.Seeds, n, 2)
	if err != nil {
		t.Fatal(err)
	}
	ot, err := accel.UploadI32(s, cases.Offsets, 1, n)
	if err != nil {
		t.Fatal(err)
	}
	out, err := d.Alloc(3 * 4 * n)
	if err != nil {
		t.Fatal(err)
	}
	kl := &klaunch{k: kTestUniform, block: blockThreads}
	for _, b := range []accel.Buffer{out, st.Buf, ot.Buf} {
		p, err := d.resolve(b, 4)
		if err != nil {
			t.Fatal(err)
		}
		kl.ptr(p)
	}
	if err := kl.i32(n); err != nil {
		t.Fatal(err)
	}
	kl.setGrid(gridFor(n))
	if err := kl.check(); err != nil {
		t.Fatal(err)
	}
	if err := s.issue(kl); err != nil {
		t.Fatal(err)
	}
	b, err := accel.Download(s, out)
	if err != nil {
		t.Fatal(err)
	}
	cases.Check(t, "CUDA", accel.BytesI32(b))
}

// Capture keeps the goroutine on one OS thread with the context current,
// and a failed capture leaves the stream usable on any thread.
func TestCaptureThreading(t *testing.T) {
	d, s := openTest(t)
	pool, err := d.NewPool()
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Release()
	x, err := accel.UploadF32(s, []float32{1, 2, 3, 4}, 1, 4)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		if err := s.BeginCapture(pool); err != nil {
			t.Fatal(err)
		}
		l := accel.On(s)
		l.Add(x, x, x)
		if err := l.Err(); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			s.AbortCapture()
			continue
		}
		g, err := s.EndCapture()
		if err != nil {
			t.Fatal(err)
		}
		g.Destroy()
	}
	if s.Capturing() {
		t.Fatal("still capturing")
	}
	d.mu.Lock()
	capturing := d.capturing
	d.mu.Unlock()
	if capturing != 0 {
		t.Fatalf("the device counts %d captures", capturing)
	}
	// Eager work from another goroutine.
	done := make(chan error)
	go func() {
		l := accel.On(s)
		l.Add(x, x, x)
		if l.Err() != nil {
			done <- l.Err()
			return
		}
		done <- s.Synchronize()
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got, err := accel.DownloadF32(s, x)
	if err != nil {
		t.Fatal(err)
	}
	if got[0] != 2 {
		t.Fatalf("after captures, an eager add gave %v", got)
	}
}

// The embedded fallback PTX loads (the driver compiles it) and its kernels
// compute what the NVRTC build computes.
func TestFallbackPTXRuns(t *testing.T) {
	d, s := openTest(t)
	ptx, by, ok := fallbackImage()
	if !ok {
		t.Skip(by)
	}
	if d.props.major*10+d.props.minor < fallbackArch {
		t.Skipf("compute capability %d.%d is below the fallback's %d", d.props.major, d.props.minor, fallbackArch)
	}
	r := rand.New(rand.NewPCG(17, 18))
	const rows, in, out = 3, 300, 70
	xv := make([]float32, rows*in)
	wv := make([]float32, out*in)
	for i := range xv {
		xv[i] = float32(r.NormFloat64())
	}
	for i := range wv {
		wv[i] = float32(r.NormFloat64() * 0.1)
	}
	x, err := accel.UploadF32(s, xv, rows, in)
	if err != nil {
		t.Fatal(err)
	}
	w, err := accel.UploadF32(s, wv, out, in)
	if err != nil {
		t.Fatal(err)
	}
	run := func() (mm, silu []float32) {
		y, err := accel.UploadF32(s, make([]float32, rows*out), rows, out)
		if err != nil {
			t.Fatal(err)
		}
		z, err := accel.UploadF32(s, make([]float32, rows*out), rows, out)
		if err != nil {
			t.Fatal(err)
		}
		l := accel.On(s)
		l.MatMul(y, x, w)
		l.SiLUMul(z, y, y)
		if l.Err() != nil {
			t.Fatal(l.Err())
		}
		if mm, err = accel.DownloadF32(s, y); err != nil {
			t.Fatal(err)
		}
		if silu, err = accel.DownloadF32(s, z); err != nil {
			t.Fatal(err)
		}
		return mm, silu
	}
	wantMM, wantSiLU := run()
	old, oldImg := d.mod, d.image
	if err := d.loadModule(kernelImage{image: ptx, target: "compute_80", ptx: true, nvrtc: by}); err != nil {
		t.Fatalf("loading the fallback PTX: %v", err)
	}
	d.enter()
	call32(d.drv.cuModuleUnload, old)
	d.leave()
	gotMM, gotSiLU := run()
	// The product is made of separately rounded products and sums in a
	// fixed order: the same bits whatever compiled it. expf may differ by
	// an ulp between CUDA versions.
	for i := range wantMM {
		if gotMM[i] != wantMM[i] {
			t.Fatalf("matmul element %d: fallback PTX %v, %s build %v", i, gotMM[i], oldImg.target, wantMM[i])
		}
		if d := math.Abs(float64(gotSiLU[i] - wantSiLU[i])); d > 1e-6*math.Max(1, math.Abs(float64(wantSiLU[i]))) {
			t.Fatalf("silu_mul element %d: fallback PTX %v, %s build %v", i, gotSiLU[i], oldImg.target, wantSiLU[i])
		}
	}
}
