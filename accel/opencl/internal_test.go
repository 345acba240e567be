//go:build (linux || darwin) && (amd64 || arm64 || riscv64 || loong64)

package opencl

import (
	"errors"
	"testing"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/accel/acceltest"
)

// openTest opens device 0, skipping where OpenCL is not usable here.
func openTest(t testing.TB, opts accel.Options) (*Device, accel.Stream) {
	t.Helper()
	if err := probeLibrary(); err != nil {
		t.Skipf("OpenCL not usable here: %v", err)
	}
	l, err := loadLibrary()
	if err != nil {
		t.Skipf("OpenCL not usable here: %v", err)
	}
	if _, err := l.enumerate(); err != nil {
		t.Skipf("OpenCL not usable here: %v", err)
	}
	d, err := Open(0, opts)
	if err != nil {
		t.Fatalf("a platform and a device are present, yet Open fails: %v", err)
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
	return d, s
}

// The OpenCL generator draws what accel.SampleUniform draws, bit for bit.
func TestSampleUniformParity(t *testing.T) {
	d, s := openTest(t, accel.Options{})
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
	kl := &klaunch{k: kTestUniform, n: n}
	for _, b := range []accel.Buffer{out, st.Buf, ot.Buf} {
		if err := d.buf(kl, b, 4); err != nil {
			t.Fatal(err)
		}
	}
	if err := kl.i32(n); err != nil {
		t.Fatal(err)
	}
	if err := s.(*stream).enqueue(kl); err != nil {
		t.Fatal(err)
	}
	b, err := accel.Download(s, out)
	if err != nil {
		t.Fatal(err)
	}
	cases.Check(t, "OpenCL", accel.BytesI32(b))
}

func TestCapability(t *testing.T) {
	d, _ := openTest(t, accel.Options{MemoryLimit: 256 << 20})
	c := d.Capability()
	if !c.Available || !c.PinnedMemory || !c.Deterministic || c.ComputeUnits < 1 {
		t.Errorf("capability %+v", c)
	}
	if c.MemoryTotal != 256<<20 || d.MemInfo().Total != 256<<20 {
		t.Errorf("memory total %d with a 256 MiB limit", c.MemoryTotal)
	}
	ext := d.l.deviceString(d.ref.device, clDeviceExtensions)
	if c.GraphCapture != hasExtension(ext, "cl_khr_command_buffer") {
		t.Errorf("GraphCapture %v, extensions %q", c.GraphCapture, ext)
	}
	if c.GraphUpdate != hasExtension(ext, "cl_khr_command_buffer_mutable_dispatch") {
		t.Errorf("GraphUpdate %v, extensions %q", c.GraphUpdate, ext)
	}
	t.Logf("%v: %s; %+v; work-group %d", d.Info(), d.Info().Detail, c, d.sh.local)
}

// A device without cl_khr_command_buffer refuses to capture.
func TestNoCommandBuffer(t *testing.T) {
	d, s := openTest(t, accel.Options{})
	d.capab.GraphCapture = false
	p, err := d.NewPool()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release()
	if err := s.BeginCapture(p); !errors.Is(err, accel.ErrUnsupported) {
		t.Fatalf("BeginCapture without the extension: %v, want ErrUnsupported", err)
	}
	if s.Capturing() {
		t.Fatal("stream capturing after a refused BeginCapture")
	}
}

// The fallbacks for drivers that run a command buffer only on the queue it
// was recorded on, or reject CL_COMMAND_BUFFER_SIMULTANEOUS_USE_KHR, give
// the same results as the main path.
func TestReplayFallbacks(t *testing.T) {
	for _, tc := range []struct {
		name                         string
		noSubstitute, noSimultaneous bool
	}{{"aux queue", true, false}, {"no simultaneous use", false, true}, {"both", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			d, s := openTest(t, accel.Options{})
			if !d.Capability().GraphCapture {
				t.Skip("no cl_khr_command_buffer")
			}
			d.noSubstitute.Store(tc.noSubstitute)
			d.noSimultaneous.Store(tc.noSimultaneous)
			x, err := accel.UploadF32(s, []float32{1, 2, 3, 4}, 1, 4)
			if err != nil {
				t.Fatal(err)
			}
			y, err := accel.UploadF32(s, make([]float32, 4), 1, 4)
			if err != nil {
				t.Fatal(err)
			}
			pool, _ := d.NewPool()
			defer pool.Release()
			g, err := accel.Capture(s, pool, func() error {
				l := accel.On(s)
				for i := 0; i < 10; i++ {
					l.Add(y, y, x)
				}
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
			s2, _ := d.NewStream()
			defer s2.Close()
			for i := 0; i < 20; i++ {
				if err := ex.Launch(s); err != nil {
					t.Fatal(err)
				}
			}
			ev, _ := d.NewEvent()
			if err := s.Record(ev); err != nil {
				t.Fatal(err)
			}
			if err := s2.Wait(ev); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 20; i++ {
				if err := ex.Launch(s2); err != nil {
					t.Fatal(err)
				}
			}
			if err := s2.Synchronize(); err != nil {
				t.Fatal(err)
			}
			got, err := accel.DownloadF32(s, y)
			if err != nil {
				t.Fatal(err)
			}
			for i, v := range got {
				if want := float32(400 * (i + 1)); v != want {
					t.Fatalf("element %d: %v after 40 replays of 10 adds, want %v", i, v, want)
				}
			}
		})
	}
}
