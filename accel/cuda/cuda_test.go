package cuda_test

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/accel/acceltest"
	_ "github.com/reprise-ml/reprise/accel/cpu"
	"github.com/reprise-ml/reprise/accel/cuda"
)

func TestConformance(t *testing.T) { acceltest.Run(t, "cuda") }

// open opens CUDA device 0 with a stream. It skips where there is no CUDA
// driver or device here, and fails where a device is listed but does not
// open (acceltest would skip that silently).
func open(t testing.TB) *acceltest.Env {
	t.Helper()
	b, err := accel.Lookup("cuda")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Probe(); err != nil {
		t.Skipf("no CUDA driver: %v", err)
	}
	if _, err := b.Devices(); err != nil {
		t.Skipf("no CUDA device: %v", err)
	}
	d, err := accel.Open("cuda", 0, accel.Options{})
	if err != nil {
		t.Fatalf("CUDA lists a device that does not open: %v", err)
	}
	d.Close()
	return acceltest.Open(t, "cuda", accel.Options{})
}

// Without the driver, Probe fails with ErrBackendUnavailable and names every
// path it searched. (Here, on a machine with CUDA, the library is found and
// the test says so.)
func TestProbeWithoutLibrary(t *testing.T) {
	empty := t.TempDir()
	t.Setenv(cuda.EnvLibraryPath, empty)
	err := accel.Probe("cuda")
	if err == nil {
		t.Skipf("libcuda is installed here (found outside %s=%s)", cuda.EnvLibraryPath, empty)
	}
	if !errors.Is(err, accel.ErrBackendUnavailable) {
		t.Fatalf("Probe without libcuda: %v, want ErrBackendUnavailable", err)
	}
	for _, p := range []string{empty + "/libcuda.so.1", empty + "/libcuda.so", "libcuda.so.1", "libcuda.so", cuda.EnvLibraryPath} {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("Probe's error does not name %s: %v", p, err)
		}
	}
	if _, err := accel.Open("cuda", 0, accel.Options{}); !errors.Is(err, accel.ErrBackendUnavailable) {
		t.Fatalf("Open without the library: %v, want ErrBackendUnavailable", err)
	}
	b, _ := accel.Lookup("cuda")
	if _, err := b.Devices(); !errors.Is(err, accel.ErrBackendUnavailable) {
		t.Fatalf("Devices without the library: %v, want ErrBackendUnavailable", err)
	}
}

func TestRegistered(t *testing.T) {
	if _, err := accel.Lookup("cuda"); err != nil {
		t.Fatal(err)
	}
}

func TestDevices(t *testing.T) {
	open(t)
	b, _ := accel.Lookup("cuda")
	ds, err := b.Devices()
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range ds {
		if d.Backend != "cuda" || d.Ordinal != i || d.Name == "" {
			t.Errorf("device %d: %+v", i, d)
		}
		t.Logf("%v: %s", d, d.Detail)
	}
	if _, err := b.Open(len(ds), accel.Options{}); err == nil {
		t.Errorf("Open(%d) of %d devices succeeded", len(ds), len(ds))
	}
	e := open(t)
	c := e.Dev.Capability()
	if !c.Available || !c.GraphCapture || !c.GraphUpdate || !c.PinnedMemory || c.Deterministic || c.ComputeUnits <= 0 || c.MemoryTotal <= 0 {
		t.Errorf("capability %+v", c)
	}
	t.Logf("opened: %s; %+v", e.Dev.Info().Detail, c)
	mi := e.Dev.MemInfo()
	if mi.Total != c.MemoryTotal || mi.Free <= 0 || mi.Free > mi.Total {
		t.Errorf("MemInfo %+v", mi)
	}
}

func bf16Bits(v []float32) ([]byte, []float32) {
	bits := make([]byte, 2*len(v))
	w := make([]float32, len(v))
	for i, x := range v {
		u := uint16(math.Float32bits(x) >> 16)
		w[i] = math.Float32frombits(uint32(u) << 16)
		bits[2*i], bits[2*i+1] = byte(u), byte(u>>8)
	}
	return bits, w
}

func uploadBF16(e *acceltest.Env, v []float32, rows, cols int) accel.Tensor {
	e.T.Helper()
	bits, _ := bf16Bits(v)
	buf, err := e.Dev.Alloc(int64(len(bits)))
	if err != nil {
		e.T.Fatal(err)
	}
	if err := accel.Upload(e.S, buf, bits); err != nil {
		e.T.Fatal(err)
	}
	return accel.Tensor{Buf: buf, DType: accel.BF16, Rows: rows, Cols: cols}
}

func sameBits(got, want []float32) error {
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

func equalI32(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func allZero(v []float32) bool {
	for _, x := range v {
		if x != 0 {
			return false
		}
	}
	return true
}

// A tensor that does not start on an element boundary is an invalid
// argument; nothing is launched.
func TestMisalignedOperand(t *testing.T) {
	e := open(t)
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

// Buffers of another backend are refused.
func TestForeignBuffer(t *testing.T) {
	e := open(t)
	c := acceltest.Open(t, "cpu", accel.Options{})
	x := c.F32([]float32{1, 2}, 1, 2)
	y := e.Zeros(accel.F32, 1, 2)
	l := accel.On(e.S)
	l.Add(y, x, y)
	if !errors.Is(l.Err(), accel.ErrInvalidArgument) {
		t.Fatalf("launch with a CPU buffer: %v, want ErrInvalidArgument", l.Err())
	}
	if err := e.S.Copy(y.Buf.Slice(0, 8), x.Buf.Slice(0, 8)); !errors.Is(err, accel.ErrInvalidArgument) {
		t.Fatalf("copy from a CPU buffer: %v, want ErrInvalidArgument", err)
	}
}

// Skipped unless asked: the search on a machine with the toolkit installed.
func TestLibraryReport(t *testing.T) {
	if os.Getenv("REPRISE_CUDA_REPORT") == "" {
		t.Skip("set REPRISE_CUDA_REPORT=1 to print what was loaded")
	}
	e := open(t)
	t.Logf("%s", e.Dev.Info().Detail)
}
